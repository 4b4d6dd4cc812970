//! Storage faults the log store survives rather than assumes away: a write torn by a
//! power failure is cut at open, and a bit flipped in synced data is caught, named and
//! never served; a disk in an older format is refused. A slow sync holds back only the
//! reports that appends are flushed, never an append or the order of the reports.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::*;
use ledger_raft_store::disk::{Disk, DiskRef, Keyspace, SimDisk, TornValue, WriteBatch};
use ledger_raft_store::error::Location;
use ledger_raft_store::types::Entry;
use ledger_raft_store::{open, LedgerRuntime, RaftLogStore, StoreError};
use openraft::storage::{IOFlushed, RaftLogStorage, RaftLogStorageExt};
use openraft::{AsyncRuntime, RaftLogReader};
use openraft_rt::Oneshot;
use tokio::sync::oneshot::error::TryRecvError;

fn entries(from: u64, to: u64) -> Vec<Entry> {
    (from..=to).map(|index| blank_entry(1, index)).collect()
}

async fn stored(log_store: &mut RaftLogStore) -> Vec<Entry> {
    log_store.try_get_log_entries(..).await.expect("entries")
}

fn corrupt_location(error: &StoreError) -> Option<&Location> {
    match error {
        StoreError::Corrupt { location, .. } => location.as_ref(),
        _ => None,
    }
}

/// An append of entries 4..=8 over a synced log 1..=3 is torn by a power failure at
/// every prefix of its operations (the five entries, then the log's end), the last value
/// kept whole, cut or garbled. The reopened log is the synced log, or the whole batch if
/// every entry reached the disk whole; never a damaged entry, never a hole; and the
/// store appends after it as usual.
#[test]
fn a_torn_append_is_cut_at_every_prefix() {
    LedgerRuntime::run(async {
        let mut seen = BTreeSet::new();
        for seed in 0..600 {
            let sim = Arc::new(SimDisk::new());
            let switch = GatedDisk::new(sim.clone());
            let (mut log_store, _) = open(switch.clone()).await.expect("open");
            log_store
                .blocking_append(entries(1, 3))
                .await
                .expect("append");
            switch.syncs.store(false, Ordering::SeqCst);
            log_store
                .blocking_append(entries(4, 8))
                .await
                .expect("append");

            let failure = sim.power_fail_torn(seed).expect("power failure");
            let (mut log_store, _) = open(sim.clone()).await.unwrap_or_else(|e| {
                panic!("seed {seed}: a torn write must not stop the open ({failure:?}): {e}")
            });
            let log = stored(&mut log_store).await;
            let expected = match failure.torn {
                None if failure.batches_kept == 1 => entries(1, 8),
                None => entries(1, 3),
                Some(torn) => {
                    let kind = match torn.last_value {
                        TornValue::Whole => 0,
                        TornValue::Cut { .. } => 1,
                        TornValue::Garbled { .. } => 2,
                    };
                    seen.insert((torn.ops_kept, kind));
                    // The batch is whole on disk only if every entry is and the end is
                    // at least there: a damaged end alone is rebuilt from the entries.
                    if torn.ops_kept == torn.ops {
                        entries(1, 8)
                    } else {
                        entries(1, 3)
                    }
                }
            };
            assert_eq!(log, expected, "seed {seed}: {failure:?}");
            let next = expected.len() as u64 + 1;
            log_store
                .blocking_append(entries(next, next))
                .await
                .expect("append after recovery");
            let reopened = open(sim.clone()).await.expect("reopen");
            let mut log_store = reopened.0;
            assert_eq!(
                stored(&mut log_store).await,
                entries(1, next),
                "seed {seed}: an append after recovery survives"
            );
        }
        // Every prefix (none kept to all six operations) with every fate of its last
        // value, where a put was kept.
        for ops_kept in 0..=6 {
            let kinds: &[usize] = if ops_kept == 0 { &[0] } else { &[0, 1, 2] };
            for kind in kinds {
                assert!(
                    seen.contains(&(ops_kept, *kind)),
                    "never tore at {ops_kept}/{kind}: {seen:?}"
                );
            }
        }
    });
}

/// A committed log id garbled by a torn write (it is written without a sync) is dropped
/// at open rather than stopping the node.
#[test]
fn a_torn_committed_id_is_dropped_at_open() {
    LedgerRuntime::run(async {
        let mut dropped = 0;
        for seed in 0..64 {
            let disk = Arc::new(SimDisk::new());
            let (mut log_store, _) = open(disk.clone()).await.expect("open");
            log_store
                .blocking_append(entries(1, 3))
                .await
                .expect("append");
            log_store
                .save_committed(Some(log_id(1, 3)))
                .await
                .expect("save committed");
            let failure = disk.power_fail_torn(seed).expect("power failure");
            let (mut log_store, _) = open(disk).await.expect("reopen");
            let committed = log_store.read_committed().await.expect("committed");
            match failure.torn.map(|t| (t.ops_kept, t.last_value)) {
                Some((1, TornValue::Cut { .. } | TornValue::Garbled { .. })) => {
                    dropped += 1;
                    assert_eq!(committed, None, "seed {seed}");
                }
                _ => assert!(committed.is_none() || committed == Some(log_id(1, 3))),
            }
            assert_eq!(stored(&mut log_store).await, entries(1, 3));
        }
        assert!(dropped > 0, "no seed garbled the committed id");
    });
}

/// A bit flipped in any synced log entry, the last one included, stops the open with an
/// error naming the entry; the entry is neither served nor cut.
#[test]
fn a_bit_flip_in_a_synced_entry_is_named_and_never_served() {
    LedgerRuntime::run(async {
        for index in 1..=5u64 {
            for bit in [0, 7, 100, 333] {
                let disk = Arc::new(SimDisk::new());
                let (mut log_store, _) = open(disk.clone()).await.expect("open");
                log_store
                    .blocking_append(entries(1, 3))
                    .await
                    .expect("append");
                log_store
                    .blocking_append(entries(4, 5))
                    .await
                    .expect("append");
                let flip = disk
                    .flip_bit(Keyspace::Log, &index.to_be_bytes(), bit)
                    .expect("flip")
                    .expect("entry stored");

                // Never served from the disk: the running store answers with the entry
                // as it was appended (it keeps the latest entries in memory) or an
                // error, and a store reading the disk itself answers with an error.
                let read = log_store.try_get_log_entries(index..=index).await;
                if let Ok(read) = read {
                    assert_eq!(read, entries(index, index), "entry {index} after {flip:?}");
                }
                let read = RaftLogStore::new(disk.clone())
                    .try_get_log_entries(index..=index)
                    .await;
                assert!(read.is_err(), "entry {index} served after {flip:?}");

                let error = open(disk.clone())
                    .await
                    .expect_err("a flipped entry stops the open");
                let location = corrupt_location(&error).unwrap_or_else(|| panic!("{error}"));
                assert_eq!(location.space, Keyspace::Log);
                assert_eq!(location.key, index.to_be_bytes().to_vec());
                assert!(error.is_damaged_data());
                let message = error.to_string();
                assert!(
                    message.contains("log entry")
                        && message.contains(&format!("{index} (log index)")),
                    "{message}"
                );
                // Nothing was cut: the entry is still there, still damaged.
                assert_eq!(
                    disk.range(Keyspace::Log, &[], None, 10)
                        .expect("range")
                        .len(),
                    5
                );
            }
        }
    });
}

/// A bit flipped in the vote or the last purged log id stops the open, naming it.
#[test]
fn a_bit_flip_in_the_vote_or_last_purged_is_named() {
    LedgerRuntime::run(async {
        for (key, seed) in [(&b"vote"[..], 1), (&b"last_purged"[..], 2)] {
            let disk = Arc::new(SimDisk::new());
            let (mut log_store, _) = open(disk.clone()).await.expect("open");
            log_store.save_vote(&vote(3)).await.expect("vote");
            log_store
                .blocking_append(entries(1, 4))
                .await
                .expect("append");
            log_store.purge(log_id(1, 2)).await.expect("purge");
            disk.flip_bit(Keyspace::Meta, key, seed * 13)
                .expect("flip")
                .expect("stored");
            let error = open(disk).await.expect_err("refused");
            let location = corrupt_location(&error).unwrap_or_else(|| panic!("{error}"));
            assert_eq!((location.space, &location.key[..]), (Keyspace::Meta, key));
        }
    });
}

/// A bit flipped in the log's end is repaired from the entries, all verified whole:
/// nothing is cut.
#[test]
fn a_bit_flip_in_the_log_end_is_rebuilt_from_whole_entries() {
    LedgerRuntime::run(async {
        let disk = Arc::new(SimDisk::new());
        let (mut log_store, _) = open(disk.clone()).await.expect("open");
        log_store
            .blocking_append(entries(1, 6))
            .await
            .expect("append");
        disk.flip_bit(Keyspace::Meta, b"log_end", 5)
            .expect("flip")
            .expect("stored");
        let (mut log_store, _) = open(disk.clone()).await.expect("repaired");
        assert_eq!(stored(&mut log_store).await, entries(1, 6));
        log_store
            .blocking_append(entries(7, 7))
            .await
            .expect("append");
        let (mut log_store, _) = open(disk).await.expect("reopen");
        assert_eq!(stored(&mut log_store).await, entries(1, 7));
    });
}

/// A random bit flip anywhere on a used disk never lets the open serve damaged data: the
/// open either refuses with damage named, or succeeds on a store whose every record
/// reads back as written.
#[test]
fn a_random_bit_flip_is_refused_or_harmless() {
    LedgerRuntime::run(async {
        let (mut refused, mut survived) = (0, 0);
        for seed in 0..200 {
            let disk = Arc::new(SimDisk::new());
            let (mut log_store, _) = open(disk.clone()).await.expect("open");
            log_store.save_vote(&vote(2)).await.expect("vote");
            log_store
                .blocking_append(entries(1, 6))
                .await
                .expect("append");
            log_store
                .save_committed(Some(log_id(1, 4)))
                .await
                .expect("committed");
            disk.sync().expect("sync");
            let flip = disk
                .flip_random_bit(seed, None)
                .expect("flip")
                .expect("data");
            match open(disk.clone()).await {
                Err(error) => {
                    assert!(error.is_damaged_data(), "{flip:?}: {error}");
                    refused += 1;
                }
                Ok((mut log_store, _)) => {
                    survived += 1;
                    assert_eq!(stored(&mut log_store).await, entries(1, 6), "{flip:?}");
                    assert_eq!(log_store.read_vote().await.expect("vote"), Some(vote(2)));
                    let committed = log_store.read_committed().await.expect("committed");
                    assert!(committed.is_none() || committed == Some(log_id(1, 4)));
                }
            }
        }
        assert!(
            refused > 0 && survived > 0,
            "refused {refused}, survived {survived}"
        );
    });
}

/// A directory written before checksums (data, no format record) is refused, as is one
/// from a newer format; a fresh disk is stamped and reopens.
#[test]
fn an_unversioned_or_unknown_format_is_refused() {
    LedgerRuntime::run(async {
        let old = Arc::new(SimDisk::new());
        let mut batch = WriteBatch::new();
        batch.put(Keyspace::Log, 1u64.to_be_bytes(), vec![0, 1, 2]);
        old.write(batch).expect("write");
        let error = open(old as DiskRef).await.expect_err("old format refused");
        assert!(
            matches!(
                error,
                StoreError::UnsupportedFormat {
                    found: None,
                    supported: 2
                }
            ),
            "{error}"
        );
        assert!(
            error.to_string().contains("wipe the data directory"),
            "{error}"
        );

        let fresh = Arc::new(SimDisk::new());
        drop(open(fresh.clone()).await.expect("a fresh disk opens"));
        drop(open(fresh.clone()).await.expect("and reopens"));
        // Format 3, written as this build writes a format record: variant 0, then the
        // number, then the checksum; made by rewriting the stamped record's number.
        let stamped = fresh
            .get(Keyspace::Meta, b"format")
            .expect("get")
            .expect("stamped");
        assert_eq!(&stamped[..2], &[0, 2], "variant V1 then format 2");
        let newer = reencoded_format(3);
        let mut batch = WriteBatch::new();
        batch.put(Keyspace::Meta, &b"format"[..], newer);
        fresh.write(batch).expect("write");
        let error = open(fresh as DiskRef)
            .await
            .expect_err("newer format refused");
        assert!(
            matches!(error, StoreError::UnsupportedFormat { found: Some(3), .. }),
            "{error}"
        );
    });
}

/// The format record for `format`: bincode of `V1(format)` and its CRC-32C.
fn reencoded_format(format: u8) -> Vec<u8> {
    let mut bytes = vec![0, format];
    let mut crc = !0u32;
    for &byte in &bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    bytes.extend_from_slice(&(!crc).to_le_bytes());
    bytes
}

/// Lets held syncs go when dropped, also when a test fails while holding them.
struct Release(Arc<GatedDisk>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.syncs_held.store(false, Ordering::SeqCst);
    }
}

/// Appends entries `from` and `from + 1`; the receiver gets their flush report.
async fn append_two(
    store: &mut RaftLogStore,
    from: u64,
) -> tokio::sync::oneshot::Receiver<Result<(), std::io::Error>> {
    let (flushed, report) = <openraft_rt_tokio::TokioOneshot as Oneshot>::channel();
    store
        .append(entries(from, from + 1), IOFlushed::signal(flushed))
        .await
        .expect("written");
    report
}

/// Appends return once their entries are readable, before the sync; the appends
/// written while a sync runs share the next one; flushes are reported in the order of
/// the appends, each after a sync that began after its write; a truncation waits until
/// the appends before it are reported.
#[test]
fn appends_are_readable_at_once_and_reported_flushed_in_order_after_a_sync() {
    LedgerRuntime::run(async {
        let disk = GatedDisk::new(Arc::new(SimDisk::new()));
        let _release = Release(disk.clone());
        let mut store = RaftLogStore::new(disk.clone());
        let syncs_started = |n: usize| {
            let disk = disk.clone();
            async move {
                while disk.syncs_started.load(Ordering::SeqCst) < n {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            }
        };

        disk.syncs_held.store(true, Ordering::SeqCst);
        let waited = std::time::Duration::from_secs(5);
        let mut first = tokio::time::timeout(waited, append_two(&mut store, 1))
            .await
            .expect("an append returns before its sync");
        syncs_started(1).await;
        let mut second = append_two(&mut store, 3).await;
        let mut third = append_two(&mut store, 5).await;
        let readable = store.try_get_log_entries(1..7).await.expect("reads");
        assert_eq!(
            readable.len(),
            6,
            "written entries are readable before the sync"
        );
        for report in [&mut first, &mut second, &mut third] {
            assert_eq!(report.try_recv().err(), Some(TryRecvError::Empty));
        }
        disk.syncs_held.store(false, Ordering::SeqCst);
        for report in [first, second, third] {
            report.await.expect("reported").expect("flushed");
        }
        assert_eq!(
            disk.syncs_started.load(Ordering::SeqCst),
            2,
            "the two appends written during the first sync share the second"
        );

        disk.syncs_held.store(true, Ordering::SeqCst);
        let mut fourth = append_two(&mut store, 7).await;
        syncs_started(3).await;
        let mut truncating = store.clone();
        let truncated = tokio::spawn(async move {
            truncating
                .truncate_after(Some(log_id(1, 6)))
                .await
                .expect("truncated");
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(
            !truncated.is_finished(),
            "the truncation waits for the append before it"
        );
        assert_eq!(fourth.try_recv().err(), Some(TryRecvError::Empty));
        disk.syncs_held.store(false, Ordering::SeqCst);
        truncated.await.expect("truncation ran");
        assert!(
            matches!(fourth.try_recv(), Ok(Ok(()))),
            "the append before the truncation was reported first"
        );
        let kept = stored(&mut store).await;
        assert_eq!(kept, entries(1, 6), "the log ends where it was cut");
    });
}
