//! The effect ledger's gRPC contract (`proto/ledger.proto`) and its mapping to the core
//! types, shared by the node and the client so that both sides convert the same way.
//!
//! - [`pb`]: the generated messages, clients and servers; [`health`]: the standard gRPC
//!   health service.
//! - [`convert`]: core values to messages and back; requests to core commands; core
//!   outcomes to responses and back. Reading a message is total: what the contract
//!   requires but the message lacks is a [`WireError`], never a panic.
//! - [`server`]: service constructors with the message limits the node needs.
//! - [`status`]: refusals and wire errors as `tonic::Status`, and refusals read back out
//!   of a status.

pub mod convert;
pub mod server;
pub mod status;

pub use convert::{
    list_limit, IntoCommand, OutcomeError, WatchFilter, WireError, LIST_LIMIT_DEFAULT,
    LIST_LIMIT_MAX,
};
pub use server::{raft_server, RAFT_MESSAGE_BYTES_MAX};
pub use status::{
    item_error_to_status, outcome_to_response, refusal_to_status, status_to_item_error,
    status_to_refusal, wire_error_to_status, REFUSAL_METADATA_KEY, RETRY_AFTER_MS_METADATA,
    WATCHES_FULL_METADATA,
};

/// Generated protobuf messages and tonic services.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("ledger.v1");
}

/// The standard gRPC health service (`grpc.health.v1`), generated.
#[allow(missing_docs, clippy::all)]
pub mod health {
    tonic::include_proto!("grpc.health.v1");
}
