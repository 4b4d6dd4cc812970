//! A store taken down and opened again on the same disk: the log, the vote and the
//! ledger come back, on RocksDB (close and reopen) and on the simulated disk (power
//! failure).

mod common;

use common::*;
use futures::stream;
use ledger_core::{EffectKey, EffectState};
use ledger_raft_store::disk::conformance::DiskHarness;
use ledger_raft_store::disk::SimDisk;
use ledger_raft_store::types::Entry;
use ledger_raft_store::{open, LedgerRuntime, LedgerStateMachine};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{AsyncRuntime, RaftLogReader, RaftSnapshotBuilder, StorageHelper};

async fn apply(state_machine: &mut LedgerStateMachine, entries: &[Entry]) {
    let items = entries.iter().cloned().map(|entry| Ok((entry, None)));
    state_machine
        .apply(stream::iter(items))
        .await
        .expect("apply");
}

/// Membership (index 0, as `initialize` writes it), setup, one claim, then a second
/// claim and a retry of the first.
fn scenario_entries() -> Vec<Entry> {
    vec![
        membership_entry(0, 0, &[NODE_ID]),
        normal_entry(1, 1, STAMPED_AT_MS, setup_commands()),
        normal_entry(2, 2, STAMPED_AT_MS + 10, vec![claim("c-1", "refund-1")]),
        normal_entry(
            2,
            3,
            STAMPED_AT_MS + 20,
            vec![claim("c-2", "refund-2"), claim("c-1", "refund-1")],
        ),
    ]
}

fn record_state<S: ledger_core::Store>(
    ledger: &ledger_core::Ledger<S>,
    key: &str,
) -> Option<EffectState> {
    ledger
        .get(&EffectKey::new(TENANT, "agent-runtime", key))
        .map(|record| record.state)
}

/// Appends and applies the scenario with a snapshot after entry 2, restarts, and checks
/// the log, the vote, the state machine (at least at the snapshot, which made it
/// durable, and exactly as it was at its applied position) and, after openraft's
/// recovery, the ledger.
async fn log_vote_and_ledger_survive_restart(harness: &mut dyn DiskHarness) {
    let entries = scenario_entries();
    let disk = harness.fresh();
    let (mut log_store, mut state_machine) = open(disk.clone()).await.expect("open");
    let reader = state_machine.reader();

    log_store.save_vote(&vote(2)).await.expect("save vote");
    log_store
        .blocking_append(entries.clone())
        .await
        .expect("append");
    log_store
        .save_committed(Some(log_id(2, 3)))
        .await
        .expect("save committed");
    apply(&mut state_machine, &entries[..3]).await;
    let snapshot = state_machine
        .build_snapshot()
        .await
        .expect("build snapshot");
    let ledger_at_snapshot = reader.read(|ledger| ledger.to_snapshot()).expect("read");
    let snapshot_meta = snapshot.meta.clone();
    let snapshot_bytes = snapshot.snapshot.to_bytes().expect("snapshot stream");
    drop(snapshot);
    apply(&mut state_machine, &entries[3..]).await;
    let ledger_at_end = reader.read(|ledger| ledger.to_snapshot()).expect("read");
    assert_eq!(
        reader.read(|l| record_state(l, "refund-2")).expect("read"),
        Some(EffectState::InProgress)
    );

    drop((log_store, state_machine, reader));
    let disk = harness.restart(disk);
    let (mut log_store, mut state_machine) = open(disk).await.expect("reopen");
    let reader = state_machine.reader();

    assert_eq!(log_store.read_vote().await.expect("vote"), Some(vote(2)));
    let stored = log_store.try_get_log_entries(..).await.expect("entries");
    assert_eq!(stored, entries, "the log comes back entry for entry");
    assert_eq!(
        log_store.read_committed().await.expect("committed"),
        Some(log_id(2, 3))
    );
    let resumed_at = reader.last_applied_index();
    let expected = match resumed_at {
        Some(2) => &ledger_at_snapshot,
        Some(3) => &ledger_at_end,
        other => panic!("resumed at {other:?}, before the synced snapshot at 2"),
    };
    assert_eq!(
        &reader.read(|ledger| ledger.to_snapshot()).expect("read"),
        expected,
        "the state on disk is byte for byte the state at its applied position"
    );
    let kept = state_machine
        .get_current_snapshot()
        .await
        .expect("read snapshot")
        .expect("a snapshot of the current state");
    assert_eq!(kept.meta.last_log_id, reader.last_applied());
    if resumed_at == Some(2) {
        assert_eq!(kept.meta, snapshot_meta);
        assert_eq!(kept.snapshot.to_bytes().expect("stream"), snapshot_bytes);
    }
    drop(kept);

    StorageHelper::new(&mut log_store, &mut state_machine)
        .with_id(NODE_ID)
        .get_initial_state()
        .await
        .expect("openraft recovery");
    assert_eq!(
        reader.last_applied_index(),
        Some(3),
        "committed entries re-applied"
    );
    assert_eq!(
        reader.read(|ledger| ledger.to_snapshot()).expect("read"),
        ledger_at_end
    );
    assert_eq!(
        reader.read(|l| l.clock_ms()).expect("read"),
        STAMPED_AT_MS + 20,
        "stamped time only"
    );
}

#[test]
fn sim_disk_store_survives_power_failure() {
    LedgerRuntime::run(async {
        log_vote_and_ledger_survive_restart(&mut SimHarness::default()).await;
    });
}

#[cfg(not(madsim))]
#[test]
fn rocks_disk_store_survives_reopen() {
    LedgerRuntime::run(async {
        log_vote_and_ledger_survive_restart(&mut RocksHarness::default()).await;
    });
}

#[test]
fn acknowledged_appends_survive_every_power_failure() {
    LedgerRuntime::run(async {
        let entries = scenario_entries();
        for seed in 0..32 {
            let disk = std::sync::Arc::new(SimDisk::new());
            let (mut log_store, _) = open(disk.clone()).await.expect("open");
            log_store.save_vote(&vote(1)).await.expect("save vote");
            for entry in &entries {
                log_store
                    .blocking_append([entry.clone()])
                    .await
                    .expect("append");
            }
            // Not synced on purpose: it may be lost, and losing it must be harmless.
            log_store
                .save_committed(Some(log_id(2, 3)))
                .await
                .expect("save committed");

            disk.power_fail(seed).expect("power failure");
            let (mut log_store, mut state_machine) = open(disk).await.expect("reopen");
            let stored = log_store.try_get_log_entries(..).await.expect("entries");
            assert_eq!(stored, entries, "seed {seed}");
            assert_eq!(log_store.read_vote().await.expect("vote"), Some(vote(1)));
            let committed = log_store.read_committed().await.expect("committed");
            assert!(
                committed.is_none() || committed == Some(log_id(2, 3)),
                "seed {seed}"
            );
            StorageHelper::new(&mut log_store, &mut state_machine)
                .with_id(NODE_ID)
                .get_initial_state()
                .await
                .expect("openraft recovery");
        }
    });
}

#[test]
fn truncation_and_purge_survive_power_failure() {
    LedgerRuntime::run(async {
        let disk = std::sync::Arc::new(SimDisk::new());
        let (mut log_store, _) = open(disk.clone()).await.expect("open");
        let entries: Vec<Entry> = (1..=5).map(|index| blank_entry(1, index)).collect();
        log_store
            .blocking_append(entries.clone())
            .await
            .expect("append");
        log_store
            .truncate_after(Some(log_id(1, 3)))
            .await
            .expect("truncate");
        log_store.purge(log_id(1, 2)).await.expect("purge");

        disk.power_fail(7).expect("power failure");
        let (mut log_store, _) = open(disk).await.expect("reopen");
        let stored = log_store.try_get_log_entries(..).await.expect("entries");
        assert_eq!(stored, entries[2..3].to_vec());
        let state = log_store.get_log_state().await.expect("log state");
        assert_eq!(state.last_purged_log_id, Some(log_id(1, 2)));
        assert_eq!(state.last_log_id, Some(log_id(1, 3)));
    });
}
