//! The internal `Raft` gRPC service: AppendEntries (as calls and as streams), votes,
//! snapshot streaming and forwarding from followers. Only peers holding the cluster
//! secret may call it, and with TLS on only over a connection on which they presented a
//! certificate the client CA signed (the handshake has checked the signature and validity
//! of any certificate presented; a connection without one is refused here, since the
//! ledger API may allow it).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures::stream::BoxStream;
use futures::StreamExt;
use openraft::alias::{SnapshotMetaOf, SnapshotOf, VoteOf};
use openraft::async_runtime::WatchReceiver;
use openraft::raft::{AppendEntriesRequest, SnapshotResponse};
use openraft::vote::RaftLeaderId;
use openraft::EntryPayload;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::watch;
use tonic::{Request, Response, Status, Streaming};

use ledger_proto::pb;
use ledger_raft_store::{blocking, SnapshotData, SnapshotReceiver, StoreError, TypeConfig};

use crate::locked;
use crate::metrics::{Stopwatch, APPEND_SERVED_SECONDS};
use crate::network::CLUSTER_SECRET_HEADER;
use crate::node::LedgerNode;
use crate::security::Security;
use crate::wire::{self, ForwardRequest};

type C = TypeConfig;

/// Largest snapshot accepted over the wire.
const SNAPSHOT_BYTES_MAX: usize = 16 << 30;

/// Serves the internal service for one node.
pub struct RaftService {
    node: LedgerNode,
    /// Becomes true when the node stops serving: streams a peer keeps open end then.
    stopping: watch::Receiver<bool>,
}

impl RaftService {
    /// The service for `node`, accepting callers with the cluster secret (and, with TLS
    /// on, a client certificate) that `node.security` holds at each call; its
    /// AppendEntries streams end when `stopping` turns true.
    pub fn new(node: LedgerNode, stopping: watch::Receiver<bool>) -> Self {
        RaftService { node, stopping }
    }

    fn check<T>(&self, request: &Request<T>) -> Result<(), Status> {
        check_peer(&self.node.security, request)
    }
}

/// Whether `request` comes from a cluster node: it offers the cluster secret and, with
/// TLS on, came over a connection that presented a client certificate.
fn check_peer<T>(security: &Security, request: &Request<T>) -> Result<(), Status> {
    #[cfg(not(madsim))]
    if security.tls_enabled() && request.peer_certs().is_none_or(|chain| chain.is_empty()) {
        return Err(Status::unauthenticated(
            "internal service: TLS is on and this connection presented no client \
             certificate; only cluster nodes, with a certificate signed by the client CA \
             (tls.client_ca_file), may call it",
        ));
    }
    match offered_secret(request) {
        Some(offered) if security.credentials().is_cluster_secret(offered) => Ok(()),
        _ => Err(wrong_secret()),
    }
}

/// Refuses a caller of the internal service on the request's headers, before its body is
/// read: a caller without the cluster secret cannot make the node buffer messages of up to
/// [`ledger_proto::RAFT_MESSAGE_BYTES_MAX`] first. (Each call checks again, so the
/// simulated transport, which has no interceptors, is checked all the same.)
#[derive(Clone)]
pub struct PeerCheck(Security);

impl PeerCheck {
    /// The check of the credentials `security` holds at each call.
    pub fn new(security: Security) -> Self {
        PeerCheck(security)
    }
}

impl tonic::service::Interceptor for PeerCheck {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        check_peer(&self.0, &request).map(|()| request)
    }
}

/// The cluster secret `request` offers, if any.
fn offered_secret<T>(request: &Request<T>) -> Option<&str> {
    request
        .metadata()
        .get(CLUSTER_SECRET_HEADER)
        .and_then(|v| v.to_str().ok())
}

fn wrong_secret() -> Status {
    Status::unauthenticated("internal service: missing or wrong cluster secret")
}

/// How a node says it could not read a message from a peer: a node of an older version
/// meeting a form it does not know answers this (sent as text, so that nodes of every
/// version since the first say it alike).
pub const UNDECODABLE: &str = "undecodable payload";

fn decode<T: DeserializeOwned>(request: Request<pb::RaftMessage>) -> Result<T, Status> {
    decode_message(&request.into_inner())
}

fn decode_message<T: DeserializeOwned>(message: &pb::RaftMessage) -> Result<T, Status> {
    wire::decode(&message.payload)
        .map_err(|e| Status::invalid_argument(format!("{UNDECODABLE}: {e}")))
}

fn reply<T: Serialize>(value: &T) -> Result<Response<pb::RaftMessage>, Status> {
    Ok(Response::new(wire::message(value)))
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
        observe_stamps(&self.node, &rpc);
        let answer = flatten(self.node.raft.append_entries(rpc).await);
        if carries_entries {
            metrics::histogram!(APPEND_SERVED_SECONDS).record(started.elapsed());
        }
        reply(&answer)
    }

    type AppendStreamStream = BoxStream<'static, Result<pb::RaftMessage, Status>>;

    /// Each request is handed to openraft as it is decoded, without waiting for the
    /// answer to the one before, and answered in order once its entries are synced. A
    /// message that does not decode ends the input there: the requests before it are
    /// answered, then the stream ends with `INVALID_ARGUMENT`. The stream may last a
    /// whole term, so the secret it was opened with is checked again at each message
    /// against the secrets in force (a rotation ends it with `UNAUTHENTICATED`), and its
    /// input ends when the node stops serving. Requests left unanswered when openraft
    /// stops end it with `UNAVAILABLE`.
    async fn append_stream(
        &self,
        request: Request<Streaming<pb::RaftMessage>>,
    ) -> Result<Response<Self::AppendStreamStream>, Status> {
        self.check(&request)?;
        let offered = offered_secret(&request).unwrap_or_default().to_string();
        let mut stopping = self.stopping.clone();
        let stopped = async move {
            // A dropped sender means the node is gone: stop as well.
            let _ = stopping.wait_for(|stopping| *stopping).await;
        };
        let node = self.node.clone();
        // Requests taken and not yet answered: when each was decoded, and whether it
        // carried entries (only those are measured, as for `append_entries`).
        let taken = Arc::new(Mutex::new(VecDeque::<(Stopwatch, bool)>::new()));
        let refused = Arc::new(Mutex::new(None::<Status>));
        let (taken_in, refused_in, taken_at_end) = (taken.clone(), refused.clone(), taken.clone());
        let requests = request
            .into_inner()
            .take_until(stopped)
            .scan((), move |(), message| {
                let decoded = message.and_then(|m| {
                    if !node.security.credentials().is_cluster_secret(&offered) {
                        return Err(wrong_secret());
                    }
                    decode_message::<AppendEntriesRequest<C>>(&m)
                });
                futures::future::ready(match decoded {
                    Ok(rpc) => {
                        observe_stamps(&node, &rpc);
                        locked(&taken_in).push_back((Stopwatch::start(), !rpc.entries.is_empty()));
                        Some(rpc)
                    }
                    Err(status) => {
                        *locked(&refused_in) = Some(status);
                        None
                    }
                })
            });
        let answers = self.node.raft.stream_append(requests).map(move |answer| {
            if let Some((started, true)) = locked(&taken).pop_front() {
                metrics::histogram!(APPEND_SERVED_SECONDS).record(started.elapsed());
            }
            match answer {
                Ok(result) => Ok(wire::message(&result)),
                Err(fatal) => Err(Status::unavailable(format!("raft stopped: {fatal}"))),
            }
        });
        let refusal = futures::stream::once(async move {
            let unanswered = locked(&taken_at_end).len();
            locked(&refused).take().or_else(|| {
                (unanswered > 0).then(|| {
                    Status::unavailable(format!(
                        "raft stopped with {unanswered} AppendEntries unanswered"
                    ))
                })
            })
        })
        .filter_map(|refused| futures::future::ready(refused.map(Err)));
        Ok(Response::new(Box::pin(answers.chain(refusal))))
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

/// Learns the leader's stamps in `rpc` as they arrive, not once applied: a follower
/// applies an entry only when it hears it is committed, which after a leader's crash is
/// only once the next leader is elected, seconds later (see `stamp_bound`). Whether the
/// entry was made in the sending leader's term tells a fresh stamp from an old one sent
/// to a follower that is behind (see `real_time`).
fn observe_stamps(node: &LedgerNode, rpc: &AppendEntriesRequest<C>) {
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
        node.time.observe_received(&stamp, current_term);
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
