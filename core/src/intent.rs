//! Canonical intent: the JSON form of a mutation that decides whether two calls are the
//! same effect.
//!
//! Canonicalisation follows RFC 8785 (JSON Canonicalization Scheme): object members sorted
//! by their UTF-16 code units, no insignificant whitespace, strings with the minimal
//! escapes, and numbers in the ECMAScript shortest round-trip form, so `1`, `1.0` and
//! `1e0` are one number. Two argument objects that differ only in member order, spacing
//! or number spelling hash the same; any change of a value hashes differently.
//!
//! Two deliberate departures from RFC 8785, both stricter: integers that JSON text spells
//! exactly and that fit 64 bits are kept exact (order ids beyond 2^53 must not collide),
//! and duplicate member names are refused instead of last-one-wins.
//!
//! A tool policy may name volatile fields (JSON pointers such as `/request_id`) that are
//! removed before hashing, so a retry that regenerates them is still the same intent.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Serialize, Serializer};
use sha2::{Digest, Sha256};

use crate::limits::{INTENT_BYTES_MAX, INTENT_DEPTH_MAX};

/// SHA-256 of a canonical intent.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct IntentHash(pub [u8; 32]);

impl fmt::Display for IntentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", hex(&self.0))
    }
}

impl fmt::Debug for IntentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Binary formats (bincode snapshots, the wire) carry the 32 bytes; human-readable ones
/// (JSON for people and refusal metadata) carry `sha256:<hex>`.
impl Serialize for IntentHash {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&self.to_string())
        } else {
            self.0.serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for IntentHash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if !d.is_human_readable() {
            return <[u8; 32]>::deserialize(d).map(IntentHash);
        }
        let text = String::deserialize(d)?;
        let digits = text
            .strip_prefix("sha256:")
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| de::Error::custom(format!("{text:?} is not sha256:<64 hex digits>")))?;
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&digits[2 * i..2 * i + 2], 16).map_err(de::Error::custom)?;
        }
        Ok(IntentHash(bytes))
    }
}

/// An intent in canonical form with its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalIntent {
    /// The canonical JSON text.
    pub json: String,
    /// SHA-256 of `json`.
    pub hash: IntentHash,
}

/// Why an intent cannot be canonicalised.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error)]
pub enum IntentError {
    /// The JSON text is larger than [`INTENT_BYTES_MAX`].
    #[error("intent is {len} bytes, more than the limit of {max}")]
    TooLarge {
        /// Its size in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// Arrays and objects nest deeper than [`INTENT_DEPTH_MAX`].
    #[error("intent nests deeper than {max} levels")]
    TooDeep {
        /// The limit.
        max: usize,
    },
    /// The text is not JSON, or holds a duplicate member name.
    #[error("intent is not valid JSON: {0}")]
    Malformed(String),
    /// A volatile-field pointer is not a JSON pointer.
    #[error("volatile field {0:?} is not a JSON pointer (RFC 6901)")]
    BadPointer(String),
}

/// Canonicalises `json_text`, removes the `volatile` fields (JSON pointers), and hashes
/// the result.
pub fn canonicalize(json_text: &str, volatile: &[String]) -> Result<CanonicalIntent, IntentError> {
    if json_text.len() > INTENT_BYTES_MAX {
        return Err(IntentError::TooLarge {
            len: json_text.len(),
            max: INTENT_BYTES_MAX,
        });
    }
    let mut value = parse(json_text)?;
    for pointer in volatile {
        remove_pointer(&mut value, &parse_pointer(pointer)?);
    }
    let mut json = String::with_capacity(json_text.len());
    write_canonical(&value, &mut json);
    let hash = IntentHash(Sha256::digest(json.as_bytes()).into());
    Ok(CanonicalIntent { json, hash })
}

/// Names of the top-level members whose values differ between two intents (present in
/// one only, or with different values), in sorted order. `$` stands for the whole intent
/// when either one is not an object.
pub fn differing_fields(stored_json: &str, offered_json: &str) -> Vec<String> {
    let (Ok(Json::Obj(a)), Ok(Json::Obj(b))) = (parse(stored_json), parse(offered_json)) else {
        return if stored_json == offered_json {
            vec![]
        } else {
            vec!["$".into()]
        };
    };
    let mut names: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Checks that `pointer` is an RFC 6901 JSON pointer naming a member (not the root).
pub fn validate_pointer(pointer: &str) -> Result<(), IntentError> {
    parse_pointer(pointer).map(|_| ())
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

/// A parsed JSON value. Integers that fit 64 bits stay exact; all others are doubles.
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(BTreeMap<String, Json>),
}

fn parse(text: &str) -> Result<Json, IntentError> {
    let value: Json = serde_json::from_str(text).map_err(|e| {
        if e.to_string().contains("recursion limit") {
            IntentError::TooDeep {
                max: INTENT_DEPTH_MAX,
            }
        } else {
            IntentError::Malformed(e.to_string())
        }
    })?;
    if depth(&value) > INTENT_DEPTH_MAX {
        return Err(IntentError::TooDeep {
            max: INTENT_DEPTH_MAX,
        });
    }
    Ok(value)
}

fn depth(value: &Json) -> usize {
    match value {
        Json::Arr(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Json::Obj(members) => 1 + members.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Int(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Int(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Json, E> {
        Ok(Json::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Arr(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut members = BTreeMap::new();
        while let Some(name) = map.next_key::<String>()? {
            if members.contains_key(&name) {
                return Err(de::Error::custom(format!("duplicate member {name:?}")));
            }
            let value = map.next_value()?;
            members.insert(name, value);
        }
        Ok(Json::Obj(members))
    }
}

fn parse_pointer(pointer: &str) -> Result<Vec<String>, IntentError> {
    let bad = || IntentError::BadPointer(pointer.to_owned());
    let rest = pointer.strip_prefix('/').ok_or_else(bad)?;
    rest.split('/')
        .map(|token| {
            let mut out = String::with_capacity(token.len());
            let mut chars = token.chars();
            while let Some(c) = chars.next() {
                match (c, c == '~') {
                    (_, false) => out.push(c),
                    (_, true) => match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => return Err(bad()),
                    },
                }
            }
            Ok(out)
        })
        .collect()
}

/// Removes the member the pointer names, if present. Pointers only walk objects: a path
/// through an array or a scalar names nothing.
fn remove_pointer(value: &mut Json, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = value;
    for name in parents {
        match node {
            Json::Obj(members) => match members.get_mut(name) {
                Some(child) => node = child,
                None => return,
            },
            _ => return,
        }
    }
    if let Json::Obj(members) = node {
        members.remove(last);
    }
}

fn write_canonical(value: &Json, out: &mut String) {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Int(i) => out.push_str(&i.to_string()),
        Json::Float(f) => out.push_str(&es_number(*f)),
        Json::Str(s) => write_string(s, out),
        Json::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Json::Obj(members) => {
            let mut sorted: Vec<(&String, &Json)> = members.iter().collect();
            sorted.sort_by(|a, b| utf16_cmp(a.0, b.0));
            out.push('{');
            for (i, (name, member)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(name, out);
                out.push(':');
                write_canonical(member, out);
            }
            out.push('}');
        }
    }
}

fn utf16_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// ECMAScript `Number.prototype.toString` for a finite double (RFC 8785 section 3.2.2.3).
fn es_number(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let sign = if v < 0.0 { "-" } else { "" };
    // Rust's `{:e}` prints the shortest digits that round-trip: "d.ddde<exp>".
    let sci = format!("{:e}", v.abs());
    let (mantissa, exp) = sci.split_once('e').expect("{:e} always has an exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i32;
    let n = exp.parse::<i32>().expect("{:e} exponent is an integer") + 1;
    let body = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let e = n - 1;
        let e_sign = if e < 0 { "-" } else { "+" };
        let (first, rest) = digits.split_at(1);
        if rest.is_empty() {
            format!("{first}e{e_sign}{}", e.abs())
        } else {
            format!("{first}.{rest}e{e_sign}{}", e.abs())
        }
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(text: &str) -> String {
        canonicalize(text, &[]).unwrap().json
    }

    #[test]
    fn key_order_and_whitespace_do_not_change_the_hash() {
        let a = canonicalize(
            r#"{"amount": 500, "currency":"EUR", "order":{"id":7,"line":[1,2]}}"#,
            &[],
        )
        .unwrap();
        let b = canonicalize(
            "{\"order\":{\"line\":[1, 2],\"id\":7},\n \"currency\":\"EUR\",\"amount\":500}",
            &[],
        )
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(
            a.json,
            r#"{"amount":500,"currency":"EUR","order":{"id":7,"line":[1,2]}}"#
        );
    }

    #[test]
    fn any_value_change_changes_the_hash() {
        let base = canonicalize(r#"{"amount":500,"to":"alice"}"#, &[]).unwrap();
        for changed in [
            r#"{"amount":501,"to":"alice"}"#,
            r#"{"amount":500,"to":"Alice"}"#,
            r#"{"amount":"500","to":"alice"}"#,
            r#"{"amount":500,"to":"alice","memo":null}"#,
            r#"{"amount":500}"#,
            r#"[500,"alice"]"#,
        ] {
            assert_ne!(
                canonicalize(changed, &[]).unwrap().hash,
                base.hash,
                "{changed}"
            );
        }
    }

    #[test]
    fn numbers_have_one_form() {
        assert_eq!(
            canon("[1, 1.0, 1e0, 10E-1, -0, -0.0, 100e-2]"),
            "[1,1,1,1,0,0,1]"
        );
        assert_eq!(
            canon("[0.1, 1e21, 1e20, 1.5e-7, 123456.789, -2.5e-3]"),
            "[0.1,1e+21,100000000000000000000,1.5e-7,123456.789,-0.0025]"
        );
        assert_eq!(
            canon("[1e-6, 1e-7, 5e-324, 1.7976931348623157e308]"),
            "[0.000001,1e-7,5e-324,1.7976931348623157e+308]"
        );
        // Exact 64-bit integers stay exact.
        assert_eq!(
            canon("[9007199254740993, -9223372036854775808, 18446744073709551615]"),
            "[9007199254740993,-9223372036854775808,18446744073709551615]"
        );
    }

    #[test]
    fn strings_use_minimal_escapes() {
        assert_eq!(
            canon(r#""a\"b\\c\/d\u0001\n\u00e9\u20ac\ud83d\ude00""#),
            "\"a\\\"b\\\\c/d\\u0001\\né€😀\""
        );
    }

    #[test]
    fn members_sort_by_utf16_code_units() {
        // U+1F600 is D83D DE00 in UTF-16, which sorts before U+FF21 (FF21) although its
        // code point is larger.
        assert_eq!(
            canon("{\"\u{ff21}\":1,\"\u{1f600}\":2,\"a\":3}"),
            "{\"a\":3,\"\u{1f600}\":2,\"\u{ff21}\":1}"
        );
    }

    #[test]
    fn volatile_fields_are_excluded() {
        let volatile = vec!["/request_id".to_string(), "/meta/trace~1id".to_string()];
        let a = canonicalize(
            r#"{"amount":5,"request_id":"r1","meta":{"trace/id":"x","lang":"en"}}"#,
            &volatile,
        )
        .unwrap();
        let b = canonicalize(
            r#"{"amount":5,"request_id":"r2","meta":{"trace/id":"y","lang":"en"}}"#,
            &volatile,
        )
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.json, r#"{"amount":5,"meta":{"lang":"en"}}"#);
        assert!(validate_pointer("request_id").is_err());
        assert!(validate_pointer("/a~2").is_err());
    }

    #[test]
    fn bad_intents_are_typed_errors() {
        assert!(matches!(
            canonicalize("{\"a\":1,\"a\":2}", &[]),
            Err(IntentError::Malformed(_))
        ));
        assert!(matches!(
            canonicalize("{\"a\":", &[]),
            Err(IntentError::Malformed(_))
        ));
        assert!(matches!(
            canonicalize("\u{0}\u{ff}garbage", &[]),
            Err(IntentError::Malformed(_))
        ));
        let big = format!("\"{}\"", "x".repeat(INTENT_BYTES_MAX));
        assert!(matches!(
            canonicalize(&big, &[]),
            Err(IntentError::TooLarge { .. })
        ));
        let deep = format!(
            "{}{}",
            "[".repeat(INTENT_DEPTH_MAX + 1),
            "]".repeat(INTENT_DEPTH_MAX + 1)
        );
        assert!(matches!(
            canonicalize(&deep, &[]),
            Err(IntentError::TooDeep { .. })
        ));
        let very_deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(
            canonicalize(&very_deep, &[]),
            Err(IntentError::TooDeep { .. })
        ));
        let ok_depth = format!(
            "{}{}",
            "[".repeat(INTENT_DEPTH_MAX),
            "]".repeat(INTENT_DEPTH_MAX)
        );
        assert!(canonicalize(&ok_depth, &[]).is_ok());
    }

    #[test]
    fn hashes_are_hex_for_people_and_bytes_for_machines() {
        let hash = canonicalize("{}", &[]).unwrap().hash;
        let json = serde_json::to_string(&hash).unwrap();
        assert_eq!(json, format!("\"{hash}\""));
        assert_eq!(serde_json::from_str::<IntentHash>(&json).unwrap(), hash);
        assert!(serde_json::from_str::<IntentHash>("\"sha256:zz\"").is_err());
        let bytes = bincode::serde::encode_to_vec(hash, bincode::config::standard()).unwrap();
        assert_eq!(bytes.len(), 32);
        let (back, _): (IntentHash, usize) =
            bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).unwrap();
        assert_eq!(back, hash);
    }

    #[test]
    fn differing_fields_names_top_level_changes() {
        let stored = canon(r#"{"amount":5,"currency":"EUR","to":"a"}"#);
        let offered = canon(r#"{"amount":6,"currency":"EUR","memo":"x"}"#);
        assert_eq!(
            differing_fields(&stored, &offered),
            vec!["amount", "memo", "to"]
        );
        assert_eq!(differing_fields(&stored, &stored), Vec::<String>::new());
        assert_eq!(differing_fields("[1]", "[2]"), vec!["$"]);
    }
}
