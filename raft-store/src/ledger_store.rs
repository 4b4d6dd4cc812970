//! [`DiskStore`]: the ledger's tables on a [`Disk`], with the writes of the entry being
//! applied kept aside until they are committed in one batch.
//!
//! Every table lives in [`Keyspace::State`] under `generation | table id | key`. The
//! generation byte lets a snapshot be installed next to the live state and swapped in
//! with one write (see `snapshot`). Reads see the pending writes first, then the disk;
//! scans merge the two in key order. Nothing reaches the disk until the state machine
//! takes the pending writes into a [`WriteBatch`] together with the applied log id.
//!
//! Every value carries the same CRC-32C as the other stored records (`codec`), checked
//! on every read. A read the disk cannot serve (an engine error, a value whose checksum
//! does not match)
//! latches a fault and answers "absent" to the ledger, as [`Store`] requires; the state
//! machine then discards everything computed since and stops, and readers get the error
//! instead of an answer. The latch is sticky: a node that found damage serves nothing
//! more from this state.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Mutex;

use ledger_core::store::{Pair, Store, Table};

use crate::codec::{seal, unseal};
use crate::disk::{DiskError, DiskRef, DiskView, Keyspace, WriteBatch};
use crate::error::StoreError;

/// Largest page read from the disk by one scan step.
const SCAN_PAGE: usize = 512;

/// The ledger's tables of one generation on a disk.
pub struct DiskStore {
    disk: DiskRef,
    generation: u8,
    pending: Writes,
    /// Committed values of the small tables read by almost every command.
    cache: Mutex<Writes>,
    /// Committed values of the other tables read while applying an entry (between
    /// [`DiskStore::begin_entry`] and taking or discarding its writes), so a key looked
    /// up several times is read from the disk once. Readers between entries leave it
    /// alone, so it never outgrows one entry.
    reads: Mutex<Writes>,
    /// Whether an entry is being applied.
    applying: bool,
    /// Per table, where its first key on the disk can be (see [`Floor`]).
    floors: Mutex<BTreeMap<Table, Floor>>,
    fault: Latch,
}

/// What a scan learnt about where a table's keys on the disk start, kept so that the next
/// scan from the start of the table seeks straight there. The deadline tables (leases
/// above all) are deleted from the front, and RocksDB keeps a deleted key until
/// compaction reaches its last level: a scan from the start would step over every one of
/// them, which at millions of effects costs more than the lookup it serves. A floor is
/// only ever raised by a scan that saw the keys below it to be gone, and is lowered by
/// every commit that puts a key below it, so it never hides a key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Floor {
    /// No key of the table on the disk is below this one.
    Key(Vec<u8>),
    /// The table has no key on the disk.
    Empty,
}

/// The first damage a store met while reading; sticky.
#[derive(Debug, Default)]
struct Latch(Mutex<Option<String>>);

impl Latch {
    fn fault(&self) -> Option<StoreError> {
        let fault = self.0.lock().unwrap_or_else(|p| p.into_inner());
        fault.clone().map(StoreError::Damaged)
    }

    fn set(&self, what: String) {
        let mut fault = self.0.lock().unwrap_or_else(|p| p.into_inner());
        fault.get_or_insert(what);
    }

    fn corrupt(&self, table: Table, key: &[u8], what: &str) {
        self.set(format!(
            "{what} in table {table:?} under {key:?} does not decode"
        ));
    }
}

/// The first key past `table` in `generation`.
pub(crate) fn table_end(generation: u8, table: Table) -> Vec<u8> {
    vec![generation, table.id() + 1]
}

/// At most `limit` pairs of `table` in `[from, to)`, read by `range` (a disk's or a
/// view's) from `generation`: keys without the prefix, values checked and opened.
fn table_page(
    range: impl FnOnce(&[u8], &[u8], usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>, DiskError>,
    generation: u8,
    table: Table,
    from: &[u8],
    to: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<Pair>, String> {
    let start = disk_key(generation, table, from);
    let end = match to {
        Some(to) => disk_key(generation, table, to),
        None => table_end(generation, table),
    };
    range(&start, &end, limit)
        .map_err(|e| e.to_string())
        .and_then(opened_pairs)
        .map_err(|e| format!("reading table {table:?}: {e}"))
}

/// Values by table and key; `None` for a key that is absent (or deleted).
type Writes = BTreeMap<Table, BTreeMap<Vec<u8>, Option<Vec<u8>>>>;

/// The value `writes` holds for `key` of `table`: `None` when it holds nothing,
/// `Some(None)` when it holds the key's absence.
fn lookup<'a>(writes: &'a Writes, table: Table, key: &[u8]) -> Option<&'a Option<Vec<u8>>> {
    writes.get(&table)?.get(key)
}

/// Sets what `writes` holds for `key` of `table`.
fn note(writes: &mut Writes, table: Table, key: Vec<u8>, value: Option<Vec<u8>>) {
    writes.entry(table).or_default().insert(key, value);
}

/// Locks a map, whether or not a panic poisoned it (the maps are only ever changed by
/// whole inserts).
fn locked<T>(map: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    map.lock().unwrap_or_else(|p| p.into_inner())
}

/// Tables whose size is bounded by the number of tenants, not of records, and which
/// most commands read: kept in memory once read.
fn cached(table: Table) -> bool {
    matches!(
        table,
        Table::Meta | Table::Tenants | Table::Usage | Table::Counts
    )
}

impl std::fmt::Debug for DiskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskStore")
            .field("generation", &self.generation)
            .field("pending", &self.pending_writes())
            .finish_non_exhaustive()
    }
}

/// Where `key` of `table` is kept in `generation`.
pub(crate) fn disk_key(generation: u8, table: Table, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + key.len());
    out.extend_from_slice(&[generation, table.id()]);
    out.extend_from_slice(key);
    out
}

/// A stored value without its checksum, or what is wrong with it.
pub(crate) fn opened(stored: &[u8]) -> Result<Vec<u8>, String> {
    unseal(stored)
        .map(<[u8]>::to_vec)
        .map_err(|damage| format!("value is corrupt: {damage}"))
}

/// Pairs read from the `state` keyspace: keys without the generation and table bytes,
/// values checked and without their checksums.
pub(crate) fn opened_pairs(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<Vec<Pair>, String> {
    pairs
        .into_iter()
        .map(|(mut k, v)| {
            let value = opened(&v).map_err(|e| format!("{e} under {k:?}"))?;
            Ok((k.split_off(2), value))
        })
        .collect()
}

/// The key range of a whole generation.
pub(crate) fn generation_range(generation: u8) -> (Vec<u8>, Vec<u8>) {
    (vec![generation], vec![generation + 1])
}

impl DiskStore {
    /// The tables of `generation` on `disk`.
    pub(crate) fn new(disk: DiskRef, generation: u8) -> DiskStore {
        DiskStore {
            disk,
            generation,
            pending: BTreeMap::new(),
            cache: Mutex::default(),
            reads: Mutex::default(),
            applying: false,
            floors: Mutex::default(),
            fault: Latch::default(),
        }
    }

    /// The generation this store reads and writes.
    pub(crate) fn generation(&self) -> u8 {
        self.generation
    }

    /// The disk under it.
    pub(crate) fn disk(&self) -> &DiskRef {
        &self.disk
    }

    /// Starts applying an entry: reads are remembered until its writes are taken or
    /// discarded.
    pub(crate) fn begin_entry(&mut self) {
        self.applying = true;
    }

    /// Moves the pending writes into `batch`; returns the keys of the records written
    /// (changed, created or removed), as stored (`keycode::key`).
    pub(crate) fn take_writes(&mut self, batch: &mut WriteBatch) -> Vec<Vec<u8>> {
        let mut cache = locked(&self.cache);
        let mut floors = locked(&self.floors);
        let mut records = Vec::new();
        for (table, writes) in std::mem::take(&mut self.pending) {
            if let Some(floor) = floors.get_mut(&table) {
                // Keys come in order: the first put is the lowest.
                let lowest = writes.iter().find(|(_, value)| value.is_some());
                if let Some((key, _)) = lowest {
                    if !matches!(floor, Floor::Key(f) if key >= f) {
                        *floor = Floor::Key(key.clone());
                    }
                }
            }
            for (key, value) in writes {
                let at = disk_key(self.generation, table, &key);
                if cached(table) {
                    note(&mut cache, table, key, value.clone());
                } else if table == Table::Records {
                    records.push(key);
                }
                match value {
                    Some(value) => batch.put(Keyspace::State, at, seal(value)),
                    None => batch.delete(Keyspace::State, at),
                };
            }
        }
        drop((cache, floors));
        self.end_entry();
        records
    }

    /// Stops remembering reads.
    fn end_entry(&mut self) {
        self.applying = false;
        locked(&self.reads).clear();
    }

    /// How many writes are pending.
    pub(crate) fn pending_writes(&self) -> usize {
        self.pending.values().map(BTreeMap::len).sum()
    }

    /// Forgets the pending writes.
    pub(crate) fn discard(&mut self) {
        self.pending.clear();
        self.end_entry();
    }

    /// Where committed values of `table` are remembered, if anywhere.
    fn known(&self, table: Table) -> Option<&Mutex<Writes>> {
        if cached(table) {
            Some(&self.cache)
        } else {
            self.applying.then_some(&self.reads)
        }
    }

    /// Whether `key` of `table` is known to be absent from the disk.
    fn absent_from_disk(&self, table: Table, key: &[u8]) -> bool {
        self.known(table)
            .is_some_and(|known| matches!(lookup(&locked(known), table, key), Some(None)))
    }

    /// What the disk answered for `key` of `table`, its checksum checked and removed.
    /// An engine error or a damaged value latches the fault and is `Err`, which readers
    /// take as "absent".
    fn checked(
        &self,
        table: Table,
        key: &[u8],
        read: Result<Option<Vec<u8>>, DiskError>,
    ) -> Result<Option<Vec<u8>>, ()> {
        read.map_err(|e| e.to_string())
            .and_then(|value| value.map(|v| opened(&v)).transpose())
            .map_err(|e| self.fault.set(format!("reading {table:?} {key:?}: {e}")))
    }

    /// The damage found so far, if any.
    pub(crate) fn fault(&self) -> Option<StoreError> {
        self.fault.fault()
    }

    /// One page of `table` from the disk, keys without the prefix. Starts at the table's
    /// floor when `from` is below it, and raises the floor when the page shows the keys
    /// from there on to be gone.
    fn disk_page(&self, table: Table, from: &[u8], to: Option<&[u8]>, limit: usize) -> Vec<Pair> {
        let (start, learns) = match locked(&self.floors).get(&table) {
            Some(Floor::Empty) => return Vec::new(),
            Some(Floor::Key(floor)) if floor.as_slice() >= from => (floor.clone(), true),
            Some(Floor::Key(_)) => (from.to_vec(), false),
            // Nothing known yet: a scan from the very start learns the first floor.
            None => (from.to_vec(), from.is_empty()),
        };
        let range = |start: &[u8], end: &[u8], limit| {
            self.disk.range(Keyspace::State, start, Some(end), limit)
        };
        let page = match table_page(range, self.generation, table, &start, to, limit) {
            Ok(page) => page,
            Err(e) => {
                self.fault.set(e);
                return Vec::new();
            }
        };
        if learns {
            let learnt = match (page.first(), to) {
                (Some((first, _)), _) => Some(Floor::Key(first.clone())),
                (None, None) => Some(Floor::Empty),
                (None, Some(to)) => (to > start.as_slice()).then(|| Floor::Key(to.to_vec())),
            };
            if let Some(learnt) = learnt {
                locked(&self.floors).insert(table, learnt);
            }
        }
        page
    }
}

impl Store for DiskStore {
    fn get(&self, table: Table, key: &[u8]) -> Option<Vec<u8>> {
        if let Some(pending) = lookup(&self.pending, table, key) {
            return pending.clone();
        }
        let known = self.known(table);
        if let Some(value) = known.and_then(|known| lookup(&locked(known), table, key).cloned()) {
            return value;
        }
        let read = self
            .disk
            .get(Keyspace::State, &disk_key(self.generation, table, key));
        let value = self.checked(table, key, read).ok()?;
        if let Some(known) = known {
            note(&mut locked(known), table, key.to_vec(), value.clone());
        }
        value
    }

    fn scan(&self, table: Table, from: &[u8], to: Option<&[u8]>, limit: usize) -> Vec<Pair> {
        let mut out = Vec::new();
        if limit == 0 || to.is_some_and(|to| to <= from) {
            return out;
        }
        let mut cursor = from.to_vec();
        loop {
            let page = self.disk_page(table, &cursor, to, SCAN_PAGE.min(limit + 1));
            let exhausted = page.len() < SCAN_PAGE.min(limit + 1);
            // Pending writes up to the last key read from the disk (or to the end of
            // the range when the disk has no more) are merged into this step.
            let upper = match (exhausted, page.last()) {
                (false, Some((last, _))) => Bound::Included(last.clone()),
                _ => to.map_or(Bound::Unbounded, |to| Bound::Excluded(to.to_vec())),
            };
            let mut pending = self
                .pending
                .get(&table)
                .into_iter()
                .flat_map(|writes| {
                    writes.range::<[u8], _>((
                        Bound::Included(&cursor[..]),
                        upper.as_ref().map(Vec::as_slice),
                    ))
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .peekable();
            let mut disk = page.iter().peekable();
            loop {
                let take_pending = match (pending.peek(), disk.peek()) {
                    (None, None) => break,
                    (Some(_), None) => true,
                    (None, Some(_)) => false,
                    (Some((pk, _)), Some((dk, _))) => pk <= dk,
                };
                let (key, value) = if take_pending {
                    let (key, value) = pending.next().expect("peeked");
                    if disk.peek().is_some_and(|(dk, _)| *dk == key) {
                        disk.next();
                    }
                    (key, value)
                } else {
                    let (key, value) = disk.next().expect("peeked");
                    (key.clone(), Some(value.clone()))
                };
                if let Some(value) = value {
                    out.push((key, value));
                    if out.len() == limit {
                        return out;
                    }
                }
            }
            match page.last() {
                Some((last, _)) if !exhausted => {
                    cursor = last.clone();
                    cursor.push(0);
                }
                _ => return out,
            }
        }
    }

    fn put(&mut self, table: Table, key: Vec<u8>, value: Vec<u8>) {
        note(&mut self.pending, table, key, Some(value));
    }

    fn delete(&mut self, table: Table, key: &[u8]) {
        // A key written only by this entry and absent from the disk needs no delete on
        // the disk: forgetting the write is enough.
        if self.absent_from_disk(table, key) {
            if let Some(writes) = self.pending.get_mut(&table) {
                writes.remove(key);
            }
        } else {
            note(&mut self.pending, table, key.to_vec(), None);
        }
    }

    fn corrupt(&self, table: Table, key: &[u8], what: &str) {
        self.fault.corrupt(table, key, what);
    }

    /// Reads the keys neither pending nor remembered in one [`Disk::get_many`] and
    /// remembers them for the entry, as [`Store::get`] would one by one. Only while an
    /// entry is applied, when reads are remembered; a failed read latches the fault.
    fn prefetch(&self, mut keys: Vec<(Table, Vec<u8>)>) {
        if !self.applying {
            return;
        }
        let mut reads = locked(&self.reads);
        keys.retain(|(table, key)| {
            !cached(*table)
                && lookup(&self.pending, *table, key).is_none()
                && lookup(&reads, *table, key).is_none()
        });
        // In the order of their keys on the disk, as `get_many` takes them.
        keys.sort_unstable_by(|(t1, k1), (t2, k2)| (t1.id(), k1).cmp(&(t2.id(), k2)));
        keys.dedup();
        let at: Vec<Vec<u8>> = keys
            .iter()
            .map(|(table, key)| disk_key(self.generation, *table, key))
            .collect();
        let values = match self.disk.get_many(Keyspace::State, &at) {
            Ok(values) => values,
            Err(e) => {
                return self
                    .fault
                    .set(format!("reading {} keys together: {e}", at.len()))
            }
        };
        for ((table, key), value) in keys.into_iter().zip(values) {
            let Ok(value) = self.checked(table, &key, Ok(value)) else {
                return;
            };
            note(&mut reads, table, key, value);
        }
    }
}

/// One generation's tables in a point-in-time [`DiskView`], for reading the whole state
/// (a digest) without holding applies back. Read-only.
pub struct ViewStore {
    view: Box<dyn DiskView>,
    generation: u8,
    fault: Latch,
}

impl ViewStore {
    /// `generation` as `view` shows it.
    pub(crate) fn new(view: Box<dyn DiskView>, generation: u8) -> ViewStore {
        ViewStore {
            view,
            generation,
            fault: Latch::default(),
        }
    }

    /// The damage found while reading, if any.
    pub(crate) fn fault(&self) -> Option<StoreError> {
        self.fault.fault()
    }
}

impl Store for ViewStore {
    fn get(&self, table: Table, key: &[u8]) -> Option<Vec<u8>> {
        let at = disk_key(self.generation, table, key);
        let mut end = at.clone();
        end.push(0);
        match self
            .view
            .range(&at, Some(&end), 1)
            .map_err(|e| e.to_string())
            .and_then(opened_pairs)
        {
            Ok(pairs) => pairs.into_iter().next().map(|(_, v)| v),
            Err(e) => {
                self.fault.set(format!("reading {table:?} {key:?}: {e}"));
                None
            }
        }
    }

    fn scan(&self, table: Table, from: &[u8], to: Option<&[u8]>, limit: usize) -> Vec<Pair> {
        let range = |start: &[u8], end: &[u8], limit| self.view.range(start, Some(end), limit);
        table_page(range, self.generation, table, from, to, limit).unwrap_or_else(|e| {
            self.fault.set(e);
            Vec::new()
        })
    }

    fn put(&mut self, table: Table, _key: Vec<u8>, _value: Vec<u8>) {
        unreachable!("a view of {table:?} is read-only");
    }

    fn delete(&mut self, table: Table, _key: &[u8]) {
        unreachable!("a view of {table:?} is read-only");
    }

    fn corrupt(&self, table: Table, key: &[u8], what: &str) {
        self.fault.corrupt(table, key, what);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ledger_core::store::MemStore;

    use super::*;
    use crate::disk::{SimDisk, WriteOp};

    /// While an entry is applied, a key is read from the disk once, and a key the entry
    /// created where the disk had none leaves no delete behind; between entries nothing is
    /// remembered, so readers cannot grow the store's memory.
    #[test]
    fn an_entry_reads_each_key_once_and_skips_deletes_of_its_own_new_keys() {
        let disk: DiskRef = Arc::new(SimDisk::new());
        let mut store = DiskStore::new(disk.clone(), 0);
        let commit = |store: &mut DiskStore| {
            let mut batch = WriteBatch::new();
            store.take_writes(&mut batch);
            let ops = batch.ops().to_vec();
            disk.write(batch).unwrap();
            ops
        };
        store.put(Table::Records, b"old".to_vec(), vec![1]);
        commit(&mut store);

        store.begin_entry();
        assert_eq!(store.get(Table::Records, b"new"), None);
        assert_eq!(store.get(Table::Records, b"old"), Some(vec![1]));
        // The disk changes under the entry; the entry keeps what it read first.
        let mut behind = WriteBatch::new();
        behind.put(
            Keyspace::State,
            disk_key(0, Table::Records, b"old"),
            seal(vec![7]),
        );
        disk.write(behind).unwrap();
        assert_eq!(
            store.get(Table::Records, b"old"),
            Some(vec![1]),
            "read once"
        );
        store.put(Table::Records, b"new".to_vec(), vec![2]);
        store.delete(Table::Records, b"new");
        store.delete(Table::Records, b"old");
        // Never read: its absence is not known, so its delete is kept.
        store.put(Table::ByState, b"blind".to_vec(), vec![]);
        store.delete(Table::ByState, b"blind");
        assert_eq!(store.get(Table::Records, b"new"), None);
        let ops = commit(&mut store);
        let deleted: Vec<Vec<u8>> = ops
            .iter()
            .map(|op| match op {
                WriteOp::Delete { key, .. } => key.clone(),
                other => panic!("only deletes were left: {other:?}"),
            })
            .collect();
        assert_eq!(
            deleted,
            vec![
                disk_key(0, Table::Records, b"old"),
                disk_key(0, Table::ByState, b"blind"),
            ]
        );

        // Between entries every read goes to the disk and nothing is remembered.
        store.put(Table::Records, b"later".to_vec(), vec![3]);
        commit(&mut store);
        assert_eq!(store.get(Table::Records, b"later"), Some(vec![3]));
        let mut behind = WriteBatch::new();
        behind.put(
            Keyspace::State,
            disk_key(0, Table::Records, b"later"),
            seal(vec![4]),
        );
        disk.write(behind).unwrap();
        assert_eq!(store.get(Table::Records, b"later"), Some(vec![4]));
        assert!(locked(&store.reads).is_empty());
        assert!(store.fault().is_none());
    }

    /// Keys prefetched while an entry is applied are read from the disk then, together,
    /// and answered from memory after; a pending write still wins, an absent key stays
    /// absent, a damaged value latches the fault, and between entries a prefetch reads
    /// and remembers nothing.
    #[test]
    fn prefetched_keys_are_read_together_once_and_answer_as_reads_do() {
        let disk: DiskRef = Arc::new(SimDisk::new());
        let mut store = DiskStore::new(disk.clone(), 0);
        store.put(Table::Records, b"kept".to_vec(), vec![1]);
        store.put(Table::Tombstones, b"written".to_vec(), vec![2]);
        let mut batch = WriteBatch::new();
        store.take_writes(&mut batch);
        disk.write(batch).unwrap();
        let overwrite = |key: &[u8], table: Table, value: Vec<u8>| {
            let mut behind = WriteBatch::new();
            behind.put(Keyspace::State, disk_key(0, table, key), value);
            disk.write(behind).unwrap();
        };

        store.prefetch(vec![(Table::Records, b"kept".to_vec())]);
        assert!(
            locked(&store.reads).is_empty(),
            "not while no entry is applied"
        );

        store.begin_entry();
        store.put(Table::Tombstones, b"written".to_vec(), vec![3]);
        store.prefetch(vec![
            (Table::Tombstones, b"written".to_vec()),
            (Table::Records, b"absent".to_vec()),
            (Table::Records, b"kept".to_vec()),
            (Table::Records, b"kept".to_vec()),
        ]);
        // Read then: later changes to the disk are not seen by this entry.
        overwrite(b"kept", Table::Records, seal(vec![7]));
        overwrite(b"absent", Table::Records, seal(vec![8]));
        assert_eq!(store.get(Table::Records, b"kept"), Some(vec![1]));
        assert_eq!(store.get(Table::Records, b"absent"), None);
        assert_eq!(store.get(Table::Tombstones, b"written"), Some(vec![3]));
        assert!(store.fault().is_none());
        store.discard();

        store.begin_entry();
        overwrite(b"torn", Table::Records, vec![1, 2]);
        store.prefetch(vec![(Table::Records, b"torn".to_vec())]);
        assert!(store.fault().is_some(), "a damaged value is never served");
    }

    /// A disk that notes where each range read starts.
    struct Spy {
        disk: SimDisk,
        starts: Mutex<Vec<Vec<u8>>>,
    }

    impl crate::disk::Disk for Spy {
        fn write(&self, batch: WriteBatch) -> Result<(), DiskError> {
            self.disk.write(batch)
        }
        fn sync(&self) -> Result<(), DiskError> {
            self.disk.sync()
        }
        fn get(&self, space: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, DiskError> {
            self.disk.get(space, key)
        }
        fn range(
            &self,
            space: Keyspace,
            from: &[u8],
            to: Option<&[u8]>,
            limit: usize,
        ) -> Result<Vec<crate::disk::KeyValue>, DiskError> {
            locked(&self.starts).push(from.to_vec());
            self.disk.range(space, from, to, limit)
        }
        fn last(&self, space: Keyspace) -> Result<Option<crate::disk::KeyValue>, DiskError> {
            self.disk.last(space)
        }
        fn view(&self, space: Keyspace) -> Result<Box<dyn DiskView>, DiskError> {
            self.disk.view(space)
        }
    }

    /// A scan from the start of a table seeks to the first key a previous scan found
    /// there, past the keys deleted in front of it; every put below that point lowers it
    /// again. Checked against the memory store through random puts, deletes and scans,
    /// committed entry by entry.
    #[test]
    fn scans_from_the_start_skip_the_deleted_front_and_never_hide_a_key() {
        use rand::rngs::SmallRng;
        use rand::{RngExt, SeedableRng};

        let spy = Arc::new(Spy {
            disk: SimDisk::new(),
            starts: Mutex::default(),
        });
        let disk: DiskRef = spy.clone();
        let mut store = DiskStore::new(disk.clone(), 0);
        let mut model = MemStore::new();
        let commit = |store: &mut DiskStore| {
            let mut batch = WriteBatch::new();
            store.take_writes(&mut batch);
            disk.write(batch).unwrap();
        };
        // A queue: 1,000 deadlines put, the first 990 deleted.
        for i in 0u32..1_000 {
            store.put(Table::Leases, i.to_be_bytes().to_vec(), vec![]);
        }
        commit(&mut store);
        for i in 0u32..990 {
            store.delete(Table::Leases, &i.to_be_bytes());
        }
        commit(&mut store);
        for i in 990u32..1_000 {
            model.put(Table::Leases, i.to_be_bytes().to_vec(), vec![]);
        }
        let first = |store: &DiskStore| store.scan(Table::Leases, &[], None, 1);
        assert_eq!(first(&store), vec![(990u32.to_be_bytes().to_vec(), vec![])]);
        locked(&spy.starts).clear();
        assert_eq!(first(&store), vec![(990u32.to_be_bytes().to_vec(), vec![])]);
        assert_eq!(
            *locked(&spy.starts),
            vec![disk_key(0, Table::Leases, &990u32.to_be_bytes())],
            "the second scan starts at the first key the first one found"
        );

        let mut rng = SmallRng::seed_from_u64(7);
        for i in 0u32..1_000 {
            store.begin_entry();
            for _ in 0..rng.random_range(0..4) {
                let key = rng.random_range(0u32..1_200).to_be_bytes().to_vec();
                if rng.random_bool(0.5) {
                    store.put(Table::Leases, key.clone(), vec![1]);
                    model.put(Table::Leases, key, vec![1]);
                } else {
                    store.delete(Table::Leases, &key);
                    model.delete(Table::Leases, &key);
                }
            }
            if i % 3 == 0 {
                // Scans while an entry is being applied see its writes too.
                let from = rng.random_range(0u32..1_200).to_be_bytes();
                for from in [&[][..], &from[..]] {
                    assert_eq!(
                        store.scan(Table::Leases, from, None, 5),
                        model.scan(Table::Leases, from, None, 5),
                        "step {i}, from {from:?}"
                    );
                }
            }
            commit(&mut store);
            let to = rng.random_range(0u32..1_200).to_be_bytes();
            for to in [None, Some(&to[..])] {
                assert_eq!(
                    store.scan(Table::Leases, &[], to, 3),
                    model.scan(Table::Leases, &[], to, 3),
                    "step {i}, to {to:?}"
                );
            }
        }
        // Emptied, then filled from below what was the floor.
        let all: Vec<Vec<u8>> = model
            .scan(Table::Leases, &[], None, usize::MAX)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        for key in &all {
            store.delete(Table::Leases, key);
        }
        commit(&mut store);
        assert_eq!(first(&store), vec![]);
        store.put(Table::Leases, vec![0], vec![2]);
        commit(&mut store);
        assert_eq!(first(&store), vec![(vec![0], vec![2])]);
        assert!(store.fault().is_none());
    }

    /// The same writes, some committed to disk and some pending, read like one map.
    #[test]
    fn scans_merge_pending_writes_with_the_disk() {
        let disk: DiskRef = Arc::new(SimDisk::new());
        let mut store = DiskStore::new(disk.clone(), 0);
        let mut model = MemStore::new();
        for i in 0u32..2_000 {
            let key = (i * 3).to_be_bytes().to_vec();
            store.put(Table::Records, key.clone(), vec![1]);
            model.put(Table::Records, key, vec![1]);
        }
        store.put(Table::Tombstones, vec![0], vec![9]);
        model.put(Table::Tombstones, vec![0], vec![9]);
        let mut batch = WriteBatch::new();
        store.take_writes(&mut batch);
        disk.write(batch).unwrap();
        for i in 0u32..2_000 {
            let key = (i * 5).to_be_bytes().to_vec();
            if i % 2 == 0 {
                store.delete(Table::Records, &key);
                model.delete(Table::Records, &key);
            } else {
                store.put(Table::Records, key.clone(), vec![2]);
                model.put(Table::Records, key, vec![2]);
            }
        }
        let bounds: [(u32, Option<u32>); 4] =
            [(0, None), (7, Some(4_000)), (5_999, None), (9, Some(9))];
        for (from, to) in bounds {
            let (from, to) = (from.to_be_bytes(), to.map(u32::to_be_bytes));
            for limit in [1, 7, 600, 10_000] {
                assert_eq!(
                    store.scan(Table::Records, &from, to.as_ref().map(|t| &t[..]), limit),
                    model.scan(Table::Records, &from, to.as_ref().map(|t| &t[..]), limit),
                    "from {from:?} to {to:?} limit {limit}"
                );
            }
        }
        assert_eq!(
            store.scan(Table::Tombstones, &[], None, 10),
            vec![(vec![0], vec![9])]
        );
        assert!(store.fault().is_none());
    }
}
