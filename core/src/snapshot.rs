//! Snapshots: the primary tables as one deterministic stream of entries, and back.
//!
//! A snapshot is a header (`LSN` and a format byte) followed by one frame per entry of
//! the primary tables ([`Table::PRIMARY`]), tables in that order and keys ascending:
//! `table id (1 byte) | key length (u32 BE) | key | value length (u32 BE) | value`, and
//! an end frame: `0xFF | SHA-256 of every byte before it`. A stream cut short at a frame
//! boundary (a sender that stopped at a read error, a backup file copied in part) has no
//! end frame and is refused, as is one whose bytes changed on the way. One
//! state has exactly one stream, so replicas can compare snapshots, or their digests,
//! byte for byte. Derived tables (indexes, counts, usage) are not carried: a [`Restore`]
//! rebuilds them through the same writes the transitions make, after checking every
//! entry: order, that keys and values decode, record invariants, fencing tokens below
//! the next one to hand out, no tombstone next to a record.
//!
//! The stream can be produced and consumed in pieces ([`Ledger::visit_snapshot`],
//! [`Frames`], [`Restore::push`]), so a large ledger is never one buffer.

use sha2::{Digest, Sha256};

use crate::command::Caller;
use crate::index;
use crate::key::EffectKey;
use crate::keycode::{self, Reader};
use crate::ledger::{command_expiry_key, CommandEntry, Ledger, CLOCK_KEY, TOKEN_KEY};
use crate::record::EffectRecord;
use crate::store::{decode_value, MemStore, Store, StoreExt, Table};
use crate::tenants::TenantConfig;
use crate::tombstone::Tombstone;

/// Largest snapshot accepted by [`Ledger::from_snapshot`], which holds it in one buffer.
pub const SNAPSHOT_BYTES_MAX: usize = 1 << 34;

/// Largest key or value in a frame: larger lengths are corrupt.
pub const FRAME_FIELD_BYTES_MAX: usize = 64 << 20;

/// The header every snapshot stream starts with (format 4: with an end frame).
pub const HEADER: [u8; 4] = [b'L', b'S', b'N', 4];

/// The first byte of the end frame; no table has this id.
const END_FRAME: u8 = 0xFF;

/// Bytes of the end frame.
const END_FRAME_BYTES: usize = 1 + 32;

/// Why snapshot bytes were refused.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The bytes are not a snapshot stream of this format.
    #[error("snapshot does not decode: {0}")]
    Decode(String),
    /// The bytes decode but describe an impossible ledger.
    #[error("snapshot is inconsistent: {0}")]
    Inconsistent(String),
}

/// Appends one frame.
fn put_frame(out: &mut Vec<u8>, table: Table, key: &[u8], value: &[u8]) {
    out.push(table.id());
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&(value.len() as u32).to_be_bytes());
    out.extend_from_slice(value);
}

/// Writes a stream in order, into buffers of the caller's choosing: the header, one frame
/// per entry, then the end frame with the SHA-256 of everything written before it.
#[derive(Debug, Clone)]
pub struct StreamWriter {
    hasher: Sha256,
}

impl StreamWriter {
    /// Appends the header to `out`.
    pub fn start(out: &mut Vec<u8>) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(HEADER);
        out.extend_from_slice(&HEADER);
        StreamWriter { hasher }
    }

    /// Appends the frame of one entry to `out`.
    pub fn frame(&mut self, out: &mut Vec<u8>, table: Table, key: &[u8], value: &[u8]) {
        let from = out.len();
        put_frame(out, table, key, value);
        self.hasher.update(&out[from..]);
    }

    /// Appends the end frame to `out`; returns the SHA-256 of the whole stream, end frame
    /// included ([`Ledger::state_digest`]).
    pub fn end(self, out: &mut Vec<u8>) -> [u8; 32] {
        let mut hasher = self.hasher;
        let before: [u8; 32] = hasher.clone().finalize().into();
        let from = out.len();
        out.push(END_FRAME);
        out.extend_from_slice(&before);
        hasher.update(&out[from..]);
        hasher.finalize().into()
    }
}

/// One entry read from a stream.
pub type Frame = (Table, Vec<u8>, Vec<u8>);

/// Reads frames from a stream that arrives in pieces: [`Frames::next_frame`] takes whole
/// frames from the front of its buffer and leaves a partial one for the next piece.
#[derive(Debug, Default)]
pub struct Frames {
    buffer: Vec<u8>,
    /// Where the unread part of `buffer` starts.
    at: usize,
    header_seen: bool,
    /// SHA-256 of the bytes read so far, to check the end frame against.
    hasher: Sha256,
    /// The end frame was read and matched.
    ended: bool,
}

impl Frames {
    /// A reader expecting the header first.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends the next piece of the stream.
    pub fn extend(&mut self, piece: &[u8]) {
        self.buffer.drain(..self.at);
        self.at = 0;
        self.buffer.extend_from_slice(piece);
    }

    /// The next whole frame, `Ok(None)` when the buffer holds none yet or the stream has
    /// ended. An error for bytes that are not a stream of this format, an end frame that
    /// does not match what came before it, or anything after the end frame.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, SnapshotError> {
        let unread = &self.buffer[self.at..];
        if self.ended {
            if unread.is_empty() {
                return Ok(None);
            }
            return Err(SnapshotError::Decode(format!(
                "{} bytes after the end frame",
                unread.len()
            )));
        }
        if !self.header_seen {
            if unread.len() < HEADER.len() {
                return Ok(None);
            }
            if unread[..HEADER.len()] != HEADER {
                return Err(SnapshotError::Decode(format!(
                    "header {:?} is not {HEADER:?}",
                    &unread[..HEADER.len()]
                )));
            }
            self.hasher.update(HEADER);
            self.at += HEADER.len();
            self.header_seen = true;
        }
        let unread = &self.buffer[self.at..];
        if unread.first() == Some(&END_FRAME) {
            if unread.len() < END_FRAME_BYTES {
                return Ok(None);
            }
            let read: [u8; 32] = self.hasher.clone().finalize().into();
            if unread[1..END_FRAME_BYTES] != read {
                return Err(SnapshotError::Decode(
                    "the end frame's SHA-256 does not match the stream: bytes changed on the way"
                        .into(),
                ));
            }
            self.at += END_FRAME_BYTES;
            self.ended = true;
            return self.next_frame();
        }
        let Some((frame, used)) = parse_frame(unread)? else {
            return Ok(None);
        };
        self.hasher.update(&unread[..used]);
        self.at += used;
        Ok(Some(frame))
    }

    /// Checks that the stream ended with its end frame.
    pub fn finish(&self) -> Result<(), SnapshotError> {
        if !self.header_seen {
            return Err(SnapshotError::Decode("no header".into()));
        }
        if !self.ended {
            return Err(SnapshotError::Decode(format!(
                "the stream ends without its end frame ({} bytes of a partial frame): cut short",
                self.buffer.len() - self.at
            )));
        }
        Ok(())
    }
}

/// A frame at the start of `bytes`, with how many bytes it took; `None` if incomplete.
fn parse_frame(bytes: &[u8]) -> Result<Option<(Frame, usize)>, SnapshotError> {
    let Some((&id, rest)) = bytes.split_first() else {
        return Ok(None);
    };
    let table = Table::from_id(id)
        .filter(|t| t.is_primary())
        .ok_or_else(|| SnapshotError::Decode(format!("table id {id} is not in snapshots")))?;
    let field = |bytes: &[u8]| -> Result<Option<(usize, usize)>, SnapshotError> {
        let Some((len, _)) = bytes.split_first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*len) as usize;
        if len > FRAME_FIELD_BYTES_MAX {
            return Err(SnapshotError::Decode(format!("field of {len} bytes")));
        }
        Ok((bytes.len() >= 4 + len).then_some((4, len)))
    };
    let Some((skip, key_len)) = field(rest)? else {
        return Ok(None);
    };
    let key = &rest[skip..skip + key_len];
    let rest = &rest[skip + key_len..];
    let Some((skip, value_len)) = field(rest)? else {
        return Ok(None);
    };
    let value = &rest[skip..skip + value_len];
    let used = 1 + 4 + key_len + 4 + value_len;
    Ok(Some(((table, key.to_vec(), value.to_vec()), used)))
}

impl<S: Store> Ledger<S> {
    /// Calls `visit` with every entry of the primary tables, in snapshot order.
    pub fn visit_snapshot(&self, mut visit: impl FnMut(Table, &[u8], &[u8])) {
        for table in Table::PRIMARY {
            self.store.walk(table, Vec::new(), None, |key, value| {
                visit(table, key, value);
                true
            });
        }
    }

    /// The whole state as bytes; equal states give equal bytes.
    pub fn to_snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut writer = StreamWriter::start(&mut out);
        self.visit_snapshot(|table, key, value| writer.frame(&mut out, table, key, value));
        writer.end(&mut out);
        out
    }

    /// SHA-256 of [`Ledger::to_snapshot`], computed without holding the snapshot.
    pub fn state_digest(&self) -> [u8; 32] {
        let mut frame = Vec::new();
        let mut writer = StreamWriter::start(&mut frame);
        self.visit_snapshot(|table, key, value| {
            frame.clear();
            writer.frame(&mut frame, table, key, value);
        });
        writer.end(&mut frame)
    }
}

impl Ledger {
    /// Restores a ledger in memory from [`Ledger::to_snapshot`] bytes.
    pub fn from_snapshot(bytes: &[u8]) -> Result<Ledger, SnapshotError> {
        if bytes.len() > SNAPSHOT_BYTES_MAX {
            return Err(SnapshotError::Decode(format!("{} bytes", bytes.len())));
        }
        let mut frames = Frames::new();
        frames.extend(bytes);
        let mut restore = Restore::new(MemStore::new());
        while let Some((table, key, value)) = frames.next_frame()? {
            restore.push(table, &key, &value)?;
        }
        frames.finish()?;
        restore.finish()
    }
}

/// Rebuilds a ledger from snapshot entries into an empty store, checking each entry.
#[derive(Debug)]
pub struct Restore<S> {
    ledger: Ledger<S>,
    /// The last entry pushed, to check the order.
    last: Option<(usize, Vec<u8>)>,
}

impl<S: Store> Restore<S> {
    /// Restores into `store`, which must be empty.
    pub fn new(store: S) -> Self {
        Restore {
            ledger: Ledger::on(store),
            last: None,
        }
    }

    /// Checks one entry and writes it with everything derived from it.
    pub fn push(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), SnapshotError> {
        let position = Table::PRIMARY
            .iter()
            .position(|t| *t == table)
            .ok_or_else(|| SnapshotError::Decode(format!("{table:?} is not in snapshots")))?;
        let here = (position, key.to_vec());
        if self.last.as_ref().is_some_and(|last| *last >= here) {
            return Err(SnapshotError::Inconsistent(format!(
                "{table:?} entry {key:?} out of order"
            )));
        }
        self.last = Some(here);
        match table {
            Table::Meta => self.meta(key, value),
            Table::Tenants => self.tenant(key, value),
            Table::Records => self.record(key, value),
            Table::Tombstones => self.tombstone(key, value),
            Table::Commands => self.command(key, value),
            _ => unreachable!("only primary tables have a position"),
        }
    }

    /// The store being written, to flush what is pending while restoring.
    pub fn store_mut(&mut self) -> &mut S {
        self.ledger.store_mut()
    }

    /// The restored ledger.
    pub fn finish(self) -> Result<Ledger<S>, SnapshotError> {
        Ok(self.ledger)
    }

    fn meta(&mut self, key: &[u8], value: &[u8]) -> Result<(), SnapshotError> {
        if key != CLOCK_KEY && key != TOKEN_KEY {
            return Err(SnapshotError::Inconsistent(format!("meta key {key:?}")));
        }
        let _: u64 = decoded(value, "meta value")?;
        self.ledger
            .store
            .put(Table::Meta, key.to_vec(), value.to_vec());
        Ok(())
    }

    fn tenant(&mut self, key: &[u8], value: &[u8]) -> Result<(), SnapshotError> {
        let mut r = Reader::new(key);
        r.string()
            .and_then(|name| r.done(name))
            .ok_or_else(|| SnapshotError::Decode(format!("tenant key {key:?}")))?;
        let _: TenantConfig = decoded(value, "tenant")?;
        self.ledger
            .store
            .put(Table::Tenants, key.to_vec(), value.to_vec());
        Ok(())
    }

    fn record(&mut self, key: &[u8], value: &[u8]) -> Result<(), SnapshotError> {
        let key = decoded_key(key)?;
        let rec: EffectRecord = decoded(value, "effect record")?;
        check_slot(&key, &rec).map_err(SnapshotError::Inconsistent)?;
        if key != rec.key {
            return Err(SnapshotError::Inconsistent(format!(
                "record {} under key {key}",
                rec.key
            )));
        }
        rec.check_invariants()
            .map_err(SnapshotError::Inconsistent)?;
        if rec
            .latest_token()
            .is_some_and(|t| t >= self.ledger.next_fencing_token())
        {
            return Err(SnapshotError::Inconsistent(format!(
                "{key}: token at or past next_fencing_token"
            )));
        }
        self.ledger.insert_record(rec);
        Ok(())
    }

    fn tombstone(&mut self, key: &[u8], value: &[u8]) -> Result<(), SnapshotError> {
        let key = decoded_key(key)?;
        let tombstone: Tombstone = decoded(value, "tombstone")?;
        if key != tombstone.key || self.ledger.get(&key).is_some() {
            return Err(SnapshotError::Inconsistent(format!(
                "tombstone of {} under key {key}, or next to its record",
                tombstone.key
            )));
        }
        self.ledger.insert_tombstone(tombstone);
        Ok(())
    }

    fn command(&mut self, key: &[u8], value: &[u8]) -> Result<(), SnapshotError> {
        let mut r = Reader::new(key);
        let (caller, id): (Caller, String) = r
            .caller()
            .and_then(|c| Some((c, r.string()?)))
            .and_then(|id| r.done(id))
            .ok_or_else(|| SnapshotError::Decode(format!("command key {key:?}")))?;
        let entry: CommandEntry = decoded(value, "command")?;
        let store = &mut self.ledger.store;
        store.put(
            Table::CommandExpiry,
            command_expiry_key(entry.expires_at_ms, &caller, &id),
            Vec::new(),
        );
        store.put(Table::Commands, key.to_vec(), value.to_vec());
        index::count(store, index::COMMAND_COUNTER, 1);
        Ok(())
    }
}

fn decoded<T: serde::de::DeserializeOwned>(value: &[u8], what: &str) -> Result<T, SnapshotError> {
    decode_value(value).ok_or_else(|| SnapshotError::Decode(format!("{what} does not decode")))
}

fn decoded_key(key: &[u8]) -> Result<EffectKey, SnapshotError> {
    keycode::read_key(key).ok_or_else(|| SnapshotError::Decode(format!("effect key {key:?}")))
}

/// A record is a slot (`base#i`, with `i` below its count) exactly when its key names
/// one: slot groups are indexed and collected by their key.
fn check_slot(key: &EffectKey, rec: &EffectRecord) -> Result<(), String> {
    let consistent = match (rec.slot, key.slot()) {
        (None, None) => true,
        (Some(slot), Some((_, index))) => slot.index == index && index < slot.count,
        _ => false,
    };
    if consistent {
        Ok(())
    } else {
        Err(format!("{key}: slot {:?} does not match the key", rec.slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreExt;

    /// A stream of two frames, and where each frame ends.
    fn two_frames() -> (Vec<u8>, Vec<usize>) {
        let mut bytes = Vec::new();
        let mut writer = StreamWriter::start(&mut bytes);
        let mut ends = vec![bytes.len()];
        writer.frame(
            &mut bytes,
            Table::Meta,
            CLOCK_KEY,
            &crate::store::encode_value(&5u64),
        );
        ends.push(bytes.len());
        writer.frame(&mut bytes, Table::Tenants, &keycode::string("acme"), b"x");
        ends.push(bytes.len());
        writer.end(&mut bytes);
        (bytes, ends)
    }

    /// Reads `bytes` in two pieces cut at `cut`: the frames, and what `finish` says.
    fn read(bytes: &[u8], cut: usize) -> Result<Vec<Frame>, SnapshotError> {
        let mut frames = Frames::new();
        let mut read = Vec::new();
        for piece in [&bytes[..cut], &bytes[cut..]] {
            frames.extend(piece);
            while let Some(frame) = frames.next_frame()? {
                read.push(frame);
            }
        }
        frames.finish()?;
        Ok(read)
    }

    #[test]
    fn frames_split_anywhere_read_the_same() {
        let (bytes, _) = two_frames();
        for cut in 0..=bytes.len() {
            assert_eq!(read(&bytes, cut).unwrap().len(), 2, "cut at {cut}");
        }
    }

    /// A sender that stops at a read error ends its stream on a frame boundary: without
    /// the end frame that stream would read as a whole, smaller ledger.
    #[test]
    fn a_stream_cut_short_anywhere_is_refused() {
        let (bytes, ends) = two_frames();
        for len in 0..bytes.len() {
            let cut = &bytes[..len];
            let err = read(cut, len / 2).expect_err("a stream without its end frame");
            if ends.contains(&len) {
                assert!(err.to_string().contains("cut short"), "{len}: {err}");
            }
        }
    }

    #[test]
    fn a_changed_byte_or_bytes_after_the_end_are_refused() {
        let (bytes, _) = two_frames();
        for at in 0..bytes.len() {
            let mut changed = bytes.clone();
            changed[at] ^= 0x10;
            assert!(read(&changed, at).is_err(), "byte {at} changed");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        let err = read(&longer, 3).expect_err("a byte after the end");
        assert!(err.to_string().contains("after the end frame"), "{err}");
    }

    #[test]
    fn the_state_digest_is_the_sha256_of_the_whole_stream() {
        let mut ledger = Ledger::new();
        ledger.store.save(Table::Meta, CLOCK_KEY.to_vec(), &7u64);
        let stream = ledger.to_snapshot();
        assert_eq!(
            ledger.state_digest(),
            <[u8; 32]>::from(Sha256::digest(&stream))
        );
        let restored = Ledger::from_snapshot(&stream).unwrap();
        assert_eq!(restored.to_snapshot(), stream);
    }

    #[test]
    fn restore_refuses_out_of_order_and_derived_tables() {
        let mut restore = Restore::new(MemStore::new());
        let clock = crate::store::encode_value(&5u64);
        restore.push(Table::Meta, TOKEN_KEY, &clock).unwrap();
        assert!(
            restore.push(Table::Meta, CLOCK_KEY, &clock).is_err(),
            "order"
        );
        assert!(restore.push(Table::Leases, b"x", b"").is_err(), "derived");
        assert!(
            restore.push(Table::Meta, b"zzz", &clock).is_err(),
            "unknown meta"
        );
        let mut frames = Frames::new();
        frames.extend(b"LSN\x03");
        assert!(frames.next_frame().is_err(), "other format");
        let restored = restore.finish().unwrap();
        assert_eq!(
            restored.store().load::<u64>(Table::Meta, TOKEN_KEY, "t"),
            Some(5)
        );
    }
}
