//! The one place where refusals and malformed requests become gRPC statuses, and where a
//! client reads a refusal back out of a status.
//!
//! A refusal travels as its gRPC code (the kind of failure, for generic gRPC tooling),
//! its `Display` text as the message (for people), and the refusal itself as JSON in the
//! binary metadata entry [`REFUSAL_METADATA_KEY`] (for clients that act on its kind, e.g.
//! a stale fencing token). Codes:
//!
//! | code                  | refusals                                                      |
//! |-----------------------|---------------------------------------------------------------|
//! | `INVALID_ARGUMENT`    | `InvalidField`, `InvalidIntent`, `InvalidPolicy`, `ProofRequired`, `DeclarationTooLarge` |
//! | `NOT_FOUND`           | `UnknownEffect`, `UnknownTool`                                |
//! | `PERMISSION_DENIED`   | `WrongTenant`, `NotPermitted`, `UnknownTenant`                |
//! | `FAILED_PRECONDITION` | `StaleToken`, `LeaseExpired`, `WrongAttemptKind`, `AlreadyFinal`, `ConfirmationRequired`, `NotEscalated`, `EscalationChanged`, `ReadOnlyTool`, `AmendNotAllowed`, `TooManyAmendments`, `Expired` |
//! | `ABORTED`             | `Conflict`                                                    |
//! | `ALREADY_EXISTS`      | `CommandIdReused`                                             |
//! | `RESOURCE_EXHAUSTED`  | `QuotaExceeded`                                               |

use ledger_core::{Outcome, Refusal};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};

use crate::convert::{OutcomeError, WireError};
use crate::pb;

/// The binary metadata entry that carries a refusal as JSON.
pub const REFUSAL_METADATA_KEY: &str = "ledger-refusal-bin";

/// Metadata key of the wait (decimal milliseconds) a `RESOURCE_EXHAUSTED` answer for
/// overload suggests before the same call is sent again. A tenant's quota refusal, also
/// `RESOURCE_EXHAUSTED`, carries a refusal instead and no such entry.
pub const RETRY_AFTER_MS_METADATA: &str = "retry-after-ms";

/// Metadata key set on the `UNAVAILABLE` answer of a node that serves all the watches it
/// may: the other nodes may have room, so a client tries them before it backs off.
pub const WATCHES_FULL_METADATA: &str = "watches-full";

/// The gRPC code a refusal is sent with.
pub fn refusal_code(refusal: &Refusal) -> Code {
    match refusal {
        Refusal::InvalidField(_)
        | Refusal::InvalidIntent(_)
        | Refusal::InvalidPolicy(_)
        | Refusal::ProofRequired => Code::InvalidArgument,
        Refusal::UnknownEffect(_) | Refusal::UnknownTool(_) => Code::NotFound,
        Refusal::WrongTenant { .. } | Refusal::NotPermitted { .. } | Refusal::UnknownTenant(_) => {
            Code::PermissionDenied
        }
        Refusal::StaleToken { .. }
        | Refusal::LeaseExpired { .. }
        | Refusal::WrongAttemptKind(_)
        | Refusal::AlreadyFinal { .. }
        | Refusal::ConfirmationRequired
        | Refusal::NotEscalated
        | Refusal::EscalationChanged { .. }
        | Refusal::ReadOnlyTool(_)
        | Refusal::AmendNotAllowed { .. }
        | Refusal::TooManyAmendments { .. }
        | Refusal::Expired(_) => Code::FailedPrecondition,
        Refusal::DeclarationTooLarge { .. } => Code::InvalidArgument,
        Refusal::QuotaExceeded { .. } => Code::ResourceExhausted,
        Refusal::Conflict(_) => Code::Aborted,
        Refusal::CommandIdReused(_) => Code::AlreadyExists,
    }
}

/// Most bytes of member names (as JSON writes them) a conflict's refusal names in its
/// status. A status travels in HTTP/2 headers, and clients take header blocks of 8 KiB (grpc-java) or 16 KiB
/// (hyper's default) unless told otherwise; a conflict between two large intents could
/// name every member of both. Past this, the names that fit are followed by one entry
/// saying how many more differ.
pub const DIFFERING_FIELDS_BYTES_MAX: usize = 4 << 10;

/// The status a refusal is sent as: its code, its text, and the refusal as JSON in
/// [`REFUSAL_METADATA_KEY`] (a conflict naming at most [`DIFFERING_FIELDS_BYTES_MAX`]
/// bytes of member names).
pub fn refusal_to_status(refusal: &Refusal) -> Status {
    let mut metadata = MetadataMap::new();
    let bounded;
    let refusal = match refusal {
        Refusal::Conflict(conflict) => {
            let mut conflict = conflict.clone();
            let mut bytes = 0_usize;
            let fitting = conflict
                .differing_fields
                .iter()
                .take_while(|name| {
                    // As the JSON carries it (escapes included), with its separator.
                    let quoted = serde_json::to_string(name).map_or(usize::MAX, |q| q.len());
                    bytes = bytes.saturating_add(quoted.saturating_add(1));
                    bytes <= DIFFERING_FIELDS_BYTES_MAX
                })
                .count();
            let more = conflict.differing_fields.len() - fitting;
            if more > 0 {
                conflict.differing_fields.truncate(fitting);
                conflict.differing_fields.push(format!("({more} more)"));
            }
            bounded = Refusal::Conflict(conflict);
            &bounded
        }
        other => other,
    };
    // Serialising a refusal (strings, numbers, byte arrays) into memory cannot fail; if it
    // ever did, the code and message still tell the client what happened.
    if let Ok(json) = serde_json::to_vec(refusal) {
        metadata.insert_bin(REFUSAL_METADATA_KEY, MetadataValue::from_bytes(&json));
    }
    Status::with_metadata(refusal_code(refusal), refusal.to_string(), metadata)
}

/// The refusal a status carries; `None` when it carries none or one this version cannot
/// decode (the status is then a transport or node error, or a newer refusal kind).
pub fn status_to_refusal(status: &Status) -> Option<Refusal> {
    let value = status.metadata().get_bin(REFUSAL_METADATA_KEY)?;
    let json = value.to_bytes().ok()?;
    serde_json::from_slice(&json).ok()
}

/// A failed call as an item of a batch's answer: the status's code, message, refusal and
/// suggested wait, which [`item_error_to_status`] turns back into the same status.
pub fn status_to_item_error(status: &Status) -> pb::ItemError {
    let metadata = status.metadata();
    pb::ItemError {
        code: status.code() as i32,
        message: status.message().to_owned(),
        refusal: metadata
            .get_bin(REFUSAL_METADATA_KEY)
            .and_then(|v| v.to_bytes().ok())
            .map(|b| b.to_vec())
            .unwrap_or_default(),
        retry_after_ms: metadata
            .get(RETRY_AFTER_MS_METADATA)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok()),
    }
}

/// The status a batch item's error stands for, as its own call would have been answered.
pub fn item_error_to_status(error: pb::ItemError) -> Status {
    let mut metadata = MetadataMap::new();
    if !error.refusal.is_empty() {
        metadata.insert_bin(
            REFUSAL_METADATA_KEY,
            MetadataValue::from_bytes(&error.refusal),
        );
    }
    if let Some(value) = error
        .retry_after_ms
        .and_then(|ms| ms.to_string().parse().ok())
    {
        metadata.insert(RETRY_AFTER_MS_METADATA, value);
    }
    Status::with_metadata(Code::from_i32(error.code), error.message, metadata)
}

/// The status for a request that does not map to a command: INVALID_ARGUMENT.
pub fn wire_error_to_status(error: &WireError) -> Status {
    Status::invalid_argument(format!("malformed request: {error}"))
}

/// The status for an outcome that cannot be a response: the refusal's status, or
/// INTERNAL when the outcome is of the wrong kind for the RPC.
pub fn outcome_error_to_status(error: &OutcomeError) -> Status {
    match error {
        OutcomeError::Refused(refusal) => refusal_to_status(refusal),
        OutcomeError::Mismatch { .. } => Status::internal(error.to_string()),
    }
}

/// An outcome as the response `R` of the RPC that asked for it, or the status to answer
/// with instead (a refusal, or INTERNAL for an outcome of the wrong kind).
pub fn outcome_to_response<R>(outcome: Outcome) -> Result<R, Status>
where
    R: TryFrom<Outcome, Error = OutcomeError>,
{
    R::try_from(outcome).map_err(|e| outcome_error_to_status(&e))
}

impl From<WireError> for Status {
    fn from(error: WireError) -> Self {
        wire_error_to_status(&error)
    }
}

impl From<OutcomeError> for Status {
    fn from(error: OutcomeError) -> Self {
        outcome_error_to_status(&error)
    }
}

#[cfg(test)]
mod tests;
