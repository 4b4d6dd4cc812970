//! The Raft transport, client side: openraft's `RaftNetworkV2` over the internal gRPC
//! `Raft` service, lazily connected channels per peer.
//!
//! Raft's messages have connections of their own, apart from forwarded client calls (the
//! node's [`Channels`]): on a shared connection a heartbeat waits in the same queue and
//! flow-control window as the calls an overloaded node forwards, and a connection reset by
//! the resets those calls cause takes the heartbeats with it. Raft itself uses two per
//! peer: `control` for heartbeats (AppendEntries without entries) and votes, small and
//! urgent, and `replication` for entries and snapshots, large and slow under load.
//!
//! Every call has a deadline: openraft's for heartbeats and votes, at least
//! `append_timeout_ms` for AppendEntries that carry entries (see `RaftSettings`).
//! Snapshots are streamed in chunks so a large ledger never becomes one oversized message;
//! the receiver restores each chunk before it takes the next, so a large snapshot takes
//! minutes, and its deadline is on progress: the call fails when no chunk has been taken,
//! or after the last no answer has come, for [`SNAPSHOT_IDLE_MIN`] (or openraft's longer
//! snapshot timeout).
//! The cluster secret goes with every call: the internal service carries
//! already-authenticated commands and must not be reachable with a tenant's key. With TLS
//! on, peers are dialed over TLS and this node presents its certificate, which the
//! peer's Raft service requires; channels made before a certificate reload are replaced.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::alias::{SnapshotOf, VoteOf};
use openraft::errors::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, OptionalSend, RaftNetworkFactory, RaftNetworkV2};
use serde::de::DeserializeOwned;
use tonic::transport::{Channel, Endpoint};

use ledger_proto::pb;
use ledger_proto::pb::raft_client::RaftClient;
use ledger_raft_store::{blocking, SnapshotData, TypeConfig};

use crate::metrics::{Stopwatch, REPLICATE_SECONDS};
use crate::security::Security;
use crate::wire;

type C = TypeConfig;

/// Metadata key carrying the cluster secret on internal calls.
pub const CLUSTER_SECRET_HEADER: &str = "x-ledger-cluster";
/// Snapshot chunk size.
const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;
/// Shortest wait for a snapshot stream's next step: the receiver taking a chunk, or its
/// answer after the last one (installing a restored stream is one synced write).
const SNAPSHOT_IDLE_MIN: Duration = Duration::from_secs(30);
/// Largest message accepted from a peer (AppendEntries batches, snapshot chunks).
pub const PEER_MESSAGE_BYTES_MAX: usize = 64 << 20;

/// Lazily connected gRPC channels to peers, by address: one connection per peer and per
/// `Channels` value, so that two values never share a connection.
#[derive(Clone)]
pub struct Channels {
    map: Arc<Mutex<ChannelMap>>,
    security: Security,
}

#[derive(Default)]
struct ChannelMap {
    /// The TLS generation the channels were made with.
    #[cfg(not(madsim))]
    generation: u64,
    by_addr: BTreeMap<String, Channel>,
}

impl Channels {
    /// No channels yet; they will be made with the TLS material of `security`.
    pub fn new(security: Security) -> Self {
        Channels {
            map: Arc::default(),
            security,
        }
    }

    /// The channel to `addr` (`host:port`), created on first use.
    pub fn get(&self, addr: &str) -> Result<Channel, String> {
        let mut map = self.map.lock().expect("channel map lock");
        #[cfg(not(madsim))]
        if let Some(tls) = self.security.tls() {
            if map.generation != tls.generation() {
                map.by_addr.clear();
                map.generation = tls.generation();
            }
        }
        if let Some(channel) = map.by_addr.get(addr) {
            return Ok(channel.clone());
        }
        let channel = self
            .endpoint(addr)?
            .connect_timeout(Duration::from_millis(500))
            .tcp_nodelay(true)
            .connect_lazy();
        map.by_addr.insert(addr.to_owned(), channel.clone());
        Ok(channel)
    }

    fn endpoint(&self, addr: &str) -> Result<Endpoint, String> {
        #[cfg(not(madsim))]
        if let Some(tls) = self.security.tls() {
            return tls.peer_endpoint(addr);
        }
        Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| format!("bad peer address {addr}: {e}"))
    }

    /// The cluster secret in force, to send with a call.
    pub fn cluster_secret(&self) -> String {
        self.security.credentials().cluster_secret().to_owned()
    }
}

/// Builds per-peer network clients for openraft, on connections of Raft's own.
#[derive(Clone)]
pub struct Network {
    control: Channels,
    replication: Channels,
    append_timeout: Duration,
}

impl Network {
    /// A network that authenticates with the secret and certificate `security` holds at
    /// each call and gives an AppendEntries that carries entries at least
    /// `append_timeout_ms`.
    pub fn new(security: Security, append_timeout_ms: u64) -> Self {
        Network {
            control: Channels::new(security.clone()),
            replication: Channels::new(security),
            append_timeout: Duration::from_millis(append_timeout_ms),
        }
    }
}

/// A client for one peer.
pub struct PeerClient {
    target: u64,
    addr: String,
    network: Network,
}

impl RaftNetworkFactory<C> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Self::Network {
        PeerClient {
            target,
            addr: node.addr.clone(),
            network: self.clone(),
        }
    }
}

fn unreachable(e: impl std::fmt::Display) -> Unreachable<C> {
    Unreachable::new(&io::Error::other(e.to_string()))
}

/// Attaches the cluster secret to a request.
pub fn with_secret<T>(message: T, secret: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Ok(value) = secret.parse() {
        request.metadata_mut().insert(CLUSTER_SECRET_HEADER, value);
    }
    request
}

impl PeerClient {
    fn client(&self, channels: &Channels) -> Result<RaftClient<Channel>, Unreachable<C>> {
        let channel = channels.get(&self.addr).map_err(unreachable)?;
        Ok(RaftClient::new(channel)
            .max_decoding_message_size(PEER_MESSAGE_BYTES_MAX)
            .max_encoding_message_size(PEER_MESSAGE_BYTES_MAX))
    }

    /// One unary call on `channels` with a deadline; a remote error string becomes
    /// `Unreachable`.
    async fn unary<Req, Resp, F, Fut>(
        &self,
        channels: &Channels,
        request: &Req,
        ttl: Duration,
        call: F,
    ) -> Result<Resp, Unreachable<C>>
    where
        Req: serde::Serialize,
        Resp: DeserializeOwned,
        F: FnOnce(RaftClient<Channel>, tonic::Request<pb::RaftMessage>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<pb::RaftMessage>, tonic::Status>>,
    {
        let message = pb::RaftMessage {
            payload: wire::encode(request),
        };
        let fut = call(
            self.client(channels)?,
            with_secret(message, &channels.cluster_secret()),
        );
        let response = tokio::time::timeout(ttl, fut)
            .await
            .map_err(|_| unreachable(format!("node {} timed out after {ttl:?}", self.target)))?
            .map_err(unreachable)?;
        let result: Result<Resp, String> =
            wire::decode(&response.into_inner().payload).map_err(unreachable)?;
        result.map_err(unreachable)
    }
}

impl RaftNetworkV2<C> for PeerClient {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<C>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<C>, RPCError<C>> {
        let network = &self.network;
        let carries_entries = !rpc.entries.is_empty();
        let (channels, ttl) = if carries_entries {
            let ttl = option.hard_ttl().max(network.append_timeout);
            (&network.replication, ttl)
        } else {
            (&network.control, option.hard_ttl())
        };
        let started = Stopwatch::start();
        let answer = self
            .unary(channels, &rpc, ttl, |mut c, r| async move {
                c.append_entries(r).await
            })
            .await?;
        if carries_entries {
            metrics::histogram!(REPLICATE_SECONDS, "follower" => self.target.to_string())
                .record(started.elapsed());
        }
        Ok(answer)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<C>,
        option: RPCOption,
    ) -> Result<VoteResponse<C>, RPCError<C>> {
        let ttl = option.hard_ttl();
        Ok(self
            .unary(&self.network.control, &rpc, ttl, |mut c, r| async move {
                c.vote(r).await
            })
            .await?)
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<C>,
        option: RPCOption,
    ) -> Result<VoteResponse<C>, RPCError<C>> {
        let ttl = option.hard_ttl();
        Ok(self
            .unary(&self.network.control, &rpc, ttl, |mut c, r| async move {
                c.pre_vote(r).await
            })
            .await?)
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<C>,
        snapshot: SnapshotOf<C, Self::SnapshotData>,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<C>, StreamingError<C>> {
        let header = wire::encode(&(vote, snapshot.meta));
        let data = snapshot.snapshot;
        let reader = blocking(move || data.chunks())
            .await
            .map_err(|e| unreachable(format!("snapshot unreadable: {e}")))?;
        let first = pb::SnapshotChunk {
            header,
            data: Vec::new(),
        };
        // Encoded from the view as it is sent: the snapshot is never one buffer here.
        let rest = futures::StreamExt::filter_map(
            reader.into_stream(SNAPSHOT_CHUNK_BYTES),
            |read| async move {
                match read {
                    Ok(data) => Some(pb::SnapshotChunk {
                        header: Vec::new(),
                        data,
                    }),
                    Err(e) => {
                        // Ending early: the receiver sees a partial stream and refuses it.
                        tracing::error!("snapshot stream failed: {e}");
                        None
                    }
                }
            },
        );
        let progress = Progress::new();
        let taken = progress.clone();
        let chunks = futures::StreamExt::inspect(
            futures::StreamExt::chain(futures::stream::iter([first]), rest),
            move |_| taken.touch(),
        );
        let mut client = self.client(&self.network.replication)?;
        let request = with_secret(chunks, &self.network.replication.cluster_secret());
        let send = client.install_snapshot(request);
        let idle = option.hard_ttl().max(SNAPSHOT_IDLE_MIN);
        let response = tokio::select! {
            biased;
            closed = cancel => return Err(StreamingError::Closed(closed)),
            r = send => r.map_err(unreachable)?,
            () = progress.stalled(idle) => return Err(unreachable(format!(
                "snapshot to node {} made no progress for {} s",
                self.target,
                idle.as_secs()
            ))
            .into()),
        };
        let result: Result<SnapshotResponse<C>, String> =
            wire::decode(&response.into_inner().payload).map_err(unreachable)?;
        Ok(result.map_err(unreachable)?)
    }
}

/// When a snapshot stream last made progress: a chunk taken by the transport. A transport
/// deadline, timed like the metrics' stages, never a time the ledger acts on.
#[derive(Clone)]
struct Progress(Arc<Mutex<Stopwatch>>);

impl Progress {
    /// Progress now.
    fn new() -> Self {
        Progress(Arc::new(Mutex::new(Stopwatch::start())))
    }

    /// The stream made progress now.
    fn touch(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Stopwatch::start();
    }

    /// Resolves once no progress has been made for `idle`.
    async fn stalled(&self, idle: Duration) {
        loop {
            let since = self.0.lock().unwrap_or_else(|p| p.into_inner()).elapsed();
            if since >= idle {
                return;
            }
            tokio::time::sleep(idle - since).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_snapshot_stream_stalls_only_once_idle_for_the_limit() {
        let idle = Duration::from_secs(2);
        let progress = Progress::new();
        let stalled = progress.stalled(idle);
        tokio::pin!(stalled);
        // Progress every 100 ms for 3 s, longer than the limit in all: never stalled.
        let mut last = Stopwatch::start();
        for _ in 0..30 {
            tokio::select! {
                () = &mut stalled => panic!("stalled while the stream made progress"),
                () = tokio::time::sleep(Duration::from_millis(100)) => {
                    last = Stopwatch::start();
                    progress.touch();
                }
            }
        }
        stalled.await;
        assert!(
            last.elapsed() >= idle,
            "stalled {:?} after the last progress",
            last.elapsed()
        );
    }
}
