//! The production disk: RocksDB with one column family per keyspace.
//!
//! Writes go through RocksDB's write-ahead log without an fsync each; [`Disk::sync`]
//! fsyncs the WAL (`flush_wal(true)`), which makes every earlier write durable at once.
//! That is how a group of log entries costs one fsync. A whole [`WriteBatch`] is one
//! RocksDB batch, so it survives a crash entirely or not at all, in every column family.

use std::path::Path;
use std::sync::Arc;

use rocksdb::{
    BlockBasedIndexType, BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor,
    DBCompressionType, DBWithThreadMode, Direction, Env, IteratorMode, Options, ReadOptions,
    SingleThreaded, SnapshotWithThreadMode,
};

use super::{
    Disk, DiskError, DiskView, EngineStats, KeyValue, Keyspace, KeyspaceStats, RocksOptions,
    WriteBatch, WriteOp,
};

/// Named explicitly: the `multi-threaded-cf` feature, if another crate enabled it, would
/// change what `rocksdb::DB` means. Column families are all created at open, so the
/// single-threaded mode (no lock around the family map) is enough.
type Db = DBWithThreadMode<SingleThreaded>;

/// Every key of [`Keyspace::State`] starts with its generation and table bytes
/// (`ledger_store::disk_key`). With this, the memtable keeps the position of the last
/// insert into each table and starts the next insert into that table from there, so an
/// apply's writes (sorted by table and key) and the time-ordered indexes (leases,
/// retention, expiries) are inserted without searching the memtable's skip list from its
/// top each time. RocksDB's C API has no setter for it; its options parser does.
const STATE_INSERT_HINTS: &str = "memtable_insert_with_hint_prefix_extractor=rocksdb.FixedPrefix.2";

/// A [`Disk`] on RocksDB.
pub struct RocksDisk {
    db: Arc<Db>,
}

impl std::fmt::Debug for RocksDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksDisk")
            .field("path", &self.db.path())
            .finish()
    }
}

fn engine(error: rocksdb::Error) -> DiskError {
    DiskError::Engine(Box::new(error))
}

impl RocksDisk {
    /// Opens the database at `path` with the default memory budget, creating it and its
    /// column families if missing.
    pub fn open(path: impl AsRef<Path>) -> Result<RocksDisk, DiskError> {
        Self::open_with(path, RocksOptions::default())
    }

    /// Opens the database at `path` within `budget`.
    pub fn open_with(path: impl AsRef<Path>, budget: RocksOptions) -> Result<RocksDisk, DiskError> {
        let mut db_options = Options::default();
        db_options.create_if_missing(true);
        db_options.create_missing_column_families(true);
        db_options.set_db_write_buffer_size(budget.write_buffer_bytes);
        db_options.set_max_background_jobs(2);
        db_options.set_env(&background_env()?);
        let cache = Cache::new_lru_cache(budget.block_cache_bytes);
        let mut families = Vec::new();
        for space in Keyspace::ALL {
            let mut table = BlockBasedOptions::default();
            table.set_block_cache(&cache);
            // Index and filter blocks count against the cache too, so memory stays
            // within the budget however many files there are.
            table.set_cache_index_and_filter_blocks(true);
            table.set_cache_index_and_filter_blocks_with_high_priority(true);
            table.set_pin_l0_filter_and_index_blocks_in_cache(true);
            // Most reads are point lookups of records that may not exist.
            table.set_bloom_filter(10.0, false);
            // Partitioned: a lookup loads one small piece of a file's index and filter,
            // not the whole of them. Whole filters of large files are evicted by data
            // blocks once the records outgrow the cache, and reading one back on every
            // lookup that misses costs more than the lookup itself.
            table.set_index_type(BlockBasedIndexType::TwoLevelIndexSearch);
            table.set_partition_filters(true);
            table.set_metadata_block_size(4096);
            table.set_pin_top_level_index_and_filter(true);
            let mut options = Options::default();
            if space == Keyspace::State {
                options = options
                    .get_options_from_string(STATE_INSERT_HINTS)
                    .map_err(engine)?;
                // Most of the ledger's lookups are of keys that do not exist (a new
                // effect's record, tombstone and command id): a bloom filter over the
                // memtable answers those without searching it.
                options.set_memtable_prefix_bloom_ratio(0.05);
                options.set_memtable_whole_key_filtering(true);
            }
            options.set_compression_type(DBCompressionType::Lz4);
            options.set_block_based_table_factory(&table);
            families.push(ColumnFamilyDescriptor::new(space.name(), options));
        }
        let db = Db::open_cf_descriptors(&db_options, path, families).map_err(engine)?;
        Ok(RocksDisk { db: Arc::new(db) })
    }

    fn family(&self, space: Keyspace) -> Result<&ColumnFamily, DiskError> {
        family(&self.db, space)
    }
}

/// RocksDB's environment with its flush and compaction threads at the lowest CPU
/// priority (nice 19, set by each thread before its next job). They catch up on work an
/// apply already finished; on a node that shares its cores with its peers or a load
/// generator, at normal priority a flush or a compaction took the cores from the Raft
/// and gRPC threads in bursts, and the callers of that moment waited for it (measured on
/// a 2-core machine: the p999 of an effect at 2,000 a second fell from 68-162 ms to
/// 41-67). What a starved flush or compaction holds up in turn (RocksDB's mutex, write
/// stalls, the Raft log's appends) is in `docs/design.md`, "The ledger on disk". The
/// environment is the process's default one, so this holds for every database the
/// process opens.
fn background_env() -> Result<Env, DiskError> {
    let mut env = Env::new().map_err(engine)?;
    env.lower_thread_pool_cpu_priority();
    env.lower_high_priority_thread_pool_cpu_priority();
    Ok(env)
}

fn family(db: &Db, space: Keyspace) -> Result<&ColumnFamily, DiskError> {
    db.cf_handle(space.name())
        .ok_or_else(|| DiskError::Engine(format!("column family {space} is missing").into()))
}

/// Pairs in `[from, to)` of `space`, read with `options` (a snapshot or not).
fn range_with(
    db: &Db,
    space: Keyspace,
    mut options: ReadOptions,
    from: &[u8],
    to: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<KeyValue>, DiskError> {
    if to.is_some_and(|to| to <= from) {
        return Ok(Vec::new());
    }
    if let Some(to) = to {
        // Lets RocksDB stop at the bound instead of stepping over deleted keys past it.
        options.set_iterate_upper_bound(to.to_vec());
    }
    let mode = IteratorMode::From(from, Direction::Forward);
    let mut pairs = Vec::new();
    for item in db.iterator_cf_opt(family(db, space)?, options, mode) {
        if pairs.len() >= limit {
            break;
        }
        let (key, value) = item.map_err(engine)?;
        pairs.push((key.into_vec(), value.into_vec()));
    }
    Ok(pairs)
}

/// A RocksDB snapshot of one column family, kept with the database it reads.
struct RocksView {
    // Declared first so it is dropped before the database handle below.
    snapshot: SnapshotWithThreadMode<'static, Db>,
    db: Arc<Db>,
    space: Keyspace,
}

impl RocksView {
    fn new(db: Arc<Db>, space: Keyspace) -> RocksView {
        let snapshot = db.snapshot();
        // SAFETY: the snapshot borrows the database, which lives in the `Arc` held by
        // this same struct and is therefore alive for as long as the snapshot; fields
        // drop in declaration order, so the snapshot is released before the `Arc`.
        let snapshot = unsafe {
            std::mem::transmute::<SnapshotWithThreadMode<'_, Db>, SnapshotWithThreadMode<'static, Db>>(
                snapshot,
            )
        };
        RocksView {
            snapshot,
            db,
            space,
        }
    }
}

impl DiskView for RocksView {
    fn range(
        &self,
        from: &[u8],
        to: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, DiskError> {
        let mut options = ReadOptions::default();
        options.set_snapshot(&self.snapshot);
        // A snapshot stream reads everything once; keep it out of the block cache.
        options.fill_cache(false);
        range_with(&self.db, self.space, options, from, to, limit)
    }
}

impl Disk for RocksDisk {
    fn write(&self, batch: WriteBatch) -> Result<(), DiskError> {
        // Sized up front: RocksDB's batch is one buffer, grown by copying otherwise.
        let bytes = batch.ops().iter().map(op_bytes).sum();
        let mut rocks_batch = rocksdb::WriteBatch::with_capacity_bytes(bytes);
        for op in batch.ops() {
            match op {
                WriteOp::Put { space, key, value } => {
                    rocks_batch.put_cf(self.family(*space)?, key, value);
                }
                WriteOp::Delete { space, key } => {
                    rocks_batch.delete_cf(self.family(*space)?, key);
                }
                // RocksDB refuses a range whose start lies past its end; the trait
                // defines that case as deleting nothing.
                WriteOp::DeleteRange { space, from, to } => {
                    if from < to {
                        rocks_batch.delete_range_cf(self.family(*space)?, from, to);
                    }
                }
            }
        }
        self.db.write(rocks_batch).map_err(engine)
    }

    fn sync(&self) -> Result<(), DiskError> {
        self.db.flush_wal(true).map_err(engine)
    }

    fn get(&self, space: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, DiskError> {
        self.db.get_cf(self.family(space)?, key).map_err(engine)
    }

    fn get_many(
        &self,
        space: Keyspace,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, DiskError> {
        self.db
            .batched_multi_get_cf(self.family(space)?, keys, true)
            .into_iter()
            .map(|value| value.map(|v| v.map(|v| v.to_vec())).map_err(engine))
            .collect()
    }

    fn range(
        &self,
        space: Keyspace,
        from: &[u8],
        to: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, DiskError> {
        range_with(&self.db, space, ReadOptions::default(), from, to, limit)
    }

    fn last(&self, space: Keyspace) -> Result<Option<KeyValue>, DiskError> {
        let mut iter = self.db.iterator_cf(self.family(space)?, IteratorMode::End);
        match iter.next() {
            None => Ok(None),
            Some(item) => {
                let (key, value) = item.map_err(engine)?;
                Ok(Some((key.into_vec(), value.into_vec())))
            }
        }
    }

    fn view(&self, space: Keyspace) -> Result<Box<dyn DiskView>, DiskError> {
        family(&self.db, space)?;
        Ok(Box::new(RocksView::new(self.db.clone(), space)))
    }

    fn engine_stats(&self) -> Result<Option<EngineStats>, DiskError> {
        use rocksdb::properties as p;
        let mut keyspaces = Vec::new();
        for space in Keyspace::ALL {
            let family = Some(self.family(space)?);
            let stats = KeyspaceStats {
                memtable_bytes: property(&self.db, family, p::CUR_SIZE_ALL_MEM_TABLES)?,
                sst_bytes: property(&self.db, family, p::LIVE_SST_FILES_SIZE)?,
                level0_files: property(&self.db, family, &p::num_files_at_level(0))?,
                pending_compaction_bytes: property(
                    &self.db,
                    family,
                    p::ESTIMATE_PENDING_COMPACTION_BYTES,
                )?,
            };
            keyspaces.push((space, stats));
        }
        // The cache is the one every keyspace was opened with; the database's own
        // property would read the unused default column family's.
        let state = Some(self.family(Keyspace::State)?);
        Ok(Some(EngineStats {
            writes_stopped: property(&self.db, None, p::IS_WRITE_STOPPED)? != 0,
            delayed_write_rate: property(&self.db, None, p::ACTUAL_DELAYED_WRITE_RATE)?,
            block_cache_bytes: property(&self.db, state, p::BLOCK_CACHE_USAGE)?,
            running_flushes: property(&self.db, None, p::NUM_RUNNING_FLUSHES)?,
            running_compactions: property(&self.db, None, p::NUM_RUNNING_COMPACTIONS)?,
            keyspaces,
        }))
    }
}

/// RocksDB's integer property `name`, of `family` or of the whole database; 0 when
/// RocksDB does not keep it.
fn property(
    db: &Db,
    family: Option<&ColumnFamily>,
    name: &rocksdb::properties::PropName,
) -> Result<u64, DiskError> {
    match family {
        Some(family) => db.property_int_value_cf(family, name),
        None => db.property_int_value(name),
    }
    .map(Option::unwrap_or_default)
    .map_err(engine)
}

/// About what `op` takes in RocksDB's batch buffer: its keys and value, with a few bytes
/// for the tag, the column family and the lengths.
fn op_bytes(op: &WriteOp) -> usize {
    const FRAMING: usize = 16;
    FRAMING
        + match op {
            WriteOp::Put { key, value, .. } => key.len() + value.len(),
            WriteOp::Delete { key, .. } => key.len(),
            WriteOp::DeleteRange { from, to, .. } => from.len() + to.len(),
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The niceness of the thread whose `/proc` folder is `task`.
    fn nice(task: &std::path::Path) -> i64 {
        let stat = std::fs::read_to_string(task.join("stat")).expect("stat");
        // After the parenthesised name: state is field 3, nice field 19.
        let fields: Vec<&str> = stat[stat.rfind(')').expect("name") + 2..]
            .split(' ')
            .collect();
        fields[16].parse().expect("nice")
    }

    /// The niceness of each of this process's threads whose name starts with `prefix`.
    fn niceness(prefix: &str) -> Vec<i64> {
        let mut found = Vec::new();
        for task in std::fs::read_dir("/proc/self/task").expect("threads") {
            let path = task.expect("thread").path();
            let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            if name.starts_with(prefix) {
                found.push(nice(&path));
            }
        }
        found
    }

    fn stats_of(disk: &RocksDisk, space: Keyspace) -> KeyspaceStats {
        let stats = disk
            .engine_stats()
            .expect("stats")
            .expect("RocksDB has stats");
        let found = stats.keyspaces.iter().find(|(s, _)| *s == space);
        found.expect("every keyspace").1
    }

    #[test]
    fn engine_stats_follow_memtables_table_files_and_write_stalls() {
        let dir = tempfile::tempdir().expect("temp dir");
        let disk = RocksDisk::open(dir.path()).expect("open");
        let state = disk.family(Keyspace::State).expect("family");
        let stats = disk
            .engine_stats()
            .expect("stats")
            .expect("RocksDB has stats");
        let spaces: Vec<Keyspace> = stats.keyspaces.iter().map(|(s, _)| *s).collect();
        assert_eq!(spaces, Keyspace::ALL);
        assert!(!stats.writes_stopped);
        assert_eq!(stats.delayed_write_rate, 0);
        // Writes stall once level 0 holds 2 files (delayed) and 3 (stopped): what a
        // compaction that cannot keep up leads to, here with compaction held off until
        // level 0 has 10 files.
        disk.db
            .set_options_cf(
                state,
                &[
                    ("level0_file_num_compaction_trigger", "10"),
                    ("level0_slowdown_writes_trigger", "2"),
                    ("level0_stop_writes_trigger", "3"),
                ],
            )
            .expect("options");
        for files in 1u64..=3 {
            let mut batch = WriteBatch::new();
            for i in 0u8..100 {
                batch.put(Keyspace::State, vec![files as u8, i], vec![i; 1000]);
            }
            disk.write(batch).expect("write");
            let before = stats_of(&disk, Keyspace::State);
            assert!(before.memtable_bytes >= 100_000, "{before:?}");
            disk.db.flush_cf(state).expect("flush");
            let after = stats_of(&disk, Keyspace::State);
            assert_eq!(after.level0_files, files, "{after:?}");
            assert!(after.sst_bytes > 0, "{after:?}");
            assert!(after.memtable_bytes < before.memtable_bytes, "{after:?}");
            let stats = disk
                .engine_stats()
                .expect("stats")
                .expect("RocksDB has stats");
            assert_eq!(stats.writes_stopped, files >= 3, "{files} files: {stats:?}");
            assert_eq!(
                stats.delayed_write_rate > 0,
                files == 2,
                "{files} files: {stats:?}"
            );
        }
        // Each keyspace is its own: the log's has no file and only an empty memtable.
        let log = stats_of(&disk, Keyspace::Log);
        assert_eq!((log.sst_bytes, log.level0_files), (0, 0), "{log:?}");
        assert!(log.memtable_bytes < 100_000, "{log:?}");
    }

    #[test]
    fn flushes_and_compactions_run_at_the_lowest_cpu_priority() {
        // The pools' threads inherit the process's niceness: run at 19 already, this test
        // could not tell the change from its absence.
        let own = nice(std::path::Path::new("/proc/thread-self"));
        assert!(own < 19, "run the tests below niceness 19 (now {own})");
        let dir = tempfile::tempdir().expect("temp dir");
        let disk = RocksDisk::open(dir.path()).expect("open");
        let state = disk.family(Keyspace::State).expect("family");
        for round in 0u8..2 {
            let mut batch = WriteBatch::new();
            for i in 0u8..100 {
                batch.put(Keyspace::State, vec![round, i], vec![i; 64]);
            }
            disk.write(batch).expect("write");
            // A flush runs on the high-priority pool, a compaction on the low one; each
            // thread takes its priority before the job, and these calls wait for theirs.
            disk.db.flush_cf(state).expect("flush");
        }
        disk.db
            .compact_range_cf(state, None::<&[u8]>, None::<&[u8]>);
        for pool in ["rocksdb:high", "rocksdb:low"] {
            let nice = niceness(pool);
            assert!(nice.contains(&19), "{pool} threads' niceness: {nice:?}");
        }
    }
}
