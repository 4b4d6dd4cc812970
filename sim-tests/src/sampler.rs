//! Watching every replica while the run goes on, for the properties that are about time.
//!
//! A sampler task reads each running node's applied ledger whenever its applied index
//! moved and keeps, per log index, a hash of the snapshot bytes and the committed
//! records. From that:
//! - state machine safety: every replica that applied up to index `i` holds the same
//!   ledger bytes, whichever node, incarnation or snapshot installation got it there;
//! - committed never reverts: a record committed at index `i` is committed, with the
//!   same receipt, at every later index;
//! - every sampled state passes [`check_records`](crate::check::check_records);
//! - per node, when its applied index moved, so that a scenario can assert that a
//!   minority did not commit anything while it was cut off.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ledger_core::EffectKey;

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
                };
                self.by_index.insert(view.applied_index, state);
            }
        }
    }

    /// Violations found while sampling: diverging replicas, broken record invariants.
    pub fn violations(&self) -> Violations {
        self.violations.clone()
    }

    /// Checks that no record committed at some index is anything else at a later one.
    pub fn check_committed_never_reverts(&self) -> Violations {
        let mut violations = Violations::new();
        let mut committed: BTreeMap<EffectKey, (u64, String)> = BTreeMap::new();
        for (index, state) in &self.by_index {
            for (key, (since, receipt)) in &committed {
                match state.committed.get(key) {
                    Some(r) if r == receipt => {}
                    other => violations.push(format!(
                        "{key} committed with {receipt:?} at index {since}, at index {index} it is {other:?}"
                    )),
                }
            }
            for (key, receipt) in &state.committed {
                committed
                    .entry(key.clone())
                    .or_insert_with(|| (*index, receipt.clone()));
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
