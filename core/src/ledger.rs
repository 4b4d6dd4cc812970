//! The ledger: all effect records, tombstones of collected ones, tenants, tool policies
//! and remembered command ids, kept in a [`Store`], and the one entry point that changes
//! them, [`Ledger::apply`]. Every record and tombstone write goes through `insert_record`,
//! `update`, `remove_record`, `insert_tombstone` or `remove_tombstone`, which keep the
//! indexes, counts and per-tenant usage counters in step. Read-only queries are in
//! `query`.
//!
//! `apply_stamped(command, stamp)` is deterministic: the same commands with the same stamps
//! give the same outcomes and the same state on every replica. Time only ever comes in as
//! the [`Stamp`] of the Raft leader; the ledger keeps the largest ledger time it has seen,
//! so a leader whose clock is behind cannot make a lease live again. Leases and retention
//! are judged by ledger time, provider horizons by the stamp's bounds on real time (see
//! [`crate::stamp`]).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::command::{Caller, Command, CommandBody};
use crate::index::{self, Entries};
use crate::key::{validate_command_id, validate_tenant, EffectKey};
use crate::keycode::{self, put_caller, put_str};
use crate::outcome::{Outcome, Refusal};
use crate::policy::TenantSettings;
use crate::record::{EffectRecord, EffectState};
use crate::stamp::Stamp;
use crate::store::{MemStore, Store, StoreExt, Table};
use crate::tenants::TenantMemo;
use crate::tombstone::Tombstone;
use crate::usage::{record_bytes, Usage};

pub use crate::query::{Escalations, ListPage, ListQuery};

/// A remembered command: its fingerprint, first outcome and when it may be forgotten.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CommandEntry {
    pub(crate) fingerprint: [u8; 32],
    pub(crate) outcome: Outcome,
    pub(crate) expires_at_ms: u64,
}

/// Key of the ledger clock in [`Table::Meta`].
pub(crate) const CLOCK_KEY: &[u8] = b"clock_ms";
/// Key of the next fencing token in [`Table::Meta`].
pub(crate) const TOKEN_KEY: &[u8] = b"next_fencing_token";

/// The key of a remembered command in [`Table::Commands`].
pub(crate) fn command_key(caller: &Caller, command_id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(command_key_len(caller, command_id));
    put_command_key(&mut out, caller, command_id);
    out
}

/// The key of a remembered command in [`Table::CommandExpiry`]: its expiry, then its
/// [`command_key`].
pub(crate) fn command_expiry_key(expires_at_ms: u64, caller: &Caller, command_id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + command_key_len(caller, command_id));
    keycode::put_u64(&mut out, expires_at_ms);
    put_command_key(&mut out, caller, command_id);
    out
}

/// Appends a [`command_key`].
fn put_command_key(out: &mut Vec<u8>, caller: &Caller, command_id: &str) {
    put_caller(out, caller);
    put_str(out, command_id);
}

/// Bytes a [`command_key`] takes when no string in it holds a `0x00`.
fn command_key_len(caller: &Caller, command_id: &str) -> usize {
    let caller_len = match caller {
        Caller::Tenant(tenant) => tenant.len() + 2,
        Caller::Operator => 1,
    };
    caller_len + command_id.len() + 1
}

/// The effect ledger state machine over the store `S` (in memory by default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger<S = MemStore> {
    pub(crate) store: S,
    pub(crate) tenant_memo: TenantMemo,
}

impl Ledger {
    /// An empty ledger in memory.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<S: Store> Ledger<S> {
    /// The ledger kept in `store` (empty or as left by earlier applies).
    pub fn on(store: S) -> Self {
        Ledger {
            store,
            tenant_memo: TenantMemo::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The store, to take what the last commands wrote (see [`Store`]).
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// Brings the store's derived tables up to this version's: adds the escalation index
    /// to a store written before it existed (once; later calls return at once). Run when
    /// a store is opened, before the first command; returns the entries added.
    pub fn upgrade_indexes(&mut self) -> u64 {
        index::index_escalations(&mut self.store)
    }

    /// Gives the store back.
    pub fn into_store(self) -> S {
        self.store
    }

    /// Tells the store which keys applying `commands` will look up first ([`Store::prefetch`]):
    /// each recorded command's id; an effect command's record; a claim's or declaration's
    /// tombstone, and the record and tombstone of the key's one-slot shape (`key#0`),
    /// which must not exist beside it. A hint, never a read the ledger relies on.
    pub fn prefetch(&self, commands: &[Command]) {
        let mut keys = Vec::new();
        for command in commands {
            if command.body.is_recorded() {
                keys.push((
                    Table::Commands,
                    command_key(&command.caller, &command.command_id),
                ));
            }
            let Some(key) = command.body.effect_key() else {
                continue;
            };
            let stored = keycode::key(key);
            if let CommandBody::Claim { .. } | CommandBody::Declare { .. } = &command.body {
                let twin = keycode::key(&key.slot_key(0));
                keys.push((Table::Tombstones, stored.clone()));
                keys.push((Table::Records, twin.clone()));
                keys.push((Table::Tombstones, twin));
            }
            keys.push((Table::Records, stored));
        }
        self.store.prefetch(keys);
    }

    /// Applies one command at ledger time `now_ms`, with no more known of real time than
    /// that ([`Stamp::at`]), and returns its outcome.
    pub fn apply(&mut self, command: &Command, now_ms: u64) -> Outcome {
        self.apply_stamped(command, Stamp::at(now_ms))
    }

    /// Applies one command as stamped by the leader and returns its outcome.
    ///
    /// A command id applied before (by the same caller) returns the first outcome and
    /// changes nothing; the same id with a different command is refused.
    pub fn apply_stamped(&mut self, command: &Command, stamp: Stamp) -> Outcome {
        let recorded = command.body.is_recorded();
        let fingerprint = if recorded {
            if let Err(refusal) = self.admit(command) {
                return refusal.into();
            }
            let fingerprint = fingerprint(&command.body);
            let id = command_key(&command.caller, &command.command_id);
            let remembered: Option<CommandEntry> = self.store.load(Table::Commands, &id, "command");
            if let Some(entry) = remembered {
                return if entry.fingerprint == fingerprint {
                    entry.outcome.clone()
                } else {
                    Refusal::CommandIdReused(command.command_id.clone()).into()
                };
            }
            Some(fingerprint)
        } else {
            None
        };
        let at = stamp.applied(self.clock_ms());
        if at.ledger_ms != self.clock_ms() {
            self.store
                .save(Table::Meta, CLOCK_KEY.to_vec(), &at.ledger_ms);
        }
        let outcome = self.execute(&command.caller, &command.body, at);
        if let Some(fingerprint) = fingerprint {
            self.remember(command, fingerprint, &outcome, at.ledger_ms);
        }
        outcome
    }

    /// Checks what must hold before a command id can be remembered: a well-formed id
    /// from a registered caller. Commands failing this are refused and not remembered.
    fn admit(&self, command: &Command) -> Result<(), Refusal> {
        validate_command_id(&command.command_id)?;
        if let Caller::Tenant(tenant) = &command.caller {
            validate_tenant(tenant)?;
            if !self.has_tenant(tenant) {
                return Err(Refusal::UnknownTenant(tenant.clone()));
            }
        }
        Ok(())
    }

    fn remember(&mut self, command: &Command, fingerprint: [u8; 32], outcome: &Outcome, now: u64) {
        let retention_ms = match &command.caller {
            Caller::Tenant(t) => {
                self.tenant_config(t)
                    .expect("admitted commands come from registered tenants")
                    .settings
                    .command_retention_ms
            }
            Caller::Operator => TenantSettings::default().command_retention_ms,
        };
        let expires_at_ms = now.saturating_add(retention_ms);
        let (caller, id) = (&command.caller, &command.command_id);
        self.store.put(
            Table::CommandExpiry,
            command_expiry_key(expires_at_ms, caller, id),
            Vec::new(),
        );
        self.store.save(
            Table::Commands,
            command_key(caller, id),
            &CommandEntry {
                fingerprint,
                outcome: outcome.clone(),
                expires_at_ms,
            },
        );
        index::count(&mut self.store, index::COMMAND_COUNTER, 1);
    }

    fn execute(&mut self, caller: &Caller, body: &CommandBody, at: Stamp) -> Outcome {
        let now = at.ledger_ms;
        if body.is_operator_only() && *caller != Caller::Operator {
            return Refusal::NotPermitted {
                command: body.name().into(),
            }
            .into();
        }
        if let Some(key) = body.effect_key() {
            if let Err(refusal) = self.authorize(caller, key) {
                return refusal.into();
            }
        }
        match body {
            CommandBody::PutTenant { tenant, settings } => self.put_tenant(tenant, settings),
            CommandBody::PutToolPolicy {
                tenant,
                tool,
                policy,
            } => self.put_tool_policy(tenant, tool, policy),
            CommandBody::Declare { declaration, slots } => self.declare(declaration, *slots, now),
            CommandBody::Claim {
                declaration,
                holder,
                lease_ms,
                confirmation,
            } => self.claim(declaration, holder, *lease_ms, confirmation.as_deref(), at),
            CommandBody::Heartbeat {
                key,
                fencing_token,
                lease_ms,
            } => self.heartbeat(key, *fencing_token, *lease_ms, at),
            CommandBody::Report {
                key,
                fencing_token,
                report,
            } => self.report(key, *fencing_token, report, now),
            CommandBody::BeginReconcile {
                key,
                holder,
                lease_ms,
            } => self.begin_reconcile(key, holder, *lease_ms, at),
            CommandBody::Observe {
                key,
                fencing_token,
                result,
                detail,
            } => self.observe(key, *fencing_token, result, detail, at),
            CommandBody::Decide {
                key,
                decision,
                operator,
                note,
            } => self.decide(key, None, decision, operator, note, now),
            CommandBody::DecideEscalation {
                key,
                escalation_token,
                decision,
                operator,
                note,
            } => self.decide(key, Some(*escalation_token), decision, operator, note, now),
            CommandBody::ExpireLeases { limit } => self.expire_leases(*limit, at),
            CommandBody::CollectGarbage { limit } => self.collect_garbage(*limit, now),
            CommandBody::Amend { declaration } => self.amend(declaration, now),
        }
    }

    /// A tenant may act only on its own effects; the operator on any registered tenant's.
    fn authorize(&self, caller: &Caller, key: &EffectKey) -> Result<(), Refusal> {
        if let Caller::Tenant(tenant) = caller {
            if *tenant != key.tenant {
                return Err(Refusal::WrongTenant {
                    caller: tenant.clone(),
                    owner: key.tenant.clone(),
                });
            }
        }
        validate_tenant(&key.tenant)?;
        if !self.has_tenant(&key.tenant) {
            return Err(Refusal::UnknownTenant(key.tenant.clone()));
        }
        Ok(())
    }

    /// Whether the `new` records fit `tenant`'s quotas (nothing new always fits).
    pub(crate) fn check_quota(&self, tenant: &str, new: &[EffectRecord]) -> Result<(), Refusal> {
        if new.is_empty() {
            return Ok(());
        }
        let Some(config) = self.tenant_config(tenant) else {
            return Err(Refusal::UnknownTenant(tenant.to_owned()));
        };
        let bytes = new.iter().map(record_bytes).sum();
        Usage::check_quota(
            &self.store,
            tenant,
            &config.settings,
            new.len() as u64,
            bytes,
        )
    }

    /// Inserts a new record; it must not exist.
    pub(crate) fn insert_record(&mut self, rec: EffectRecord) {
        self.write_record(rec, false, |_, _| ());
    }

    /// Changes a record as just read from the store through `change` (which also gets
    /// the next fencing token to hand out), then checks its invariants and that committed
    /// never went back, and moves its index entries.
    pub(crate) fn update<R>(
        &mut self,
        rec: EffectRecord,
        change: impl FnOnce(&mut EffectRecord, &mut u64) -> R,
    ) -> R {
        self.write_record(rec, true, change)
    }

    /// Changes `rec` through `change` and stores it: over its stored self when `stored`,
    /// else as a new record, which must not exist. A record created and changed by one
    /// command is written once, with only its final index entries.
    pub(crate) fn write_record<R>(
        &mut self,
        mut rec: EffectRecord,
        stored: bool,
        change: impl FnOnce(&mut EffectRecord, &mut u64) -> R,
    ) -> R {
        let key = keycode::key(&rec.key);
        let before = stored.then(|| (Entries::of(&rec), record_bytes(&rec)));
        if !stored {
            assert!(
                self.store.get(Table::Tombstones, &key).is_none(),
                "{}: record over a tombstone",
                rec.key
            );
            assert!(
                self.store.get(Table::Records, &key).is_none(),
                "{}: a new record over an existing one",
                rec.key
            );
        }
        let receipt_before = rec.receipt.clone();
        let token_before = self.next_fencing_token();
        let mut token = token_before;
        let result = change(&mut rec, &mut token);
        check_record(&rec);
        if receipt_before.is_some() {
            assert_eq!(
                rec.receipt, receipt_before,
                "{}: committed changed",
                rec.key
            );
            assert_eq!(
                rec.state,
                EffectState::Committed,
                "{}: committed reverted",
                rec.key
            );
        }
        if token != token_before {
            self.store.save(Table::Meta, TOKEN_KEY.to_vec(), &token);
        }
        let after = Entries::of(&rec);
        index::replace(
            &mut self.store,
            &rec.key,
            before.as_ref().map(|(entries, _)| entries),
            Some(&after),
        );
        match before {
            Some((_, bytes_before)) => Usage::resize_record(
                &mut self.store,
                &rec.key.tenant,
                bytes_before,
                record_bytes(&rec),
            ),
            None => Usage::add_record(&mut self.store, &rec),
        }
        self.store.save(Table::Records, key, &rec);
        result
    }

    /// Removes a record (garbage collection) and returns it.
    pub(crate) fn remove_record(&mut self, key: &EffectKey) -> Option<EffectRecord> {
        let rec = self.get(key)?;
        self.store.delete(Table::Records, &keycode::key(key));
        index::replace(&mut self.store, key, Some(&Entries::of(&rec)), None);
        Usage::remove_record(&mut self.store, &rec);
        Some(rec)
    }

    /// Keeps a tombstone; there must be no record and no tombstone of its key.
    pub(crate) fn insert_tombstone(&mut self, tombstone: Tombstone) {
        let key = keycode::key(&tombstone.key);
        assert!(
            self.store.get(Table::Records, &key).is_none(),
            "{}: tombstone next to a record",
            tombstone.key
        );
        assert!(
            self.store.get(Table::Tombstones, &key).is_none(),
            "insert_tombstone over a tombstone"
        );
        self.store.put(
            Table::TombstoneExpiry,
            keycode::at_key(tombstone.expires_at_ms, &tombstone.key),
            Vec::new(),
        );
        Usage::add_tombstone(&mut self.store, &tombstone);
        index::count(&mut self.store, index::TOMBSTONE_COUNTER, 1);
        self.store.save(Table::Tombstones, key, &tombstone);
    }

    /// Forgets a tombstone (its window has passed).
    pub(crate) fn remove_tombstone(&mut self, key: &EffectKey) {
        if let Some(tombstone) = self.tombstone(key) {
            self.store.delete(Table::Tombstones, &keycode::key(key));
            self.store.delete(
                Table::TombstoneExpiry,
                &keycode::at_key(tombstone.expires_at_ms, key),
            );
            Usage::remove_tombstone(&mut self.store, &tombstone);
            index::count(&mut self.store, index::TOMBSTONE_COUNTER, -1);
        }
    }

    /// The refusal for a command on `key` when it has no record: expired when a tombstone
    /// of the key is kept, unknown otherwise.
    pub(crate) fn missing(&self, key: &EffectKey) -> Refusal {
        match self.tombstone(key) {
            Some(tombstone) => Refusal::Expired(Box::new(tombstone.expired())),
            None => Refusal::UnknownEffect(key.clone()),
        }
    }

    /// The record of `key`.
    pub fn get(&self, key: &EffectKey) -> Option<EffectRecord> {
        self.store
            .load(Table::Records, &keycode::key(key), "effect record")
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.counts().values().sum()
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of remembered command ids.
    pub fn remembered_commands(&self) -> usize {
        self.counter(index::COMMAND_COUNTER) as usize
    }

    /// A counter of [`Table::Counts`].
    pub(crate) fn counter(&self, counter: &[u8]) -> u64 {
        self.store
            .load(Table::Counts, counter, "counter")
            .unwrap_or(0)
    }

    /// The largest time applied so far (ms).
    pub fn clock_ms(&self) -> u64 {
        self.store
            .load(Table::Meta, CLOCK_KEY, "ledger clock")
            .unwrap_or(0)
    }

    /// The fencing token the next grant gets.
    pub(crate) fn next_fencing_token(&self) -> u64 {
        self.store
            .load(Table::Meta, TOKEN_KEY, "fencing token")
            .unwrap_or(1)
    }
}

/// Asserts a record's invariants. On in release builds: a violation is a bug in this crate
/// and continuing would replicate a corrupt record.
fn check_record(rec: &EffectRecord) {
    if let Err(violation) = rec.check_invariants() {
        panic!("effect record invariant violated: {violation}");
    }
}

/// SHA-256 of the command body's canonical encoding, hashed as it is encoded.
fn fingerprint(body: &CommandBody) -> [u8; 32] {
    struct Hashing(Sha256);
    impl bincode::enc::write::Writer for Hashing {
        fn write(&mut self, bytes: &[u8]) -> Result<(), bincode::error::EncodeError> {
            self.0.update(bytes);
            Ok(())
        }
    }
    let mut hashing = Hashing(Sha256::new());
    bincode::serde::encode_into_writer(body, &mut hashing, bincode::config::standard())
        .expect("hashing a command's encoding cannot fail");
    hashing.0.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stored fingerprints were taken over the whole encoded body; hashing while encoding
    /// must give the same digest, or remembered commands would read as reused ids.
    #[test]
    fn fingerprint_is_the_digest_of_the_whole_encoding() {
        let body = CommandBody::PutTenant {
            tenant: "acme".into(),
            settings: TenantSettings::default(),
        };
        let whole = bincode::serde::encode_to_vec(&body, bincode::config::standard()).unwrap();
        let digest: [u8; 32] = Sha256::digest(&whole).into();
        assert_eq!(fingerprint(&body), digest);
        let other = CommandBody::PutTenant {
            tenant: "acme2".into(),
            settings: TenantSettings::default(),
        };
        assert_ne!(fingerprint(&other), digest);
    }
}
