//! Secondary indexes over the records: lease deadlines, retention deadlines, state and
//! workflow.
//!
//! They are derived from the records alone, never serialised, and rebuilt on restore, so
//! a snapshot holds each fact once. Every record write goes through
//! [`Indexes::replace`], which moves the record's entries from its old to its new shape.

use std::collections::BTreeSet;

use crate::command::Caller;
use crate::key::EffectKey;
use crate::record::{EffectRecord, EffectState};

/// The index entries one record contributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entries {
    lease_until_ms: Option<u64>,
    retention_deadline_ms: Option<u64>,
    state: EffectState,
    workflow_id: String,
}

impl Entries {
    pub(crate) fn of(rec: &EffectRecord) -> Self {
        Entries {
            lease_until_ms: rec.open_attempt().map(|a| a.lease_until_ms),
            retention_deadline_ms: rec.retention_deadline_ms,
            state: rec.state,
            workflow_id: rec.workflow_id.clone(),
        }
    }
}

/// Ordered sets keyed by what the sweeper and list queries look up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Indexes {
    /// Open attempts by the end of their lease.
    pub(crate) leases: BTreeSet<(u64, EffectKey)>,
    /// Collectable records by retention deadline.
    pub(crate) retention: BTreeSet<(u64, EffectKey)>,
    /// Records by state.
    pub(crate) by_state: BTreeSet<(EffectState, EffectKey)>,
    /// Records by (tenant, workflow).
    pub(crate) by_workflow: BTreeSet<(String, String, EffectKey)>,
    /// Recorded command ids by the end of their retention.
    pub(crate) command_expiry: BTreeSet<(u64, Caller, String)>,
}

impl Indexes {
    /// Moves `key`'s entries from `old` (absent for a new record) to `new` (absent for a
    /// removed one).
    pub(crate) fn replace(
        &mut self,
        key: &EffectKey,
        old: Option<&Entries>,
        new: Option<&Entries>,
    ) {
        if old == new {
            return;
        }
        if let Some(e) = old {
            if let Some(t) = e.lease_until_ms {
                self.leases.remove(&(t, key.clone()));
            }
            if let Some(t) = e.retention_deadline_ms {
                self.retention.remove(&(t, key.clone()));
            }
            self.by_state.remove(&(e.state, key.clone()));
            self.by_workflow
                .remove(&(key.tenant.clone(), e.workflow_id.clone(), key.clone()));
        }
        if let Some(e) = new {
            if let Some(t) = e.lease_until_ms {
                self.leases.insert((t, key.clone()));
            }
            if let Some(t) = e.retention_deadline_ms {
                self.retention.insert((t, key.clone()));
            }
            self.by_state.insert((e.state, key.clone()));
            self.by_workflow
                .insert((key.tenant.clone(), e.workflow_id.clone(), key.clone()));
        }
    }
}
