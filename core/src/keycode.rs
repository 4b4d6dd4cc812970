//! Order-preserving key encodings for the [`Store`](crate::store::Store) tables.
//!
//! Byte order of an encoded key is the order of the values it encodes, so ordered scans
//! over bytes walk effect keys, deadlines and states in the order the ledger needs:
//! - `u64`: 8 bytes big-endian;
//! - strings: the bytes with each `0x00` written as `0x00 0xFF`, then a `0x00`
//!   terminator (as FoundationDB's tuple layer does), so a string sorts before every
//!   longer string it prefixes and a tuple's fields cannot run into each other;
//! - an effect key: tenant, namespace, key, each a string (the derived order of
//!   [`EffectKey`]);
//! - a caller: `0x00` then the tenant for a tenant, `0x01` for the operator (the derived
//!   order of [`Caller`]).
//!
//! Decoders return `None` on bytes no encoder makes.

use crate::command::Caller;
use crate::key::EffectKey;
use crate::record::EffectState;

/// Appends `value` big-endian.
pub fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_be_bytes());
}

/// Appends `s` escaped and terminated.
pub fn put_str(out: &mut Vec<u8>, s: &str) {
    out.reserve(s.len() + 1);
    for (i, run) in s.as_bytes().split(|&b| b == 0).enumerate() {
        if i > 0 {
            out.extend_from_slice(&[0, 0xFF]);
        }
        out.extend_from_slice(run);
    }
    out.push(0);
}

/// Appends an effect key.
pub fn put_key(out: &mut Vec<u8>, key: &EffectKey) {
    out.reserve(key.tenant.len() + key.namespace.len() + key.key.len() + 3);
    put_str(out, &key.tenant);
    put_str(out, &key.namespace);
    put_str(out, &key.key);
}

/// Appends a caller.
pub fn put_caller(out: &mut Vec<u8>, caller: &Caller) {
    match caller {
        Caller::Tenant(tenant) => {
            out.push(0);
            put_str(out, tenant);
        }
        Caller::Operator => out.push(1),
    }
}

/// Bytes an encoded effect key takes when none of its strings holds a `0x00` (each one
/// does add a byte): the capacity to build a key with, so that it is not grown piecemeal.
pub fn key_len(key: &EffectKey) -> usize {
    key.tenant.len() + key.namespace.len() + key.key.len() + 3
}

/// An effect key alone.
pub fn key(key: &EffectKey) -> Vec<u8> {
    let mut out = Vec::with_capacity(key_len(key));
    put_key(&mut out, key);
    out
}

/// A string alone.
pub fn string(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + 1);
    put_str(&mut out, s);
    out
}

/// A deadline followed by an effect key.
pub fn at_key(at_ms: u64, key: &EffectKey) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + key_len(key));
    put_u64(&mut out, at_ms);
    put_key(&mut out, key);
    out
}

/// The first key at or after time `at_ms` in a table keyed by a leading deadline: scan
/// up to `after(now)` to take everything due at `now`.
pub fn after(at_ms: u64) -> Option<Vec<u8>> {
    at_ms.checked_add(1).map(|t| t.to_be_bytes().to_vec())
}

/// A state's byte.
pub fn state(state: EffectState) -> u8 {
    match state {
        EffectState::NotStarted => 0,
        EffectState::InProgress => 1,
        EffectState::Committed => 2,
        EffectState::FailedBeforeEffect => 3,
        EffectState::UnknownAfterDispatch => 4,
    }
}

/// The state of a byte from [`state`].
pub fn state_of(byte: u8) -> Option<EffectState> {
    EffectState::ALL.into_iter().find(|s| state(*s) == byte)
}

/// Reads keys back from an encoding.
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Reads from the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes }
    }

    /// A big-endian `u64`.
    pub fn u64(&mut self) -> Option<u64> {
        let (head, rest) = self.bytes.split_first_chunk::<8>()?;
        self.bytes = rest;
        Some(u64::from_be_bytes(*head))
    }

    /// A big-endian `u32`.
    pub fn u32(&mut self) -> Option<u32> {
        let (head, rest) = self.bytes.split_first_chunk::<4>()?;
        self.bytes = rest;
        Some(u32::from_be_bytes(*head))
    }

    /// One byte.
    pub fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.bytes.split_first()?;
        self.bytes = rest;
        Some(b)
    }

    /// An escaped, terminated string.
    pub fn string(&mut self) -> Option<String> {
        let mut out = Vec::new();
        let mut i = 0;
        loop {
            let b = *self.bytes.get(i)?;
            if b != 0 {
                out.push(b);
                i += 1;
            } else if self.bytes.get(i + 1) == Some(&0xFF) {
                out.push(0);
                i += 2;
            } else {
                self.bytes = &self.bytes[i + 1..];
                return String::from_utf8(out).ok();
            }
        }
    }

    /// An effect key.
    pub fn key(&mut self) -> Option<EffectKey> {
        Some(EffectKey {
            tenant: self.string()?,
            namespace: self.string()?,
            key: self.string()?,
        })
    }

    /// A caller.
    pub fn caller(&mut self) -> Option<Caller> {
        match self.byte()? {
            0 => Some(Caller::Tenant(self.string()?)),
            1 => Some(Caller::Operator),
            _ => None,
        }
    }

    /// Whether everything was read.
    pub fn is_done(&self) -> bool {
        self.bytes.is_empty()
    }

    /// `value` when everything was read, else `None`.
    pub fn done<T>(self, value: T) -> Option<T> {
        self.is_done().then_some(value)
    }
}

/// Decodes a key written by [`key`].
pub fn read_key(bytes: &[u8]) -> Option<EffectKey> {
    let mut r = Reader::new(bytes);
    let key = r.key()?;
    r.done(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Vec<EffectKey> {
        let parts = ["", "a", "a\0", "a\0b", "ab", "b", "\u{ff}", "a\u{1}"];
        let mut out = Vec::new();
        for t in parts {
            for n in ["", "x", "x\0"] {
                for k in parts {
                    out.push(EffectKey::new(t, n, k));
                }
            }
        }
        out
    }

    #[test]
    fn effect_keys_sort_as_encoded_and_decode_back() {
        let keys = keys();
        for a in &keys {
            assert_eq!(read_key(&key(a)).as_ref(), Some(a));
            for b in &keys {
                assert_eq!(a.cmp(b), key(a).cmp(&key(b)), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn deadlines_sort_before_keys() {
        let (a, b) = (EffectKey::new("t", "n", "z"), EffectKey::new("t", "n", "a"));
        assert!(at_key(1, &a) < at_key(2, &b));
        assert!(at_key(2, &b) < at_key(2, &a));
        assert!(at_key(u64::MAX, &a) > at_key(1, &a));
        let due_up_to_2 = after(2).unwrap();
        assert!(at_key(2, &a) < due_up_to_2 && due_up_to_2 <= at_key(3, &b));
        assert_eq!(after(u64::MAX), None);
    }

    #[test]
    fn callers_sort_as_derived() {
        let callers = [
            Caller::Tenant("".into()),
            Caller::Tenant("a".into()),
            Caller::Tenant("b".into()),
            Caller::Operator,
        ];
        for a in &callers {
            let mut ea = Vec::new();
            put_caller(&mut ea, a);
            let mut r = Reader::new(&ea);
            assert_eq!(r.caller().as_ref(), Some(a));
            assert!(r.is_done());
            for b in &callers {
                let mut eb = Vec::new();
                put_caller(&mut eb, b);
                assert_eq!(a.cmp(b), ea.cmp(&eb));
            }
        }
    }

    #[test]
    fn states_round_trip_in_order() {
        for (i, s) in EffectState::ALL.iter().enumerate() {
            assert_eq!(state(*s) as usize, i);
            assert_eq!(state_of(state(*s)), Some(*s));
        }
        assert_eq!(state_of(200), None);
    }

    #[test]
    fn garbage_does_not_decode() {
        assert_eq!(read_key(b"a\0b"), None, "unterminated");
        assert_eq!(read_key(b"a\0b\0c\0extra"), None, "trailing");
        assert_eq!(read_key(&[0xC3, 0, 0, 0]), None, "not UTF-8");
        assert_eq!(Reader::new(&[1, 2]).u64(), None);
        assert_eq!(Reader::new(&[7]).caller(), None);
    }
}
