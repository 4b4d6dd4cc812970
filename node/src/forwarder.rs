//! A follower's commands travel to the leader in groups: one forwarded call carries every
//! command that arrived while earlier groups were on their way.
//!
//! A follower serves writes by forwarding them to the leader. One call per command would
//! cost the leader a gRPC request, a decode and an admission per command, and the follower
//! a round trip per command; under load, a follower would serve far fewer effects than the
//! leader. Instead, as the proposer does for Raft entries, at most
//! [`FORWARDS_IN_FLIGHT`] groups are on their way at once; commands that arrive meanwhile
//! queue, and when a group's answer comes back everything queued (up to the batch limits)
//! leaves as the next group. When idle a command leaves at once, alone.
//!
//! The leader admits a group as one call per command, proposes every command of it, and
//! answers with all their outcomes or with one failure (not the leader, overloaded,
//! unavailable). On a failure every command of the group fails the same way and is sent
//! again by [`LedgerNode::submit`](crate::node::LedgerNode::submit) with its own command id:
//! a command the leader had applied before the failure is found among the remembered
//! command ids and answered as the first time, never applied twice.

use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tonic::transport::Channel;

use ledger_core::{Command, Outcome};
use ledger_proto::pb;
use ledger_proto::pb::raft_client::RaftClient;
use ledger_raft_store::Raft;

use crate::config::ProposerSettings;
use crate::error::NodeError;
use crate::metrics::FORWARD_COMMANDS;
use crate::network::{with_secret, Channels, PEER_MESSAGE_BYTES_MAX};
use crate::proposer::approx_bytes;
use crate::wire::{self, ForwardRequest, ForwardResponse};

/// Groups on their way to the leader at once. The leader proposes a group's commands in
/// its next entries; two groups in flight keep its proposer fed while the next forms.
pub const FORWARDS_IN_FLIGHT: usize = 2;
/// Longest wait for a forwarded call; the leader's own timeout is shorter.
pub const FORWARD_TIMEOUT_MS: u64 = 10_000;

struct Waiting {
    leader: u64,
    command: Command,
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
        let message = pb::RaftMessage {
            payload: wire::encode(request),
        };
        let call = client.forward(with_secret(message, &self.channels.cluster_secret()));
        let response = tokio::time::timeout(Duration::from_millis(FORWARD_TIMEOUT_MS), call)
            .await
            .map_err(|_| NodeError::Timeout(FORWARD_TIMEOUT_MS))?
            .map_err(|s| NodeError::Unavailable(format!("node {peer}: {}", s.message())))?;
        let response: ForwardResponse = wire::decode(&response.into_inner().payload)
            .map_err(|e| NodeError::Internal(format!("node {peer} sent garbage: {e}")))?;
        match response {
            ForwardResponse::NotLeader(l) => Err(NodeError::NotLeader(l)),
            ForwardResponse::Unavailable(m) => Err(NodeError::Unavailable(m)),
            ForwardResponse::Overloaded { retry_after_ms } => Err(NodeError::Overloaded {
                what: format!("leader {peer} admits no more calls"),
                retry_after_ms,
            }),
            other => Ok(other),
        }
    }
}

/// Hands commands to the grouping task.
#[derive(Clone)]
pub struct Forwarder {
    tx: mpsc::UnboundedSender<Waiting>,
}

/// Limits of one group: the proposer's limits of one entry, which the group becomes.
#[derive(Debug, Clone, Copy)]
struct Limits {
    commands: usize,
    bytes: usize,
}

impl Forwarder {
    /// Starts the grouping task, forwarding along `route` within the entry limits of
    /// `settings`. The commands waiting are bounded by the node's admission, which every
    /// command passed before it is forwarded.
    pub fn start(route: Route, settings: &ProposerSettings) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let limits = Limits {
            commands: settings.max_batch_commands,
            bytes: settings.max_batch_bytes,
        };
        tokio::spawn(run(route, rx, limits));
        Forwarder { tx }
    }

    /// Forwards `command` to `leader` with whatever else is waiting for it, and returns
    /// its outcome.
    pub async fn forward(&self, leader: u64, command: Command) -> Result<Outcome, NodeError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Waiting {
                leader,
                command,
                reply,
            })
            .map_err(|_| NodeError::Internal("forwarder stopped".into()))?;
        answer
            .await
            .unwrap_or_else(|_| Err(NodeError::Internal("forwarder dropped a command".into())))
    }
}

async fn run(route: Route, mut rx: mpsc::UnboundedReceiver<Waiting>, limits: Limits) {
    let slots = Arc::new(Semaphore::new(FORWARDS_IN_FLIGHT));
    // A command for another leader than its group's, held for the next group.
    let mut held: Option<Waiting> = None;
    loop {
        let first = match held.take() {
            Some(first) => first,
            None => match rx.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let leader = first.leader;
        let mut bytes = approx_bytes(&first.command);
        let mut group = vec![first];
        while group.len() < limits.commands && bytes < limits.bytes {
            match rx.try_recv() {
                Ok(next) if next.leader == leader => {
                    bytes += approx_bytes(&next.command);
                    group.push(next);
                }
                Ok(next) => {
                    held = Some(next);
                    break;
                }
                Err(_) => break,
            }
        }
        let route = route.clone();
        tokio::spawn(async move {
            send(&route, leader, group).await;
            drop(slot);
        });
    }
}

/// Forwards one group and hands each command its outcome, or all of them the failure.
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
        Ok(other) => Err(unexpected(other)),
        Err(e) => Err(e),
    };
    match result {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                let _ = reply.send(Ok(outcome));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

/// A leader's answer that does not fit the question.
pub(crate) fn unexpected(response: ForwardResponse) -> NodeError {
    NodeError::Internal(format!("unexpected answer from the leader: {response:?}"))
}
