//! Power cut at every write of a snapshot install and of applies: the node comes back
//! with one whole state, the one before or the one after, never a mix, and what a cut
//! install left behind is cleared.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::*;
use futures::stream;
use ledger_raft_store::disk::{Disk, DiskRef, Keyspace, SimDisk};
use ledger_raft_store::types::{Entry, Snapshot};
use ledger_raft_store::{
    open, LedgerReader, LedgerRuntime, LedgerStateMachine, SnapshotData, SnapshotReceiver,
};
use openraft::storage::RaftStateMachine;
use openraft::{AsyncRuntime, RaftSnapshotBuilder};

async fn apply(state_machine: &mut LedgerStateMachine, entries: Vec<Entry>) -> bool {
    let items = entries.into_iter().map(|entry| Ok((entry, None)));
    state_machine.apply(stream::iter(items)).await.is_ok()
}

/// Enough claims that an install takes several batches.
fn many_claims(prefix: &str) -> Vec<ledger_core::Command> {
    (0..600)
        .map(|i| claim(&format!("{prefix}-c{i}"), &format!("{prefix}-{i}")))
        .collect()
}

/// A leader's state machine at index 3, and the disk under it.
async fn leader() -> (Arc<SimDisk>, LedgerStateMachine) {
    let disk = Arc::new(SimDisk::new());
    let shared: DiskRef = disk.clone();
    let (_, mut state_machine) = open(shared).await.expect("open");
    let entries = vec![
        membership_entry(1, 1, &[NODE_ID]),
        normal_entry(1, 2, STAMPED_AT_MS, setup_commands()),
        normal_entry(1, 3, STAMPED_AT_MS + 5, many_claims("leader")),
    ];
    assert!(apply(&mut state_machine, entries).await);
    (disk, state_machine)
}

/// A leader's state at index 3 and its snapshot as received bytes.
async fn leader_snapshot() -> (Vec<u8>, Snapshot) {
    let (_, mut state_machine) = leader().await;
    let snapshot = state_machine.build_snapshot().await.expect("build");
    let bytes = state_machine
        .reader()
        .read(|l| l.to_snapshot())
        .expect("read");
    (bytes, snapshot)
}

/// The state and applied index of a state machine opened on `disk`, and whether the
/// generation that is not live is empty.
async fn reopened(disk: Arc<SimDisk>) -> (Vec<u8>, Option<u64>, bool) {
    let shared: DiskRef = disk.clone();
    let (_, state_machine) = open(shared).await.expect("reopen after a cut");
    let reader = state_machine.reader();
    let state = reader.read(|l| l.to_snapshot()).expect("read");
    let generations: Vec<u8> = disk
        .range(Keyspace::State, &[], None, usize::MAX)
        .expect("range")
        .iter()
        .map(|(k, _)| k[0])
        .collect();
    let one_generation = generations.windows(2).all(|w| w[0] == w[1]);
    (state, reader.last_applied_index(), one_generation)
}

/// A state machine on a gated new disk with its own state applied up to index 2, the
/// gate and the disk behind it.
async fn gated_with_own_state() -> (Arc<SimDisk>, Arc<GatedDisk>, LedgerStateMachine) {
    let inner = Arc::new(SimDisk::new());
    let disk = GatedDisk::new(inner.clone());
    let (_, mut state_machine) = open(disk.clone()).await.expect("open");
    let own = vec![
        membership_entry(1, 1, &[NODE_ID]),
        normal_entry(1, 2, STAMPED_AT_MS, setup_commands()),
    ];
    assert!(apply(&mut state_machine, own).await);
    (inner, disk, state_machine)
}

#[test]
fn install_cut_at_any_write_leaves_one_whole_state() {
    LedgerRuntime::run(async {
        let (after, snapshot) = leader_snapshot().await;
        let received = snapshot.snapshot.to_bytes().expect("stream");
        let mut cut_at = 0;
        loop {
            let (inner, disk, mut state_machine) = gated_with_own_state().await;
            let before = state_machine
                .reader()
                .read(|l| l.to_snapshot())
                .expect("read");
            // What a follower applied before is durable or in its log; here, durable.
            inner.sync().expect("sync");
            disk.cut_after(cut_at);
            let installed = state_machine
                .install_snapshot(&snapshot.meta, SnapshotData::from_bytes(received.clone()))
                .await
                .is_ok();
            drop(state_machine);
            inner.power_fail(cut_at as u64).expect("power failure");
            let (state, applied, one_generation) = reopened(inner).await;
            if state == after {
                assert_eq!(applied, Some(3), "cut at write {cut_at}");
            } else {
                assert_eq!(state, before, "cut at write {cut_at}: neither state");
                assert_eq!(applied, Some(2), "cut at write {cut_at}");
            }
            assert!(
                one_generation,
                "cut at write {cut_at}: a partial install remains"
            );
            if installed && disk.writes_left.load(Ordering::SeqCst) > 0 {
                assert!(cut_at > 3, "the install took several batches");
                break;
            }
            cut_at += 1;
        }
    });
}

#[test]
fn applies_cut_at_any_write_resume_at_a_whole_entry() {
    LedgerRuntime::run(async {
        let entries = vec![
            membership_entry(1, 1, &[NODE_ID]),
            normal_entry(1, 2, STAMPED_AT_MS, setup_commands()),
            normal_entry(1, 3, STAMPED_AT_MS + 1, vec![claim("c-1", "refund-1")]),
            normal_entry(1, 4, STAMPED_AT_MS + 2, vec![claim("c-2", "refund-2")]),
            normal_entry(1, 5, STAMPED_AT_MS + 3, many_claims("bulk")),
        ];
        // The state after each whole entry, as an uncut run leaves it.
        let mut states = vec![(Vec::new(), None)];
        {
            let disk: DiskRef = Arc::new(SimDisk::new());
            let (_, mut state_machine) = open(disk).await.expect("open");
            let reader = state_machine.reader();
            states[0].0 = reader.read(|l| l.to_snapshot()).expect("read");
            for entry in &entries {
                assert!(apply(&mut state_machine, vec![entry.clone()]).await);
                states.push((
                    reader.read(|l| l.to_snapshot()).expect("read"),
                    reader.last_applied_index(),
                ));
            }
        }
        for cut_at in 0..=entries.len() {
            for seed in 0..4 {
                let inner = Arc::new(SimDisk::new());
                let disk = GatedDisk::new(inner.clone());
                let (_, mut state_machine) = open(disk.clone()).await.expect("open");
                disk.cut_after(cut_at);
                let applied_all = apply(&mut state_machine, entries.clone()).await;
                assert_eq!(applied_all, cut_at >= entries.len(), "cut at {cut_at}");
                drop(state_machine);
                inner.power_fail(seed).expect("power failure");
                let (state, applied, _) = reopened(inner).await;
                let whole = states
                    .iter()
                    .position(|(s, a)| *s == state && *a == applied);
                assert!(
                    whole.is_some_and(|i| i <= cut_at),
                    "cut at {cut_at}, seed {seed}: resumed at {applied:?}, not a whole entry"
                );
            }
        }
    });
}

/// A state machine on a new disk, and the disk.
async fn fresh() -> (Arc<SimDisk>, LedgerStateMachine) {
    let disk = Arc::new(SimDisk::new());
    let shared: DiskRef = disk.clone();
    let (_, state_machine) = open(shared).await.expect("open");
    (disk, state_machine)
}

/// `snapshot`'s stream received whole by `reader`'s node.
fn received_whole(snapshot: &Snapshot, reader: &LedgerReader) -> SnapshotData {
    let mut receiver = reader.receive_snapshot().expect("receive");
    feed(snapshot, &mut receiver, 1 << 20);
    receiver.finish(&snapshot.meta).expect("finish")
}

/// The keys of generation `generation` on `disk`.
fn generation_keys(disk: &SimDisk, generation: u8) -> usize {
    disk.range(
        Keyspace::State,
        &[generation],
        Some(&[generation + 1]),
        usize::MAX,
    )
    .expect("range")
    .len()
}

/// Feeds `snapshot`'s stream to `receiver` in pieces of `bytes`; how many pieces.
fn feed(snapshot: &Snapshot, receiver: &mut SnapshotReceiver, bytes: usize) -> usize {
    let mut chunks = snapshot.snapshot.chunks().expect("chunks");
    let mut pieces = 0;
    while let Some(piece) = chunks.next_chunk(bytes).expect("chunk") {
        receiver.push(&piece).expect("push");
        pieces += 1;
    }
    pieces
}

#[test]
fn a_streamed_snapshot_is_restored_as_it_arrives_and_installs() {
    LedgerRuntime::run(async {
        let (after, snapshot) = leader_snapshot().await;
        let (disk, mut state_machine) = fresh().await;
        let reader = state_machine.reader();
        let mut receiver = reader.receive_snapshot().expect("receive");
        assert!(feed(&snapshot, &mut receiver, 4096) >= 2, "several pieces");
        let received = receiver.finish(&snapshot.meta).expect("finish");
        assert!(
            generation_keys(&disk, 1) > 0,
            "the stream is restored into the standby generation before the install"
        );
        assert_eq!(reader.last_applied_index(), None, "not live before install");
        state_machine
            .install_snapshot(&snapshot.meta, received)
            .await
            .expect("install");
        assert_eq!(reader.read(|l| l.to_snapshot()).expect("read"), after);
        assert_eq!(reader.last_applied_index(), Some(3));
        assert_eq!(
            generation_keys(&disk, 0),
            0,
            "the old generation is deleted"
        );
        let spooled = disk
            .range(Keyspace::State, &[2], None, usize::MAX)
            .expect("range");
        assert!(spooled.is_empty(), "nothing is kept beside the generations");
    });
}

/// `stale`, a receiver that another stream's took over, cannot push the rest of
/// `stream` and, dropped, leaves the standby generation as the other left it; then
/// `received`, the other stream, installs on `state_machine` and shows `after`.
async fn stale_writes_nothing_and_the_other_installs(
    disk: &SimDisk,
    mut stale: SnapshotReceiver,
    stream: &[u8],
    state_machine: &mut LedgerStateMachine,
    received: SnapshotData,
    snapshot: &Snapshot,
    after: &[u8],
) {
    let written = generation_keys(disk, 1);
    assert!(written > 0, "the other stream is restored");
    assert!(
        stale.push(&stream[stream.len() / 2..]).is_err(),
        "the stale receiver cannot write once the other began"
    );
    drop(stale);
    assert_eq!(
        generation_keys(disk, 1),
        written,
        "the stale receiver, dropped, leaves the other's writes alone"
    );
    state_machine
        .install_snapshot(&snapshot.meta, received)
        .await
        .expect("the other stream installs");
    let state = state_machine
        .reader()
        .read(|l| l.to_snapshot())
        .expect("read");
    assert_eq!(state, after);
}

#[test]
fn a_stream_taken_over_by_a_later_one_writes_nothing_more() {
    LedgerRuntime::run(async {
        let (after, snapshot) = leader_snapshot().await;
        let (disk, mut state_machine) = fresh().await;
        let reader = state_machine.reader();
        let mut first = reader.receive_snapshot().expect("receive");
        let stream = snapshot.snapshot.to_bytes().expect("stream");
        first.push(&stream[..stream.len() / 2]).expect("first half");
        let mut second = reader.receive_snapshot().expect("receive again");
        feed(&snapshot, &mut second, 4096);
        let received = second.finish(&snapshot.meta).expect("finish");
        stale_writes_nothing_and_the_other_installs(
            &disk,
            first,
            &stream,
            &mut state_machine,
            received,
            &snapshot,
            &after,
        )
        .await;
    });
}

#[test]
fn a_failed_sync_while_installing_leaves_the_generation_the_disk_names_live() {
    LedgerRuntime::run(async {
        let (after, snapshot) = leader_snapshot().await;
        let (inner, disk, mut state_machine) = gated_with_own_state().await;
        let reader = state_machine.reader();
        let received = received_whole(&snapshot, &reader);
        disk.syncs_fail.store(true, Ordering::SeqCst);
        assert!(
            state_machine
                .install_snapshot(&snapshot.meta, received)
                .await
                .is_err(),
            "the install reports the failed sync"
        );
        assert!(
            generation_keys(&inner, 1) > 0,
            "the received generation, which the disk may name live, is not deleted"
        );
        assert!(
            reader.receive_snapshot().is_err(),
            "no stream is taken until the disk is reopened"
        );
        disk.syncs_fail.store(false, Ordering::SeqCst);
        drop((state_machine, reader));
        // The process restarted; the unsynced swap had reached the disk.
        let (state, applied, one_generation) = reopened(inner).await;
        assert_eq!(state, after);
        assert_eq!(applied, Some(3));
        assert!(one_generation, "the old generation is cleared at open");
    });
}

#[test]
fn a_stream_of_an_earlier_instance_never_writes_or_clears_what_a_later_one_made_live() {
    LedgerRuntime::run(async {
        let (after, snapshot) = leader_snapshot().await;
        let (disk, earlier) = fresh().await;
        let earlier_reader = earlier.reader();
        let mut stale = earlier_reader.receive_snapshot().expect("receive");
        let stream = snapshot.snapshot.to_bytes().expect("stream");
        stale.push(&stream[..stream.len() / 2]).expect("first half");
        // The node restarts on the same disk while the old instance still holds a
        // receiver (as a simulated restart can), and installs a snapshot.
        let shared: DiskRef = disk.clone();
        let (_, mut later) = open(shared).await.expect("reopen");
        let reader = later.reader();
        let received = received_whole(&snapshot, &reader);
        later
            .install_snapshot(&snapshot.meta, received)
            .await
            .expect("install");
        let live = generation_keys(&disk, 1);
        assert!(
            stale.push(&stream[stream.len() / 2..]).is_err(),
            "the old receiver cannot write into the generation now live"
        );
        assert!(
            earlier_reader.receive_snapshot().is_err(),
            "nor can the old instance begin another stream"
        );
        drop(stale);
        assert_eq!(generation_keys(&disk, 1), live, "nor clear it when dropped");
        assert_eq!(reader.read(|l| l.to_snapshot()).expect("read"), after);
    });
}

#[test]
fn a_stream_of_an_earlier_instance_leaves_a_later_instances_stream_alone() {
    LedgerRuntime::run(async {
        let (after, snapshot) = leader_snapshot().await;
        let (disk, earlier) = fresh().await;
        let mut stale = earlier.reader().receive_snapshot().expect("receive");
        let stream = snapshot.snapshot.to_bytes().expect("stream");
        stale.push(&stream[..stream.len() / 2]).expect("first half");
        // Restarted on the same disk, the node receives into the same standby generation
        // the old instance's receiver still holds.
        let shared: DiskRef = disk.clone();
        let (_, mut later) = open(shared).await.expect("reopen");
        let received = received_whole(&snapshot, &later.reader());
        stale_writes_nothing_and_the_other_installs(
            &disk, stale, &stream, &mut later, received, &snapshot, &after,
        )
        .await;
    });
}

#[test]
fn a_stream_never_installed_is_deleted_and_the_state_kept() {
    LedgerRuntime::run(async {
        let (_, snapshot) = leader_snapshot().await;
        let (disk, mut state_machine) = fresh().await;
        let own = vec![
            membership_entry(1, 1, &[NODE_ID]),
            normal_entry(1, 2, STAMPED_AT_MS, setup_commands()),
        ];
        assert!(apply(&mut state_machine, own).await);
        let reader = state_machine.reader();
        let before = reader.read(|l| l.to_snapshot()).expect("read");
        let mut receiver = reader.receive_snapshot().expect("receive");
        feed(&snapshot, &mut receiver, 4096);
        let received = receiver.finish(&snapshot.meta).expect("finish");
        assert!(generation_keys(&disk, 1) > 0);
        // openraft declined it (a stale leader's, say): the data is dropped.
        drop(received);
        assert_eq!(generation_keys(&disk, 1), 0, "what it wrote is deleted");
        assert_eq!(reader.read(|l| l.to_snapshot()).expect("read"), before);
        assert_eq!(reader.last_applied_index(), Some(2));
    });
}

#[test]
fn a_received_snapshot_for_other_metadata_is_refused() {
    LedgerRuntime::run(async {
        let (_, snapshot) = leader_snapshot().await;
        let (disk, mut state_machine) = fresh().await;
        let reader = state_machine.reader();
        let other = ledger_raft_store::types::SnapshotMeta::default();
        let mut receiver = reader.receive_snapshot().expect("receive");
        feed(&snapshot, &mut receiver, 1 << 20);
        assert!(
            receiver.finish(&other).is_err(),
            "a stream whose sender says it covers something else is refused when received"
        );
        assert_eq!(generation_keys(&disk, 1), 0, "what it wrote is deleted");
        let received = received_whole(&snapshot, &reader);
        assert!(state_machine
            .install_snapshot(&other, received)
            .await
            .is_err());
        assert_eq!(reader.last_applied_index(), None, "nothing was installed");
        assert_eq!(generation_keys(&disk, 1), 0, "what it wrote is deleted");
        assert!(
            reader.receive_snapshot().is_ok(),
            "the standby generation is free for the next stream"
        );
    });
}

#[test]
fn a_stream_received_whole_is_not_taken_over_before_it_is_installed() {
    LedgerRuntime::run(async {
        let (after, snapshot) = leader_snapshot().await;
        let (_, mut state_machine) = fresh().await;
        let reader = state_machine.reader();
        let received = received_whole(&snapshot, &reader);
        assert!(
            reader.receive_snapshot().is_err(),
            "a new stream is turned away while a whole one waits"
        );
        state_machine
            .install_snapshot(&snapshot.meta, received)
            .await
            .expect("the waiting stream installs");
        assert_eq!(reader.read(|l| l.to_snapshot()).expect("read"), after);
        assert!(
            reader.receive_snapshot().is_ok(),
            "once installed, the next stream is taken"
        );
    });
}

/// A leader whose stored value fails its checksum stops its stream at that value, on a
/// frame boundary: the follower must refuse what arrived, not install a ledger without
/// the rest of the records, the tombstones and the remembered command ids.
#[test]
fn a_stream_stopped_at_a_damaged_value_is_refused() {
    LedgerRuntime::run(async {
        let (disk, mut leader) = leader().await;
        disk.sync().expect("sync");
        // Remembered commands come last in a stream, after every record.
        let commands = ledger_core::Table::Commands.id();
        let keys: Vec<Vec<u8>> = disk
            .range(Keyspace::State, &[], None, usize::MAX)
            .expect("range")
            .into_iter()
            .map(|(key, _)| key)
            .filter(|key| key.get(1) == Some(&commands))
            .collect();
        assert!(keys.len() >= 600, "the claims' command ids are stored");
        disk.flip_bit(Keyspace::State, &keys[keys.len() / 2], 100)
            .expect("flip")
            .expect("a synced command");
        let snapshot = leader.build_snapshot().await.expect("build");

        let mut chunks = snapshot.snapshot.chunks().expect("chunks");
        let mut sent = Vec::new();
        let stopped = loop {
            match chunks.next_chunk(4096) {
                Ok(Some(piece)) => sent.push(piece),
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        let stopped = stopped.expect("the damaged record stops the stream");
        assert!(stopped.to_string().contains("damage"), "{stopped}");
        assert!(!sent.is_empty(), "the records before the damage were sent");

        let (_, follower) = fresh().await;
        let mut receiver = follower.reader().receive_snapshot().expect("receive");
        for piece in &sent {
            receiver.push(piece).expect("each piece is well formed");
        }
        let refused = receiver
            .finish(&snapshot.meta)
            .expect_err("a stream without its end is refused");
        assert!(refused.to_string().contains("cut short"), "{refused}");
        assert_eq!(follower.reader().last_applied_index(), None);
    });
}
