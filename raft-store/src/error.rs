//! Why a storage operation failed, and how that reaches openraft.
//!
//! openraft's storage traits speak `std::io::Error`. Our code builds a typed
//! [`StoreError`] and converts it at the trait boundary; the kind says whether the stored
//! bytes are bad (`InvalidData`) or the disk failed (`Other`).

use std::io;

use crate::disk::DiskError;

/// A Raft storage operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The disk failed.
    #[error(transparent)]
    Disk(#[from] DiskError),
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
    /// Snapshot bytes decode but describe an impossible ledger.
    #[error("snapshot refused: {0}")]
    SnapshotRefused(ledger_core::snapshot::SnapshotError),
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

impl From<StoreError> for io::Error {
    fn from(error: StoreError) -> io::Error {
        let kind = match &error {
            StoreError::Decode { .. }
            | StoreError::SnapshotRefused(_)
            | StoreError::Inconsistent(_)
            | StoreError::Damaged(_) => io::ErrorKind::InvalidData,
            StoreError::Disk(_) | StoreError::Encode { .. } | StoreError::Poisoned => {
                io::ErrorKind::Other
            }
        };
        io::Error::new(kind, error)
    }
}
