//! The simulated disk: in memory, with the durability of a write-ahead log.
//!
//! A real disk may lose anything written since the last fsync when the power goes, but
//! it loses a suffix, never a hole: a WAL replays records in the order they were
//! written and stops at the first torn one. `SimDisk` models exactly that. It keeps the
//! durable state and, apart from it, the batches written since the last sync; reads see
//! both. [`SimDisk::power_fail`] keeps the durable state plus a prefix of the unsynced
//! batches whose length a seed decides, so a simulated run stays reproducible.
//!
//! Two harsher faults, as LazyFS injects them for Jepsen, are there for storage code to
//! survive rather than assume away:
//! - a torn write: [`SimDisk::power_fail_torn`] also lets the first lost batch land
//!   partly, a prefix of its operations in order, the last value kept possibly cut short
//!   or garbled (a file system without a write-ahead log tears a write this way);
//! - a bit flip in synced data: [`SimDisk::flip_bit`] at a chosen value, or
//!   [`SimDisk::flip_random_bit`] in a value drawn from a seed (media decay, a misdirected
//!   write).
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

impl State {
    /// Rebuilds what reads see after the durable state changed under the unsynced
    /// batches.
    fn refresh_visible(&mut self) {
        let mut visible = self.durable.clone();
        for batch in &self.unsynced {
            visible.apply(batch);
        }
        self.visible = visible;
    }
}

/// What a simulated power failure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerFailure {
    /// Unsynced batches that reached the disk anyway (the oldest ones).
    pub batches_kept: usize,
    /// Unsynced batches lost.
    pub batches_lost: usize,
    /// The first lost batch, when it landed partly anyway.
    pub torn: Option<TornWrite>,
}

/// What reached the disk of a batch torn by a power failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornWrite {
    /// Operations of the batch that reached the disk (the first ones).
    pub ops_kept: usize,
    /// Operations in the batch.
    pub ops: usize,
    /// What happened to the last value kept, if the last operation kept is a put.
    pub last_value: TornValue,
}

/// The last value a torn write kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TornValue {
    /// Whole (or no put was kept).
    Whole,
    /// Cut to its first `len` bytes.
    Cut {
        /// Bytes kept.
        len: usize,
    },
    /// One byte overwritten with garbage.
    Garbled {
        /// Which byte.
        at: usize,
    },
}

/// A bit flipped in a stored value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitFlip {
    /// The value's keyspace.
    pub space: Keyspace,
    /// The value's key.
    pub key: Vec<u8>,
    /// The bit flipped, counted from the first byte's lowest bit.
    pub bit: usize,
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
            torn: None,
        })
    }

    /// Cuts the power like [`SimDisk::power_fail`], except that the first batch lost may
    /// land partly: a prefix of its operations, the last value kept possibly cut short or
    /// with one byte garbled. All drawn from `seed`. Synced data is never touched, and
    /// neither are batches of the ledger's state (see [`tearable`]).
    pub fn power_fail_torn(&self, seed: u64) -> Result<PowerFailure, DiskError> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut state = self.lock()?;
        let unsynced = std::mem::take(&mut state.unsynced);
        let batches_kept = rng.random_range(0..=unsynced.len());
        for batch in &unsynced[..batches_kept] {
            state.durable.apply(batch);
        }
        let torn = unsynced
            .get(batches_kept)
            .filter(|b| tearable(b))
            .map(|batch| {
                let ops = batch.ops();
                let ops_kept = rng.random_range(0..=ops.len());
                let mut kept = ops[..ops_kept].to_vec();
                let last_value = match kept.last_mut() {
                    Some(WriteOp::Put { value, .. }) if !value.is_empty() => {
                        match rng.random_range(0..3) {
                            0 => TornValue::Whole,
                            1 => {
                                let len = rng.random_range(0..value.len());
                                value.truncate(len);
                                TornValue::Cut { len }
                            }
                            _ => {
                                let at = rng.random_range(0..value.len());
                                // Never the same byte again: a garbled byte differs.
                                value[at] ^= rng.random_range(1..=u8::MAX);
                                TornValue::Garbled { at }
                            }
                        }
                    }
                    _ => TornValue::Whole,
                };
                state.durable.apply(&WriteBatch { ops: kept });
                TornWrite {
                    ops_kept,
                    ops: ops.len(),
                    last_value,
                }
            });
        state.visible = state.durable.clone();
        Ok(PowerFailure {
            batches_kept,
            batches_lost: unsynced.len() - batches_kept,
            torn,
        })
    }

    /// Flips bit `bit` (counted from the first byte's lowest bit, modulo the value's
    /// length) of the synced value under `key`. Returns what was flipped, or `None` when
    /// no synced non-empty value is there. Unsynced writes over the key stay visible.
    pub fn flip_bit(
        &self,
        space: Keyspace,
        key: &[u8],
        bit: usize,
    ) -> Result<Option<BitFlip>, DiskError> {
        let mut state = self.lock()?;
        let Some(value) = state.durable.map_mut(space).get_mut(key) else {
            return Ok(None);
        };
        if value.is_empty() {
            return Ok(None);
        }
        let bit = bit % (value.len() * 8);
        value[bit / 8] ^= 1 << (bit % 8);
        state.refresh_visible();
        Ok(Some(BitFlip {
            space,
            key: key.to_vec(),
            bit,
        }))
    }

    /// Flips one bit of a synced value drawn from `seed`: in `space`, or in any keyspace
    /// when `None`. Returns what was flipped, or `None` when there is no synced non-empty
    /// value to flip.
    pub fn flip_random_bit(
        &self,
        seed: u64,
        space: Option<Keyspace>,
    ) -> Result<Option<BitFlip>, DiskError> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let candidates: Vec<(Keyspace, Vec<u8>, usize)> = {
            let state = self.lock()?;
            Keyspace::ALL
                .into_iter()
                .filter(|s| space.is_none_or(|wanted| wanted == *s))
                .flat_map(|s| {
                    state
                        .durable
                        .map(s)
                        .iter()
                        .filter(|(_, value)| !value.is_empty())
                        .map(move |(key, value)| (s, key.clone(), value.len()))
                })
                .collect()
        };
        if candidates.is_empty() {
            return Ok(None);
        }
        let (space, key, len) = &candidates[rng.random_range(0..candidates.len())];
        let bit = rng.random_range(0..len * 8);
        self.flip_bit(*space, key, bit)
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

/// Whether a power failure may tear `batch`. The ledger's state machine commits each
/// entry as one batch and relies on the disk keeping a batch whole or not at all, which
/// RocksDB's write-ahead log gives (a record torn at its tail fails its checksum and is
/// dropped whole at recovery). The Raft log store checks its own tail instead, so its
/// batches are torn here to prove it.
fn tearable(batch: &WriteBatch) -> bool {
    batch.ops().iter().all(|op| {
        let space = match op {
            WriteOp::Put { space, .. }
            | WriteOp::Delete { space, .. }
            | WriteOp::DeleteRange { space, .. } => space,
        };
        *space != Keyspace::State
    })
}
