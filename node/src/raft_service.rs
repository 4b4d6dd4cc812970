//! The internal `Raft` gRPC service: AppendEntries, votes, snapshot streaming and
//! forwarding from followers. Only peers holding the cluster secret may call it, and with
//! TLS on only over a connection on which they presented a certificate the client CA
//! signed (the handshake has checked the signature and validity of any certificate
//! presented; a connection without one is refused here, since the ledger API may allow
//! it).

use futures::StreamExt;
use openraft::alias::{SnapshotMetaOf, SnapshotOf, VoteOf};
use openraft::async_runtime::WatchReceiver;
use openraft::raft::{AppendEntriesRequest, SnapshotResponse};
use openraft::vote::RaftLeaderId;
use openraft::EntryPayload;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Request, Response, Status, Streaming};

use ledger_proto::pb;
use ledger_raft_store::{blocking, SnapshotData, SnapshotReceiver, StoreError, TypeConfig};

use crate::metrics::{Stopwatch, APPEND_SERVED_SECONDS};
use crate::network::CLUSTER_SECRET_HEADER;
use crate::node::LedgerNode;
use crate::wire::{self, ForwardRequest};

type C = TypeConfig;

/// Largest snapshot accepted over the wire.
const SNAPSHOT_BYTES_MAX: usize = 16 << 30;

/// Serves the internal service for one node.
pub struct RaftService {
    node: LedgerNode,
}

impl RaftService {
    /// The service for `node`, accepting callers with the cluster secret (and, with TLS
    /// on, a client certificate) that `node.security` holds at each call.
    pub fn new(node: LedgerNode) -> Self {
        RaftService { node }
    }

    fn check<T>(&self, request: &Request<T>) -> Result<(), Status> {
        #[cfg(not(madsim))]
        if self.node.security.tls_enabled()
            && request.peer_certs().is_none_or(|chain| chain.is_empty())
        {
            return Err(Status::unauthenticated(
                "internal service: TLS is on and this connection presented no client \
                 certificate; only cluster nodes, with a certificate signed by the client \
                 CA (tls.client_ca_file), may call it",
            ));
        }
        let offered = request
            .metadata()
            .get(CLUSTER_SECRET_HEADER)
            .and_then(|v| v.to_str().ok());
        match offered {
            Some(offered) if self.node.security.credentials().is_cluster_secret(offered) => Ok(()),
            _ => Err(Status::unauthenticated(
                "internal service: missing or wrong cluster secret",
            )),
        }
    }
}

fn decode<T: DeserializeOwned>(request: Request<pb::RaftMessage>) -> Result<T, Status> {
    wire::decode(&request.into_inner().payload)
        .map_err(|e| Status::invalid_argument(format!("undecodable payload: {e}")))
}

fn reply<T: Serialize>(value: &T) -> Result<Response<pb::RaftMessage>, Status> {
    Ok(Response::new(pb::RaftMessage {
        payload: wire::encode(value),
    }))
}

/// A Raft result as sent back: the error as text, since a peer only needs to know it failed.
fn flatten<T, E: std::fmt::Display>(result: Result<T, E>) -> Result<T, String> {
    result.map_err(|e| e.to_string())
}

#[tonic::async_trait]
impl pb::raft_server::Raft for RaftService {
    async fn append_entries(
        &self,
        request: Request<pb::RaftMessage>,
    ) -> Result<Response<pb::RaftMessage>, Status> {
        self.check(&request)?;
        let rpc: AppendEntriesRequest<C> = decode(request)?;
        let started = Stopwatch::start();
        let carries_entries = !rpc.entries.is_empty();
        // Learn the leader's stamps as they arrive, not once applied: a follower applies
        // an entry only when it hears it is committed, which after a leader's crash is
        // only once the next leader is elected, seconds later (see `stamp_bound`).
        // Whether the entry was made in the sending leader's term tells a fresh stamp from
        // an old one sent to a follower that is behind (see `real_time`).
        let term = rpc.vote.leader_id().to_committed();
        let latest = rpc
            .entries
            .iter()
            .filter_map(|entry| match &entry.payload {
                EntryPayload::Normal(request) => {
                    Some((request.stamp, *entry.log_id.committed_leader_id() == term))
                }
                _ => None,
            })
            .max_by_key(|(stamp, _)| stamp.ledger_ms);
        if let Some((stamp, current_term)) = latest {
            self.node.time.observe_received(&stamp, current_term);
        }
        let answer = flatten(self.node.raft.append_entries(rpc).await);
        if carries_entries {
            metrics::histogram!(APPEND_SERVED_SECONDS).record(started.elapsed());
        }
        reply(&answer)
    }

    async fn vote(
        &self,
        request: Request<pb::RaftMessage>,
    ) -> Result<Response<pb::RaftMessage>, Status> {
        self.check(&request)?;
        let rpc = decode(request)?;
        reply(&flatten(self.node.raft.vote(rpc).await))
    }

    async fn pre_vote(
        &self,
        request: Request<pb::RaftMessage>,
    ) -> Result<Response<pb::RaftMessage>, Status> {
        self.check(&request)?;
        let rpc = decode(request)?;
        reply(&flatten(self.node.raft.pre_vote(rpc).await))
    }

    async fn install_snapshot(
        &self,
        request: Request<Streaming<pb::SnapshotChunk>>,
    ) -> Result<Response<pb::RaftMessage>, Status> {
        self.check(&request)?;
        let mut chunks = request.into_inner();
        let first = chunks
            .next()
            .await
            .ok_or_else(|| Status::invalid_argument("empty snapshot stream"))??;
        let (vote, meta): (VoteOf<C>, SnapshotMetaOf<C>) = wire::decode(&first.header)
            .map_err(|e| Status::invalid_argument(format!("undecodable snapshot header: {e}")))?;
        // A stale leader's stream would take the standby generation over from the current
        // leader's, only to be turned away by openraft once received whole: answered now,
        // as openraft answers it, with this node's vote. The vote read here may lag the
        // one openraft holds, never lead it, so nothing openraft would take is turned away.
        let current = self.node.raft.metrics().borrow_watched().vote;
        if !matches!(
            vote.partial_cmp(&current),
            Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)
        ) {
            return reply(&Ok::<_, String>(SnapshotResponse::<C>::new(current)));
        }
        // Restored piece by piece as it arrives: a snapshot is never one buffer here.
        let reader = self.node.reader.clone();
        let receiver = blocking(move || reader.receive_snapshot())
            .await
            .map_err(|e| Status::unavailable(format!("cannot receive a snapshot: {e}")))?;
        let mut received_bytes = 0;
        let mut receiver = keep(receiver, first.data).await?;
        while let Some(chunk) = chunks.next().await {
            let data = chunk?.data;
            received_bytes += data.len();
            if received_bytes > SNAPSHOT_BYTES_MAX {
                return Err(Status::resource_exhausted("snapshot larger than the limit"));
            }
            receiver = keep(receiver, data).await?;
        }
        let expected = meta.clone();
        let data = blocking(move || receiver.finish(&expected))
            .await
            .map_err(|e| refused("the snapshot stream", e))?;
        let snapshot = SnapshotOf::<C, SnapshotData> {
            meta,
            snapshot: data,
        };
        reply(&flatten(
            self.node.raft.install_full_snapshot(vote, snapshot).await,
        ))
    }

    async fn forward(
        &self,
        request: Request<pb::RaftMessage>,
    ) -> Result<Response<pb::RaftMessage>, Status> {
        self.check(&request)?;
        let forwarded: ForwardRequest = decode(request)?;
        reply(&self.node.serve_forwarded(forwarded).await)
    }
}

/// Restores one received piece of a snapshot.
async fn keep(mut receiver: SnapshotReceiver, piece: Vec<u8>) -> Result<SnapshotReceiver, Status> {
    if piece.is_empty() {
        return Ok(receiver);
    }
    blocking(move || receiver.push(&piece).map(|()| receiver))
        .await
        .map_err(|e| refused("a snapshot piece", e))
}

/// The answer when `what` of a snapshot stream could not be taken: the stream is not a
/// valid snapshot (INVALID_ARGUMENT), or this node could not write it or is taking
/// another (UNAVAILABLE).
fn refused(what: &str, error: StoreError) -> Status {
    match error {
        StoreError::SnapshotRefused(_)
        | StoreError::Inconsistent(_)
        | StoreError::Decode { .. } => {
            Status::invalid_argument(format!("{what} was refused: {error}"))
        }
        other => Status::unavailable(format!("cannot keep {what}: {other}")),
    }
}
