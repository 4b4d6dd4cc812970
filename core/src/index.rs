//! Secondary indexes over the records: lease deadlines, retention deadlines, state,
//! workflow and open escalations, and counts per state and of escalations; kept in the
//! derived tables of the [`Store`].
//!
//! They are derived from the records alone, never carried by a snapshot, and rebuilt on
//! restore, so a snapshot holds each fact once. Every record write goes through
//! [`replace`], which moves the record's entries from its old to its new shape.
//!
//! The slots of one declaration (`base#0 .. base#n-1`) are collected together, so they
//! have one retention entry between them: the group's, due at the latest slot deadline
//! once every slot has one (every slot finished), and absent before. A group blocked by
//! one unfinished slot is therefore never "due" and never makes the sweeper spin.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::key::EffectKey;
use crate::keycode::{self, put_key, put_str, put_u64, Reader};
use crate::record::{EffectRecord, EffectState};
use crate::store::{Store, StoreExt, Table};

/// A slot's group: the declared key, the slot's index, how many slots.
type Slot = (EffectKey, u32, u32);

/// The index entries one record contributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entries {
    lease_until_ms: Option<u64>,
    retention_deadline_ms: Option<u64>,
    state: EffectState,
    workflow_id: String,
    /// When the record was escalated, while it waits for an operator.
    escalated_at_ms: Option<u64>,
    /// The record's group, when one of several slots.
    slot: Option<Slot>,
}

impl Entries {
    /// The retention deadline and the group it counts for, if the record has one.
    fn retention(&self) -> Option<(u64, &Option<Slot>)> {
        self.retention_deadline_ms.map(|t| (t, &self.slot))
    }

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
            escalated_at_ms: rec.escalation.as_ref().map(|e| e.at_ms),
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

    /// Its retention entry: the deadline, then a variant byte and the key(s).
    fn entry(&self, at_ms: u64) -> Vec<u8> {
        let mut out = Vec::new();
        put_u64(&mut out, at_ms);
        match self {
            Collectable::Record(key) => {
                out.push(0);
                put_key(&mut out, key);
            }
            Collectable::Slots { base, count } => {
                out.push(1);
                put_key(&mut out, base);
                out.extend_from_slice(&count.to_be_bytes());
            }
        }
        out
    }

    /// Reads a retention entry back.
    pub(crate) fn read_entry(bytes: &[u8]) -> Option<(u64, Collectable)> {
        let mut r = Reader::new(bytes);
        let at_ms = r.u64()?;
        let collectable = match r.byte()? {
            0 => Collectable::Record(r.key()?),
            1 => {
                let base = r.key()?;
                let count = r.u32()?;
                Collectable::Slots { base, count }
            }
            _ => return None,
        };
        r.done((at_ms, collectable))
    }
}

/// The retention deadlines of a declaration's finished slots.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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

/// The key of a record in [`Table::ByState`].
pub(crate) fn by_state(state: EffectState, key: &EffectKey) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + keycode::key_len(key));
    out.push(keycode::state(state));
    put_key(&mut out, key);
    out
}

/// The key of a record in [`Table::ByWorkflow`].
pub(crate) fn by_workflow(tenant: &str, workflow_id: &str, key: &EffectKey) -> Vec<u8> {
    let mut out = Vec::with_capacity(tenant.len() + workflow_id.len() + 2 + keycode::key_len(key));
    put_str(&mut out, tenant);
    put_str(&mut out, workflow_id);
    put_key(&mut out, key);
    out
}

/// The key of a state's counter in [`Table::Counts`].
pub(crate) fn state_counter(state: EffectState) -> Vec<u8> {
    vec![b's', keycode::state(state)]
}

/// The key of the tombstone counter in [`Table::Counts`].
pub(crate) const TOMBSTONE_COUNTER: &[u8] = b"tombstones";
/// The key of the remembered-command counter in [`Table::Counts`].
pub(crate) const COMMAND_COUNTER: &[u8] = b"commands";
/// The key of the escalation counter in [`Table::Counts`].
pub(crate) const ESCALATION_COUNTER: &[u8] = b"escalations";
/// Set in [`Table::Counts`] once every open escalation is known to be in
/// [`Table::Escalations`] (see [`index_escalations`]).
const ESCALATIONS_INDEXED: &[u8] = b"indexed:escalations";

/// Adds the escalation entries a store written before escalations were indexed lacks:
/// walks every record once, then marks the store so that later calls return at once.
/// Idempotent: an escalation already indexed is left alone. Returns how many it added.
pub(crate) fn index_escalations<S: Store + ?Sized>(store: &mut S) -> u64 {
    if store.get(Table::Counts, ESCALATIONS_INDEXED).is_some() {
        return 0;
    }
    let mut missing = Vec::new();
    store.walk(Table::Records, Vec::new(), None, |entry, value| {
        match crate::store::decode_value::<EffectRecord>(value) {
            Some(rec) => {
                if let Some(e) = &rec.escalation {
                    if store.get(Table::Escalations, entry).is_none() {
                        missing.push((entry.to_vec(), e.at_ms));
                    }
                }
            }
            None => store.corrupt(Table::Records, entry, "effect record"),
        }
        true
    });
    let added = missing.len() as u64;
    for (entry, at_ms) in missing {
        store.save(Table::Escalations, entry, &at_ms);
        count(store, ESCALATION_COUNTER, 1);
    }
    store.save(Table::Counts, ESCALATIONS_INDEXED.to_vec(), &1u64);
    added
}

/// Adds `delta` to a counter in [`Table::Counts`]; a counter at zero is not stored.
pub(crate) fn count<S: Store + ?Sized>(store: &mut S, counter: &[u8], delta: i64) {
    let value: u64 = store.load(Table::Counts, counter, "counter").unwrap_or(0);
    let changed = value
        .checked_add_signed(delta)
        .unwrap_or_else(|| panic!("counter {counter:?} went below zero"));
    if changed == 0 {
        store.delete(Table::Counts, counter);
    } else {
        store.save(Table::Counts, counter.to_vec(), &changed);
    }
}

/// Moves `key`'s entries from `old` (absent for a new record) to `new` (absent for a
/// removed one). An entry that is the same in both is left alone: most record writes
/// change the state and the lease, not the workflow or the retention deadline, and a
/// rewrite of an unchanged entry would still cost the disk a write.
pub(crate) fn replace<S: Store + ?Sized>(
    store: &mut S,
    key: &EffectKey,
    old: Option<&Entries>,
    new: Option<&Entries>,
) {
    if old == new {
        return;
    }
    let lease = |e: &Entries| e.lease_until_ms.map(|t| keycode::at_key(t, key));
    move_entry(
        store,
        Table::Leases,
        old.and_then(lease),
        new.and_then(lease),
    );
    let (old_due, new_due) = (
        old.and_then(Entries::retention),
        new.and_then(Entries::retention),
    );
    if old_due != new_due {
        if let (Some(e), Some((t, _))) = (old, old_due) {
            forget_deadline(store, key, e, t);
        }
        if let (Some(e), Some((t, _))) = (new, new_due) {
            note_deadline(store, key, e, t);
        }
    }
    let state = |e: &Entries| e.state;
    if old.map(state) != new.map(state) {
        if let Some(s) = old.map(state) {
            store.delete(Table::ByState, &by_state(s, key));
            count(store, &state_counter(s), -1);
        }
        if let Some(s) = new.map(state) {
            store.put(Table::ByState, by_state(s, key), Vec::new());
            count(store, &state_counter(s), 1);
        }
    }
    let escalated = |e: &Entries| e.escalated_at_ms;
    let (was, is) = (old.and_then(escalated), new.and_then(escalated));
    if was != is {
        match is {
            Some(at_ms) => store.save(Table::Escalations, keycode::key(key), &at_ms),
            None => store.delete(Table::Escalations, &keycode::key(key)),
        }
        match (was, is) {
            (None, Some(_)) => count(store, ESCALATION_COUNTER, 1),
            (Some(_), None) => count(store, ESCALATION_COUNTER, -1),
            _ => {}
        }
    }
    let workflow = |e: &Entries| by_workflow(&key.tenant, &e.workflow_id, key);
    move_entry(
        store,
        Table::ByWorkflow,
        old.map(workflow),
        new.map(workflow),
    );
}

/// Replaces the entry `old` of `table` with `new` (either may be absent), unless they are
/// the same.
fn move_entry<S: Store + ?Sized>(
    store: &mut S,
    table: Table,
    old: Option<Vec<u8>>,
    new: Option<Vec<u8>>,
) {
    if old == new {
        return;
    }
    if let Some(entry) = old {
        store.delete(table, &entry);
    }
    if let Some(entry) = new {
        store.put(table, entry, Vec::new());
    }
}

fn note_deadline<S: Store + ?Sized>(store: &mut S, key: &EffectKey, e: &Entries, t: u64) {
    match &e.slot {
        None => store.put(
            Table::Retention,
            Collectable::Record(key.clone()).entry(t),
            Vec::new(),
        ),
        Some((base, index, count)) => change_group(store, base, *count, |g| {
            g.deadlines.insert((t, *index));
        }),
    }
}

fn forget_deadline<S: Store + ?Sized>(store: &mut S, key: &EffectKey, e: &Entries, t: u64) {
    match &e.slot {
        None => store.delete(Table::Retention, &Collectable::Record(key.clone()).entry(t)),
        Some((base, index, count)) => change_group(store, base, *count, |g| {
            g.deadlines.remove(&(t, *index));
        }),
    }
}

/// Changes a group's deadlines and moves its retention entry accordingly.
fn change_group<S: Store + ?Sized>(
    store: &mut S,
    base: &EffectKey,
    count: u32,
    change: impl FnOnce(&mut SlotGroup),
) {
    let group_key = keycode::key(base);
    let mut group = store
        .load(Table::SlotGroups, &group_key, "slot group")
        .unwrap_or(SlotGroup {
            count,
            deadlines: BTreeSet::new(),
        });
    let slots = Collectable::Slots {
        base: base.clone(),
        count: group.count,
    };
    let before = group.due_ms().map(|t| slots.entry(t));
    change(&mut group);
    let after = group.due_ms().map(|t| slots.entry(t));
    if group.deadlines.is_empty() {
        store.delete(Table::SlotGroups, &group_key);
    } else {
        store.save(Table::SlotGroups, group_key, &group);
    }
    if before != after {
        if let Some(old) = before {
            store.delete(Table::Retention, &old);
        }
        if let Some(new) = after {
            store.put(Table::Retention, new, Vec::new());
        }
    }
}
