//! Watching every replica while the run goes on, for the properties that are about time.
//!
//! A sampler task reads each running node's applied ledger whenever its applied index
//! moved and keeps, per log index, a hash of the snapshot bytes and the committed
//! records. From that:
//! - state machine safety: every replica that applied up to index `i` holds the same
//!   ledger bytes, whichever node, incarnation or snapshot installation got it there;
//! - committed never reverts: a record committed at index `i` is committed, with the
//!   same receipt, at every later index, until garbage collection replaces it with a
//!   tombstone of a committed effect with that receipt's digest (and the tombstone's own
//!   window may end later);
//! - every sampled state passes [`check_records`](crate::check::check_records);
//! - per node, when its applied index moved, so that a scenario can assert that a
//!   minority did not commit anything while it was cut off.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ledger_core::{EffectKey, EffectState, ReceiptDigest};

use crate::check::{check_records, Violations};
use crate::cluster::Cluster;
use crate::replica::ReplicaView;

/// How often the sampler looks at the replicas.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);

/// What one log index looked like on the first replica sampled there.
#[derive(Debug, Clone)]
struct IndexState {
    node: u64,
    hash: u64,
    committed: BTreeMap<EffectKey, String>,
    /// The receipt digests of the tombstones of effects collected committed.
    collected: BTreeMap<EffectKey, Option<ReceiptDigest>>,
}

/// Everything the sampler saw.
#[derive(Debug, Default)]
pub struct StateLog {
    by_index: BTreeMap<u64, IndexState>,
    moves: BTreeMap<u64, Vec<(Duration, u64)>>,
    violations: Violations,
    samples: usize,
}

impl StateLog {
    /// Records one replica's state sampled at `at`.
    pub fn record(&mut self, view: &ReplicaView, at: Duration) {
        self.samples += 1;
        let moves = self.moves.entry(view.node).or_default();
        if moves.last().map(|(_, i)| *i) != Some(view.applied_index) {
            moves.push((at, view.applied_index));
        }
        let hash = crate::fnv64(&view.snapshot);
        match self.by_index.get(&view.applied_index) {
            Some(seen) if seen.hash != hash => self.violations.push(format!(
                "at log index {} node {} and node {} hold different ledgers",
                view.applied_index, seen.node, view.node
            )),
            Some(_) => {}
            None => {
                self.violations.extend(check_records(view));
                let state = IndexState {
                    node: view.node,
                    hash,
                    committed: view.committed(),
                    collected: view
                        .tombstones
                        .values()
                        .filter(|t| t.final_state == EffectState::Committed)
                        .map(|t| (t.key.clone(), t.receipt_digest))
                        .collect(),
                };
                self.by_index.insert(view.applied_index, state);
            }
        }
    }

    /// Violations found while sampling: diverging replicas, broken record invariants.
    pub fn violations(&self) -> Violations {
        self.violations.clone()
    }

    /// Checks that no record committed at some index is anything else at a later one,
    /// except collected: a tombstone of a committed effect with the receipt's digest, and
    /// once such a tombstone was seen, nothing (its window passed; the key may be used
    /// again).
    pub fn check_committed_never_reverts(&self) -> Violations {
        let mut violations = Violations::new();
        // Per key: the index it committed at, its receipt, whether its tombstone was seen.
        let mut committed: BTreeMap<EffectKey, (u64, String, bool)> = BTreeMap::new();
        for (index, state) in &self.by_index {
            committed.retain(|key, (since, receipt, collected)| {
                let digest = Some(ReceiptDigest::of(receipt));
                match (state.committed.get(key), state.collected.get(key)) {
                    (Some(r), _) if r == receipt => true,
                    (None, Some(d)) if *d == digest => {
                        *collected = true;
                        true
                    }
                    (_, None) if *collected => false,
                    (other, tombstone) => {
                        violations.push(format!(
                            "{key} committed with {receipt:?} at index {since}, at index {index} \
                             it is {other:?} (collected with digest {tombstone:?})"
                        ));
                        true
                    }
                }
            });
            for (key, receipt) in &state.committed {
                committed
                    .entry(key.clone())
                    .or_insert_with(|| (*index, receipt.clone(), false));
            }
        }
        violations
    }

    /// The moves of `node`'s applied index within `[from, to)`.
    pub fn moves_between(&self, node: u64, from: Duration, to: Duration) -> Vec<(Duration, u64)> {
        self.moves
            .get(&node)
            .map(|m| {
                m.iter()
                    .filter(|(at, _)| *at >= from && *at < to)
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How many states were sampled and how many distinct log indexes they covered.
    pub fn coverage(&self) -> (usize, usize) {
        (self.samples, self.by_index.len())
    }
}

/// The running sampler task.
pub struct Sampler {
    log: Arc<Mutex<StateLog>>,
    task: madsim::task::JoinHandle<()>,
}

impl Sampler {
    /// Starts sampling `cluster`'s replicas.
    pub fn start(cluster: Arc<Cluster>) -> Sampler {
        let log = Arc::new(Mutex::new(StateLog::default()));
        let task = madsim::task::spawn(sample(cluster, log.clone()));
        Sampler { log, task }
    }

    /// Takes one more sample of every running node now, stops, and returns the log.
    pub fn stop(self, cluster: &Cluster) -> StateLog {
        self.task.abort();
        let mut log = self.log.lock().expect("state log lock");
        let at = crate::sim_elapsed();
        for view in cluster.views() {
            log.record(&view, at);
        }
        std::mem::take(&mut *log)
    }
}

async fn sample(cluster: Arc<Cluster>, log: Arc<Mutex<StateLog>>) {
    let mut last_seen: BTreeMap<u64, u64> = BTreeMap::new();
    loop {
        let at = crate::sim_elapsed();
        for id in cluster.ids() {
            let Some(node) = cluster.node(id) else {
                last_seen.remove(&id);
                continue;
            };
            let index = node.reader.last_applied_index().unwrap_or(0);
            if last_seen.get(&id) == Some(&index) {
                continue;
            }
            last_seen.insert(id, index);
            let view = ReplicaView::read(&node);
            log.lock().expect("state log lock").record(&view, at);
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ledger_core::{
        Caller, ClaimOutcome, Command, CommandBody, Ledger, Outcome, ReceiptDigest, Report,
        TenantSettings,
    };

    use super::StateLog;
    use crate::fixtures::{declaration, effect_key, ToolKind, TENANT};
    use crate::linearize::model::configured_ledger;
    use crate::replica::ReplicaView;

    const COMMITTED_AT_MS: u64 = 1_100;
    const WEEK_MS: u64 = 7 * 24 * 60 * 60 * 1000;

    fn apply(
        ledger: &mut Ledger,
        id: &str,
        caller: Caller,
        body: CommandBody,
        now_ms: u64,
    ) -> Outcome {
        let command = Command {
            command_id: id.into(),
            caller,
            body,
        };
        ledger.apply(&command, now_ms)
    }

    /// An effect committed (index 1), collected (index 2), then its tombstone's window
    /// passed (index 3).
    fn committed_collected_forgotten() -> Vec<ReplicaView> {
        let mut ledger = configured_ledger();
        let tenant = || Caller::Tenant(TENANT.into());
        let claim = CommandBody::Claim {
            declaration: declaration("done", ToolKind::Keyed),
            holder: "h".into(),
            lease_ms: None,
            confirmation: None,
        };
        let Outcome::Claim(ClaimOutcome::Proceed(grant)) =
            apply(&mut ledger, "c", tenant(), claim, 1_000)
        else {
            panic!("a first claim is granted");
        };
        let report = CommandBody::Report {
            key: effect_key("done"),
            fencing_token: grant.fencing_token,
            report: Report::Committed {
                receipt: "r".into(),
            },
        };
        apply(&mut ledger, "r", tenant(), report, COMMITTED_AT_MS);
        let mut views = vec![ReplicaView::of_ledger(1, 1, &ledger)];
        let collect = || CommandBody::CollectGarbage { limit: 10 };
        let collected_at_ms = COMMITTED_AT_MS + WEEK_MS;
        apply(
            &mut ledger,
            "gc-1",
            Caller::Operator,
            collect(),
            collected_at_ms,
        );
        views.push(ReplicaView::of_ledger(1, 2, &ledger));
        let forgotten_at_ms = collected_at_ms + TenantSettings::TOMBSTONE_RETENTION_MS_DEFAULT;
        apply(
            &mut ledger,
            "gc-2",
            Caller::Operator,
            collect(),
            forgotten_at_ms,
        );
        views.push(ReplicaView::of_ledger(1, 3, &ledger));
        let kept: Vec<(usize, usize)> = views
            .iter()
            .map(|v| (v.records.len(), v.tombstones.len()))
            .collect();
        assert_eq!(kept, [(1, 0), (0, 1), (0, 0)]);
        views
    }

    fn reverted(views: &[ReplicaView]) -> Vec<String> {
        let mut log = StateLog::default();
        for view in views {
            log.record(view, Duration::ZERO);
        }
        log.check_committed_never_reverts()
    }

    #[test]
    fn a_committed_record_may_be_collected_and_its_tombstone_forgotten() {
        assert_eq!(
            reverted(&committed_collected_forgotten()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_committed_record_gone_without_its_committed_tombstone_reverted() {
        let mut never_tombstoned = committed_collected_forgotten();
        never_tombstoned.remove(1);
        assert_eq!(reverted(&never_tombstoned).len(), 1);
        let mut other_receipt = committed_collected_forgotten();
        for t in other_receipt[1].tombstones.values_mut() {
            t.receipt_digest = Some(ReceiptDigest::of("other"));
        }
        assert_eq!(reverted(&other_receipt).len(), 2);
    }
}
