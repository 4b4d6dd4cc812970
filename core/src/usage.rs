//! Per-tenant usage: how many records a tenant keeps and roughly how many bytes its
//! records and tombstones take, judged against the quotas in
//! [`TenantSettings`](crate::policy::TenantSettings).
//!
//! The counters are derived state, like the indexes: never in a snapshot, changed
//! incrementally on every record and tombstone write (never recomputed by a scan while
//! serving), and rebuilt from the records and tombstones when a snapshot is restored, so
//! every replica holds the same numbers. A tenant with nothing stored has no entry, so
//! counters kept incrementally and counters rebuilt from a snapshot compare equal.
//!
//! Bytes are an approximation of what a caller controls: a record costs its key,
//! canonical intent and receipt plus [`RECORD_OVERHEAD_BYTES`] (attempts, observations,
//! policy copy); a tombstone its key plus [`TOMBSTONE_OVERHEAD_BYTES`]. Tombstones count
//! towards `stored_bytes` because they are kept too (a tenant collecting quickly would
//! otherwise pile them up unbounded for the tombstone window), but not towards
//! `live_records`.

use serde::{Deserialize, Serialize};

use crate::key::EffectKey;
use crate::keycode;
use crate::outcome::{Quota, Refusal};
use crate::policy::TenantSettings;
use crate::record::EffectRecord;
use crate::store::{Store, StoreExt, Table};
use crate::tombstone::Tombstone;

/// Bytes counted for each record on top of its key, intent and receipt.
pub const RECORD_OVERHEAD_BYTES: u64 = 512;
/// Bytes counted for each tombstone on top of its key.
pub const TOMBSTONE_OVERHEAD_BYTES: u64 = 128;

/// What one tenant keeps in the ledger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantUsage {
    /// Records not yet collected, in any state.
    pub live_records: u64,
    /// Tombstones of collected records not yet expired.
    pub tombstones: u64,
    /// Approximate bytes of those records and tombstones.
    pub stored_bytes: u64,
}

/// The bytes a record counts for.
pub fn record_bytes(rec: &EffectRecord) -> u64 {
    let receipt = rec.receipt.as_ref().map_or(0, String::len);
    RECORD_OVERHEAD_BYTES + key_bytes(&rec.key) + (rec.intent.len() + receipt) as u64
}

/// The bytes a tombstone counts for.
pub fn tombstone_bytes(tombstone: &Tombstone) -> u64 {
    TOMBSTONE_OVERHEAD_BYTES + key_bytes(&tombstone.key)
}

fn key_bytes(key: &EffectKey) -> u64 {
    (key.tenant.len() + key.namespace.len() + key.key.len()) as u64
}

/// Per-tenant usage counters in [`Table::Usage`], keyed by tenant; a tenant with
/// nothing stored has no entry.
pub(crate) struct Usage;

impl Usage {
    /// `tenant`'s usage (zero when it keeps nothing).
    pub(crate) fn of<S: Store + ?Sized>(store: &S, tenant: &str) -> TenantUsage {
        store
            .load(Table::Usage, &keycode::string(tenant), "tenant usage")
            .unwrap_or_default()
    }

    pub(crate) fn add_record<S: Store + ?Sized>(store: &mut S, rec: &EffectRecord) {
        let bytes = record_bytes(rec);
        Self::change(store, &rec.key.tenant, |u| {
            u.live_records += 1;
            u.stored_bytes += bytes;
        });
    }

    pub(crate) fn remove_record<S: Store + ?Sized>(store: &mut S, rec: &EffectRecord) {
        let bytes = record_bytes(rec);
        Self::change(store, &rec.key.tenant, |u| {
            u.live_records = below(u.live_records, 1, "live_records");
            u.stored_bytes = below(u.stored_bytes, bytes, "stored_bytes");
        });
    }

    /// A record of `tenant` changed from `before` to `after` bytes.
    pub(crate) fn resize_record<S: Store + ?Sized>(
        store: &mut S,
        tenant: &str,
        before: u64,
        after: u64,
    ) {
        if before != after {
            Self::change(store, tenant, |u| {
                u.stored_bytes = below(u.stored_bytes, before, "stored_bytes") + after;
            });
        }
    }

    pub(crate) fn add_tombstone<S: Store + ?Sized>(store: &mut S, tombstone: &Tombstone) {
        let bytes = tombstone_bytes(tombstone);
        Self::change(store, &tombstone.key.tenant, |u| {
            u.tombstones += 1;
            u.stored_bytes += bytes;
        });
    }

    pub(crate) fn remove_tombstone<S: Store + ?Sized>(store: &mut S, tombstone: &Tombstone) {
        let bytes = tombstone_bytes(tombstone);
        Self::change(store, &tombstone.key.tenant, |u| {
            u.tombstones = below(u.tombstones, 1, "tombstones");
            u.stored_bytes = below(u.stored_bytes, bytes, "stored_bytes");
        });
    }

    fn change<S: Store + ?Sized>(store: &mut S, tenant: &str, f: impl FnOnce(&mut TenantUsage)) {
        let mut usage = Self::of(store, tenant);
        f(&mut usage);
        let key = keycode::string(tenant);
        if usage == TenantUsage::default() {
            store.delete(Table::Usage, &key);
        } else {
            store.save(Table::Usage, key, &usage);
        }
    }

    /// Whether `records` more records of `bytes` more bytes fit `tenant`'s quotas.
    pub(crate) fn check_quota<S: Store + ?Sized>(
        store: &S,
        tenant: &str,
        settings: &TenantSettings,
        records: u64,
        bytes: u64,
    ) -> Result<(), Refusal> {
        let used = Self::of(store, tenant);
        let quotas = [
            (
                Quota::LiveRecords,
                used.live_records,
                records,
                settings.live_records_max,
            ),
            (
                Quota::StoredBytes,
                used.stored_bytes,
                bytes,
                settings.stored_bytes_max,
            ),
        ];
        for (what, used, requested, limit) in quotas {
            if used.saturating_add(requested) > limit {
                return Err(Refusal::QuotaExceeded {
                    what,
                    used,
                    requested,
                    limit,
                });
            }
        }
        Ok(())
    }
}

/// `value - amount`; a counter going below zero is a bug in this crate, and continuing
/// would replicate wrong quotas.
fn below(value: u64, amount: u64, counter: &str) -> u64 {
    value
        .checked_sub(amount)
        .unwrap_or_else(|| panic!("usage counter {counter} went below zero"))
}
