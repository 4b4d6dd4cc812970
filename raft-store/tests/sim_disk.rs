//! What a simulated power failure may and may not lose, how it tears a write, and how a
//! bit flip lands.

use ledger_raft_store::disk::{Disk, Keyspace, SimDisk, TornValue, WriteBatch};

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

/// A torn power failure keeps every synced write as it was, keeps whole batches before
/// the torn one, and is decided by the seed alone.
#[test]
fn a_torn_power_failure_never_touches_synced_writes_and_is_seeded() {
    let mut tore = 0;
    for seed in SEEDS {
        let disk = disk_with_synced_and_unsynced();
        let mut batch = WriteBatch::new();
        for key in 20..25u64 {
            batch.put(Keyspace::Log, key.to_be_bytes(), vec![7; 16]);
        }
        disk.write(batch).expect("write");
        let failure = disk.power_fail_torn(seed).expect("power failure");
        let again = {
            let disk = disk_with_synced_and_unsynced();
            let mut batch = WriteBatch::new();
            for key in 20..25u64 {
                batch.put(Keyspace::Log, key.to_be_bytes(), vec![7; 16]);
            }
            disk.write(batch).expect("write");
            disk.power_fail_torn(seed).expect("power failure")
        };
        assert_eq!(failure, again, "seed {seed}");
        for key in 0..10u64 {
            let value = disk.get(Keyspace::Log, &key.to_be_bytes()).expect("get");
            assert_eq!(value, Some(key.to_string().into_bytes()), "seed {seed}");
        }
        let kept = failure.batches_kept as u64;
        assert!(
            (10..10 + kept).all(|key| present(&disk, key)),
            "seed {seed}"
        );
        if let Some(torn) = failure.torn {
            tore += 1;
            // The first lost batch is the torn one: its kept operations only.
            let torn_keys: Vec<u64> = if kept < 10 {
                vec![10 + kept]
            } else {
                (20..25).collect()
            };
            let present_keys: Vec<u64> = torn_keys
                .iter()
                .copied()
                .filter(|k| present(&disk, *k))
                .collect();
            assert_eq!(present_keys, torn_keys[..torn.ops_kept], "seed {seed}");
            if let (Some(last), TornValue::Cut { len }) = (present_keys.last(), torn.last_value) {
                let value = disk.get(Keyspace::Log, &last.to_be_bytes()).expect("get");
                assert_eq!(value.map(|v| v.len()), Some(len), "seed {seed}");
            }
        }
    }
    assert!(tore > 0, "no seed tore a write");
}

/// A bit flip changes exactly one bit of the synced value, and an unsynced overwrite of
/// the same key stays what reads see.
#[test]
fn a_bit_flip_changes_one_synced_bit() {
    let disk = disk_with_synced_and_unsynced();
    let key = 3u64.to_be_bytes();
    let before = disk.get(Keyspace::Log, &key).expect("get").expect("synced");
    let flip = disk
        .flip_bit(Keyspace::Log, &key, 2)
        .expect("flip")
        .expect("flipped");
    assert_eq!((flip.space, flip.bit), (Keyspace::Log, 2));
    let after = disk
        .get(Keyspace::Log, &key)
        .expect("get")
        .expect("still there");
    let differing: u32 = before
        .iter()
        .zip(&after)
        .map(|(a, b)| (a ^ b).count_ones())
        .sum();
    assert_eq!(differing, 1);
    assert_eq!(
        disk.flip_bit(Keyspace::Log, b"absent", 0).expect("flip"),
        None
    );

    let mut batch = WriteBatch::new();
    batch.put(Keyspace::Log, key, &b"unsynced"[..]);
    disk.write(batch).expect("write");
    disk.flip_bit(Keyspace::Log, &key, 9)
        .expect("flip")
        .expect("flipped");
    assert_eq!(
        disk.get(Keyspace::Log, &key).expect("get").as_deref(),
        Some(&b"unsynced"[..])
    );
    // The flip is in the synced value the power failure falls back to.
    disk.power_fail(0).expect("power failure");
    let synced = disk.get(Keyspace::Log, &key).expect("get").expect("synced");
    assert!(synced == b"unsynced" || synced != before);

    let picked = disk.flip_random_bit(5, Some(Keyspace::Log)).expect("flip");
    let picked_again = disk_with_synced_and_unsynced()
        .flip_random_bit(5, Some(Keyspace::Log))
        .expect("flip");
    assert_eq!(picked.map(|f| f.space), Some(Keyspace::Log));
    assert!(picked_again.is_some());
    assert_eq!(SimDisk::new().flip_random_bit(1, None).expect("flip"), None);
}
