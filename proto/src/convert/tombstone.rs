//! Collected effects on the wire: the [`ExpiredEffect`] a late claim or reconcile is
//! answered with, the [`Tombstone`] a `Get` of a collected key may return, and the
//! tenant settings that bound retention and usage.
//!
//! Reading is total: a missing key, an intent hash or receipt digest that is not 32 bytes,
//! and an undefined state are [`WireError`]s. Tenant settings added after the first
//! contract version are `optional` on the wire, and an absent one reads as its default,
//! so an older sender never sets a tenant's quota to zero.

use ledger_core::{EffectRecord, ExpiredEffect, ReceiptDigest, TenantSettings, Tombstone};

use super::values::{effect_state_from_i32, effect_state_to_i32};
use super::{intent_hash_from_bytes, intent_hash_to_bytes, required, WireError};
use crate::pb;

/// Reads a receipt digest: exactly 32 bytes.
pub fn receipt_digest_from_bytes(bytes: &[u8], field: &str) -> Result<ReceiptDigest, WireError> {
    <[u8; 32]>::try_from(bytes)
        .map(ReceiptDigest)
        .map_err(|_| WireError::BadLength {
            field: field.to_owned(),
            len: bytes.len(),
            expected: 32,
        })
}

fn digest_from_wire(bytes: Option<Vec<u8>>) -> Result<Option<ReceiptDigest>, WireError> {
    bytes
        .map(|b| receipt_digest_from_bytes(&b, "receipt_digest"))
        .transpose()
}

impl From<ExpiredEffect> for pb::ExpiredEffect {
    fn from(e: ExpiredEffect) -> Self {
        pb::ExpiredEffect {
            key: Some(e.key.into()),
            intent_hash: intent_hash_to_bytes(&e.intent_hash),
            final_state: effect_state_to_i32(e.final_state),
            receipt_digest: e.receipt_digest.map(|d| d.0.to_vec()),
            collected_at_ms: e.collected_at_ms,
        }
    }
}

/// `key` is required, `intent_hash` and a present `receipt_digest` are 32 bytes, and
/// `final_state` is defined.
impl TryFrom<pb::ExpiredEffect> for ExpiredEffect {
    type Error = WireError;

    fn try_from(e: pb::ExpiredEffect) -> Result<Self, WireError> {
        Ok(ExpiredEffect {
            key: required(e.key, "key")?,
            intent_hash: intent_hash_from_bytes(&e.intent_hash, "intent_hash")?,
            final_state: effect_state_from_i32(e.final_state, "final_state")?,
            receipt_digest: digest_from_wire(e.receipt_digest)?,
            collected_at_ms: e.collected_at_ms,
        })
    }
}

impl From<Tombstone> for pb::Tombstone {
    fn from(t: Tombstone) -> Self {
        pb::Tombstone {
            key: Some(t.key.into()),
            intent_hash: intent_hash_to_bytes(&t.intent_hash),
            final_state: effect_state_to_i32(t.final_state),
            receipt_digest: t.receipt_digest.map(|d| d.0.to_vec()),
            collected_at_ms: t.collected_at_ms,
            expires_at_ms: t.expires_at_ms,
        }
    }
}

/// As for [`ExpiredEffect`].
impl TryFrom<pb::Tombstone> for Tombstone {
    type Error = WireError;

    fn try_from(t: pb::Tombstone) -> Result<Self, WireError> {
        Ok(Tombstone {
            key: required(t.key, "key")?,
            intent_hash: intent_hash_from_bytes(&t.intent_hash, "intent_hash")?,
            final_state: effect_state_from_i32(t.final_state, "final_state")?,
            receipt_digest: digest_from_wire(t.receipt_digest)?,
            collected_at_ms: t.collected_at_ms,
            expires_at_ms: t.expires_at_ms,
        })
    }
}

/// What a `Get` found: the record, or the tombstone its collection left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The effect's record.
    Record(Box<EffectRecord>),
    /// The record was collected; this is what is kept of it.
    Tombstone(Tombstone),
}

impl From<Tombstone> for pb::GetResponse {
    fn from(t: Tombstone) -> Self {
        pb::GetResponse {
            record: None,
            tombstone: Some(t.into()),
        }
    }
}

impl From<Found> for pb::GetResponse {
    fn from(found: Found) -> Self {
        match found {
            Found::Record(record) => (*record).into(),
            Found::Tombstone(tombstone) => tombstone.into(),
        }
    }
}

/// `record` when set, else `tombstone`; one of them is required.
impl TryFrom<pb::GetResponse> for Found {
    type Error = WireError;

    fn try_from(r: pb::GetResponse) -> Result<Self, WireError> {
        match (r.record, r.tombstone) {
            (Some(record), _) => Ok(Found::Record(Box::new(required(Some(record), "record")?))),
            (None, Some(tombstone)) => {
                Ok(Found::Tombstone(required(Some(tombstone), "tombstone")?))
            }
            (None, None) => Err(WireError::Missing("record".into())),
        }
    }
}

impl From<TenantSettings> for pb::TenantSettings {
    fn from(s: TenantSettings) -> Self {
        pb::TenantSettings {
            command_retention_ms: s.command_retention_ms,
            tombstone_retention_ms: Some(s.tombstone_retention_ms),
            live_records_max: Some(s.live_records_max),
            stored_bytes_max: Some(s.stored_bytes_max),
        }
    }
}

/// Absent optional settings read as their defaults.
impl From<pb::TenantSettings> for TenantSettings {
    fn from(s: pb::TenantSettings) -> Self {
        let defaults = TenantSettings::default();
        TenantSettings {
            command_retention_ms: s.command_retention_ms,
            tombstone_retention_ms: s
                .tombstone_retention_ms
                .unwrap_or(defaults.tombstone_retention_ms),
            live_records_max: s.live_records_max.unwrap_or(defaults.live_records_max),
            stored_bytes_max: s.stored_bytes_max.unwrap_or(defaults.stored_bytes_max),
        }
    }
}
