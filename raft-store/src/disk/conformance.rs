//! The conformance suite every [`Disk`] implementation must pass.
//!
//! Storage code relies on these properties and on nothing else, so a disk that passes
//! can replace another under the Raft log and state machine. The suite is public so that
//! any wrapper (a fault-injecting disk in the simulator, say) can run it too. Checks
//! panic with a message naming the property that failed.

use super::{Disk, DiskRef, KeyValue, Keyspace, WriteBatch};

/// How the suite gets disks and takes them down.
pub trait DiskHarness {
    /// A new, empty disk.
    fn fresh(&mut self) -> DiskRef;

    /// Takes `disk` down (crash or power failure) and opens it again. Every write synced
    /// before must survive; unsynced writes may survive only as a prefix of whole
    /// batches (a harness that also tears writes passes only the checks that say so).
    fn restart(&mut self, disk: DiskRef) -> DiskRef;
}

/// Runs every check.
pub fn run_all(harness: &mut dyn DiskHarness) {
    put_get_delete(harness);
    get_many_answers_as_get_does(harness);
    keyspaces_are_separate(harness);
    range_respects_bounds_and_limit(harness);
    delete_range_removes_half_open_interval(harness);
    batch_applies_in_order(harness);
    last_returns_largest_key(harness);
    synced_writes_survive_restart(harness);
    view_is_a_point_in_time(harness);
    unsynced_writes_survive_as_a_prefix(harness);
}

/// The checks a disk whose power failures tear the last write must pass too (every one
/// but the whole-batch guarantee of [`synced_writes_survive_restart`]).
pub fn run_all_torn(harness: &mut dyn DiskHarness) {
    put_get_delete(harness);
    get_many_answers_as_get_does(harness);
    keyspaces_are_separate(harness);
    range_respects_bounds_and_limit(harness);
    delete_range_removes_half_open_interval(harness);
    batch_applies_in_order(harness);
    last_returns_largest_key(harness);
    view_is_a_point_in_time(harness);
    unsynced_writes_survive_as_a_prefix(harness);
}

fn write(disk: &dyn Disk, build: impl FnOnce(&mut WriteBatch)) {
    let mut batch = WriteBatch::new();
    build(&mut batch);
    disk.write(batch).expect("write");
}

fn get(disk: &dyn Disk, space: Keyspace, key: &[u8]) -> Option<Vec<u8>> {
    disk.get(space, key).expect("get")
}

fn keys(pairs: Vec<KeyValue>) -> Vec<Vec<u8>> {
    pairs.into_iter().map(|(key, _)| key).collect()
}

/// `get_many` answers every key, present, deleted or never written, in the keyspace
/// asked, in the order asked, as `get` does one by one.
pub fn get_many_answers_as_get_does(harness: &mut dyn DiskHarness) {
    let disk = harness.fresh();
    write(&*disk, |b| {
        b.put(Keyspace::State, *b"a", *b"1")
            .put(Keyspace::State, *b"c", *b"3")
            .put(Keyspace::State, *b"d", *b"4")
            .put(Keyspace::Meta, *b"b", *b"other keyspace");
    });
    write(&*disk, |b| {
        b.delete(Keyspace::State, *b"d");
    });
    let keys: Vec<Vec<u8>> = [&b"a"[..], b"b", b"c", b"d", b"e"]
        .iter()
        .map(|k| k.to_vec())
        .collect();
    let together = disk.get_many(Keyspace::State, &keys).expect("get_many");
    let one_by_one: Vec<_> = keys
        .iter()
        .map(|k| get(&*disk, Keyspace::State, k))
        .collect();
    assert_eq!(together, one_by_one);
    assert_eq!(
        together,
        vec![Some(b"1".to_vec()), None, Some(b"3".to_vec()), None, None]
    );
    assert_eq!(
        disk.get_many(Keyspace::State, &[]).expect("no keys"),
        Vec::new()
    );
}

/// A put is readable at once, a later put replaces it, a delete removes it; empty
/// values and keys with `0x00`/`0xFF` bytes are ordinary.
pub fn put_get_delete(harness: &mut dyn DiskHarness) {
    let disk = harness.fresh();
    assert_eq!(
        get(&*disk, Keyspace::Meta, b"k"),
        None,
        "fresh disk is empty"
    );
    write(&*disk, |b| {
        b.put(Keyspace::Meta, *b"k", *b"v1");
    });
    assert_eq!(
        get(&*disk, Keyspace::Meta, b"k").as_deref(),
        Some(&b"v1"[..])
    );
    write(&*disk, |b| {
        b.put(Keyspace::Meta, *b"k", *b"v2");
    });
    assert_eq!(
        get(&*disk, Keyspace::Meta, b"k").as_deref(),
        Some(&b"v2"[..]),
        "put replaces"
    );
    write(&*disk, |b| {
        b.delete(Keyspace::Meta, *b"k")
            .delete(Keyspace::Meta, *b"absent");
    });
    assert_eq!(get(&*disk, Keyspace::Meta, b"k"), None, "delete removes");

    write(&*disk, |b| {
        b.put(Keyspace::Meta, vec![0x00, 0xFF], Vec::new());
    });
    assert_eq!(
        get(&*disk, Keyspace::Meta, &[0x00, 0xFF]),
        Some(Vec::new()),
        "empty value"
    );
}

/// The same key in two keyspaces holds two values, and ranges stay in their keyspace.
pub fn keyspaces_are_separate(harness: &mut dyn DiskHarness) {
    let disk = harness.fresh();
    write(&*disk, |b| {
        b.put(Keyspace::Log, *b"k", *b"log")
            .put(Keyspace::Meta, *b"k", *b"meta")
            .put(Keyspace::State, *b"k", *b"state");
    });
    for space in Keyspace::ALL {
        assert_eq!(
            get(&*disk, space, b"k").as_deref(),
            Some(space.name().as_bytes()),
            "{space} keeps its own value"
        );
    }
    write(&*disk, |b| {
        b.delete_range(Keyspace::Log, *b"a", *b"z");
    });
    assert_eq!(get(&*disk, Keyspace::Log, b"k"), None);
    assert!(
        get(&*disk, Keyspace::Meta, b"k").is_some(),
        "delete_range stays in its keyspace"
    );
}

/// `range` returns `[from, to)` ascending, at most `limit` pairs, to the end without `to`.
pub fn range_respects_bounds_and_limit(harness: &mut dyn DiskHarness) {
    let disk = harness.fresh();
    write(&*disk, |b| {
        for i in [5u64, 1, 3, 2, 4] {
            b.put(Keyspace::Log, i.to_be_bytes(), i.to_string());
        }
    });
    let key = |i: u64| i.to_be_bytes().to_vec();
    let range = |from: u64, to: Option<u64>, limit: usize| {
        let to = to.map(|to| to.to_be_bytes());
        keys(
            disk.range(
                Keyspace::Log,
                &key(from),
                to.as_ref().map(|t| &t[..]),
                limit,
            )
            .expect("range"),
        )
    };
    assert_eq!(
        range(0, None, usize::MAX),
        (1..=5).map(key).collect::<Vec<_>>(),
        "all, ascending"
    );
    assert_eq!(
        range(2, Some(4), usize::MAX),
        vec![key(2), key(3)],
        "from inclusive, to exclusive"
    );
    assert_eq!(range(2, None, 2), vec![key(2), key(3)], "limit");
    assert_eq!(
        range(3, Some(3), usize::MAX),
        Vec::<Vec<u8>>::new(),
        "empty interval"
    );
    assert_eq!(
        range(4, Some(2), usize::MAX),
        Vec::<Vec<u8>>::new(),
        "inverted interval"
    );
    assert_eq!(
        range(6, None, usize::MAX),
        Vec::<Vec<u8>>::new(),
        "past the end"
    );
    assert_eq!(range(0, None, 0), Vec::<Vec<u8>>::new(), "zero limit");
    let pairs = disk.range(Keyspace::Log, &key(5), None, 1).expect("range");
    assert_eq!(
        pairs,
        vec![(key(5), b"5".to_vec())],
        "values come with their keys"
    );
}

/// `delete_range` removes exactly `[from, to)` and nothing when the interval is empty
/// or inverted.
pub fn delete_range_removes_half_open_interval(harness: &mut dyn DiskHarness) {
    let disk = harness.fresh();
    let key = |i: u64| i.to_be_bytes().to_vec();
    write(&*disk, |b| {
        for i in 1..=6 {
            b.put(Keyspace::Log, key(i), *b"x");
        }
    });
    write(&*disk, |b| {
        b.delete_range(Keyspace::Log, key(2), key(4))
            .delete_range(Keyspace::Log, key(6), key(6))
            .delete_range(Keyspace::Log, key(6), key(5));
    });
    let left = keys(
        disk.range(Keyspace::Log, &[], None, usize::MAX)
            .expect("range"),
    );
    assert_eq!(left, vec![key(1), key(4), key(5), key(6)]);
    write(&*disk, |b| {
        b.delete_range(Keyspace::Log, key(0), vec![0xFF; 9]);
    });
    let left = keys(
        disk.range(Keyspace::Log, &[], None, usize::MAX)
            .expect("range"),
    );
    assert!(
        left.is_empty(),
        "a 9-byte 0xFF bound covers every 8-byte key"
    );
}

/// Operations of one batch apply in the order they were added.
pub fn batch_applies_in_order(harness: &mut dyn DiskHarness) {
    let disk = harness.fresh();
    write(&*disk, |b| {
        b.put(Keyspace::Meta, *b"a", *b"1")
            .delete(Keyspace::Meta, *b"a")
            .put(Keyspace::Meta, *b"a", *b"2")
            .put(Keyspace::Meta, *b"b", *b"1")
            .delete_range(Keyspace::Meta, *b"b", *b"c")
            .put(Keyspace::Meta, *b"c", *b"1")
            .put(Keyspace::Meta, *b"c", *b"2");
    });
    assert_eq!(
        get(&*disk, Keyspace::Meta, b"a").as_deref(),
        Some(&b"2"[..])
    );
    assert_eq!(get(&*disk, Keyspace::Meta, b"b"), None);
    assert_eq!(
        get(&*disk, Keyspace::Meta, b"c").as_deref(),
        Some(&b"2"[..])
    );
    disk.write(WriteBatch::new())
        .expect("an empty batch is a no-op");
}

/// `last` returns the pair with the largest key, or nothing in an empty keyspace.
pub fn last_returns_largest_key(harness: &mut dyn DiskHarness) {
    let disk = harness.fresh();
    assert_eq!(disk.last(Keyspace::Log).expect("last"), None);
    write(&*disk, |b| {
        for i in [3u64, 300, 7] {
            b.put(Keyspace::Log, i.to_be_bytes(), i.to_string());
        }
        b.put(Keyspace::Meta, [0xFF; 16], *b"elsewhere");
    });
    let last = disk.last(Keyspace::Log).expect("last");
    assert_eq!(last, Some((300u64.to_be_bytes().to_vec(), b"300".to_vec())));
    write(&*disk, |b| {
        b.delete(Keyspace::Log, 300u64.to_be_bytes());
    });
    let last = disk.last(Keyspace::Log).expect("last");
    assert_eq!(last.map(|(k, _)| k), Some(7u64.to_be_bytes().to_vec()));
}

/// Synced writes survive a restart; unsynced ones survive, if at all, as whole batches
/// and in order: a later batch never without the earlier ones.
pub fn synced_writes_survive_restart(harness: &mut dyn DiskHarness) {
    let disk = harness.fresh();
    write(&*disk, |b| {
        b.put(Keyspace::Log, *b"synced-1", *b"1");
    });
    write(&*disk, |b| {
        b.put(Keyspace::Meta, *b"x", *b"2")
            .delete(Keyspace::Log, *b"synced-1")
            .put(Keyspace::Log, *b"synced-2", *b"2");
    });
    disk.sync().expect("sync");
    write(&*disk, |b| {
        b.put(Keyspace::Meta, *b"x", *b"3");
    });
    write(&*disk, |b| {
        b.put(Keyspace::Meta, *b"x", *b"4")
            .put(Keyspace::State, *b"y", *b"4");
    });

    let disk = harness.restart(disk);
    assert_eq!(
        get(&*disk, Keyspace::Log, b"synced-1"),
        None,
        "synced delete survives"
    );
    assert!(
        get(&*disk, Keyspace::Log, b"synced-2").is_some(),
        "synced put survives"
    );
    let x = get(&*disk, Keyspace::Meta, b"x").expect("x was synced");
    let y = get(&*disk, Keyspace::State, b"y");
    match &x[..] {
        b"2" | b"3" => assert_eq!(y, None, "batch 4 is lost whole"),
        b"4" => assert_eq!(y.as_deref(), Some(&b"4"[..]), "batch 4 survives whole"),
        other => panic!("x is {other:?}, a value never written in that order"),
    }

    disk.sync().expect("sync after restart");
    let seen = (x, y);
    let disk = harness.restart(disk);
    let again = (
        get(&*disk, Keyspace::Meta, b"x").expect("x"),
        get(&*disk, Keyspace::State, b"y"),
    );
    assert_eq!(
        seen, again,
        "what a restarted disk shows and then syncs stays"
    );
}

/// A view shows its keyspace as it was when taken: later puts, deletes and range deletes
/// do not reach it, and it honours bounds and limits like [`Disk::range`].
pub fn view_is_a_point_in_time(harness: &mut dyn DiskHarness) {
    let disk = harness.fresh();
    write(&*disk, |b| {
        b.put(Keyspace::State, *b"a", *b"1")
            .put(Keyspace::State, *b"b", *b"2")
            .put(Keyspace::State, *b"c", *b"3")
            .put(Keyspace::Meta, *b"a", *b"meta");
    });
    let view = disk.view(Keyspace::State).expect("view");
    write(&*disk, |b| {
        b.put(Keyspace::State, *b"a", *b"changed")
            .delete(Keyspace::State, *b"b")
            .put(Keyspace::State, *b"d", *b"4")
            .delete_range(Keyspace::State, *b"c", *b"cz");
    });
    let all = view.range(b"", None, 10).expect("range");
    let expected: Vec<KeyValue> = [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
        .iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect();
    assert_eq!(all, expected, "the view is unchanged by later writes");
    assert_eq!(
        view.range(b"b", Some(b"c"), 10).expect("range"),
        expected[1..2]
    );
    assert_eq!(view.range(b"a", None, 1).expect("range"), expected[..1]);
    assert!(view.range(b"c", Some(b"a"), 10).expect("range").is_empty());
    assert_eq!(
        disk.range(Keyspace::State, b"", None, 10)
            .expect("range")
            .len(),
        2,
        "the disk itself moved on"
    );
}

/// Synced writes survive every restart, torn or not. Of the unsynced writes, what
/// survives is a prefix of their operations in write order, across batches; every value
/// kept is exactly as written except possibly the last one kept, which a torn write may
/// cut short or garble. Storage code relies on exactly this to recover (see the log
/// store's recovery).
pub fn unsynced_writes_survive_as_a_prefix(harness: &mut dyn DiskHarness) {
    const KEYS: u8 = 9;
    let value = |i: u8| vec![i; 8];
    for round in 0..8 {
        let disk = harness.fresh();
        write(&*disk, |b| {
            b.put(Keyspace::Meta, *b"base", *b"synced");
        });
        disk.sync().expect("sync");
        for batch in 0..3 {
            write(&*disk, |b| {
                for i in batch * 3..batch * 3 + 3 {
                    b.put(Keyspace::Log, [i], value(i));
                }
            });
        }
        let disk = harness.restart(disk);
        assert_eq!(
            get(&*disk, Keyspace::Meta, b"base").as_deref(),
            Some(&b"synced"[..]),
            "round {round}: a synced write survives"
        );
        let kept: Vec<Option<Vec<u8>>> = (0..KEYS)
            .map(|i| get(&*disk, Keyspace::Log, &[i]))
            .collect();
        let prefix = kept.iter().take_while(|v| v.is_some()).count();
        assert!(
            kept[prefix..].iter().all(Option::is_none),
            "round {round}: unsynced writes kept with a hole: {kept:?}"
        );
        for (i, kept) in kept.iter().enumerate().take(prefix.saturating_sub(1)) {
            assert_eq!(
                kept.as_deref(),
                Some(&value(i as u8)[..]),
                "round {round}: value {i} kept but changed, and it is not the last kept"
            );
        }
    }
}
