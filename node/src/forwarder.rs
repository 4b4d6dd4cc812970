//! A follower's commands travel to the leader in groups: one forwarded call carries every
//! command that arrived while earlier groups were on their way.
//!
//! A follower serves writes by forwarding them to the leader. One call per command would
//! cost the leader a gRPC request, a decode and an admission per command, and the follower
//! a round trip per command; under load, a follower would serve far fewer effects than the
//! leader. Instead, as the proposer does for Raft entries, at most
//! [`FORWARDS_IN_FLIGHT`] groups are on their way to a leader at once; commands that
//! arrive meanwhile queue, and when a group's answer comes back everything queued (up to
//! the batch limits) leaves as the next group. When idle a command leaves at once, alone.
//! Each leader has its own queue: commands for a new leader do not wait behind calls to
//! an old one that stopped answering. A command whose caller has gone (its call was
//! cancelled or timed out) is dropped when its group forms, unsent.
//!
//! The leader admits a group as one call per command, proposes every command of it, and
//! answers with all their outcomes, with "overloaded" when it proposed none of them, or
//! with each command's own result (see
//! [`LedgerNode::serve_forwarded`](crate::node::LedgerNode::serve_forwarded)). A command
//! whose leader stopped leading or could not serve it is sent again by
//! [`LedgerNode::submit`](crate::node::LedgerNode::submit), with its own command id: one
//! the leader had applied before the failure is found among the remembered command ids
//! and answered as the first time, never applied twice. A command the leader turned away
//! as overloaded, or did not commit within its request timeout, is answered so to its
//! caller, whose client waits before it tries again: a slow leader is not sent its
//! commands again at once, and the commands of a group that were committed are answered,
//! not sent again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tonic::transport::Channel;

use ledger_core::{Command, Outcome};
use ledger_proto::pb::raft_client::RaftClient;
use ledger_raft_store::Raft;

use crate::config::ProposerSettings;
use crate::error::NodeError;
use crate::metrics::FORWARD_COMMANDS;
use crate::network::{with_secret, Channels, PEER_MESSAGE_BYTES_MAX};
use crate::proposer::answer_all;
use crate::wire::{self, ForwardFailure, ForwardRequest, ForwardResponse};

/// Groups on their way to the leader at once. The leader proposes a group's commands in
/// its next entries; two groups in flight keep its proposer fed while the next forms.
pub const FORWARDS_IN_FLIGHT: usize = 2;
/// Longest wait for a forwarded call; the leader's own timeout is shorter.
pub const FORWARD_TIMEOUT_MS: u64 = 10_000;

struct Waiting {
    command: Command,
    /// The command's encoded size (`proposer::encoded_bytes`).
    bytes: usize,
    reply: oneshot::Sender<Result<Outcome, NodeError>>,
}

/// The way from a node to its peers for forwarded calls: the Raft handle (for their
/// addresses) and connections apart from those that carry Raft's messages.
#[derive(Clone)]
pub struct Route {
    raft: Raft,
    channels: Channels,
}

impl Route {
    /// Forwarded calls from `raft`'s node over `channels`, which must not be the ones
    /// Raft's messages use.
    pub fn new(raft: Raft, channels: Channels) -> Self {
        Route { raft, channels }
    }

    /// The connections forwarded calls use.
    pub fn channels(&self) -> &Channels {
        &self.channels
    }

    /// The advertised address of a cluster member.
    pub fn addr_of(&self, id: u64) -> Option<String> {
        let metrics = self.raft.metrics().borrow_watched().clone();
        metrics
            .membership_config
            .membership()
            .get_node(&id)
            .map(|n| n.addr.clone())
    }

    /// Sends `request` to `peer` and returns its answer; the peer's refusals (not the
    /// leader, overloaded, unavailable) are errors.
    pub async fn call(
        &self,
        peer: u64,
        request: &ForwardRequest,
    ) -> Result<ForwardResponse, NodeError> {
        let addr = self
            .addr_of(peer)
            .ok_or_else(|| NodeError::Unavailable(format!("no address for node {peer}")))?;
        let channel = self.channels.get(&addr).map_err(NodeError::Unavailable)?;
        let mut client = RaftClient::<Channel>::new(channel)
            .max_decoding_message_size(PEER_MESSAGE_BYTES_MAX)
            .max_encoding_message_size(PEER_MESSAGE_BYTES_MAX);
        let message = wire::message(request);
        let call = client.forward(with_secret(message, &self.channels.cluster_secret()));
        let response = tokio::time::timeout(Duration::from_millis(FORWARD_TIMEOUT_MS), call)
            .await
            .map_err(|_| NodeError::Timeout(FORWARD_TIMEOUT_MS))?
            .map_err(|s| NodeError::Unavailable(format!("node {peer}: {}", s.message())))?;
        let response: ForwardResponse = wire::decode(&response.into_inner().payload)
            .map_err(|e| NodeError::Internal(format!("node {peer} sent garbage: {e}")))?;
        let refused = match response {
            ForwardResponse::NotLeader(l) => ForwardFailure::NotLeader(l),
            ForwardResponse::Unavailable(m) => ForwardFailure::Unavailable(m),
            ForwardResponse::Overloaded { retry_after_ms } => {
                ForwardFailure::Overloaded { retry_after_ms }
            }
            other => return Ok(other),
        };
        Err(failure(peer, refused))
    }
}

/// Hands commands to the grouping task of their leader.
#[derive(Clone)]
pub struct Forwarder {
    route: Route,
    limits: Limits,
    /// One queue per leader, each drained by its own task; the tasks end with the
    /// forwarder.
    queues: Arc<Mutex<BTreeMap<u64, mpsc::UnboundedSender<Waiting>>>>,
}

/// Limits of one group: the proposer's limits of one entry, which the group becomes.
#[derive(Debug, Clone, Copy)]
struct Limits {
    commands: usize,
    bytes: usize,
}

impl Forwarder {
    /// Forwards along `route` within the entry limits of `settings`. What waits is what
    /// the node admitted: every command passed admission before it is forwarded, and one
    /// whose caller has gone is dropped when its group forms.
    pub fn new(route: Route, settings: &ProposerSettings) -> Self {
        Forwarder {
            route,
            limits: Limits {
                commands: settings.max_batch_commands,
                bytes: settings.max_batch_bytes,
            },
            queues: Arc::default(),
        }
    }

    /// Forwards `command`, of `bytes` encoded, to `leader` with whatever else is waiting
    /// for it, and returns its outcome.
    pub async fn forward(
        &self,
        leader: u64,
        command: Command,
        bytes: usize,
    ) -> Result<Outcome, NodeError> {
        let (reply, answer) = oneshot::channel();
        self.queue(leader)
            .send(Waiting {
                command,
                bytes,
                reply,
            })
            .map_err(|_| NodeError::Internal("forwarder stopped".into()))?;
        answer
            .await
            .unwrap_or_else(|_| Err(NodeError::Internal("forwarder dropped a command".into())))
    }

    /// The queue of `leader`, its task started on first use.
    fn queue(&self, leader: u64) -> mpsc::UnboundedSender<Waiting> {
        let mut queues = crate::locked(&self.queues);
        queues
            .entry(leader)
            .or_insert_with(|| {
                let (tx, rx) = mpsc::unbounded_channel();
                tokio::spawn(run(self.route.clone(), leader, rx, self.limits));
                tx
            })
            .clone()
    }
}

/// Forwards the commands queued for `leader`, in groups.
async fn run(route: Route, leader: u64, mut rx: mpsc::UnboundedReceiver<Waiting>, limits: Limits) {
    let slots = Arc::new(Semaphore::new(FORWARDS_IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut group = Vec::new();
        let mut bytes = 0;
        let mut next = Some(first);
        while let Some(waiting) = next.take() {
            if !waiting.reply.is_closed() {
                bytes += waiting.bytes;
                group.push(waiting);
            }
            if group.len() < limits.commands && bytes < limits.bytes {
                next = rx.try_recv().ok();
            }
        }
        if group.is_empty() {
            continue;
        }
        let route = route.clone();
        tokio::spawn(async move {
            send(&route, leader, group).await;
            drop(slot);
        });
    }
}

/// Forwards one group and hands each command its own result, or all of them the failure.
async fn send(route: &Route, leader: u64, group: Vec<Waiting>) {
    let count = group.len();
    metrics::histogram!(FORWARD_COMMANDS).record(count as f64);
    let (commands, replies): (Vec<Command>, Vec<_>) =
        group.into_iter().map(|w| (w.command, w.reply)).unzip();
    let result = match route
        .call(leader, &ForwardRequest::Commands(commands))
        .await
    {
        Ok(ForwardResponse::Outcomes(outcomes)) if outcomes.len() == count => Ok(outcomes),
        Ok(ForwardResponse::Each(results)) if results.len() == count => {
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(result.map_err(|f| failure(leader, f)));
            }
            return;
        }
        Ok(other) => Err(unexpected(other)),
        Err(e) => Err(e),
    };
    answer_all(replies, result);
}

/// The error a caller gets for `peer`'s failure to serve its call or command.
fn failure(peer: u64, failure: ForwardFailure) -> NodeError {
    match failure {
        ForwardFailure::NotLeader(l) => NodeError::NotLeader(l),
        ForwardFailure::Unavailable(m) => NodeError::Unavailable(m),
        ForwardFailure::Overloaded { retry_after_ms } => NodeError::Overloaded {
            what: format!("leader {peer} admits no more calls"),
            retry_after_ms,
        },
        ForwardFailure::Timeout(ms) => NodeError::Timeout(ms),
    }
}

/// A leader's answer that does not fit the question.
pub(crate) fn unexpected(response: ForwardResponse) -> NodeError {
    NodeError::Internal(format!("unexpected answer from the leader: {response:?}"))
}
