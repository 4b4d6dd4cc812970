//! Garbage on disk or in a received snapshot is an error, never a panic, and a refused
//! snapshot leaves the state machine as it was.

mod common;

use std::io::ErrorKind;
use std::sync::Arc;

use common::*;
use futures::stream;
use ledger_core::{EffectKey, EffectRecord, Table};
use ledger_raft_store::disk::{Disk, DiskRef, Keyspace, SimDisk, WriteBatch};
use ledger_raft_store::{
    open, LedgerRuntime, LedgerStateMachine, RaftLogStore, SnapshotData, StoreError,
};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{AsyncRuntime, RaftLogReader, RaftSnapshotBuilder};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

fn put(disk: &SimDisk, space: Keyspace, key: &[u8], value: Vec<u8>) {
    let mut batch = WriteBatch::new();
    batch.put(space, key.to_vec(), value);
    disk.write(batch).expect("write");
}

/// Byte strings of every short length and some long random ones, all from one seed.
fn garbage() -> Vec<Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    let mut samples: Vec<Vec<u8>> = vec![Vec::new(), vec![0], vec![0xFF; 64], vec![1; 3]];
    for len in (1..64).chain([256, 4096]) {
        for _ in 0..4 {
            samples.push((0..len).map(|_| rng.random()).collect());
        }
    }
    samples
}

async fn store_on(disk: &Arc<SimDisk>) -> (RaftLogStore, LedgerStateMachine) {
    let disk: DiskRef = disk.clone();
    open(disk).await.expect("open")
}

#[test]
fn garbage_log_entry_is_an_invalid_data_error() {
    LedgerRuntime::run(async {
        for bytes in garbage() {
            let disk = Arc::new(SimDisk::new());
            let (mut log_store, _) = store_on(&disk).await;
            put(&disk, Keyspace::Log, &5u64.to_be_bytes(), bytes);
            let read = log_store.try_get_log_entries(5..6).await;
            assert_eq!(
                read.expect_err("garbage entry").kind(),
                ErrorKind::InvalidData
            );
            let state = log_store.get_log_state().await;
            assert_eq!(
                state.expect_err("garbage last entry").kind(),
                ErrorKind::InvalidData
            );
        }
    });
}

#[test]
fn entry_under_the_wrong_index_is_refused() {
    LedgerRuntime::run(async {
        let disk = Arc::new(SimDisk::new());
        let (mut log_store, _) = store_on(&disk).await;
        log_store
            .blocking_append([blank_entry(1, 7)])
            .await
            .expect("append");
        let bytes = disk
            .get(Keyspace::Log, &7u64.to_be_bytes())
            .expect("get")
            .expect("entry 7 stored");
        put(&disk, Keyspace::Log, &5u64.to_be_bytes(), bytes);
        let read = log_store.try_get_log_entries(5..6).await;
        assert_eq!(
            read.expect_err("misplaced entry").kind(),
            ErrorKind::InvalidData
        );
    });
}

#[test]
fn garbage_vote_and_log_ids_are_errors() {
    LedgerRuntime::run(async {
        for bytes in garbage() {
            let disk = Arc::new(SimDisk::new());
            let (mut log_store, _) = store_on(&disk).await;
            put(&disk, Keyspace::Meta, b"vote", bytes.clone());
            put(&disk, Keyspace::Meta, b"committed", bytes.clone());
            put(&disk, Keyspace::Meta, b"last_purged", bytes);
            assert!(log_store.read_vote().await.is_err());
            assert!(log_store.read_committed().await.is_err());
            assert!(log_store.get_log_state().await.is_err());
        }
    });
}

#[test]
fn garbage_state_generation_fails_open() {
    LedgerRuntime::run(async {
        for bytes in garbage() {
            if bytes == [0] || bytes == [1] {
                continue;
            }
            let disk = Arc::new(SimDisk::new());
            put(&disk, Keyspace::Meta, b"state_generation", bytes);
            let disk: DiskRef = disk;
            assert!(
                open(disk).await.is_err(),
                "open refuses a garbage generation"
            );
        }
    });
}

#[test]
fn damaged_record_is_never_served_nor_applied_over() {
    LedgerRuntime::run(async {
        let key = EffectKey::new(TENANT, "agent-runtime", "refund-1");
        let mut stored = vec![0, Table::Records.id()];
        stored.extend(ledger_core::keycode::key(&key));
        for bytes in garbage() {
            if ledger_core::store::decode_value::<EffectRecord>(&bytes).is_some() {
                continue;
            }
            let (disk, mut state_machine, _) = busy_state_machine_on().await;
            let reader = state_machine.reader();
            assert!(reader.read(|l| l.get(&key)).expect("read").is_some());
            put(&disk, Keyspace::State, &stored, bytes);
            let served = reader.read(|l| l.get(&key));
            assert!(
                matches!(served, Err(StoreError::Damaged(_))),
                "a damaged record is an error, not an answer: {served:?}"
            );
            let retry = normal_entry(1, 4, STAMPED_AT_MS, vec![claim("c-9", "refund-1")]);
            let applied = state_machine.apply(stream::iter([Ok((retry, None))])).await;
            assert!(applied.is_err(), "nothing is applied over a damaged record");
            assert_eq!(reader.last_applied_index(), Some(3));
        }
    });
}

/// A state machine with the setup and a claim applied, and its snapshot.
async fn busy_state_machine() -> (LedgerStateMachine, ledger_raft_store::types::Snapshot) {
    let (_, state_machine, snapshot) = busy_state_machine_on().await;
    (state_machine, snapshot)
}

/// [`busy_state_machine`] with its disk.
async fn busy_state_machine_on() -> (
    Arc<SimDisk>,
    LedgerStateMachine,
    ledger_raft_store::types::Snapshot,
) {
    let disk = Arc::new(SimDisk::new());
    let (_, mut state_machine) = store_on(&disk).await;
    let entries = [
        membership_entry(1, 1, &[NODE_ID]),
        normal_entry(1, 2, STAMPED_AT_MS, setup_commands()),
        normal_entry(1, 3, STAMPED_AT_MS, vec![claim("c-1", "refund-1")]),
    ];
    let items = entries.into_iter().map(|entry| Ok((entry, None)));
    state_machine
        .apply(stream::iter(items))
        .await
        .expect("apply");
    let snapshot = state_machine
        .build_snapshot()
        .await
        .expect("build snapshot");
    (disk, state_machine, snapshot)
}

#[test]
fn refused_snapshot_leaves_state_untouched() {
    LedgerRuntime::run(async {
        let (mut state_machine, snapshot) = busy_state_machine().await;
        let reader = state_machine.reader();
        let before = (
            reader.read(|l| l.to_snapshot()).expect("read"),
            reader.last_applied_index(),
        );
        let good = snapshot.snapshot.to_bytes().expect("stream");

        let mut candidates = garbage();
        candidates.push(good[..good.len() / 2].to_vec());
        candidates.push([good.as_slice(), &[0]].concat());
        for bytes in candidates {
            let installed = state_machine
                .install_snapshot(&snapshot.meta, SnapshotData::from_bytes(bytes))
                .await;
            assert!(installed.is_err(), "garbage snapshot refused");
            assert_eq!(
                (
                    reader.read(|l| l.to_snapshot()).expect("read"),
                    reader.last_applied_index()
                ),
                before
            );
        }
        let kept = state_machine
            .get_current_snapshot()
            .await
            .expect("read")
            .expect("kept");
        assert_eq!(
            kept.snapshot.to_bytes().expect("stream"),
            good,
            "the state is unchanged"
        );
    });
}

#[test]
fn snapshot_with_mismatched_metadata_is_refused() {
    LedgerRuntime::run(async {
        let (_, snapshot) = busy_state_machine().await;
        let (_, mut fresh) = store_on(&Arc::new(SimDisk::new())).await;
        let mut meta = snapshot.meta.clone();
        meta.last_log_id = Some(log_id(1, 9));
        let installed = fresh.install_snapshot(&meta, snapshot.snapshot).await;
        assert_eq!(
            installed.expect_err("mismatch").kind(),
            ErrorKind::InvalidData
        );
        assert_eq!(fresh.reader().last_applied_index(), None);
    });
}

#[test]
fn valid_snapshot_installs_on_a_fresh_state_machine() {
    LedgerRuntime::run(async {
        let (source, snapshot) = busy_state_machine().await;
        let (_, mut fresh) = store_on(&Arc::new(SimDisk::new())).await;
        fresh
            .install_snapshot(&snapshot.meta, snapshot.snapshot)
            .await
            .expect("install");
        let expected = source.reader().read(|l| l.to_snapshot()).expect("read");
        assert_eq!(
            fresh.reader().read(|l| l.to_snapshot()).expect("read"),
            expected
        );
        assert_eq!(fresh.reader().last_applied_index(), Some(3));
    });
}
