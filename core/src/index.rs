//! Secondary indexes over the records: lease deadlines, retention deadlines, state and
//! workflow, and tombstone expiry.
//!
//! They are derived from the records and tombstones alone, never serialised, and rebuilt
//! on restore, so a snapshot holds each fact once. Every record write goes through
//! [`Indexes::replace`], which moves the record's entries from its old to its new shape.
//!
//! The slots of one declaration (`base#0 .. base#n-1`) are collected together, so they
//! have one retention entry between them: the group's, due at the latest slot deadline
//! once every slot has one (every slot finished), and absent before. A group blocked by
//! one unfinished slot is therefore never "due" and never makes the sweeper spin.

use std::collections::{BTreeMap, BTreeSet};

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
    /// The record's group (base key, slot index, slot count), when one of several slots.
    slot: Option<(EffectKey, u32, u32)>,
}

impl Entries {
    pub(crate) fn of(rec: &EffectRecord) -> Self {
        let slot = rec.slot.and_then(|s| {
            let (base, index) = rec.key.slot()?;
            (index == s.index).then_some((base, s.index, s.count))
        });
        Entries {
            lease_until_ms: rec.open_attempt().map(|a| a.lease_until_ms),
            retention_deadline_ms: rec.retention_deadline_ms,
            state: rec.state,
            workflow_id: rec.workflow_id.clone(),
            slot,
        }
    }
}

/// What one retention entry collects.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Collectable {
    /// A record declared alone.
    Record(EffectKey),
    /// Every slot of a declaration, `base#0 .. base#(count-1)`.
    Slots {
        /// The declared key.
        base: EffectKey,
        /// How many slots it declared.
        count: u32,
    },
}

impl Collectable {
    /// The keys of the records it collects.
    pub(crate) fn keys(&self) -> Vec<EffectKey> {
        match self {
            Collectable::Record(key) => vec![key.clone()],
            Collectable::Slots { base, count } => (0..*count).map(|i| base.slot_key(i)).collect(),
        }
    }

    /// How many records it collects.
    pub(crate) fn len(&self) -> usize {
        match self {
            Collectable::Record(_) => 1,
            Collectable::Slots { count, .. } => *count as usize,
        }
    }
}

/// The retention deadlines of a declaration's finished slots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SlotGroup {
    count: u32,
    /// `(retention deadline, slot index)` of every slot that has a deadline.
    deadlines: BTreeSet<(u64, u32)>,
}

impl SlotGroup {
    /// When the whole group may be collected: once every slot has a deadline, at the
    /// latest of them.
    fn due_ms(&self) -> Option<u64> {
        let complete = self.deadlines.len() == self.count as usize;
        complete.then(|| self.deadlines.last().map_or(0, |(t, _)| *t))
    }
}

/// Ordered sets keyed by what the sweeper and list queries look up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Indexes {
    /// Open attempts by the end of their lease.
    pub(crate) leases: BTreeSet<(u64, EffectKey)>,
    /// Collectable records and slot groups by retention deadline.
    pub(crate) retention: BTreeSet<(u64, Collectable)>,
    /// Slot groups with at least one finished slot, by base key.
    pub(crate) slot_groups: BTreeMap<EffectKey, SlotGroup>,
    /// Tombstones by the end of their window.
    pub(crate) tombstone_expiry: BTreeSet<(u64, EffectKey)>,
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
                self.forget_deadline(key, e, t);
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
                self.note_deadline(key, e, t);
            }
            self.by_state.insert((e.state, key.clone()));
            self.by_workflow
                .insert((key.tenant.clone(), e.workflow_id.clone(), key.clone()));
        }
    }

    fn note_deadline(&mut self, key: &EffectKey, e: &Entries, t: u64) {
        match &e.slot {
            None => {
                self.retention.insert((t, Collectable::Record(key.clone())));
            }
            Some((base, index, count)) => self.change_group(base, *count, |g| {
                g.deadlines.insert((t, *index));
            }),
        }
    }

    fn forget_deadline(&mut self, key: &EffectKey, e: &Entries, t: u64) {
        match &e.slot {
            None => {
                self.retention
                    .remove(&(t, Collectable::Record(key.clone())));
            }
            Some((base, index, count)) => self.change_group(base, *count, |g| {
                g.deadlines.remove(&(t, *index));
            }),
        }
    }

    /// Changes a group's deadlines and moves its retention entry accordingly.
    fn change_group(&mut self, base: &EffectKey, count: u32, change: impl FnOnce(&mut SlotGroup)) {
        let group = self.slot_groups.entry(base.clone()).or_insert(SlotGroup {
            count,
            deadlines: BTreeSet::new(),
        });
        let count = group.count;
        let entry = |t| {
            (
                t,
                Collectable::Slots {
                    base: base.clone(),
                    count,
                },
            )
        };
        let before = group.due_ms().map(entry);
        change(group);
        let after = group.due_ms().map(entry);
        if group.deadlines.is_empty() {
            self.slot_groups.remove(base);
        }
        if before != after {
            if let Some(old) = before {
                self.retention.remove(&old);
            }
            if let Some(new) = after {
                self.retention.insert(new);
            }
        }
    }
}
