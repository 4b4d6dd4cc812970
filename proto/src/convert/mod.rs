//! The mapping between the core types and the protobuf messages, in both directions.
//!
//! Core to wire is infallible (`From`). Wire to core is total (`TryFrom`, never a panic):
//! a message field the contract requires but the sender left out, an unset oneof, an
//! enum number the contract does not define (or its `UNSPECIFIED` zero) and an intent
//! hash that is not 32 bytes are a [`WireError`] naming the field, which the node answers
//! with INVALID_ARGUMENT. The contents (key syntax, sizes, empty strings) are not judged
//! here: the core's `apply` refuses bad contents itself, identically on every replica.
//! Grants are the exception: a client acts on one with no core to judge it, so a grant
//! without its provider key or grant time, or whose lease does not end after it was
//! granted, is a [`WireError`] too.
//!
//! - [`values`]: keys, tools, authorities, declarations, enums, observations, reports,
//!   decisions.
//! - [`record`]: effect records and their parts, tool policies, tenant settings.
//! - [`outcome`]: grants and claim and reconcile outcomes; core [`Outcome`]s as RPC
//!   responses and back.
//! - [`request`]: request constructors for the client and [`IntoCommand`] for the node.
//! - [`tombstone`]: expired effects, tombstones (and what a `Get` found), tenant settings.

use std::convert::Infallible;

use ledger_core::{IntentHash, Outcome, Refusal};

pub mod outcome;
pub mod record;
pub mod request;
pub mod tombstone;
pub mod values;

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod tests;

pub use request::{list_limit, IntoCommand, WatchFilter, LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX};

/// Why a protobuf message does not map to a core value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// A message field or oneof the contract requires is not set.
    #[error("{0} is missing")]
    Missing(String),
    /// An enum field holds its unspecified zero or a number the contract does not define.
    #[error("{field} has no valid value ({value})")]
    BadEnum {
        /// The field's path in the message.
        field: String,
        /// The number received.
        value: i32,
    },
    /// A bytes field has the wrong length.
    #[error("{field} is {len} bytes, expected {expected}")]
    BadLength {
        /// The field's path in the message.
        field: String,
        /// The length received.
        len: usize,
        /// The length the contract requires.
        expected: usize,
    },
    /// A field holds a value the contract rules out (a grant's lease that ends before it
    /// was granted).
    #[error("{field} is invalid: {reason}")]
    Invalid {
        /// The field's path in the message.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl WireError {
    /// The path of the offending field within the top-level message, e.g.
    /// `declaration.key`.
    pub fn field(&self) -> &str {
        match self {
            WireError::Missing(field)
            | WireError::BadEnum { field, .. }
            | WireError::BadLength { field, .. }
            | WireError::Invalid { field, .. } => field,
        }
    }

    /// The same error seen from the message that holds the offending one in `parent`:
    /// the field path gains `parent.` in front.
    pub fn within(self, parent: &str) -> Self {
        let join = |field: String| {
            if field.is_empty() {
                parent.to_owned()
            } else {
                format!("{parent}.{field}")
            }
        };
        match self {
            WireError::Missing(field) => WireError::Missing(join(field)),
            WireError::BadEnum { field, value } => WireError::BadEnum {
                field: join(field),
                value,
            },
            WireError::BadLength {
                field,
                len,
                expected,
            } => WireError::BadLength {
                field: join(field),
                len,
                expected,
            },
            WireError::Invalid { field, reason } => WireError::Invalid {
                field: join(field),
                reason,
            },
        }
    }
}

impl From<Infallible> for WireError {
    fn from(never: Infallible) -> Self {
        match never {}
    }
}

/// Why a core outcome cannot be sent as the response of an RPC.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutcomeError {
    /// The command was refused: the RPC answers with the refusal's status.
    #[error(transparent)]
    Refused(Refusal),
    /// The outcome is of another kind than the RPC returns (a bug in the caller).
    #[error("a {rpc} call cannot answer with a {got} outcome")]
    Mismatch {
        /// The RPC whose response was asked for.
        rpc: &'static str,
        /// The kind of outcome offered.
        got: &'static str,
    },
}

impl OutcomeError {
    /// The error for `outcome` offered as the answer of `rpc`.
    pub(crate) fn unexpected(rpc: &'static str, outcome: Outcome) -> Self {
        match outcome {
            Outcome::Refused(refusal) => OutcomeError::Refused(refusal),
            other => OutcomeError::Mismatch {
                rpc,
                got: outcome_name(&other),
            },
        }
    }
}

/// A short name of an outcome's kind, for errors and logs.
pub fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Configured => "configured",
        Outcome::Declared { .. } => "declared",
        Outcome::Claim(_) => "claim",
        Outcome::LeaseExtended { .. } => "lease_extended",
        Outcome::Reported { .. } => "reported",
        Outcome::Reconcile(_) => "reconcile",
        Outcome::Observed { .. } => "observed",
        Outcome::Decided { .. } => "decided",
        Outcome::Swept { .. } => "swept",
        Outcome::Refused(_) => "refused",
        Outcome::Amended { .. } => "amended",
    }
}

/// Converts a required message field: absent is [`WireError::Missing`], and an error
/// inside it names the field.
pub fn required<T, U>(value: Option<T>, field: &str) -> Result<U, WireError>
where
    U: TryFrom<T>,
    WireError: From<U::Error>,
{
    let value = value.ok_or_else(|| WireError::Missing(field.to_owned()))?;
    U::try_from(value).map_err(|e| WireError::from(e).within(field))
}

/// Converts an optional message field: absent is `None`.
pub fn optional<T, U>(value: Option<T>, field: &str) -> Result<Option<U>, WireError>
where
    U: TryFrom<T>,
    WireError: From<U::Error>,
{
    value.map(|v| required(Some(v), field)).transpose()
}

/// Converts a repeated message field; an error names the element (`field[i]`).
pub fn repeated<T, U>(values: Vec<T>, field: &str) -> Result<Vec<U>, WireError>
where
    U: TryFrom<T>,
    WireError: From<U::Error>,
{
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| required(Some(v), &format!("{field}[{i}]")))
        .collect()
}

/// Reads an enum field: `P` is the generated enum, `C` the core one. Numbers the
/// contract does not define and the `UNSPECIFIED` zero are [`WireError::BadEnum`].
///
/// `enum_from_i32::<pb::EffectState, ledger_core::EffectState>(response.state, "state")`
pub fn enum_from_i32<P, C>(value: i32, field: &str) -> Result<C, WireError>
where
    P: TryFrom<i32>,
    C: TryFrom<P, Error = WireError>,
{
    P::try_from(value)
        .map_err(|_| WireError::BadEnum {
            field: String::new(),
            value,
        })
        .and_then(C::try_from)
        .map_err(|e| e.within(field))
}

/// Reads a SHA-256 intent hash: exactly 32 bytes.
pub fn intent_hash_from_bytes(bytes: &[u8], field: &str) -> Result<IntentHash, WireError> {
    <[u8; 32]>::try_from(bytes)
        .map(IntentHash)
        .map_err(|_| WireError::BadLength {
            field: field.to_owned(),
            len: bytes.len(),
            expected: 32,
        })
}

/// The bytes of an intent hash as the wire carries them.
pub fn intent_hash_to_bytes(hash: &IntentHash) -> Vec<u8> {
    hash.0.to_vec()
}
