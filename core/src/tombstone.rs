//! Tombstones: what the ledger keeps of a record that garbage collection removed
//! (DESIGN.md section 4).
//!
//! A finished record past its retention is collected, but its key is not forgotten: a
//! small [`Tombstone`] (key, intent hash, final state, receipt digest) stays for the
//! tenant's `tombstone_retention_ms`. A late claim, declare or reconcile on that key is
//! answered [`ExpiredEffect`] with what is known, never granted as a new effect and never
//! given a new record. Tombstones are part of the replicated state, so of every snapshot
//! and its digest, and are collected by the same sweep once their window has passed.
//!
//! This module holds the values only; the sweep that makes and removes tombstones is in
//! `sweep`, and the answers for tombstoned keys are where each command is handled.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use crate::intent::IntentHash;
use crate::key::EffectKey;
use crate::record::{EffectRecord, EffectState};

/// SHA-256 of a receipt, kept where the receipt itself no longer is: a caller holding a
/// receipt can tell whether it is the one the collected effect committed with.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReceiptDigest(pub [u8; 32]);

impl ReceiptDigest {
    /// The digest of `receipt`.
    pub fn of(receipt: &str) -> Self {
        ReceiptDigest(Sha256::digest(receipt.as_bytes()).into())
    }
}

impl fmt::Display for ReceiptDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", crate::intent::hex(&self.0))
    }
}

impl fmt::Debug for ReceiptDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Encoded as an [`IntentHash`] is: 32 bytes in binary formats, `sha256:<hex>` in
/// human-readable ones (refusal metadata).
impl Serialize for ReceiptDigest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        IntentHash(self.0).serialize(s)
    }
}

impl<'de> Deserialize<'de> for ReceiptDigest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        IntentHash::deserialize(d).map(|h| ReceiptDigest(h.0))
    }
}

/// What is known of an effect whose record was collected: the answer to a late claim,
/// declare or reconcile. Do not dispatch: whatever happened is final, and the provider
/// may no longer deduplicate the key. Compare `intent_hash` and `receipt_digest` with
/// what the caller holds, or reconcile with the provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpiredEffect {
    /// The collected effect's key.
    pub key: EffectKey,
    /// The intent hash it was declared (or last amended) with.
    pub intent_hash: IntentHash,
    /// The state it was collected in: `committed`, `failed_before_effect` or
    /// `not_started`.
    pub final_state: EffectState,
    /// SHA-256 of its receipt, when it committed.
    pub receipt_digest: Option<ReceiptDigest>,
    /// When it was collected (ledger time, ms).
    pub collected_at_ms: u64,
}

/// What the ledger keeps of a collected record, until `expires_at_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    /// The collected effect's key.
    pub key: EffectKey,
    /// The intent hash it carried.
    pub intent_hash: IntentHash,
    /// The state it was collected in.
    pub final_state: EffectState,
    /// SHA-256 of its receipt, when it committed.
    pub receipt_digest: Option<ReceiptDigest>,
    /// When it was collected (ledger time, ms).
    pub collected_at_ms: u64,
    /// When the tombstone itself may be collected (ledger time, ms); after that the key
    /// is unknown again.
    pub expires_at_ms: u64,
}

impl Tombstone {
    /// The tombstone `rec` leaves when collected at `now_ms`, kept for `retention_ms`.
    pub fn of(rec: &EffectRecord, now_ms: u64, retention_ms: u64) -> Self {
        Tombstone {
            key: rec.key.clone(),
            intent_hash: rec.intent_hash,
            final_state: rec.state,
            receipt_digest: rec.receipt.as_deref().map(ReceiptDigest::of),
            collected_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(retention_ms),
        }
    }

    /// What a late command on this key is told.
    pub fn expired(&self) -> ExpiredEffect {
        ExpiredEffect {
            key: self.key.clone(),
            intent_hash: self.intent_hash,
            final_state: self.final_state,
            receipt_digest: self.receipt_digest,
            collected_at_ms: self.collected_at_ms,
        }
    }
}
