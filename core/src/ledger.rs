//! The ledger: all effect records, tombstones of collected ones, tenants, tool policies
//! and remembered command ids, and the one entry point that changes them,
//! [`Ledger::apply`]. Every record and tombstone write goes through `insert_record`,
//! `update`, `remove_record`, `insert_tombstone` or `remove_tombstone`, which keep the
//! indexes and per-tenant usage counters in step. Read-only queries are in `query`.
//!
//! `apply_stamped(command, stamp)` is deterministic: the same commands with the same stamps
//! give the same outcomes and the same state on every replica. Time only ever comes in as
//! the [`Stamp`] of the Raft leader; the ledger keeps the largest ledger time it has seen,
//! so a leader whose clock is behind cannot make a lease live again. Leases and retention
//! are judged by ledger time, provider horizons by the stamp's bounds on real time (see
//! [`crate::stamp`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::command::{Caller, Command, CommandBody};
use crate::index::{Entries, Indexes};
use crate::key::{validate_command_id, validate_tenant, EffectKey};
use crate::outcome::{Outcome, Refusal};
use crate::policy::{ReplayClass, TenantSettings, ToolName, ToolPolicy, ToolRef};
use crate::record::{EffectRecord, EffectState};
use crate::stamp::Stamp;
use crate::tombstone::Tombstone;
use crate::usage::{record_bytes, Usage};

pub use crate::query::ListQuery;

/// A tenant's settings and tool policies.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TenantConfig {
    /// Settings.
    pub settings: TenantSettings,
    /// Policy per tool.
    pub tools: BTreeMap<ToolName, ToolPolicy>,
}

/// A remembered command: its fingerprint, first outcome and when it may be forgotten.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CommandEntry {
    pub(crate) fingerprint: [u8; 32],
    pub(crate) outcome: Outcome,
    pub(crate) expires_at_ms: u64,
}

/// The serialised part of the ledger. Ordered maps only, so its encoding is deterministic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct State {
    pub(crate) clock_ms: u64,
    pub(crate) next_fencing_token: u64,
    pub(crate) tenants: BTreeMap<String, TenantConfig>,
    pub(crate) effects: BTreeMap<EffectKey, EffectRecord>,
    pub(crate) commands: BTreeMap<(Caller, String), CommandEntry>,
    /// What is kept of collected records, by key.
    pub(crate) tombstones: BTreeMap<EffectKey, Tombstone>,
}

impl Default for State {
    fn default() -> Self {
        State {
            clock_ms: 0,
            next_fencing_token: 1,
            tenants: BTreeMap::new(),
            effects: BTreeMap::new(),
            commands: BTreeMap::new(),
            tombstones: BTreeMap::new(),
        }
    }
}

/// The effect ledger state machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    pub(crate) state: State,
    pub(crate) index: Indexes,
    /// Per-tenant counters, derived like the indexes.
    pub(crate) usage: Usage,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
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
            let id = (command.caller.clone(), command.command_id.clone());
            if let Some(entry) = self.state.commands.get(&id) {
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
        let at = stamp.applied(self.state.clock_ms);
        self.state.clock_ms = at.ledger_ms;
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
            if !self.state.tenants.contains_key(tenant) {
                return Err(Refusal::UnknownTenant(tenant.clone()));
            }
        }
        Ok(())
    }

    fn remember(&mut self, command: &Command, fingerprint: [u8; 32], outcome: &Outcome, now: u64) {
        let retention_ms = match &command.caller {
            Caller::Tenant(t) => self.state.tenants[t].settings.command_retention_ms,
            Caller::Operator => TenantSettings::default().command_retention_ms,
        };
        let expires_at_ms = now.saturating_add(retention_ms);
        let id = (command.caller.clone(), command.command_id.clone());
        self.index
            .command_expiry
            .insert((expires_at_ms, id.0.clone(), id.1.clone()));
        self.state.commands.insert(
            id,
            CommandEntry {
                fingerprint,
                outcome: outcome.clone(),
                expires_at_ms,
            },
        );
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
            } => self.decide(key, decision, operator, note, now),
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
        if !self.state.tenants.contains_key(&key.tenant) {
            return Err(Refusal::UnknownTenant(key.tenant.clone()));
        }
        Ok(())
    }

    fn put_tenant(&mut self, tenant: &str, settings: &TenantSettings) -> Outcome {
        if let Err(e) = validate_tenant(tenant) {
            return e.into();
        }
        self.state
            .tenants
            .entry(tenant.to_owned())
            .or_default()
            .settings = settings.clone();
        Outcome::Configured
    }

    fn put_tool_policy(&mut self, tenant: &str, tool: &ToolName, policy: &ToolPolicy) -> Outcome {
        let Some(config) = self.state.tenants.get_mut(tenant) else {
            return Refusal::UnknownTenant(tenant.to_owned()).into();
        };
        let valid = crate::key::validate_name("tool.provider", &tool.provider)
            .and_then(|()| crate::key::validate_name("tool.name", &tool.name));
        if let Err(e) = valid {
            return e.into();
        }
        if let Err(e) = policy.validate() {
            return Refusal::InvalidPolicy(e).into();
        }
        config.tools.insert(tool.clone(), policy.clone());
        Outcome::Configured
    }

    /// The policy for a new effect of `tool`; read-only tools have no effects.
    pub(crate) fn policy_for(&self, tenant: &str, tool: &ToolRef) -> Result<&ToolPolicy, Refusal> {
        let name = tool.tool_name();
        let policy = self
            .state
            .tenants
            .get(tenant)
            .and_then(|t| t.tools.get(&name))
            .ok_or_else(|| Refusal::UnknownTool(name.clone()))?;
        if policy.class == ReplayClass::ReadOnly {
            return Err(Refusal::ReadOnlyTool(name));
        }
        Ok(policy)
    }

    /// Whether the `new` records fit `tenant`'s quotas (nothing new always fits).
    pub(crate) fn check_quota(&self, tenant: &str, new: &[EffectRecord]) -> Result<(), Refusal> {
        if new.is_empty() {
            return Ok(());
        }
        let Some(config) = self.state.tenants.get(tenant) else {
            return Err(Refusal::UnknownTenant(tenant.to_owned()));
        };
        let bytes = new.iter().map(record_bytes).sum();
        self.usage
            .check_quota(tenant, &config.settings, new.len() as u64, bytes)
    }

    /// Inserts a new record; it must not exist.
    pub(crate) fn insert_record(&mut self, rec: EffectRecord) {
        check_record(&rec);
        let key = rec.key.clone();
        assert!(
            !self.state.tombstones.contains_key(&key),
            "{key}: record over a tombstone"
        );
        self.index.replace(&key, None, Some(&Entries::of(&rec)));
        self.usage.add_record(&rec);
        let previous = self.state.effects.insert(key, rec);
        assert!(previous.is_none(), "insert_record over an existing record");
    }

    /// Changes a record through `change` (which also gets the next fencing token to hand
    /// out), then checks its invariants and that committed never went back, and moves its
    /// index entries. Panics if the record does not exist: callers look it up first.
    pub(crate) fn update<R>(
        &mut self,
        key: &EffectKey,
        change: impl FnOnce(&mut EffectRecord, &mut u64) -> R,
    ) -> R {
        let rec = self
            .state
            .effects
            .get_mut(key)
            .expect("update of a record that was looked up");
        let before = Entries::of(rec);
        let bytes_before = record_bytes(rec);
        let receipt_before = rec.receipt.clone();
        let result = change(rec, &mut self.state.next_fencing_token);
        check_record(rec);
        if receipt_before.is_some() {
            assert_eq!(rec.receipt, receipt_before, "{key}: committed changed");
            assert_eq!(
                rec.state,
                EffectState::Committed,
                "{key}: committed reverted"
            );
        }
        let after = Entries::of(rec);
        self.index.replace(key, Some(&before), Some(&after));
        let bytes_after = record_bytes(rec);
        self.usage
            .resize_record(&key.tenant, bytes_before, bytes_after);
        result
    }

    /// Removes a record (garbage collection) and returns it.
    pub(crate) fn remove_record(&mut self, key: &EffectKey) -> Option<EffectRecord> {
        let rec = self.state.effects.remove(key)?;
        self.index.replace(key, Some(&Entries::of(&rec)), None);
        self.usage.remove_record(&rec);
        Some(rec)
    }

    /// Keeps a tombstone; there must be no record and no tombstone of its key.
    pub(crate) fn insert_tombstone(&mut self, tombstone: Tombstone) {
        let key = tombstone.key.clone();
        assert!(
            !self.state.effects.contains_key(&key),
            "{key}: tombstone next to a record"
        );
        self.index
            .tombstone_expiry
            .insert((tombstone.expires_at_ms, key.clone()));
        self.usage.add_tombstone(&tombstone);
        let previous = self.state.tombstones.insert(key, tombstone);
        assert!(previous.is_none(), "insert_tombstone over a tombstone");
    }

    /// Forgets a tombstone (its window has passed).
    pub(crate) fn remove_tombstone(&mut self, key: &EffectKey) {
        if let Some(tombstone) = self.state.tombstones.remove(key) {
            self.index
                .tombstone_expiry
                .remove(&(tombstone.expires_at_ms, key.clone()));
            self.usage.remove_tombstone(&tombstone);
        }
    }

    /// The refusal for a command on `key` when it has no record: expired when a tombstone
    /// of the key is kept, unknown otherwise.
    pub(crate) fn missing(&self, key: &EffectKey) -> Refusal {
        match self.state.tombstones.get(key) {
            Some(tombstone) => Refusal::Expired(Box::new(tombstone.expired())),
            None => Refusal::UnknownEffect(key.clone()),
        }
    }

    /// The record of `key`.
    pub fn get(&self, key: &EffectKey) -> Option<&EffectRecord> {
        self.state.effects.get(key)
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.state.effects.len()
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        self.state.effects.is_empty()
    }

    /// Number of remembered command ids.
    pub fn remembered_commands(&self) -> usize {
        self.state.commands.len()
    }

    /// The largest time applied so far (ms).
    pub fn clock_ms(&self) -> u64 {
        self.state.clock_ms
    }

    /// A tenant's configuration.
    pub fn tenant(&self, tenant: &str) -> Option<&TenantConfig> {
        self.state.tenants.get(tenant)
    }

    /// All tenants in order.
    pub fn tenants(&self) -> impl Iterator<Item = (&String, &TenantConfig)> {
        self.state.tenants.iter()
    }
}

/// Asserts a record's invariants. On in release builds: a violation is a bug in this crate
/// and continuing would replicate a corrupt record.
fn check_record(rec: &EffectRecord) {
    if let Err(violation) = rec.check_invariants() {
        panic!("effect record invariant violated: {violation}");
    }
}

/// SHA-256 of the command body's canonical encoding.
fn fingerprint(body: &CommandBody) -> [u8; 32] {
    let bytes = bincode::serde::encode_to_vec(body, bincode::config::standard())
        .expect("encoding a command into memory cannot fail");
    Sha256::digest(&bytes).into()
}
