//! Watching garbage collection (DESIGN.md section 4) on every replica while a run goes on.
//!
//! A watch task reads each running node's applied ledger whenever its applied index moved
//! and keeps, per log index, what is kept of each key: a record (its state, receipt digest,
//! intent hash, retention deadline and slot group) or a tombstone, with the ledger clock.
//! Every replica holds the same state at the same index (the [`crate::sampler`] checks
//! that), so walking the indexes in order checks what collection did, whichever node,
//! incarnation or snapshot installation got a replica there:
//! - a record is only ever replaced by a tombstone, never simply forgotten, and only once
//!   its retention deadline has passed; the tombstone keeps its final state, receipt
//!   digest and intent hash;
//! - a tombstone never changes, and goes (or its key is used again) only once its window
//!   has passed;
//! - the slots of one declaration are all records or none: collected together, in one
//!   command, with one collection time between them.
//!
//! It keeps every key of every index, so it is meant for scenarios with a few dozen
//! effects, not for the randomized runs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ledger_core::{EffectKey, EffectState, IntentHash, ReceiptDigest, Tombstone};

use crate::check::Violations;
use crate::cluster::Cluster;
use crate::replica::ReplicaView;

/// How often the watch looks at the replicas.
const WATCH_EVERY: Duration = Duration::from_millis(10);

/// What one index keeps of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KeptRecord {
    state: EffectState,
    receipt_digest: Option<ReceiptDigest>,
    intent_hash: IntentHash,
    retention_deadline_ms: Option<u64>,
    /// The base key and slot count, for one slot of a declaration.
    group: Option<(EffectKey, u32)>,
}

/// What one index keeps of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kept {
    Record(KeptRecord),
    Tombstone(Tombstone),
}

/// One log index as the first replica sampled there held it.
#[derive(Debug, Clone)]
struct IndexKept {
    clock_ms: u64,
    keys: BTreeMap<EffectKey, Kept>,
}

impl IndexKept {
    fn of(view: &ReplicaView) -> Self {
        let records = view.records.values().map(|r| {
            let record = KeptRecord {
                state: r.state,
                receipt_digest: r.receipt.as_deref().map(ReceiptDigest::of),
                intent_hash: r.intent_hash,
                retention_deadline_ms: r.retention_deadline_ms,
                group: r
                    .slot
                    .and_then(|s| Some((r.key.slot()?.0, s.count)))
                    .filter(|(_, count)| *count > 1),
            };
            (r.key.clone(), Kept::Record(record))
        });
        let tombstones = view
            .tombstones
            .values()
            .map(|t| (t.key.clone(), Kept::Tombstone(t.clone())));
        IndexKept {
            clock_ms: view.clock_ms,
            keys: records.chain(tombstones).collect(),
        }
    }
}

/// Everything the watch saw.
#[derive(Debug, Default)]
pub struct RetentionLog {
    by_index: BTreeMap<u64, IndexKept>,
}

impl RetentionLog {
    fn record(&mut self, view: &ReplicaView) {
        self.by_index
            .entry(view.applied_index)
            .or_insert_with(|| IndexKept::of(view));
    }

    /// How many distinct log indexes were seen.
    pub fn indexes(&self) -> usize {
        self.by_index.len()
    }

    /// Every collection that broke a rule, walking the indexes in order.
    pub fn violations(&self) -> Violations {
        let mut violations = Violations::new();
        // Slot counts of every group seen, for its tombstones once its records are gone.
        let mut groups: BTreeMap<EffectKey, u32> = BTreeMap::new();
        let mut previous: Option<(u64, &IndexKept)> = None;
        for (index, now) in &self.by_index {
            for record in now.keys.values() {
                if let Kept::Record(KeptRecord {
                    group: Some((base, count)),
                    ..
                }) = record
                {
                    groups.insert(base.clone(), *count);
                }
            }
            check_groups(*index, now, &groups, &mut violations);
            if let Some((before_index, before)) = previous {
                for (key, kept) in &before.keys {
                    if let Err(e) = transition(kept, now.keys.get(key), now.clock_ms) {
                        violations.push(format!(
                            "{key}, from index {before_index} to {index} (ledger time {}): {e}",
                            now.clock_ms
                        ));
                    }
                }
            }
            previous = Some((*index, now));
        }
        violations
    }
}

/// Whether what `before` kept of a key may become `after` at ledger time `now_ms`.
fn transition(before: &Kept, after: Option<&Kept>, now_ms: u64) -> Result<(), String> {
    match (before, after) {
        (Kept::Record(_), Some(Kept::Record(_))) => Ok(()),
        (Kept::Record(r), Some(Kept::Tombstone(t))) => collected(r, t),
        (Kept::Record(r), None) => {
            Err(format!("a {} record vanished without a tombstone", r.state))
        }
        (Kept::Tombstone(t), Some(Kept::Tombstone(u))) if t == u => Ok(()),
        (Kept::Tombstone(t), Some(Kept::Tombstone(u))) => {
            Err(format!("tombstone {t:?} changed to {u:?}"))
        }
        (Kept::Tombstone(t), after) if now_ms < t.expires_at_ms => Err(format!(
            "tombstone kept until {} replaced by {after:?} early",
            t.expires_at_ms
        )),
        (Kept::Tombstone(_), _) => Ok(()),
    }
}

/// Whether tombstone `t` keeps what it must of record `r`, collected past its deadline.
fn collected(r: &KeptRecord, t: &Tombstone) -> Result<(), String> {
    if r.retention_deadline_ms
        .is_none_or(|d| d > t.collected_at_ms)
    {
        return Err(format!(
            "a {} record with retention deadline {:?} collected at {}",
            r.state, r.retention_deadline_ms, t.collected_at_ms
        ));
    }
    let kept = (t.final_state, t.receipt_digest, t.intent_hash);
    if kept != (r.state, r.receipt_digest, r.intent_hash) {
        return Err(format!(
            "the tombstone keeps {kept:?} of a record with {:?}",
            (r.state, r.receipt_digest, r.intent_hash)
        ));
    }
    if t.expires_at_ms < t.collected_at_ms {
        return Err(format!("tombstone {t:?} expires before it was made"));
    }
    Ok(())
}

/// Checks that every slot group of `now` is all records or all tombstones, the latter
/// from one collection, and whole until their window has passed.
fn check_groups(
    index: u64,
    now: &IndexKept,
    groups: &BTreeMap<EffectKey, u32>,
    violations: &mut Violations,
) {
    for (base, count) in groups {
        let slots: Vec<Option<&Kept>> = (0..*count)
            .map(|i| now.keys.get(&base.slot_key(i)))
            .collect();
        let records = slots
            .iter()
            .filter(|s| matches!(s, Some(Kept::Record(_))))
            .count();
        let tombstones: Vec<&Tombstone> = slots
            .iter()
            .filter_map(|s| match s {
                Some(Kept::Tombstone(t)) => Some(t),
                _ => None,
            })
            .collect();
        let whole = if records > 0 {
            records == *count as usize
        } else {
            let one_collection = tombstones
                .windows(2)
                .all(|w| w[0].collected_at_ms == w[1].collected_at_ms);
            let window_passed = tombstones.iter().all(|t| t.expires_at_ms <= now.clock_ms);
            one_collection && (tombstones.len() == *count as usize || window_passed)
        };
        if !whole {
            violations.push(format!(
                "index {index}: the {count} slots of {base} are {slots:?}: not collected together"
            ));
        }
    }
}

/// The running watch task.
pub struct RetentionWatch {
    log: Arc<Mutex<RetentionLog>>,
    task: madsim::task::JoinHandle<()>,
}

impl RetentionWatch {
    /// Starts watching `cluster`'s replicas.
    pub fn start(cluster: Arc<Cluster>) -> RetentionWatch {
        let log = Arc::new(Mutex::new(RetentionLog::default()));
        let task = madsim::task::spawn(watch(cluster, log.clone()));
        RetentionWatch { log, task }
    }

    /// Looks at every running node once more, stops, and returns the log.
    pub fn stop(self, cluster: &Cluster) -> RetentionLog {
        self.task.abort();
        let mut log = self.log.lock().expect("retention log lock");
        for view in cluster.views() {
            log.record(&view);
        }
        std::mem::take(&mut *log)
    }
}

async fn watch(cluster: Arc<Cluster>, log: Arc<Mutex<RetentionLog>>) {
    let mut last_seen: BTreeMap<u64, u64> = BTreeMap::new();
    loop {
        for id in cluster.ids() {
            let Some(node) = cluster.node(id) else {
                last_seen.remove(&id);
                continue;
            };
            let index = node.reader.last_applied_index().unwrap_or(0);
            if last_seen.insert(id, index) == Some(index) {
                continue;
            }
            let view = ReplicaView::read(&node);
            log.lock().expect("retention log lock").record(&view);
        }
        tokio::time::sleep(WATCH_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ledger_core::{Caller, Command, CommandBody};

    use super::RetentionLog;
    use crate::fixtures::{declaration, effect_key, ToolKind, TENANT};
    use crate::linearize::model::configured_ledger;
    use crate::replica::ReplicaView;

    const DECLARED_AT_MS: u64 = 1_000;
    const WEEK_MS: u64 = 7 * 24 * 60 * 60 * 1000;

    /// A lone effect and a group of two, declared (index 1), then collected (index 2).
    fn declared_then_collected() -> (ReplicaView, ReplicaView) {
        let mut ledger = configured_ledger();
        for (id, name, slots) in [("d-1", "single", 1), ("d-2", "group", 2)] {
            let command = Command {
                command_id: id.into(),
                caller: Caller::Tenant(TENANT.into()),
                body: CommandBody::Declare {
                    declaration: declaration(name, ToolKind::Keyed),
                    slots,
                },
            };
            ledger.apply(&command, DECLARED_AT_MS);
        }
        let declared = ReplicaView::of_ledger(1, 1, &ledger);
        let collect = Command {
            command_id: "gc".into(),
            caller: Caller::Operator,
            body: CommandBody::CollectGarbage { limit: 10 },
        };
        ledger.apply(&collect, DECLARED_AT_MS + WEEK_MS);
        let collected = ReplicaView::of_ledger(1, 2, &ledger);
        assert_eq!(
            (collected.records.len(), collected.tombstones.len()),
            (0, 3)
        );
        (declared, collected)
    }

    fn violations(views: &[ReplicaView]) -> Vec<String> {
        let mut log = RetentionLog::default();
        for v in views {
            log.record(v);
        }
        log.violations()
    }

    fn one_violation_saying(views: &[ReplicaView], words: &str) {
        let found = violations(views);
        assert!(
            found.len() == 1 && found[0].contains(words),
            "expected one violation saying {words:?}, got {found:?}"
        );
    }

    #[test]
    fn a_collection_by_the_core_breaks_no_rule() {
        let (declared, collected) = declared_then_collected();
        assert_eq!(violations(&[declared, collected]), Vec::<String>::new());
    }

    #[test]
    fn one_slot_collected_without_the_other_is_caught() {
        let (declared, mut collected) = declared_then_collected();
        let slot = effect_key("group").slot_key(1);
        collected.tombstones.remove(&slot);
        collected
            .records
            .insert(slot.clone(), declared.records[&slot].clone());
        one_violation_saying(&[declared, collected], "not collected together");
    }

    #[test]
    fn a_record_forgotten_without_a_tombstone_is_caught() {
        let (declared, mut collected) = declared_then_collected();
        collected.tombstones.remove(&effect_key("single"));
        one_violation_saying(&[declared, collected], "vanished without a tombstone");
    }

    #[test]
    fn a_collection_before_the_deadline_is_caught() {
        let (declared, mut collected) = declared_then_collected();
        let tombstone = collected
            .tombstones
            .get_mut(&effect_key("single"))
            .expect("collected");
        tombstone.collected_at_ms = DECLARED_AT_MS + WEEK_MS - 1;
        one_violation_saying(&[declared, collected], "collected at");
    }

    #[test]
    fn a_tombstone_gone_before_its_window_is_caught() {
        let (declared, collected) = declared_then_collected();
        let mut later = collected.clone();
        later.applied_index = 3;
        later.tombstones = BTreeMap::new();
        let found = violations(&[declared, collected, later]);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found.iter().all(|v| v.contains("early")), "{found:?}");
    }
}
