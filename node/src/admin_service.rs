//! The `Admin` gRPC service: forming and changing the cluster, this node's status, and the
//! operator's tenant and tool configuration.
//!
//! Everything here takes the operator key except two calls: `GetTenant` (a tenant may
//! read its own configuration) and `Leader`, the routing hint every client follows.
//! `Status` shows the whole cluster's shape and load (records per state, ledger time, a
//! digest of the entire ledger state, across tenants), so it is the operator's alone.
//!
//! Membership changes must run on the leader; any node accepts them and passes them on to
//! the leader's admin service with the caller's credentials. Configuration is a replicated
//! ledger command like any other, so it goes through the ordinary write path.

use std::collections::{BTreeMap, BTreeSet};
use std::pin::Pin;

use futures::Stream;

use openraft::async_runtime::WatchReceiver;
use openraft::{BasicNode, ServerState};
use tonic::{Request, Response, Status};

use ledger_core::Caller;
use ledger_proto::convert::IntoCommand;
use ledger_proto::pb;
use ledger_proto::pb::admin_client::AdminClient;
use ledger_raft_store::{blocking, StoreError, StreamDigest};

use crate::auth::Authenticator;
use crate::error::NodeError;
use crate::node::LedgerNode;
use crate::wire::{ReadRequest, ReadResponse};

/// Serves the admin API on one node.
pub struct AdminService {
    node: LedgerNode,
    auth: Authenticator,
}

impl AdminService {
    /// The service for `node`.
    pub fn new(node: LedgerNode, auth: Authenticator) -> Self {
        AdminService { node, auth }
    }

    /// The leader's admin client, for a membership change that reached a follower.
    fn leader_client(&self) -> Result<AdminClient<tonic::transport::Channel>, Status> {
        let leader = self
            .node
            .current_leader()
            .ok_or_else(|| NodeError::Unavailable("no leader".into()))?;
        let addr = self
            .node
            .addr_of(leader)
            .ok_or_else(|| NodeError::Unavailable(format!("no address for leader {leader}")))?;
        let channel = self.node.channel(&addr).map_err(NodeError::Unavailable)?;
        Ok(AdminClient::new(channel))
    }

    fn membership(&self, log_index: Option<u64>) -> pb::MembershipResponse {
        let metrics = self.node.raft.metrics().borrow_watched().clone();
        let membership = metrics.membership_config.membership();
        let voters: BTreeSet<u64> = membership.voter_ids().collect();
        let (mut v, mut l) = (Vec::new(), Vec::new());
        for (id, node) in membership.nodes() {
            let member = pb::Member {
                node_id: *id,
                addr: node.addr.clone(),
            };
            if voters.contains(id) {
                v.push(member);
            } else {
                l.push(member);
            }
        }
        pb::MembershipResponse {
            log_index,
            voters: v,
            learners: l,
        }
    }

    async fn configure<Req: IntoCommand>(
        &self,
        request: Request<Req>,
    ) -> Result<Response<pb::Empty>, Status> {
        let caller = self.auth.caller(&request)?;
        let command = request.into_inner().into_command(caller)?;
        let outcome = self.node.submit(command).await?;
        ledger_proto::outcome_to_response(outcome).map(Response::new)
    }
}

/// Copies the caller's credentials onto a request passed on to the leader.
fn pass_on<T, U>(from: &Request<T>, message: U) -> Request<U> {
    let mut request = Request::new(message);
    if let Some(auth) = from.metadata().get("authorization") {
        request.metadata_mut().insert("authorization", auth.clone());
    }
    request
}

fn raft_error(e: impl std::fmt::Display) -> Status {
    Status::failed_precondition(e.to_string())
}

#[tonic::async_trait]
impl pb::admin_server::Admin for AdminService {
    async fn initialize(
        &self,
        request: Request<pb::InitializeRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        self.auth.operator(&request)?;
        let members: BTreeMap<u64, BasicNode> = request
            .into_inner()
            .members
            .into_iter()
            .map(|m| (m.node_id, BasicNode::new(m.addr)))
            .collect();
        if members.is_empty() {
            return Err(Status::invalid_argument("no members"));
        }
        self.node
            .raft
            .initialize(members)
            .await
            .map_err(raft_error)?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn add_learner(
        &self,
        request: Request<pb::AddLearnerRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        self.auth.operator(&request)?;
        if !self.node.raft.is_leader() {
            let message = request.get_ref().clone();
            return self
                .leader_client()?
                .add_learner(pass_on(&request, message))
                .await;
        }
        let member = request
            .into_inner()
            .member
            .ok_or_else(|| Status::invalid_argument("member is missing"))?;
        let response = self
            .node
            .raft
            .add_learner(member.node_id, BasicNode::new(member.addr), true)
            .await
            .map_err(raft_error)?;
        Ok(Response::new(self.membership(Some(response.log_id.index))))
    }

    async fn change_membership(
        &self,
        request: Request<pb::ChangeMembershipRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        self.auth.operator(&request)?;
        if !self.node.raft.is_leader() {
            let message = request.get_ref().clone();
            return self
                .leader_client()?
                .change_membership(pass_on(&request, message))
                .await;
        }
        let change = request.into_inner();
        let voters: BTreeSet<u64> = change.voters.into_iter().collect();
        if voters.is_empty() {
            return Err(Status::invalid_argument("no voters"));
        }
        let response = self
            .node
            .raft
            .change_membership(voters, change.retain)
            .await
            .map_err(raft_error)?;
        Ok(Response::new(self.membership(Some(response.log_id.index))))
    }

    async fn leader(
        &self,
        request: Request<pb::LeaderRequest>,
    ) -> Result<Response<pb::LeaderResponse>, Status> {
        self.auth.caller(&request)?;
        let leader_id = self.node.current_leader();
        Ok(Response::new(pb::LeaderResponse {
            node_id: self.node.id,
            leader_id,
            leader_addr: leader_id.and_then(|id| self.node.addr_of(id)),
        }))
    }

    async fn status(
        &self,
        request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        self.auth.operator_for(&request, "cluster status")?;
        let with_digest = request.get_ref().with_state_digest;
        let m = self.node.raft.metrics().borrow_watched().clone();
        let role = match m.state {
            ServerState::Leader => "leader",
            ServerState::Follower => "follower",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shutdown",
        };
        let unreadable = |e| Status::unavailable(format!("ledger state unreadable: {e}"));
        let (records_by_state, ledger_clock_ms) = self
            .node
            .reader
            .read(|l| {
                let counts = l
                    .counts()
                    .into_iter()
                    .map(|(s, n)| (s.as_str().to_owned(), n as u64))
                    .collect();
                (counts, l.clock_ms())
            })
            .map_err(unreadable)?;
        let (state_digest, state_digest_index) = if with_digest {
            let reader = self.node.reader.clone();
            let (digest, applied) = ledger_raft_store::blocking(move || reader.state_digest())
                .await
                .map_err(unreadable)?;
            (digest.to_vec(), applied)
        } else {
            (Vec::new(), None)
        };
        let members = self.membership(None);
        Ok(Response::new(pb::StatusResponse {
            node_id: self.node.id,
            leader_id: m.current_leader,
            term: m.current_term,
            role: role.into(),
            last_log_index: m.last_log_index,
            committed_index: m.cluster_committed.map(|l| l.index),
            applied_index: m.last_applied.map(|l| l.index),
            snapshot_index: m.snapshot.map(|l| l.index),
            purged_index: m.purged.map(|l| l.index),
            voters: members.voters,
            learners: members.learners,
            records_by_state,
            ledger_clock_ms,
            state_digest,
            state_digest_index,
        }))
    }

    async fn put_tenant(
        &self,
        request: Request<pb::PutTenantRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        self.configure(request).await
    }

    async fn put_tool_policy(
        &self,
        request: Request<pb::PutToolPolicyRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        self.configure(request).await
    }

    async fn get_tenant(
        &self,
        request: Request<pb::GetTenantRequest>,
    ) -> Result<Response<pb::GetTenantResponse>, Status> {
        let caller = self.auth.caller(&request)?;
        let tenant = request.into_inner().tenant;
        if let Caller::Tenant(t) = &caller {
            if *t != tenant {
                return Err(ledger_proto::refusal_to_status(
                    &ledger_core::Refusal::WrongTenant {
                        caller: t.clone(),
                        owner: tenant,
                    },
                ));
            }
        }
        match self.node.read(ReadRequest::Tenant(tenant.clone())).await? {
            ReadResponse::Tenant(Some(config)) => Ok(Response::new(pb::GetTenantResponse {
                settings: Some(config.settings.into()),
                tools: config.tools.into_iter().map(Into::into).collect(),
            })),
            ReadResponse::Tenant(None) => Err(ledger_proto::refusal_to_status(
                &ledger_core::Refusal::UnknownTenant(tenant),
            )),
            other => Err(NodeError::Internal(format!("unexpected read answer {other:?}")).into()),
        }
    }

    type BackupStream = Pin<Box<dyn Stream<Item = Result<pb::BackupChunk, Status>> + Send>>;

    async fn backup(
        &self,
        request: Request<pb::BackupRequest>,
    ) -> Result<Response<Self::BackupStream>, Status> {
        self.auth.operator_for(&request, "a backup")?;
        // Everything acknowledged before this call is in the view taken next.
        self.node.linearizable().await?;
        let reader = self.node.reader.clone();
        let unreadable =
            |e: StoreError| Status::unavailable(format!("ledger state unreadable: {e}"));
        let (data, index) = blocking(move || reader.backup())
            .await
            .map_err(unreadable)?
            .ok_or_else(|| {
                Status::failed_precondition("nothing is applied yet: no state to back up")
            })?;
        let chunks = blocking(move || data.chunks()).await.map_err(unreadable)?;
        let chunk = move |data, state_digest| pb::BackupChunk {
            data,
            applied_index: index,
            state_digest,
        };
        let pieces = Box::pin(chunks.into_stream(BACKUP_CHUNK_BYTES));
        let stream = futures::stream::unfold(
            Some((pieces, StreamDigest::new())),
            move |state| async move {
                let (mut pieces, mut digest) = state?;
                match futures::StreamExt::next(&mut pieces).await {
                    Some(Ok(data)) => match digest.feed(&data) {
                        Ok(()) => Some((Ok(chunk(data, Vec::new())), Some((pieces, digest)))),
                        Err(e) => Some((Err(unreadable(e)), None)),
                    },
                    Some(Err(e)) => Some((Err(unreadable(e)), None)),
                    // The last chunk carries the digest of everything sent.
                    None => Some((Ok(chunk(Vec::new(), digest.finish().to_vec())), None)),
                }
            },
        );
        Ok(Response::new(Box::pin(stream)))
    }
}

/// Bytes of one backup chunk (a view's page is never split, so some are larger).
const BACKUP_CHUNK_BYTES: usize = 1 << 20;
