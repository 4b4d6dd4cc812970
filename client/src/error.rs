//! What a client call can fail with.

use ledger_core::Refusal;

/// Why a call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The ledger refused the command; nothing changed. The refusal says why.
    #[error("refused: {0}")]
    Refused(Refusal),
    /// No node answered within the retry budget. The command may or may not have been
    /// applied: retry it with the same command id.
    #[error("ledger unavailable after {attempts} attempts: {last}")]
    Unavailable {
        /// Attempts made.
        attempts: u32,
        /// The last error seen.
        last: String,
    },
    /// The cluster admits no more calls now: the last try was turned away before anything
    /// of it was proposed, and the waits it suggested used up the overload budget
    /// (`OverloadPolicy`). Try later, with the same command id (an earlier try that got no
    /// answer may still have been applied).
    #[error("overloaded, try later (in {retry_after_ms} ms; waited {waited_ms} ms already)")]
    Overloaded {
        /// The wait the node suggested last.
        retry_after_ms: u64,
        /// How long this call already waited on overload answers.
        waited_ms: u64,
    },
    /// A node answered with an error that is not a ledger refusal (bad request,
    /// unauthenticated, not found).
    #[error("{code:?}: {message}")]
    Status {
        /// The gRPC code.
        code: tonic::Code,
        /// The node's message.
        message: String,
    },
    /// A node's answer could not be understood.
    #[error("malformed answer: {0}")]
    Malformed(String),
    /// The client is misconfigured.
    #[error("configuration: {0}")]
    Config(String),
}

impl ClientError {
    /// The error a status stands for: a refusal when it carries one.
    pub fn from_status(status: tonic::Status) -> Self {
        match refusal_of(&status) {
            Some(refusal) => ClientError::Refused(refusal),
            None => ClientError::Status {
                code: status.code(),
                message: status.message().to_owned(),
            },
        }
    }
}

/// The ledger refusal a status carries, if any.
pub fn refusal_of(status: &tonic::Status) -> Option<Refusal> {
    ledger_proto::status::status_to_refusal(status)
}
