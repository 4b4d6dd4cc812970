//! Why a storage operation failed, and how that reaches openraft.
//!
//! openraft's storage traits speak `std::io::Error`. Our code builds a typed
//! [`StoreError`] and converts it at the trait boundary; the kind says whether the stored
//! bytes are bad (`InvalidData`) or the disk failed (`Other`).

use std::fmt;
use std::io;

use crate::disk::{DiskError, Keyspace};

/// A Raft storage operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The disk failed.
    #[error(transparent)]
    Disk(#[from] DiskError),
    /// A stored value fails its checksum: it was cut short, garbled or had a bit flipped.
    /// It is never served.
    #[error("stored {what}{} is corrupt: {damage}", location.as_ref().map(|l| format!(" at {l}")).unwrap_or_default())]
    Corrupt {
        /// What was being read.
        what: &'static str,
        /// Where it is stored, when the reader knows.
        location: Option<Location>,
        /// How the damage showed.
        damage: Damage,
    },
    /// Stored bytes do not decode as any known version of what they should hold.
    #[error("stored {what} does not decode: {cause}")]
    Decode {
        /// What was being read.
        what: &'static str,
        /// The decoder's complaint.
        cause: bincode::error::DecodeError,
    },
    /// A value could not be encoded.
    #[error("{what} does not encode: {cause}")]
    Encode {
        /// What was being written.
        what: &'static str,
        /// The encoder's complaint.
        cause: bincode::error::EncodeError,
    },
    /// The disk holds data in a storage format this build does not read.
    #[error(
        "the disk holds data in storage format {}, this build reads format {supported} only; \
         wipe the data directory and add the node back to the cluster",
        found.map_or_else(|| "1 (unversioned, without checksums)".to_string(), |v| v.to_string())
    )]
    UnsupportedFormat {
        /// The format found; `None` for data written before formats were recorded.
        found: Option<u32>,
        /// The format this build reads and writes.
        supported: u32,
    },
    /// Snapshot bytes decode but describe an impossible ledger.
    #[error("snapshot refused: {0}")]
    SnapshotRefused(ledger_core::snapshot::SnapshotError),
    /// A snapshot stream cannot be received now: another is received into the standby
    /// generation, or was received whole and waits to be installed, or a later one took
    /// this one over. Nothing stored is wrong; the sender tries again later.
    #[error("snapshot stream not taken: {0}")]
    SnapshotBusy(&'static str),
    /// Stored records contradict each other or what openraft asked for.
    #[error("stored data is inconsistent: {0}")]
    Inconsistent(String),
    /// The ledger's tables could not be read (an engine error or a damaged value); the
    /// node serves nothing more from them.
    #[error("ledger state damaged: {0}")]
    Damaged(String),
    /// An earlier apply panicked while holding the state; the state cannot be trusted.
    #[error("ledger state poisoned by a panic during apply")]
    Poisoned,
}

impl StoreError {
    /// Names where a [`StoreError::Corrupt`] value is stored; other errors are unchanged.
    pub(crate) fn at(self, space: Keyspace, key: &[u8]) -> StoreError {
        match self {
            StoreError::Corrupt {
                what,
                location: None,
                damage,
            } => StoreError::Corrupt {
                what,
                location: Some(Location {
                    space,
                    key: key.to_vec(),
                }),
                damage,
            },
            other => other,
        }
    }

    /// Whether the stored data itself is damaged or unreadable (as opposed to a failing
    /// disk or a bug): a node whose disk says so must not serve from it, and the way
    /// back is to wipe it and add it back to the cluster.
    pub fn is_damaged_data(&self) -> bool {
        matches!(
            self,
            StoreError::Corrupt { .. }
                | StoreError::Decode { .. }
                | StoreError::UnsupportedFormat { .. }
                | StoreError::SnapshotRefused(_)
                | StoreError::Inconsistent(_)
        )
    }
}

/// Where a damaged value is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// Its keyspace.
    pub space: Keyspace,
    /// Its key.
    pub key: Vec<u8>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "keyspace {}, key ", self.space)?;
        // Log keys are big-endian indexes; the others are short ASCII names.
        match <[u8; 8]>::try_from(&self.key[..]) {
            Ok(index) if self.space == Keyspace::Log => {
                write!(f, "{} (log index)", u64::from_be_bytes(index))
            }
            _ => match std::str::from_utf8(&self.key) {
                Ok(name) if name.chars().all(|c| c.is_ascii_graphic()) => {
                    write!(f, "{name:?}")
                }
                _ => write!(f, "{:02x?}", self.key),
            },
        }
    }
}

/// How a damaged stored value showed its damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// Shorter than a checksum.
    TooShort {
        /// Its length in bytes.
        len: usize,
    },
    /// The checksum it carries is not the checksum of its bytes.
    Checksum {
        /// The checksum stored with the value.
        stored: u32,
        /// The checksum of the bytes as read.
        computed: u32,
    },
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Damage::TooShort { len } => write!(f, "{len} bytes, too short to hold a checksum"),
            Damage::Checksum { stored, computed } => write!(
                f,
                "checksum mismatch (stored {stored:08x}, computed {computed:08x})"
            ),
        }
    }
}

impl From<StoreError> for io::Error {
    fn from(error: StoreError) -> io::Error {
        let kind = match &error {
            StoreError::Corrupt { .. }
            | StoreError::Decode { .. }
            | StoreError::UnsupportedFormat { .. }
            | StoreError::SnapshotRefused(_)
            | StoreError::Inconsistent(_)
            | StoreError::Damaged(_) => io::ErrorKind::InvalidData,
            StoreError::Disk(_)
            | StoreError::Encode { .. }
            | StoreError::Poisoned
            | StoreError::SnapshotBusy(_) => io::ErrorKind::Other,
        };
        io::Error::new(kind, error)
    }
}
