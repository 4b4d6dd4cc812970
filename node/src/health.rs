//! The standard gRPC health service (`grpc.health.v1.Health`): whether this node is ready
//! to serve, for load balancers, `grpc_health_probe` and Kubernetes gRPC probes.
//!
//! A node is ready (`SERVING`) when it knows a leader and has applied its log up to
//! [`APPLY_LAG_ENTRIES_MAX`] entries behind what it knows to be committed; otherwise it
//! answers `NOT_SERVING`: no leader yet (before the cluster is initialized, during an
//! election), catching up, or shut down. The answer is about this node only: a follower
//! that lost touch with its leader keeps its last view until its election timeout. The
//! empty service name and the ledger's own (`ledger.v1.Ledger`) are known; any other is
//! `SERVICE_UNKNOWN`. `Watch` sends the status at once, then every change.

use std::pin::Pin;

use futures::Stream;
use openraft::async_runtime::WatchReceiver;
use openraft::ServerState;
use tonic::{Request, Response, Status};

use ledger_proto::health::health_check_response::ServingStatus;
use ledger_proto::health::health_server::Health;
use ledger_proto::health::{HealthCheckRequest, HealthCheckResponse};
use ledger_raft_store::TypeConfig;

use crate::node::LedgerNode;

/// Entries a node may have committed but not yet applied and still be ready: a few full
/// batches, so that a node under load does not leave the pool with every burst.
pub const APPLY_LAG_ENTRIES_MAX: u64 = 64;

/// The service names this node answers for.
const SERVICES: [&str; 2] = ["", "ledger.v1.Ledger"];

/// Whether a node in the state `m` describes is ready to serve.
pub fn is_ready(m: &openraft::RaftMetrics<TypeConfig>) -> bool {
    let member = matches!(
        m.state,
        ServerState::Leader | ServerState::Follower | ServerState::Learner
    );
    let committed = m.local_committed.map_or(0, |id| id.index);
    let applied = m.last_applied.map_or(0, |id| id.index);
    member
        && m.current_leader.is_some()
        && applied.saturating_add(APPLY_LAG_ENTRIES_MAX) >= committed
}

/// Serves the health of one node.
pub struct HealthService {
    node: LedgerNode,
}

impl HealthService {
    /// The health service of `node`.
    pub fn new(node: LedgerNode) -> Self {
        HealthService { node }
    }

    fn status(&self) -> ServingStatus {
        status_of(&self.node.raft.metrics().borrow_watched())
    }
}

fn status_of(m: &openraft::RaftMetrics<TypeConfig>) -> ServingStatus {
    if is_ready(m) {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    }
}

fn known(request: &HealthCheckRequest) -> Result<(), Status> {
    if SERVICES.contains(&request.service.as_str()) {
        Ok(())
    } else {
        Err(Status::not_found(format!(
            "unknown service {:?}: this node answers for \"\" and \"ledger.v1.Ledger\"",
            request.service
        )))
    }
}

fn response(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status as i32,
    }
}

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        known(request.get_ref())?;
        Ok(Response::new(response(self.status())))
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        if known(request.get_ref()).is_err() {
            let unknown = response(ServingStatus::ServiceUnknown);
            let stream = futures::stream::once(async move { Ok(unknown) });
            return Ok(Response::new(Box::pin(stream)));
        }
        let metrics = self.node.raft.metrics();
        let stream = futures::stream::unfold((metrics, None), |(mut metrics, last)| async move {
            loop {
                let status = status_of(&metrics.borrow_watched());
                if Some(status) != last {
                    return Some((Ok(response(status)), (metrics, Some(status))));
                }
                // The node shut down: the stream ends.
                metrics.changed().await.ok()?;
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }
}
