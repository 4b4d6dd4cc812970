//! Server constructors with the message limits the node needs.
//!
//! Real tonic lets a server raise its decoding limit (4 MiB by default), which the internal
//! Raft service needs for AppendEntries batches; the simulated transport passes messages
//! in memory and has no such limit or setter. The difference is absorbed here, so node
//! code is the same in both builds.

use crate::pb::raft_server::{Raft, RaftServer};

/// Largest message the internal Raft service accepts.
pub const RAFT_MESSAGE_BYTES_MAX: usize = 64 << 20;

/// The internal Raft service with its message limits.
#[cfg(not(madsim))]
pub fn raft_server<T: Raft>(service: T) -> RaftServer<T> {
    RaftServer::new(service)
        .max_decoding_message_size(RAFT_MESSAGE_BYTES_MAX)
        .max_encoding_message_size(RAFT_MESSAGE_BYTES_MAX)
}

/// The internal Raft service (the simulated transport has no message limits).
#[cfg(madsim)]
pub fn raft_server<T: Raft>(service: T) -> RaftServer<T, tonic::codegen::IdentityInterceptor> {
    RaftServer::new(service)
}
