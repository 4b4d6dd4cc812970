//! One replica's applied ledger as the harness reads it, straight from the node's
//! `LedgerReader`, without going through the network or the leader.
//!
//! The simulator runs every task on one thread and switches only at `.await`, so reading
//! the applied index and then the ledger, with no `.await` between, observes one state:
//! exactly the entries up to that index applied, no more, no fewer.

use std::collections::BTreeMap;

use ledger_core::{EffectKey, EffectRecord, EffectState, Ledger, ListQuery, Store, Tombstone};
use ledger_node::LedgerNode;

/// A replica's applied state at one log index.
#[derive(Debug, Clone)]
pub struct ReplicaView {
    /// The node.
    pub node: u64,
    /// The last log index applied (0 before the first).
    pub applied_index: u64,
    /// The ledger's deterministic snapshot bytes at that index.
    pub snapshot: Vec<u8>,
    /// Every record of every tenant.
    pub records: BTreeMap<EffectKey, EffectRecord>,
    /// Every tombstone of every tenant: what is kept of the records garbage collection
    /// removed, until their window has passed.
    pub tombstones: BTreeMap<EffectKey, Tombstone>,
    /// The ledger clock: the largest leader time stamp applied.
    pub clock_ms: u64,
}

impl ReplicaView {
    /// Reads `node`'s applied state.
    pub fn read(node: &LedgerNode) -> ReplicaView {
        let applied_index = node.reader.last_applied_index().unwrap_or(0);
        node.reader
            .read(|ledger| ReplicaView::of_ledger(node.id, applied_index, ledger))
            .unwrap_or_else(|e| panic!("node {} state unreadable: {e}", node.id))
    }

    /// The view of `ledger` as node `node` holds it at `applied_index` (checkers' tests
    /// build views of a core ledger directly).
    pub fn of_ledger<S: Store>(node: u64, applied_index: u64, ledger: &Ledger<S>) -> ReplicaView {
        ReplicaView {
            node,
            applied_index,
            snapshot: ledger.to_snapshot(),
            records: all_records(ledger),
            tombstones: all_tombstones(ledger),
            clock_ms: ledger.clock_ms(),
        }
    }

    /// The committed records and their receipts.
    pub fn committed(&self) -> BTreeMap<EffectKey, String> {
        self.records
            .values()
            .filter(|r| r.state == EffectState::Committed)
            .map(|r| (r.key.clone(), r.receipt.clone().unwrap_or_default()))
            .collect()
    }

    /// How many records are in each state, every state listed.
    pub fn counts(&self) -> BTreeMap<EffectState, u64> {
        let mut counts: BTreeMap<EffectState, u64> =
            EffectState::ALL.iter().map(|s| (*s, 0)).collect();
        for record in self.records.values() {
            *counts.entry(record.state).or_default() += 1;
        }
        counts
    }
}

fn all_records<S: Store>(ledger: &Ledger<S>) -> BTreeMap<EffectKey, EffectRecord> {
    let tenants: Vec<String> = ledger.tenants().into_iter().map(|(t, _)| t).collect();
    tenants
        .into_iter()
        .flat_map(|tenant| {
            let query = ListQuery {
                tenant,
                escalated: false,
                state: None,
                workflow_id: None,
                updated_at_or_before_ms: None,
                after: None,
                limit: usize::MAX,
            };
            ledger.list(&query)
        })
        .map(|r| (r.key.clone(), r))
        .collect()
}

fn all_tombstones<S: Store>(ledger: &Ledger<S>) -> BTreeMap<EffectKey, Tombstone> {
    ledger
        .tenants()
        .into_iter()
        .flat_map(|(tenant, _)| ledger.tombstones(&tenant))
        .map(|t| (t.key.clone(), t))
        .collect()
}
