//! Where the ledger keeps its state: ordered byte tables behind the [`Store`] trait.
//!
//! The ledger's state is a handful of *primary* tables (meta, tenants, records, tombstones,
//! remembered commands) and *derived* tables (indexes for the sweeper and `List`, usage
//! counters, counts) that are a function of the primary ones. Every table is an ordered
//! map from bytes to bytes; keys are encoded so that byte order is the order the ledger
//! scans in ([`keycode`](crate::keycode)). The ledger reads and writes only through this
//! trait, so the same transitions run on [`MemStore`] (tests, the simulation's model) and
//! on the Raft state machine's disk store, which keeps a command's writes in a pending
//! batch that it commits atomically with the applied log position.
//!
//! Values are bincode (standard configuration) behind a one-byte format tag, so a later
//! format can be told apart. A value that does not decode is reported to the store
//! ([`Store::corrupt`]) and treated as absent: the disk store then refuses to commit
//! anything computed from it, the memory store panics (it only holds what this crate
//! wrote, so a bad value there is a bug).

use std::collections::BTreeMap;
use std::ops::Bound;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// One ordered table of the ledger's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    /// Ledger clock and next fencing token.
    Meta,
    /// Tenant configuration by tenant name.
    Tenants,
    /// Effect records by effect key.
    Records,
    /// Tombstones of collected records by effect key.
    Tombstones,
    /// Remembered command ids by (caller, command id).
    Commands,
    /// Open attempts by lease end.
    Leases,
    /// Collectable records and slot groups by retention deadline.
    Retention,
    /// Finished slots' deadlines by base key.
    SlotGroups,
    /// Tombstones by the end of their window.
    TombstoneExpiry,
    /// Remembered command ids by the end of their retention.
    CommandExpiry,
    /// Records by state.
    ByState,
    /// Records by (tenant, workflow).
    ByWorkflow,
    /// Per-tenant usage by tenant name.
    Usage,
    /// Counters: records per state, tombstones, remembered commands, escalations.
    Counts,
    /// Escalated records waiting for an operator, by effect key; the value is when they
    /// were escalated.
    Escalations,
}

impl Table {
    /// Every table, in a fixed order.
    pub const ALL: [Table; 15] = [
        Table::Meta,
        Table::Tenants,
        Table::Records,
        Table::Tombstones,
        Table::Commands,
        Table::Leases,
        Table::Retention,
        Table::SlotGroups,
        Table::TombstoneExpiry,
        Table::CommandExpiry,
        Table::ByState,
        Table::ByWorkflow,
        Table::Usage,
        Table::Counts,
        Table::Escalations,
    ];

    /// The tables a snapshot carries, in snapshot order; every other table is derived
    /// from these and rebuilt when a snapshot is restored.
    pub const PRIMARY: [Table; 5] = [
        Table::Meta,
        Table::Tenants,
        Table::Records,
        Table::Tombstones,
        Table::Commands,
    ];

    /// A stable one-byte id, used as a key prefix on disk and in snapshots.
    pub fn id(self) -> u8 {
        match self {
            Table::Meta => 1,
            Table::Tenants => 2,
            Table::Records => 3,
            Table::Tombstones => 4,
            Table::Commands => 5,
            Table::Leases => 10,
            Table::Retention => 11,
            Table::SlotGroups => 12,
            Table::TombstoneExpiry => 13,
            Table::CommandExpiry => 14,
            Table::ByState => 15,
            Table::ByWorkflow => 16,
            Table::Usage => 17,
            Table::Counts => 18,
            Table::Escalations => 19,
        }
    }

    /// The table with id `id`.
    pub fn from_id(id: u8) -> Option<Table> {
        Table::ALL.into_iter().find(|t| t.id() == id)
    }

    /// Whether a snapshot carries this table.
    pub fn is_primary(self) -> bool {
        Table::PRIMARY.contains(&self)
    }
}

/// A key and its value.
pub type Pair = (Vec<u8>, Vec<u8>);

/// Ordered byte tables the ledger keeps its state in.
///
/// Duties of an implementation:
/// 1. Reads see every earlier write, including those of the command being applied.
/// 2. [`Store::scan`] returns pairs in ascending key order.
/// 3. A read that cannot be served (I/O error, checksum mismatch) is latched, the read
///    answers as if absent, and nothing computed after it is made durable.
pub trait Store {
    /// The value under `key`.
    fn get(&self, table: Table, key: &[u8]) -> Option<Vec<u8>>;

    /// At most `limit` pairs with keys in `[from, to)` (to the end when `to` is `None`),
    /// in ascending key order.
    fn scan(&self, table: Table, from: &[u8], to: Option<&[u8]>, limit: usize) -> Vec<Pair>;

    /// Sets `key` to `value`.
    fn put(&mut self, table: Table, key: Vec<u8>, value: Vec<u8>);

    /// Removes `key` if present.
    fn delete(&mut self, table: Table, key: &[u8]);

    /// A stored value under `key` did not decode as `what`.
    fn corrupt(&self, table: Table, key: &[u8], what: &str);

    /// Told which keys the next commands will look up first, a store that reads keys
    /// faster together than one by one may read them now. A hint: it changes no answer,
    /// and a key left out is read when it is asked for.
    fn prefetch(&self, _keys: Vec<(Table, Vec<u8>)>) {}
}

/// The state in memory: one ordered map per table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemStore {
    tables: BTreeMap<Table, BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every pair of `table`, in key order.
    pub fn iter(&self, table: Table) -> impl Iterator<Item = (&Vec<u8>, &Vec<u8>)> {
        self.tables.get(&table).into_iter().flatten()
    }
}

impl Store for MemStore {
    fn get(&self, table: Table, key: &[u8]) -> Option<Vec<u8>> {
        self.tables.get(&table)?.get(key).cloned()
    }

    fn scan(&self, table: Table, from: &[u8], to: Option<&[u8]>, limit: usize) -> Vec<Pair> {
        let Some(map) = self.tables.get(&table) else {
            return Vec::new();
        };
        let upper = to.map_or(Bound::Unbounded, Bound::Excluded);
        if to.is_some_and(|to| to <= from) {
            return Vec::new();
        }
        map.range::<[u8], _>((Bound::Included(from), upper))
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn put(&mut self, table: Table, key: Vec<u8>, value: Vec<u8>) {
        self.tables.entry(table).or_default().insert(key, value);
    }

    fn delete(&mut self, table: Table, key: &[u8]) {
        if let Some(map) = self.tables.get_mut(&table) {
            map.remove(key);
            if map.is_empty() {
                self.tables.remove(&table);
            }
        }
    }

    fn corrupt(&self, table: Table, key: &[u8], what: &str) {
        panic!("{what} in memory table {table:?} under {key:?} does not decode");
    }
}

/// Format tag in front of every stored value.
const VALUE_FORMAT: u8 = 1;

/// Largest stored value decoded: a record is bounded by the intent and receipt limits,
/// a tenant's configuration by its tool policies; this only stops a corrupt length field
/// from allocating without bound.
const VALUE_BYTES_MAX: usize = 64 << 20;

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<VALUE_BYTES_MAX>()
}

/// The capacity a value is encoded into first.
const VALUE_CAPACITY: usize = 64;

/// Encodes a stored value.
pub fn encode_value<T: Serialize>(value: &T) -> Vec<u8> {
    // Room for most values (a record grows from here in two steps, not seven); a stored
    // copy is never more than twice its size, as with any grown vector.
    let mut bytes = Vec::with_capacity(VALUE_CAPACITY);
    bytes.push(VALUE_FORMAT);
    bincode::serde::encode_into_std_write(value, &mut bytes, config())
        .expect("encoding a value into memory cannot fail");
    bytes
}

/// Decodes a stored value; `None` when the bytes are not one whole `T` of this format.
pub fn decode_value<T: DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    let (&format, body) = bytes.split_first()?;
    if format != VALUE_FORMAT {
        return None;
    }
    let (value, read) = bincode::serde::decode_from_slice(body, config()).ok()?;
    (read == body.len()).then_some(value)
}

/// Pairs read per scan by [`StoreExt::walk`].
const WALK_PAGE: usize = 512;

/// Typed reads and writes over a [`Store`].
pub(crate) trait StoreExt: Store {
    /// The value under `key`, decoded; a value that does not decode is reported and
    /// read as absent.
    fn load<T: DeserializeOwned>(&self, table: Table, key: &[u8], what: &str) -> Option<T> {
        let bytes = self.get(table, key)?;
        let value = decode_value(&bytes);
        if value.is_none() {
            self.corrupt(table, key, what);
        }
        value
    }

    /// Stores `value` under `key`.
    fn save<T: Serialize>(&mut self, table: Table, key: Vec<u8>, value: &T) {
        self.put(table, key, encode_value(value));
    }

    /// Calls `visit` with every pair in `[from, to)` in key order, reading a page at a
    /// time, until `visit` returns false.
    fn walk(
        &self,
        table: Table,
        mut from: Vec<u8>,
        to: Option<&[u8]>,
        mut visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) {
        loop {
            let page = self.scan(table, &from, to, WALK_PAGE);
            let Some((last, _)) = page.last() else {
                return;
            };
            // The least key after `last`.
            from = last.clone();
            from.push(0);
            for (key, value) in &page {
                if !visit(key, value) {
                    return;
                }
            }
        }
    }

    /// The keys of at most `limit` entries in `[from, to)`.
    fn keys(&self, table: Table, from: &[u8], to: Option<&[u8]>, limit: usize) -> Vec<Vec<u8>> {
        self.scan(table, from, to, limit)
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }
}

impl<S: Store + ?Sized> StoreExt for S {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_is_ordered_bounded_and_limited() {
        let mut store = MemStore::new();
        for k in [b"c", b"a", b"d", b"b"] {
            store.put(Table::Records, k.to_vec(), k.to_vec());
        }
        store.put(Table::Tombstones, b"a".to_vec(), vec![]);
        let keys = |pairs: Vec<Pair>| pairs.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(
            keys(store.scan(Table::Records, b"a", Some(b"d"), 10)),
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
        );
        assert_eq!(
            keys(store.scan(Table::Records, b"b", None, 1)),
            vec![b"b".to_vec()]
        );
        assert!(store.scan(Table::Records, b"c", Some(b"c"), 10).is_empty());
        assert!(store.scan(Table::Records, b"d", Some(b"a"), 10).is_empty());
        store.delete(Table::Tombstones, b"a");
        assert_eq!(store.iter(Table::Tombstones).count(), 0);
        assert_eq!(store, {
            let mut s = MemStore::new();
            for k in [b"a", b"b", b"c", b"d"] {
                s.put(Table::Records, k.to_vec(), k.to_vec());
            }
            s
        });
    }

    #[test]
    fn values_round_trip_and_garbage_does_not_decode() {
        let bytes = encode_value(&(7u64, "x".to_string()));
        assert_eq!(decode_value::<(u64, String)>(&bytes), Some((7, "x".into())));
        assert_eq!(
            decode_value::<(u64, String)>(&bytes[..bytes.len() - 1]),
            None
        );
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode_value::<(u64, String)>(&longer), None, "trailing");
        let mut other_format = bytes;
        other_format[0] = 9;
        assert_eq!(decode_value::<(u64, String)>(&other_format), None);
        assert_eq!(decode_value::<u64>(&[]), None);
    }

    #[test]
    fn table_ids_are_unique_and_round_trip() {
        for t in Table::ALL {
            assert_eq!(Table::from_id(t.id()), Some(t));
        }
        let mut ids: Vec<u8> = Table::ALL.iter().map(|t| t.id()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), Table::ALL.len());
        assert_eq!(Table::from_id(0), None);
    }
}
