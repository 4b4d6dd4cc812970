//! The simulated disk: in memory, with the durability of a write-ahead log.
//!
//! A real disk may lose anything written since the last fsync when the power goes, but
//! it loses a suffix, never a hole: a WAL replays records in the order they were
//! written and stops at the first torn one. `SimDisk` models exactly that. It keeps the
//! durable state and, apart from it, the batches written since the last sync; reads see
//! both. [`SimDisk::power_fail`] keeps the durable state plus a prefix of the unsynced
//! batches whose length a seed decides, so a simulated run stays reproducible.
//!
//! A process crash (madsim `kill`) loses nothing written: the harness keeps the `SimDisk`
//! outside the simulated node, in an `Arc`, and the restarted node opens it again.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use super::{Disk, DiskError, DiskView, KeyValue, Keyspace, WriteBatch, WriteOp};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Debug, Clone, Default)]
struct Spaces([Map; Keyspace::ALL.len()]);

impl Spaces {
    fn map(&self, space: Keyspace) -> &Map {
        &self.0[space.position()]
    }

    fn map_mut(&mut self, space: Keyspace) -> &mut Map {
        &mut self.0[space.position()]
    }

    fn apply(&mut self, batch: &WriteBatch) {
        for op in batch.ops() {
            match op {
                WriteOp::Put { space, key, value } => {
                    self.map_mut(*space).insert(key.clone(), value.clone());
                }
                WriteOp::Delete { space, key } => {
                    self.map_mut(*space).remove(key);
                }
                WriteOp::DeleteRange { space, from, to } => {
                    if from < to {
                        remove_range(self.map_mut(*space), from, to);
                    }
                }
            }
        }
    }
}

/// Removes `[from, to)` in time proportional to what is removed, not to the map.
fn remove_range(map: &mut Map, from: &[u8], to: &[u8]) {
    let mut tail = map.split_off(from);
    let mut kept = tail.split_off(to);
    map.append(&mut kept);
}

#[derive(Debug, Default)]
struct State {
    durable: Spaces,
    visible: Spaces,
    unsynced: Vec<WriteBatch>,
}

/// What a simulated power failure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerFailure {
    /// Unsynced batches that reached the disk anyway (the oldest ones).
    pub batches_kept: usize,
    /// Unsynced batches lost.
    pub batches_lost: usize,
}

/// An in-memory [`Disk`] that loses unsynced writes on a simulated power failure.
#[derive(Debug, Default)]
pub struct SimDisk {
    state: Mutex<State>,
}

impl SimDisk {
    /// An empty disk.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cuts the power: keeps the durable state and the oldest `k` unsynced batches, with
    /// `k` drawn from `seed`, and drops the rest. Reads afterwards see only what was kept,
    /// as a reopened disk would.
    pub fn power_fail(&self, seed: u64) -> Result<PowerFailure, DiskError> {
        let mut state = self.lock()?;
        let unsynced = std::mem::take(&mut state.unsynced);
        let batches_kept = SmallRng::seed_from_u64(seed).random_range(0..=unsynced.len());
        for batch in &unsynced[..batches_kept] {
            state.durable.apply(batch);
        }
        state.visible = state.durable.clone();
        Ok(PowerFailure {
            batches_kept,
            batches_lost: unsynced.len() - batches_kept,
        })
    }

    /// Batches written since the last sync.
    pub fn unsynced_batches(&self) -> Result<usize, DiskError> {
        Ok(self.lock()?.unsynced.len())
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>, DiskError> {
        self.state.lock().map_err(|_| DiskError::Poisoned)
    }
}

impl Disk for SimDisk {
    fn write(&self, batch: WriteBatch) -> Result<(), DiskError> {
        let mut state = self.lock()?;
        state.visible.apply(&batch);
        state.unsynced.push(batch);
        Ok(())
    }

    fn sync(&self) -> Result<(), DiskError> {
        let mut state = self.lock()?;
        let State {
            durable, unsynced, ..
        } = &mut *state;
        for batch in unsynced.drain(..) {
            durable.apply(&batch);
        }
        Ok(())
    }

    fn get(&self, space: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, DiskError> {
        Ok(self.lock()?.visible.map(space).get(key).cloned())
    }

    fn range(
        &self,
        space: Keyspace,
        from: &[u8],
        to: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, DiskError> {
        let state = self.lock()?;
        Ok(range(state.visible.map(space), from, to, limit))
    }

    fn last(&self, space: Keyspace) -> Result<Option<KeyValue>, DiskError> {
        let state = self.lock()?;
        Ok(state
            .visible
            .map(space)
            .last_key_value()
            .map(|(k, v)| (k.clone(), v.clone())))
    }

    fn view(&self, space: Keyspace) -> Result<Box<dyn DiskView>, DiskError> {
        let map = self.lock()?.visible.map(space).clone();
        Ok(Box::new(SimView(map)))
    }
}

/// A copy of one keyspace.
struct SimView(Map);

impl DiskView for SimView {
    fn range(
        &self,
        from: &[u8],
        to: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, DiskError> {
        Ok(range(&self.0, from, to, limit))
    }
}

fn range(map: &Map, from: &[u8], to: Option<&[u8]>, limit: usize) -> Vec<KeyValue> {
    if to.is_some_and(|to| to <= from) {
        return Vec::new();
    }
    let upper = to.map_or(Bound::Unbounded, Bound::Excluded);
    map.range::<[u8], _>((Bound::Included(from), upper))
        .take(limit)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}
