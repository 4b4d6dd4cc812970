//! Operational failures of a node, and the one place they become gRPC statuses.
//!
//! Domain refusals (a stale token, a conflict) are outcomes from the state machine and are
//! mapped by `ledger_proto::status`; what is here is everything else: no leader, overload,
//! timeouts, bad wire input, a Raft fatal error.

use ledger_proto::convert::WireError;

pub use ledger_proto::RETRY_AFTER_MS_METADATA;

/// Why a node could not serve a call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NodeError {
    /// No leader is known or the leader could not be reached; retry, possibly elsewhere.
    #[error("no leader available: {0}")]
    Unavailable(String),
    /// This node is not the leader (only returned to other nodes forwarding to it).
    #[error("not the leader (leader is {0:?})")]
    NotLeader(Option<u64>),
    /// The command did not finish in time; it may still be applied. Retry with the same
    /// command id.
    #[error("timed out after {0} ms; retry with the same command id")]
    Timeout(u64),
    /// The node serves as many calls as it admits; nothing of this one was proposed.
    /// Retry the same call after `retry_after_ms`.
    #[error("overloaded ({what}); retry after {retry_after_ms} ms")]
    Overloaded {
        /// Which limit was reached.
        what: String,
        /// The suggested wait before retrying.
        retry_after_ms: u64,
    },
    /// The request is malformed.
    #[error("malformed request: {0}")]
    BadRequest(String),
    /// No or an unknown API key.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// The caller may not do this.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The thing asked for does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// Raft reported an unrecoverable error or the node is shutting down.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<WireError> for NodeError {
    fn from(e: WireError) -> Self {
        NodeError::BadRequest(e.to_string())
    }
}

impl From<NodeError> for tonic::Status {
    fn from(e: NodeError) -> Self {
        let message = e.to_string();
        match e {
            NodeError::Unavailable(_) | NodeError::NotLeader(_) => {
                tonic::Status::unavailable(message)
            }
            NodeError::Timeout(_) => tonic::Status::deadline_exceeded(message),
            NodeError::Overloaded { retry_after_ms, .. } => {
                let mut status = tonic::Status::resource_exhausted(message);
                if let Ok(value) = retry_after_ms.to_string().parse() {
                    status.metadata_mut().insert(RETRY_AFTER_MS_METADATA, value);
                }
                status
            }
            NodeError::BadRequest(_) => tonic::Status::invalid_argument(message),
            NodeError::Unauthenticated(_) => tonic::Status::unauthenticated(message),
            NodeError::PermissionDenied(_) => tonic::Status::permission_denied(message),
            NodeError::NotFound(_) => tonic::Status::not_found(message),
            NodeError::Internal(_) => tonic::Status::internal(message),
        }
    }
}
