//! A running ledger node: Raft, the state machine's read handle, the proposer, and the
//! paths that let any node serve every call.
//!
//! Writes: the leader proposes through the group-commit proposer; a follower forwards the
//! command to the leader over the internal service (one hop, never further), grouped with
//! the other commands waiting to go there (`forwarder`). Reads that
//! decide a dispatch are linearizable: the leader confirms its leadership with a quorum
//! (Raft read index) and waits until its state machine has applied up to that point
//! before reading; followers forward reads to the leader. When leadership moves while a
//! command is in flight the node retries it at the new leader with the same command id,
//! which the state machine deduplicates.
//!
//! Before its first proposal after starting, a node asks its peers what they know of
//! time ([`LedgerNode::settle_time`]): a node that restarted knows the last stamp on its
//! disk but not how long ago it was made, and a peer that kept running does; when none
//! kept running, their wall clocks are the only witnesses of the outage (`real_time`).
//!
//! Every client call is admitted first (`admission`): on the node the caller reached and,
//! when forwarded, again on the leader (one call per command of a group), whose limit is
//! the one that protects Raft. A call
//! turned away on either is answered `RESOURCE_EXHAUSTED` with a suggested wait. Forwarded
//! calls travel on connections of their own, never on those that carry Raft's messages
//! (see `network`).

use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::ReadPolicy;
use tonic::transport::Channel;

use ledger_core::limits::LIST_PAGE_VISITS_MAX;
use ledger_core::{Command, ListPage, ListQuery, Outcome};
use ledger_raft_store::{DiskRef, LedgerReader, Raft};

use crate::admission::Admission;
use crate::error::NodeError;
use crate::forwarder::{unexpected, Forwarder, Route};
use crate::ledger_time::{LedgerTime, PeerAnswer};
use crate::proposer::{check_size, encoded_bytes, Proposer};
use crate::raft_service::UNDECODABLE;
use crate::security::Security;
use crate::wire::{ForwardFailure, ForwardRequest, ForwardResponse, ReadRequest, ReadResponse};

/// How long to wait for a leader to be elected before telling the caller to retry.
const LEADER_WAIT_MS: u64 = 3_000;
/// Attempts at reaching the current leader before giving up.
const ROUTE_ATTEMPTS: usize = 5;
/// Longest wait for the peers' answers about ledger time; a peer that does not answer in
/// time is left out.
const PEER_TIME_TIMEOUT_MS: u64 = 500;
/// What a read counts for against the bytes a node admits: its request is small, and its
/// answer is bounded by the page size.
const READ_ADMITTED_BYTES: usize = 4 << 10;

/// The parts of a node the services share.
#[derive(Clone)]
pub struct LedgerNode {
    /// This node's id.
    pub id: u64,
    /// The Raft handle.
    pub raft: Raft,
    /// Read access to the applied state.
    pub reader: LedgerReader,
    /// The disk Raft's log and the state live on (read for the storage gauges).
    pub disk: DiskRef,
    /// Ledger time on this node: what stamps commands and judges what is due.
    pub time: LedgerTime,
    proposer: Proposer,
    admission: Admission,
    /// Connections for forwarded calls and administration, apart from Raft's.
    route: Route,
    /// Groups a follower's commands into forwarded calls to the leader.
    forwarder: Forwarder,
    /// The credentials and certificates in force; [`Security::reload`] replaces them.
    pub security: Security,
    /// Held while the peers are asked about ledger time, so that they are asked once.
    asking_peers: std::sync::Arc<tokio::sync::Mutex<()>>,
}

impl LedgerNode {
    /// Assembles a node from its running parts. `route` carries forwarded calls, on
    /// connections that must not be the ones Raft's messages use; `forwarder` groups
    /// commands along it.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: u64,
        raft: Raft,
        reader: LedgerReader,
        disk: DiskRef,
        time: LedgerTime,
        proposer: Proposer,
        admission: Admission,
        route: Route,
        forwarder: Forwarder,
        security: Security,
    ) -> Self {
        LedgerNode {
            id,
            raft,
            reader,
            disk,
            time,
            proposer,
            admission,
            route,
            forwarder,
            security,
            asking_peers: Default::default(),
        }
    }

    /// Applies `command` through Raft wherever the leader is, and returns its outcome.
    /// Fails with `Overloaded`, having proposed nothing, when this node or the leader
    /// admits no more calls, and with `BadRequest` for a command larger than any the
    /// ledger accepts.
    pub async fn submit(&self, command: Command) -> Result<Outcome, NodeError> {
        let bytes = encoded_bytes(&command);
        check_size(bytes)?;
        let _admitted = self.admission.admit(bytes)?;
        let mut last = NodeError::Unavailable("no attempt made".into());
        for _ in 0..ROUTE_ATTEMPTS {
            let leader = self.wait_for_leader().await?;
            let result = if leader == self.id {
                self.settle_time().await;
                self.proposer.propose(command.clone(), bytes).await
            } else {
                self.forwarder.forward(leader, command.clone(), bytes).await
            };
            match result {
                Err(e @ (NodeError::NotLeader(_) | NodeError::Unavailable(_))) => last = e,
                other => return other,
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(last)
    }

    /// A page of records, read at the leader, which visits at most
    /// [`LIST_PAGE_VISITS_MAX`] entries for it. A leader of an earlier version cannot read
    /// that form; it is then asked in one it reads, and its page, which ends only at the
    /// limit, goes on after its last record when full.
    pub async fn list(&self, query: ListQuery) -> Result<ListPage, NodeError> {
        let limit = query.limit;
        let answer = match self.read(ReadRequest::ListPage(query.clone())).await {
            Err(NodeError::Unavailable(m)) if m.contains(UNDECODABLE) => {
                self.read(ReadRequest::list_before_pages(query)).await?
            }
            answer => answer?,
        };
        match answer {
            ReadResponse::Page(page) => Ok(page),
            ReadResponse::Records(records) => Ok(ListPage::ended_at_limit(records, limit)),
            other => Err(NodeError::Internal(format!(
                "unexpected read answer {other:?}"
            ))),
        }
    }

    /// Proposes `command` on this node only; fails with `NotLeader` on a follower. For the
    /// leader's own housekeeping (sweeps), which must never be forwarded.
    pub async fn propose_local(&self, command: Command) -> Result<Outcome, NodeError> {
        self.settle_time().await;
        let bytes = encoded_bytes(&command);
        self.proposer.propose(command, bytes).await
    }

    /// Asks the peers what they know of time, once after the node started, before its
    /// first proposal; later calls return at once. A peer that does not answer within
    /// [`PEER_TIME_TIMEOUT_MS`] is left out (with no answer at all, the node goes on from
    /// the last stamp on its disk and ledger time lags: see `stamp_bound`; its own wall
    /// clock then bounds real time: see `real_time`).
    pub async fn settle_time(&self) {
        if !self.time.peers_unasked() {
            return;
        }
        let _asking = self.asking_peers.lock().await;
        if !self.time.peers_unasked() {
            return;
        }
        let peers: Vec<u64> = {
            let metrics = self.raft.metrics().borrow_watched().clone();
            let membership = metrics.membership_config.membership();
            membership
                .nodes()
                .map(|(id, _)| *id)
                .filter(|id| *id != self.id)
                .collect()
        };
        let asks = peers.iter().map(|peer| async move {
            let asked_at_ms = self.time.monotonic_ms();
            let ask = self.route.call(*peer, &ForwardRequest::Clocks);
            let answer = tokio::time::timeout(Duration::from_millis(PEER_TIME_TIMEOUT_MS), ask);
            (*peer, asked_at_ms, answer.await, self.time.monotonic_ms())
        });
        let mut answers = Vec::new();
        for (peer, asked_at_ms, answer, received_at_ms) in futures::future::join_all(asks).await {
            match answer {
                Ok(Ok(ForwardResponse::Clocks(clocks))) => answers.push(PeerAnswer {
                    clocks,
                    asked_at_ms,
                    received_at_ms,
                }),
                other => tracing::debug!(peer, ?other, "no clocks from peer"),
            }
        }
        self.time.settle(&answers);
        self.time.peers_asked();
    }

    /// Serves a read linearizably, at the leader. Fails with `Overloaded` when this node
    /// or the leader admits no more calls.
    pub async fn read(&self, request: ReadRequest) -> Result<ReadResponse, NodeError> {
        let _admitted = self.admission.admit(READ_ADMITTED_BYTES)?;
        let mut last = NodeError::Unavailable("no attempt made".into());
        for _ in 0..ROUTE_ATTEMPTS {
            let leader = self.wait_for_leader().await?;
            let result = if leader == self.id {
                self.read_local(&request).await
            } else {
                self.route
                    .call(leader, &ForwardRequest::Read(request.clone()))
                    .await
                    .and_then(|r| match r {
                        ForwardResponse::Read(answer) => Ok(answer),
                        other => Err(unexpected(other)),
                    })
            };
            match result {
                // The leader cannot read this form; asking again will not change that.
                Err(NodeError::Unavailable(m)) if m.contains(UNDECODABLE) => {
                    return Err(NodeError::Unavailable(m))
                }
                Err(e @ (NodeError::NotLeader(_) | NodeError::Unavailable(_))) => last = e,
                other => return other,
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(last)
    }

    /// Serves a request forwarded by a follower. Never forwards again.
    pub async fn serve_forwarded(&self, request: ForwardRequest) -> ForwardResponse {
        let result = match request {
            ForwardRequest::LedgerTime => {
                let (ledger_ms, age_ms) = self.time.known();
                return ForwardResponse::LedgerTime { ledger_ms, age_ms };
            }
            ForwardRequest::Clocks => return ForwardResponse::Clocks(self.time.clocks()),
            _ if !self.raft.is_leader() => {
                return ForwardResponse::NotLeader(self.current_leader());
            }
            ForwardRequest::Commands(commands) => {
                let sizes: Vec<usize> = commands.iter().map(encoded_bytes).collect();
                let bytes = sizes.iter().fold(0, |sum: usize, b| sum.saturating_add(*b));
                let _admitted = match self.admission.admit_many(commands.len(), bytes) {
                    Ok(admitted) => admitted,
                    Err(e) => return forward_error(e),
                };
                self.settle_time().await;
                let proposals = commands
                    .into_iter()
                    .zip(sizes)
                    .map(|(c, bytes)| self.proposer.propose(c, bytes));
                return group_answer(futures::future::join_all(proposals).await);
            }
            ForwardRequest::Read(read) => {
                let _admitted = match self.admission.admit(READ_ADMITTED_BYTES) {
                    Ok(admitted) => admitted,
                    Err(e) => return forward_error(e),
                };
                self.read_local(&read).await.map(ForwardResponse::Read)
            }
        };
        result.unwrap_or_else(forward_error)
    }

    /// Waits until this node, as leader, has applied everything committed before the
    /// call: what it reads next is linearizable. `NotLeader` on a follower.
    pub async fn linearizable(&self) -> Result<(), NodeError> {
        self.raft
            .ensure_linearizable(ReadPolicy::ReadIndex)
            .await
            .map(|_| ())
            .map_err(|e| match e.forward_to_leader() {
                Some(f) => NodeError::NotLeader(f.leader_id),
                None => NodeError::Unavailable(e.to_string()),
            })
    }

    async fn read_local(&self, request: &ReadRequest) -> Result<ReadResponse, NodeError> {
        self.linearizable().await?;
        self.reader
            .read(|ledger| match request {
                ReadRequest::Get(key) => ReadResponse::Record(ledger.get(key).map(Box::new)),
                ReadRequest::List(query) => {
                    ReadResponse::Records(ledger.list(&query.clone().into()))
                }
                ReadRequest::ListV2(query) => ReadResponse::Records(ledger.list(query)),
                ReadRequest::ListPage(query) => {
                    ReadResponse::Page(ledger.list_page(query, LIST_PAGE_VISITS_MAX))
                }
                ReadRequest::Tenant(t) => ReadResponse::Tenant(ledger.tenant(t)),
            })
            .map_err(|e| NodeError::Unavailable(format!("ledger state unreadable: {e}")))
    }

    /// The gRPC channel to a peer's address.
    pub fn channel(&self, addr: &str) -> Result<Channel, String> {
        self.route.channels().get(addr)
    }

    /// The current leader as this node knows it.
    pub fn current_leader(&self) -> Option<u64> {
        self.raft.metrics().borrow_watched().current_leader
    }

    /// The current term as this node knows it; every election raises it.
    pub fn current_term(&self) -> u64 {
        self.raft.metrics().borrow_watched().current_term
    }

    /// The advertised address of a cluster member.
    pub fn addr_of(&self, id: u64) -> Option<String> {
        self.route.addr_of(id)
    }

    async fn wait_for_leader(&self) -> Result<u64, NodeError> {
        if let Some(leader) = self.current_leader() {
            return Ok(leader);
        }
        let wait = self
            .raft
            .wait(Some(Duration::from_millis(LEADER_WAIT_MS)))
            .metrics(|m| m.current_leader.is_some(), "a leader is known")
            .await;
        match wait {
            Ok(m) => m
                .current_leader
                .ok_or_else(|| NodeError::Unavailable("no leader".into())),
            Err(_) => Err(NodeError::Unavailable(format!(
                "no leader elected within {LEADER_WAIT_MS} ms"
            ))),
        }
    }
}

/// The answer to a forwarded group: every outcome when all were committed; one failure
/// when every command failed alike (overloaded: none was proposed; not the leader;
/// unavailable), which a follower of the previous version reads too; else each command's
/// own result, so that the follower sends again only what failed and hands a slow
/// leader's timeout or an overload to its caller instead of forwarding again at once.
fn group_answer(results: Vec<Result<Outcome, NodeError>>) -> ForwardResponse {
    if results.iter().all(|r| r.is_ok()) {
        return ForwardResponse::Outcomes(results.into_iter().flatten().collect());
    }
    let alike =
        |same: fn(&NodeError) -> bool| results.iter().all(|r| r.as_ref().err().is_some_and(same));
    match results.first() {
        Some(Err(NodeError::Overloaded { retry_after_ms, .. }))
            if alike(|e| matches!(e, NodeError::Overloaded { .. })) =>
        {
            return ForwardResponse::Overloaded {
                retry_after_ms: *retry_after_ms,
            };
        }
        Some(Err(NodeError::NotLeader(leader)))
            if alike(|e| matches!(e, NodeError::NotLeader(_))) =>
        {
            return ForwardResponse::NotLeader(*leader);
        }
        Some(Err(NodeError::Unavailable(message)))
            if alike(|e| matches!(e, NodeError::Unavailable(_))) =>
        {
            return ForwardResponse::Unavailable(message.clone());
        }
        _ => {}
    }
    ForwardResponse::Each(
        results
            .into_iter()
            .map(|r| r.map_err(ForwardFailure::from))
            .collect(),
    )
}

impl From<NodeError> for ForwardFailure {
    fn from(e: NodeError) -> Self {
        match e {
            NodeError::NotLeader(leader) => ForwardFailure::NotLeader(leader),
            NodeError::Overloaded { retry_after_ms, .. } => {
                ForwardFailure::Overloaded { retry_after_ms }
            }
            NodeError::Timeout(ms) => ForwardFailure::Timeout(ms),
            e => ForwardFailure::Unavailable(e.to_string()),
        }
    }
}

/// How a failure to serve a forwarded call is told to the follower.
fn forward_error(e: NodeError) -> ForwardResponse {
    match e {
        NodeError::NotLeader(leader) => ForwardResponse::NotLeader(leader),
        NodeError::Overloaded { retry_after_ms, .. } => {
            ForwardResponse::Overloaded { retry_after_ms }
        }
        e => ForwardResponse::Unavailable(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overloaded() -> NodeError {
        NodeError::Overloaded {
            what: "queue full".into(),
            retry_after_ms: 70,
        }
    }

    #[test]
    fn a_forwarded_group_is_overloaded_only_when_none_of_it_was_proposed() {
        let ok = || Ok(Outcome::Configured);
        assert_eq!(
            group_answer(vec![ok(), ok()]),
            ForwardResponse::Outcomes(vec![Outcome::Configured, Outcome::Configured])
        );
        assert_eq!(
            group_answer(vec![Err(overloaded()), Err(overloaded())]),
            ForwardResponse::Overloaded { retry_after_ms: 70 }
        );
        // One command applied: "overloaded" would tell its caller nothing was proposed.
        assert_eq!(
            group_answer(vec![ok(), Err(overloaded())]),
            ForwardResponse::Each(vec![
                Ok(Outcome::Configured),
                Err(ForwardFailure::Overloaded { retry_after_ms: 70 })
            ])
        );
    }

    #[test]
    fn each_command_of_a_group_that_partly_failed_gets_its_own_result() {
        let ok = || Ok(Outcome::Configured);
        // The applied command is answered; the other is sent again, at the new leader.
        assert_eq!(
            group_answer(vec![ok(), Err(NodeError::NotLeader(Some(2)))]),
            ForwardResponse::Each(vec![
                Ok(Outcome::Configured),
                Err(ForwardFailure::NotLeader(Some(2)))
            ])
        );
        // A slow leader's timeout reaches the caller as a timeout, not as "unavailable",
        // which the follower would answer by forwarding the command again at once.
        assert_eq!(
            group_answer(vec![Err(NodeError::Timeout(5)), Err(overloaded())]),
            ForwardResponse::Each(vec![
                Err(ForwardFailure::Timeout(5)),
                Err(ForwardFailure::Overloaded { retry_after_ms: 70 })
            ])
        );
        assert_eq!(
            group_answer(vec![Err(NodeError::Internal("gone".into()))]),
            ForwardResponse::Each(vec![Err(ForwardFailure::Unavailable(
                "internal error: gone".into()
            ))])
        );
    }

    /// A group that failed alike is answered as before `Each`, which a follower of the
    /// previous version cannot read.
    #[test]
    fn a_group_that_failed_alike_gets_one_answer() {
        let not_leader = || Err(NodeError::NotLeader(Some(2)));
        assert_eq!(
            group_answer(vec![not_leader(), not_leader()]),
            ForwardResponse::NotLeader(Some(2))
        );
        let unavailable = || Err(NodeError::Unavailable("no quorum".into()));
        assert_eq!(
            group_answer(vec![unavailable(), unavailable()]),
            ForwardResponse::Unavailable("no quorum".into())
        );
        assert!(matches!(
            group_answer(vec![not_leader(), unavailable()]),
            ForwardResponse::Each(_)
        ));
    }
}
