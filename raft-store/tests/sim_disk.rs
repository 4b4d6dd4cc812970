//! What a simulated power failure may and may not lose.

use ledger_raft_store::disk::{Disk, Keyspace, SimDisk, WriteBatch};

const SEEDS: std::ops::Range<u64> = 0..64;

fn put(disk: &SimDisk, key: u64) {
    let mut batch = WriteBatch::new();
    batch.put(Keyspace::Log, key.to_be_bytes(), key.to_string());
    disk.write(batch).expect("write");
}

fn present(disk: &SimDisk, key: u64) -> bool {
    disk.get(Keyspace::Log, &key.to_be_bytes())
        .expect("get")
        .is_some()
}

/// Ten synced keys, then ten unsynced batches of one key each.
fn disk_with_synced_and_unsynced() -> SimDisk {
    let disk = SimDisk::new();
    for key in 0..10 {
        put(&disk, key);
    }
    disk.sync().expect("sync");
    for key in 10..20 {
        put(&disk, key);
    }
    disk
}

#[test]
fn reads_see_unsynced_writes() {
    let disk = disk_with_synced_and_unsynced();
    assert!((0..20).all(|key| present(&disk, key)));
    assert_eq!(disk.unsynced_batches().expect("count"), 10);
    disk.sync().expect("sync");
    assert_eq!(disk.unsynced_batches().expect("count"), 0);
}

#[test]
fn power_failure_never_loses_synced_writes() {
    for seed in SEEDS {
        let disk = disk_with_synced_and_unsynced();
        disk.power_fail(seed).expect("power failure");
        assert!((0..10).all(|key| present(&disk, key)), "seed {seed}");
    }
}

#[test]
fn power_failure_keeps_a_prefix_of_unsynced_batches() {
    for seed in SEEDS {
        let disk = disk_with_synced_and_unsynced();
        let failure = disk.power_fail(seed).expect("power failure");
        assert_eq!(
            failure.batches_kept + failure.batches_lost,
            10,
            "seed {seed}"
        );
        let boundary = 10 + failure.batches_kept as u64;
        assert!(
            (10..boundary).all(|key| present(&disk, key)),
            "seed {seed}: kept batches"
        );
        assert!(
            (boundary..20).all(|key| !present(&disk, key)),
            "seed {seed}: lost batches"
        );
        assert_eq!(
            disk.unsynced_batches().expect("count"),
            0,
            "nothing pending after restart"
        );
    }
}

#[test]
fn power_failure_can_drop_and_can_keep_unsynced_writes() {
    let outcomes: Vec<_> = SEEDS
        .map(|seed| {
            let disk = disk_with_synced_and_unsynced();
            disk.power_fail(seed).expect("power failure")
        })
        .collect();
    assert!(outcomes.iter().any(|failure| failure.batches_lost > 0));
    assert!(outcomes.iter().any(|failure| failure.batches_kept > 0));
}

#[test]
fn power_failure_is_decided_by_the_seed() {
    for seed in SEEDS {
        let first = disk_with_synced_and_unsynced()
            .power_fail(seed)
            .expect("power failure");
        let second = disk_with_synced_and_unsynced()
            .power_fail(seed)
            .expect("power failure");
        assert_eq!(first, second, "seed {seed}");
    }
}

#[test]
fn power_failure_keeps_or_drops_a_batch_whole() {
    for seed in SEEDS {
        let disk = SimDisk::new();
        let mut batch = WriteBatch::new();
        batch
            .put(Keyspace::Log, *b"a", *b"1")
            .put(Keyspace::Meta, *b"b", *b"1")
            .put(Keyspace::State, *b"c", *b"1");
        disk.write(batch).expect("write");
        disk.power_fail(seed).expect("power failure");
        let seen = [
            disk.get(Keyspace::Log, b"a").expect("get").is_some(),
            disk.get(Keyspace::Meta, b"b").expect("get").is_some(),
            disk.get(Keyspace::State, b"c").expect("get").is_some(),
        ];
        assert!(
            seen == [true; 3] || seen == [false; 3],
            "seed {seed}: {seen:?}"
        );
    }
}
