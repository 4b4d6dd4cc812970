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
//! A replication session's AppendEntries go on one stream (`AppendStream`), each sent
//! without waiting for the answer to the one before (see [`PeerClient::stream_append`]).
//!
//! Every call has a deadline: openraft's for heartbeats and votes, at least
//! `append_timeout_ms` for AppendEntries that carry entries (see `RaftSettings`), and on
//! a stream for each request's answer.
//! Snapshots are streamed in chunks so a large ledger never becomes one oversized message;
//! the receiver restores each chunk before it takes the next, so a large snapshot takes
//! minutes, and its deadline is on progress: the call fails when no chunk has been taken,
//! or after the last no answer has come, for [`SNAPSHOT_IDLE_MIN`] (or openraft's longer
//! snapshot timeout).
//! The cluster secret goes with every call: the internal service carries
//! already-authenticated commands and must not be reachable with a tenant's key. With TLS
//! on, peers are dialed over TLS and this node presents its certificate, which the
//! peer's Raft service requires; channels made before a certificate reload are replaced.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{AbortHandle, Peekable, Stream, StreamExt};
use openraft::alias::{SnapshotOf, VoteOf};
use openraft::base::{BoxFuture, BoxStream};
use openraft::errors::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{stream_append_sequential, RPCOption};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendResult, VoteRequest,
    VoteResponse,
};
use openraft::{BasicNode, OptionalSend, RaftNetworkFactory, RaftNetworkV2};
use serde::de::DeserializeOwned;
use tonic::transport::{Channel, Endpoint};

use ledger_proto::pb;
use ledger_proto::pb::raft_client::RaftClient;
use ledger_raft_store::{blocking, SnapshotData, TypeConfig};

use crate::locked;
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
/// How long a peer that does not take AppendEntries streams is sent calls before a
/// stream is tried again.
const STREAM_RETRY_AFTER: Duration = Duration::from_secs(60);
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
    /// Since when the peer is sent one call at a time: a node of an earlier version
    /// answers `AppendStream` with `UNIMPLEMENTED`. Tried again after
    /// [`STREAM_RETRY_AFTER`], since the peer may have been upgraded meanwhile.
    calls_since: Option<Stopwatch>,
}

impl RaftNetworkFactory<C> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Self::Network {
        PeerClient {
            target,
            addr: node.addr.clone(),
            network: self.clone(),
            calls_since: None,
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
        let message = wire::message(request);
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

    /// A replication session's requests: while none has carried entries (a heartbeat, a
    /// commit update, a probe), each is its own call on the control connection, as
    /// `append_entries` sends it; from the first that carries entries on, they go on one
    /// `AppendStream` call on the replication connection, each sent as soon as openraft
    /// has it rather than after the answer to the one before, and answered in order.
    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<'s, Result<BoxStream<'s, Result<StreamAppendResult<C>, RPCError<C>>>, RPCError<C>>>
    where
        S: Stream<Item = AppendEntriesRequest<C>> + OptionalSend + Unpin + 'static,
    {
        if self
            .calls_since
            .is_some_and(|since| since.elapsed() < STREAM_RETRY_AFTER)
        {
            return stream_append_sequential(self, input, option);
        }
        let session = Session {
            peer: self,
            option,
            phase: Phase::Calls(input.peekable()),
        };
        Box::pin(async move {
            let answers: BoxStream<'s, _> =
                Box::pin(futures::stream::unfold(session, Session::next));
            Ok(answers)
        })
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

/// One `stream_append` session's state.
struct Session<'s, S: Stream> {
    peer: &'s mut PeerClient,
    option: RPCOption,
    phase: Phase<S>,
}

enum Phase<S: Stream> {
    /// No request has carried entries yet: each is a call of its own.
    Calls(Peekable<S>),
    /// Requests go on one stream; `sent` holds when each unanswered one was sent and
    /// whether it carried entries (only those are measured, as for calls). Dropping
    /// `input` ends the requests (see [`InputGuard`]).
    Piped {
        answers: Box<tonic::Streaming<pb::RaftMessage>>,
        sent: Arc<Mutex<VecDeque<(Stopwatch, bool)>>>,
        ttl: Duration,
        input: InputGuard,
    },
    Ended,
}

type Answer = Result<StreamAppendResult<C>, RPCError<C>>;

impl<'s, S> Session<'s, S>
where
    S: Stream<Item = AppendEntriesRequest<C>> + OptionalSend + Unpin + 'static,
{
    /// The next answer, in the order of the requests; `None` once the input is done or
    /// after an error (openraft starts a new session).
    async fn next(mut self) -> Option<(Answer, Self)> {
        match std::mem::replace(&mut self.phase, Phase::Ended) {
            Phase::Ended => None,
            Phase::Calls(mut input) => {
                let carries_entries = !Pin::new(&mut input).peek().await?.entries.is_empty();
                if carries_entries {
                    match self.peer.open_stream(input, &self.option).await {
                        Ok(phase) => {
                            self.phase = phase;
                            Box::pin(self.next()).await
                        }
                        Err(e) => Some((Err(e), self)),
                    }
                } else {
                    let rpc = input.next().await?;
                    match self.call(rpc).await {
                        Ok((result, go_on)) => {
                            if go_on {
                                self.phase = Phase::Calls(input);
                            }
                            Some((Ok(result), self))
                        }
                        Err(e) => Some((Err(e), self)),
                    }
                }
            }
            Phase::Piped {
                mut answers,
                sent,
                ttl,
                input,
            } => {
                let answer = match next_answer(&mut answers, &sent, ttl, self.peer.target).await {
                    Ok(Some(answer)) => answer,
                    Ok(None) => return None,
                    Err(e) => return Some((Err(e), self)),
                };
                if let Some((sent, true)) = locked(&sent).pop_front() {
                    metrics::histogram!(REPLICATE_SECONDS, "follower" => self.peer.target.to_string())
                        .record(sent.elapsed());
                }
                if answer.is_ok() {
                    self.phase = Phase::Piped {
                        answers,
                        sent,
                        ttl,
                        input,
                    };
                }
                Some((Ok(answer), self))
            }
        }
    }

    /// `rpc` as a call of its own, and whether the session may go on: the follower took
    /// all of it.
    async fn call(
        &mut self,
        rpc: AppendEntriesRequest<C>,
    ) -> Result<(StreamAppendResult<C>, bool), RPCError<C>> {
        let prev = rpc.prev_log_id;
        let last = rpc.entries.last().map(|e| e.log_id).or(prev);
        let response = self.peer.append_entries(rpc, self.option.clone()).await?;
        let whole = match &response {
            AppendEntriesResponse::PartialSuccess(matching) => *matching == last,
            _ => true,
        };
        let result = response.into_stream_result(prev, last);
        let go_on = whole && result.is_ok();
        Ok((result, go_on))
    }
}

/// Ends a session's request stream when dropped. The transport keeps taking a request
/// body after the answers are no longer read, and openraft's requests for one follower
/// come from state its sessions share: a session that ended (an error, a timeout,
/// openraft letting it go) must not keep taking requests meant for the next one.
struct InputGuard(AbortHandle);

impl Drop for InputGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The next answer on a stream of AppendEntries: `Ok(None)` when the follower ended the
/// stream with every request answered (an end with requests unanswered fails). Fails
/// when the oldest request sent has waited `ttl` for its answer; while none is waiting
/// (the session is idle between entries) there is no deadline.
async fn next_answer(
    answers: &mut tonic::Streaming<pb::RaftMessage>,
    sent: &Mutex<VecDeque<(Stopwatch, bool)>>,
    ttl: Duration,
    target: u64,
) -> Result<Option<StreamAppendResult<C>>, RPCError<C>> {
    loop {
        let oldest = locked(sent).front().map(|(sent, _)| *sent);
        let wait = oldest.map_or(ttl, |sent| ttl.saturating_sub(sent.elapsed()));
        match tokio::time::timeout(wait, answers.next()).await {
            Ok(None) => {
                let unanswered = locked(sent).len();
                if unanswered == 0 {
                    return Ok(None);
                }
                return Err(unreachable(format!(
                    "node {target} ended the AppendEntries stream with {unanswered} unanswered"
                ))
                .into());
            }
            Ok(Some(Err(status))) => return Err(unreachable(status).into()),
            Ok(Some(Ok(message))) => {
                return wire::decode(&message.payload)
                    .map(Some)
                    .map_err(|e| unreachable(e).into())
            }
            Err(_) => {
                if locked(sent)
                    .front()
                    .is_some_and(|(sent, _)| sent.elapsed() >= ttl)
                {
                    return Err(unreachable(format!(
                        "node {target} left an AppendEntries unanswered for {ttl:?}"
                    ))
                    .into());
                }
            }
        }
    }
}

impl PeerClient {
    /// Opens an `AppendStream` call on the replication connection that sends `input`
    /// as openraft yields it.
    async fn open_stream<S>(
        &mut self,
        input: Peekable<S>,
        option: &RPCOption,
    ) -> Result<Phase<S>, RPCError<C>>
    where
        S: Stream<Item = AppendEntriesRequest<C>> + OptionalSend + Unpin + 'static,
    {
        let ttl = option.hard_ttl().max(self.network.append_timeout);
        let sent = Arc::new(Mutex::new(VecDeque::new()));
        let sending = sent.clone();
        let (input, abort) = futures::stream::abortable(input);
        let guard = InputGuard(abort);
        let requests = input.map(move |rpc| {
            let message = wire::message(&rpc);
            locked(&sending).push_back((Stopwatch::start(), !rpc.entries.is_empty()));
            message
        });
        let channels = &self.network.replication;
        let mut client = self.client(channels)?;
        let call = client.append_stream(with_secret(requests, &channels.cluster_secret()));
        let answers = match tokio::time::timeout(ttl, call).await {
            Err(_) => {
                return Err(unreachable(format!(
                    "node {} did not take an AppendEntries stream within {ttl:?}",
                    self.target
                ))
                .into())
            }
            Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => {
                self.calls_since = Some(Stopwatch::start());
                return Err(unreachable(format!(
                    "node {} does not take streamed AppendEntries (an earlier version): \
                     sending it one call at a time",
                    self.target
                ))
                .into());
            }
            Ok(Err(status)) => return Err(unreachable(status).into()),
            Ok(Ok(response)) => Box::new(response.into_inner()),
        };
        Ok(Phase::Piped {
            answers,
            sent,
            ttl,
            input: guard,
        })
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
        *locked(&self.0) = Stopwatch::start();
    }

    /// Resolves once no progress has been made for `idle`.
    async fn stalled(&self, idle: Duration) {
        loop {
            let since = locked(&self.0).elapsed();
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

    /// A peer for the tests of replication sessions, on a real local connection: it
    /// serves AppendEntries calls one at a time, answering each `Success`, and either has
    /// no `AppendStream` (a node of an earlier version) or takes a stream, reports how
    /// many requests arrived on it once its input ends, and never answers.
    #[cfg(not(madsim))]
    mod peer {
        use std::sync::atomic::{AtomicUsize, Ordering};

        use futures::channel::mpsc::UnboundedSender;
        use openraft::vote::RaftLeaderIdExt;
        use openraft::{EntryPayload, RaftTypeConfig};
        use tonic::{Request, Response, Status};

        use ledger_raft_store::types::{Entry, LogId, Vote};

        use super::*;

        pub struct FakePeer {
            /// `None`: no `AppendStream`; else where each stream's request count goes.
            pub streams: Option<UnboundedSender<usize>>,
            /// Calls being served now.
            pub calls: AtomicUsize,
        }

        #[tonic::async_trait]
        impl pb::raft_server::Raft for FakePeer {
            async fn append_entries(
                &self,
                request: Request<pb::RaftMessage>,
            ) -> Result<Response<pb::RaftMessage>, Status> {
                let rpc: AppendEntriesRequest<C> =
                    wire::decode(&request.into_inner().payload).expect("a request");
                assert_eq!(rpc.entries.len(), 1);
                let at_once = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
                self.calls.fetch_sub(1, Ordering::SeqCst);
                assert_eq!(at_once, 1, "a call was sent before the last was answered");
                let answer: Result<AppendEntriesResponse<C>, String> =
                    Ok(AppendEntriesResponse::Success);
                Ok(Response::new(wire::message(&answer)))
            }
            type AppendStreamStream =
                futures::stream::BoxStream<'static, Result<pb::RaftMessage, Status>>;
            async fn append_stream(
                &self,
                request: Request<tonic::Streaming<pb::RaftMessage>>,
            ) -> Result<Response<Self::AppendStreamStream>, Status> {
                let Some(counts) = self.streams.clone() else {
                    return Err(Status::unimplemented("AppendStream"));
                };
                let mut inbound = request.into_inner();
                tokio::spawn(async move {
                    let mut seen = 0;
                    while let Some(Ok(_)) = inbound.next().await {
                        seen += 1;
                    }
                    let _ = counts.unbounded_send(seen);
                });
                Ok(Response::new(Box::pin(futures::stream::pending())))
            }
            async fn vote(
                &self,
                _: Request<pb::RaftMessage>,
            ) -> Result<Response<pb::RaftMessage>, Status> {
                Err(Status::unimplemented("Vote"))
            }
            async fn pre_vote(
                &self,
                _: Request<pb::RaftMessage>,
            ) -> Result<Response<pb::RaftMessage>, Status> {
                Err(Status::unimplemented("PreVote"))
            }
            async fn install_snapshot(
                &self,
                _: Request<tonic::Streaming<pb::SnapshotChunk>>,
            ) -> Result<Response<pb::RaftMessage>, Status> {
                Err(Status::unimplemented("InstallSnapshot"))
            }
            async fn forward(
                &self,
                _: Request<pb::RaftMessage>,
            ) -> Result<Response<pb::RaftMessage>, Status> {
                Err(Status::unimplemented("Forward"))
            }
        }

        /// A client of `peer`, served on a local port.
        pub async fn client_of(peer: FakePeer) -> PeerClient {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("a port");
            let addr = listener.local_addr().expect("its address");
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(pb::raft_server::RaftServer::new(peer))
                    .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
            );
            let config = crate::config::NodeConfig::from_toml(
                "node_id = 1\nlisten_addr = \"127.0.0.1:1\"\ndata_dir = \"/tmp/x\"\n\
                 cluster_secret = \"0123456789abcdef\"\n",
                std::path::Path::new("x.toml"),
            )
            .expect("a config");
            let mut network = Network::new(Security::new(&config).expect("security"), 2_000);
            network
                .new_client(2, &BasicNode::new(addr.to_string()))
                .await
        }

        pub fn log_id(index: u64) -> LogId {
            LogId::new(<C as RaftTypeConfig>::LeaderId::new_committed(1, 1), index)
        }

        /// The request carrying entry `index`, after the one before it.
        pub fn request(index: u64) -> AppendEntriesRequest<C> {
            AppendEntriesRequest::<C> {
                vote: Vote::new_committed(1, 1),
                prev_log_id: (index > 1).then(|| log_id(index - 1)),
                leader_commit: None,
                entries: vec![Entry {
                    log_id: log_id(index),
                    payload: EntryPayload::Blank,
                }],
            }
        }
    }

    /// A peer of an earlier version serves AppendEntries one call at a time and has no
    /// `AppendStream`: the first session to it fails naming why, and the next sends the
    /// same requests as calls of their own, one after the other, each answered.
    #[cfg(not(madsim))]
    #[tokio::test]
    async fn a_peer_without_append_streams_is_sent_one_call_at_a_time() {
        use peer::{client_of, log_id, request, FakePeer};

        let mut peer = client_of(FakePeer {
            streams: None,
            calls: Default::default(),
        })
        .await;
        let requests = || futures::stream::iter((1..=3).map(request));
        let option = RPCOption::new(Duration::from_secs(1));

        let first: Vec<_> = peer
            .stream_append(requests(), option.clone())
            .await
            .expect("a session")
            .collect()
            .await;
        match first.as_slice() {
            [Err(e)] => assert!(e.to_string().contains("earlier version"), "{e}"),
            other => panic!("the first session answered {other:?}"),
        }

        let second: Vec<_> = peer
            .stream_append(requests(), option)
            .await
            .expect("a session")
            .collect()
            .await;
        let matched: Vec<_> = second
            .into_iter()
            .map(|answer| answer.expect("answered").expect("taken"))
            .collect();
        assert_eq!(
            matched,
            vec![Some(log_id(1)), Some(log_id(2)), Some(log_id(3))]
        );
    }

    /// A session that ends while its follower has not answered (here openraft letting it
    /// go) ends its requests too: the follower sees the stream's input end after the one
    /// request sent, and a request openraft yields afterwards never leaves.
    #[cfg(not(madsim))]
    #[tokio::test]
    async fn a_session_that_ends_sends_no_more_requests() {
        use peer::{client_of, request, FakePeer};

        let (counts, mut seen) = futures::channel::mpsc::unbounded();
        let mut peer = client_of(FakePeer {
            streams: Some(counts),
            calls: Default::default(),
        })
        .await;
        let (more, input) = futures::channel::mpsc::unbounded();
        more.unbounded_send(request(1)).expect("queued");
        let mut answers = peer
            .stream_append(input, RPCOption::new(Duration::from_secs(1)))
            .await
            .expect("a session");
        let unanswered = tokio::time::timeout(Duration::from_millis(300), answers.next()).await;
        assert!(unanswered.is_err(), "the peer answers nothing");
        drop(answers);
        more.unbounded_send(request(2)).expect("queued");
        let taken = tokio::time::timeout(Duration::from_secs(5), seen.next())
            .await
            .expect("the stream's input ended");
        assert_eq!(taken, Some(1));
    }

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
