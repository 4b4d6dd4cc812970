//! Snapshots: the whole ledger as deterministic bytes, and back.
//!
//! The encoding is bincode 2 (standard configuration) of ordered maps, so one state has
//! exactly one encoding and replicas can compare snapshots byte for byte. The state is
//! wrapped in a versioned enum: a future format adds a variant and a migration, and old
//! snapshots stay readable. Indexes are not stored; they are rebuilt on restore, and every
//! record's invariants are checked before the snapshot is accepted.

use serde::{Deserialize, Serialize};

use crate::index::{Entries, Indexes};
use crate::ledger::{Ledger, State};

/// Largest snapshot accepted when decoding, so corrupt length fields cannot make the
/// decoder allocate without bound.
pub const SNAPSHOT_BYTES_MAX: usize = 1 << 34;

#[derive(Serialize)]
enum SnapshotRef<'a> {
    V1(&'a State),
}

#[derive(Deserialize)]
enum SnapshotOwned {
    V1(State),
}

/// Why snapshot bytes were refused.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The bytes do not decode as any known snapshot version.
    #[error("snapshot does not decode: {0}")]
    Decode(#[from] bincode::error::DecodeError),
    /// The bytes decode but describe an impossible ledger.
    #[error("snapshot is inconsistent: {0}")]
    Inconsistent(String),
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<SNAPSHOT_BYTES_MAX>()
}

impl Ledger {
    /// The whole state as bytes; equal ledgers give equal bytes.
    pub fn to_snapshot(&self) -> Vec<u8> {
        bincode::serde::encode_to_vec(SnapshotRef::V1(&self.state), config())
            .expect("encoding the ledger into memory cannot fail")
    }

    /// Restores a ledger from [`Ledger::to_snapshot`] bytes.
    pub fn from_snapshot(bytes: &[u8]) -> Result<Ledger, SnapshotError> {
        let (decoded, read): (SnapshotOwned, usize) =
            bincode::serde::decode_from_slice(bytes, config())?;
        if read != bytes.len() {
            return Err(SnapshotError::Inconsistent(format!(
                "{} trailing bytes",
                bytes.len() - read
            )));
        }
        let SnapshotOwned::V1(state) = decoded;
        let mut index = Indexes::default();
        for (key, rec) in &state.effects {
            if *key != rec.key {
                return Err(SnapshotError::Inconsistent(format!(
                    "record {} under key {key}",
                    rec.key
                )));
            }
            rec.check_invariants()
                .map_err(SnapshotError::Inconsistent)?;
            if rec
                .latest_token()
                .is_some_and(|t| t >= state.next_fencing_token)
            {
                return Err(SnapshotError::Inconsistent(format!(
                    "{key}: token at or past next_fencing_token"
                )));
            }
            index.replace(key, None, Some(&Entries::of(rec)));
        }
        for ((caller, id), entry) in &state.commands {
            index
                .command_expiry
                .insert((entry.expires_at_ms, caller.clone(), id.clone()));
        }
        Ok(Ledger { state, index })
    }
}
