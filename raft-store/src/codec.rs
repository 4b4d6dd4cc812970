//! How records are turned into bytes on disk, and how damage to them is caught.
//!
//! Every stored record is bincode 2 (serde, standard configuration) of an enum with one
//! variant per format version, so a later format adds a variant and old disks stay
//! readable, followed by a CRC-32C of those bytes (4 bytes, little-endian). Decoding
//! checks the checksum first: a value cut short, garbled by a torn write or hit by a bit
//! flip gives [`StoreError::Corrupt`], never a misread record. Decoding never panics:
//! bytes with a good checksum that still do not decode give [`StoreError::Decode`], and
//! bytes left over after a complete record count as garbage too.
//!
//! The checksum covers the value only. Keys are checked by the records themselves where
//! it matters (a log entry knows its own index).

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Damage, StoreError};

/// Largest record accepted when decoding: the ledger's own snapshot limit, since a
/// stored snapshot wraps a ledger snapshot.
pub(crate) const STORED_BYTES_MAX: usize = ledger_core::snapshot::SNAPSHOT_BYTES_MAX;

/// Length of the checksum that ends every stored value.
const CHECKSUM_BYTES: usize = 4;

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<STORED_BYTES_MAX>()
}

/// Encodes `value` and appends its checksum; `what` names it in errors.
pub(crate) fn encode<T: Serialize>(value: &T, what: &'static str) -> Result<Vec<u8>, StoreError> {
    let mut bytes = bincode::serde::encode_to_vec(value, config())
        .map_err(|cause| StoreError::Encode { what, cause })?;
    let checksum = crc32c(&bytes);
    bytes.extend_from_slice(&checksum.to_le_bytes());
    Ok(bytes)
}

/// Checks the checksum of `bytes` and decodes a whole `T` from what it covers; `what`
/// names it in errors.
pub(crate) fn decode<T: DeserializeOwned>(
    bytes: &[u8],
    what: &'static str,
) -> Result<T, StoreError> {
    let record = verified(bytes).map_err(|damage| StoreError::Corrupt {
        what,
        location: None,
        damage,
    })?;
    let (value, read) = bincode::serde::decode_from_slice(record, config())
        .map_err(|cause| StoreError::Decode { what, cause })?;
    if read != record.len() {
        return Err(StoreError::Inconsistent(format!(
            "{} trailing bytes after stored {what}",
            record.len() - read
        )));
    }
    Ok(value)
}

/// Appends the checksum to raw `bytes` (values the ledger encodes itself).
pub(crate) fn seal(mut bytes: Vec<u8>) -> Vec<u8> {
    let checksum = crc32c(&bytes);
    bytes.extend_from_slice(&checksum.to_le_bytes());
    bytes
}

/// The bytes [`seal`] was given, if the checksum matches.
pub(crate) fn unseal(bytes: &[u8]) -> Result<&[u8], Damage> {
    verified(bytes)
}

/// The record `bytes` carry, if their checksum matches it.
fn verified(bytes: &[u8]) -> Result<&[u8], Damage> {
    let Some(split) = bytes.len().checked_sub(CHECKSUM_BYTES) else {
        return Err(Damage::TooShort { len: bytes.len() });
    };
    let (record, tail) = bytes.split_at(split);
    let mut stored = [0u8; CHECKSUM_BYTES];
    stored.copy_from_slice(tail);
    let stored = u32::from_le_bytes(stored);
    let computed = crc32c(record);
    if stored == computed {
        Ok(record)
    } else {
        Err(Damage::Checksum { stored, computed })
    }
}

/// CRC-32C (Castagnoli, reflected polynomial `0x82F63B78`), the checksum of iSCSI, ext4
/// and RocksDB: it catches every burst up to 32 bits, so every single bit flip.
/// Every value read or written is checked, so this is on the apply path of every command:
/// the CPU's CRC32 instruction does it where there is one (SSE 4.2, checked at run time,
/// once), eight bytes a step; elsewhere a table does it a byte a step.
fn crc32c(bytes: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE 4.2, as just checked.
        return !unsafe { crc32c_sse42(!0, bytes) };
    }
    !crc32c_bytewise(!0, bytes)
}

/// The CRC-32C register after `bytes`, from `crc`, a byte a step; built at compile time.
fn crc32c_bytewise(mut crc: u32, bytes: &[u8]) -> u32 {
    for &byte in bytes {
        crc = CRC32C_TABLE[((crc ^ u32::from(byte)) & 0xFF) as usize] ^ (crc >> 8);
    }
    crc
}

/// The CRC-32C register after `bytes`, from `crc`, by the SSE 4.2 CRC32 instruction (the
/// same polynomial and bit order as the table).
///
/// # Safety
///
/// The CPU must have SSE 4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_sse42(crc: u32, bytes: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut words = bytes.chunks_exact(8);
    let mut wide = u64::from(crc);
    for word in &mut words {
        let word: [u8; 8] = word.try_into().expect("chunks of eight bytes");
        wide = _mm_crc32_u64(wide, u64::from_le_bytes(word));
    }
    // The instruction leaves the 32-bit register in the low half.
    let mut crc = wide as u32;
    for &byte in words.remainder() {
        crc = _mm_crc32_u8(crc, byte);
    }
    crc
}

const CRC32C_TABLE: [u32; 256] = crc32c_table();

const fn crc32c_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        // The check value of CRC-32C over the nine ASCII digits (RFC 3720, appendix B.4).
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn the_crc32_instruction_and_the_table_agree() {
        let bytes: Vec<u8> = (0u32..300)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        // Every length, and starts off an eight-byte boundary, so both the wide steps and
        // the byte steps of the tail are compared.
        for start in 0..9 {
            for end in start..bytes.len() {
                let part = &bytes[start..end];
                let table = !crc32c_bytewise(!0, part);
                // `crc32c` takes the instruction wherever the CPU has it.
                assert_eq!(crc32c(part), table, "bytes {start}..{end}");
            }
        }
    }

    #[test]
    fn every_single_bit_flip_is_caught_and_named() {
        let bytes = encode(&(42u64, "effect".to_string()), "test record").expect("encodes");
        let back: (u64, String) = decode(&bytes, "test record").expect("decodes");
        assert_eq!(back, (42, "effect".to_string()));
        for bit in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let error = decode::<(u64, String)>(&flipped, "test record")
                .expect_err("a flipped bit is caught");
            assert!(
                matches!(
                    error,
                    StoreError::Corrupt {
                        what: "test record",
                        ..
                    }
                ),
                "bit {bit}: {error}"
            );
        }
    }

    #[test]
    fn every_cut_is_caught() {
        let bytes = encode(&vec![7u8; 40], "test record").expect("encodes");
        for len in 0..bytes.len() {
            let error =
                decode::<Vec<u8>>(&bytes[..len], "test record").expect_err("a cut value is caught");
            assert!(
                matches!(error, StoreError::Corrupt { .. }),
                "{len}: {error}"
            );
        }
    }
}
