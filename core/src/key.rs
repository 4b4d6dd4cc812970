//! Effect identity: the scoped effect key, declared slots, and the provider key derived
//! from it.
//!
//! An effect key is chosen by code (a runtime, tool handler or gateway), never by a model.
//! It is scoped by tenant and namespace so that two tenants can never name each other's
//! effects. The provider key is a pure function of the scoped key, so every attempt of one
//! effect sends the provider the same idempotency token and two effects never share one.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::limits::{
    COMMAND_ID_BYTES_MAX, DETAIL_BYTES_MAX, KEY_BYTES_MAX, NAMESPACE_BYTES_MAX, NAME_BYTES_MAX,
    SLOTS_MAX, TENANT_BYTES_MAX,
};

/// The identity of one logical external mutation: tenant, namespace and key.
///
/// Ordering is by tenant, then namespace, then key, which keeps one tenant's records
/// together in ordered maps and snapshots.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EffectKey {
    /// The tenant that owns the effect.
    pub tenant: String,
    /// A namespace within the tenant, typically the tool server or application.
    pub namespace: String,
    /// The key within the namespace; `base#i` names slot `i` of a declared multiplicity.
    pub key: String,
}

/// What is wrong with a field a caller sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum FieldError {
    /// The field is empty.
    #[error("{field} is empty")]
    Empty {
        /// The field's name.
        field: String,
    },
    /// The field is longer than its limit.
    #[error("{field} is {len} bytes, more than the limit of {max}")]
    TooLong {
        /// The field's name.
        field: String,
        /// Its length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// The field holds a character it may not hold.
    #[error("{field} has a character that is not allowed at byte {at}")]
    BadChar {
        /// The field's name.
        field: String,
        /// Byte offset of the first bad character.
        at: usize,
    },
    /// The field is out of its allowed range.
    #[error("{field} is out of range: {detail}")]
    OutOfRange {
        /// The field's name.
        field: String,
        /// What is wrong with it.
        detail: String,
    },
}

impl EffectKey {
    /// Builds a key from its three parts. Use [`EffectKey::validate`] before trusting it.
    pub fn new(
        tenant: impl Into<String>,
        namespace: impl Into<String>,
        key: impl Into<String>,
    ) -> Self {
        Self {
            tenant: tenant.into(),
            namespace: namespace.into(),
            key: key.into(),
        }
    }

    /// Checks a key chosen by a caller: no slot suffix allowed.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.validate_scope()?;
        check_visible("key", &self.key, KEY_BYTES_MAX, |c| c != b'#')
    }

    /// Checks a key that may name a declared slot (`base#i`). Whether the slot was in fact
    /// declared is for the ledger to answer.
    pub fn validate_addressable(&self) -> Result<(), FieldError> {
        match self.slot() {
            None => self.validate(),
            Some((base, index)) => {
                base.validate()?;
                if index >= SLOTS_MAX {
                    return Err(FieldError::OutOfRange {
                        field: "key".into(),
                        detail: format!("slot {index} is not below {SLOTS_MAX}"),
                    });
                }
                Ok(())
            }
        }
    }

    fn validate_scope(&self) -> Result<(), FieldError> {
        validate_tenant(&self.tenant)?;
        check_visible("namespace", &self.namespace, NAMESPACE_BYTES_MAX, |c| {
            c != b'#'
        })
    }

    /// The key of slot `index` of this (base) key.
    pub fn slot_key(&self, index: u32) -> EffectKey {
        EffectKey {
            tenant: self.tenant.clone(),
            namespace: self.namespace.clone(),
            key: format!("{}#{index}", self.key),
        }
    }

    /// Splits `base#i` into the base key and `i`; `None` when the key names no slot or the
    /// suffix is not a canonical decimal number.
    pub fn slot(&self) -> Option<(EffectKey, u32)> {
        let (base, index) = self.key.rsplit_once('#')?;
        let canonical = !index.is_empty()
            && index.bytes().all(|b| b.is_ascii_digit())
            && (index == "0" || !index.starts_with('0'));
        if !canonical {
            return None;
        }
        let index = index.parse().ok()?;
        Some((EffectKey::new(&self.tenant, &self.namespace, base), index))
    }

    /// The idempotency token sent to the provider on every attempt of this effect.
    ///
    /// `el1_` followed by 160 bits of SHA-256 over the length-prefixed scoped key, in hex:
    /// stable across attempts, nodes and versions of this crate, short enough for any
    /// provider's key field, and distinct for distinct effects.
    pub fn provider_key(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(b"effect-ledger/provider-key/v1");
        for part in [&self.tenant, &self.namespace, &self.key] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
        }
        let digest = hasher.finalize();
        format!("el1_{}", crate::intent::hex(&digest[..20]))
    }
}

impl fmt::Display for EffectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.tenant, self.namespace, self.key)
    }
}

/// Checks a tenant id: `[A-Za-z0-9._-]`, 1 to [`TENANT_BYTES_MAX`] bytes.
pub fn validate_tenant(tenant: &str) -> Result<(), FieldError> {
    check_visible("tenant", tenant, TENANT_BYTES_MAX, |c| {
        c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-')
    })
}

/// Checks a command id: visible ASCII, 1 to [`COMMAND_ID_BYTES_MAX`] bytes.
pub fn validate_command_id(id: &str) -> Result<(), FieldError> {
    check_visible("command_id", id, COMMAND_ID_BYTES_MAX, |_| true)
}

/// Checks a free-text name (holder, workflow id, principal, target): 1 to
/// [`NAME_BYTES_MAX`] bytes of UTF-8 without control characters.
pub fn validate_name(field: &str, value: &str) -> Result<(), FieldError> {
    if value.is_empty() {
        return Err(FieldError::Empty {
            field: field.into(),
        });
    }
    check_text(field, value, NAME_BYTES_MAX)
}

/// Checks a detail (proof, reason, note): at most [`DETAIL_BYTES_MAX`] bytes of UTF-8
/// without control characters other than tab and newline. May be empty.
pub fn validate_detail(field: &str, value: &str) -> Result<(), FieldError> {
    check_text(field, value, DETAIL_BYTES_MAX)
}

fn check_text(field: &str, value: &str, max: usize) -> Result<(), FieldError> {
    if value.len() > max {
        return Err(FieldError::TooLong {
            field: field.into(),
            len: value.len(),
            max,
        });
    }
    match value
        .char_indices()
        .find(|(_, c)| c.is_control() && *c != '\n' && *c != '\t')
    {
        Some((at, _)) => Err(FieldError::BadChar {
            field: field.into(),
            at,
        }),
        None => Ok(()),
    }
}

fn check_visible(
    field: &str,
    value: &str,
    max: usize,
    allowed: impl Fn(u8) -> bool,
) -> Result<(), FieldError> {
    if value.is_empty() {
        return Err(FieldError::Empty {
            field: field.into(),
        });
    }
    if value.len() > max {
        return Err(FieldError::TooLong {
            field: field.into(),
            len: value.len(),
            max,
        });
    }
    match value
        .bytes()
        .position(|c| !(0x21..=0x7e).contains(&c) || !allowed(c))
    {
        Some(at) => Err(FieldError::BadChar {
            field: field.into(),
            at,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> EffectKey {
        EffectKey::new("acme", "billing", k)
    }

    #[test]
    fn provider_key_is_stable_and_distinct() {
        assert_eq!(key("r-1").provider_key(), key("r-1").provider_key());
        assert_ne!(key("r-1").provider_key(), key("r-2").provider_key());
        // Length prefixes keep part boundaries apart.
        assert_ne!(
            EffectKey::new("ab", "c", "d").provider_key(),
            EffectKey::new("a", "bc", "d").provider_key()
        );
        assert!(key("r-1").provider_key().starts_with("el1_"));
        assert_eq!(key("r-1").provider_key().len(), 4 + 40);
    }

    #[test]
    fn caller_keys_are_validated() {
        assert!(key("refund-42").validate().is_ok());
        assert!(matches!(key("").validate(), Err(FieldError::Empty { .. })));
        assert!(matches!(
            key(&"x".repeat(KEY_BYTES_MAX + 1)).validate(),
            Err(FieldError::TooLong { .. })
        ));
        assert!(matches!(
            key("has space").validate(),
            Err(FieldError::BadChar { at: 3, .. })
        ));
        assert!(matches!(
            key("slot#1").validate(),
            Err(FieldError::BadChar { .. })
        ));
        assert!(matches!(
            EffectKey::new("a/b", "n", "k").validate(),
            Err(FieldError::BadChar { .. })
        ));
        assert!(matches!(
            EffectKey::new("t", "n", "ké").validate(),
            Err(FieldError::BadChar { .. })
        ));
    }

    #[test]
    fn slot_keys_round_trip_and_reject_noncanonical_suffixes() {
        let base = key("msg-7");
        let slot = base.slot_key(3);
        assert_eq!(slot.key, "msg-7#3");
        assert_eq!(slot.slot(), Some((base.clone(), 3)));
        assert!(slot.validate_addressable().is_ok());
        assert!(slot.validate().is_err());
        assert_eq!(key("msg#03").slot(), None);
        assert_eq!(key("msg#").slot(), None);
        assert!(key("msg#03").validate_addressable().is_err());
        assert!(key(&format!("m#{SLOTS_MAX}"))
            .validate_addressable()
            .is_err());
    }
}
