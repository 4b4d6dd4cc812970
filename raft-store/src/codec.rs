//! How records are turned into bytes on disk.
//!
//! Every stored record is bincode 2 (serde, standard configuration) of an enum with one
//! variant per format version, so a later format adds a variant and old disks stay
//! readable. Decoding never panics: garbage gives [`StoreError::Decode`], and bytes left
//! over after a complete record count as garbage too.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::StoreError;

/// Largest record accepted when decoding: the ledger's own snapshot limit, since a
/// stored snapshot wraps a ledger snapshot.
pub(crate) const STORED_BYTES_MAX: usize = ledger_core::snapshot::SNAPSHOT_BYTES_MAX;

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<STORED_BYTES_MAX>()
}

/// Encodes `value`; `what` names it in errors.
pub(crate) fn encode<T: Serialize>(value: &T, what: &'static str) -> Result<Vec<u8>, StoreError> {
    bincode::serde::encode_to_vec(value, config())
        .map_err(|cause| StoreError::Encode { what, cause })
}

/// Decodes a whole `T` from `bytes`; `what` names it in errors.
pub(crate) fn decode<T: DeserializeOwned>(
    bytes: &[u8],
    what: &'static str,
) -> Result<T, StoreError> {
    let (value, read) = bincode::serde::decode_from_slice(bytes, config())
        .map_err(|cause| StoreError::Decode { what, cause })?;
    if read != bytes.len() {
        return Err(StoreError::Inconsistent(format!(
            "{} trailing bytes after stored {what}",
            bytes.len() - read
        )));
    }
    Ok(value)
}
