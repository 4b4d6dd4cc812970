//! A fake ledger node served in process on loopback, for tests of how the client library
//! meets nodes a real one cannot play here (a node from before `Batch`, a node that turns
//! calls away). A test answers the calls it needs through a [`Handler`]; every other call
//! is UNIMPLEMENTED. The listener is bound before the server starts, and kept, so no other
//! process can take the port in between.

#![allow(dead_code)]

use std::sync::Arc;

use tokio::sync::oneshot;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use ledger_proto::pb;
use ledger_proto::pb::ledger_server::{Ledger, LedgerServer};

/// What a fake call the handler does not answer gets.
pub fn unimplemented() -> Status {
    Status::unimplemented("not in this fake")
}

/// The calls a fake node answers; each one not given is UNIMPLEMENTED.
#[tonic::async_trait]
pub trait Handler: Send + Sync + 'static {
    async fn get(&self, _request: pb::GetRequest) -> Result<pb::GetResponse, Status> {
        Err(unimplemented())
    }

    async fn batch(&self, _request: pb::BatchRequest) -> Result<pb::BatchResponse, Status> {
        Err(unimplemented())
    }

    async fn claim(&self, _request: pb::ClaimRequest) -> Result<pb::ClaimResponse, Status> {
        Err(unimplemented())
    }

    async fn declare(&self, _request: pb::DeclareRequest) -> Result<pb::DeclareResponse, Status> {
        Err(unimplemented())
    }

    async fn report(&self, _request: pb::ReportRequest) -> Result<pb::ReportResponse, Status> {
        Err(unimplemented())
    }

    async fn heartbeat(
        &self,
        _request: pb::HeartbeatRequest,
    ) -> Result<pb::HeartbeatResponse, Status> {
        Err(unimplemented())
    }

    /// A fake only turns watches away: an error here is the watch's answer, and `Ok` is
    /// UNIMPLEMENTED as well.
    async fn watch(&self, _request: pb::WatchRequest) -> Result<(), Status> {
        Err(unimplemented())
    }
}

/// The node's `Ledger` service over a handler.
struct Service<H>(Arc<H>);

#[tonic::async_trait]
impl<H: Handler> Ledger for Service<H> {
    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        self.0.get(request.into_inner()).await.map(Response::new)
    }

    async fn batch(
        &self,
        request: Request<pb::BatchRequest>,
    ) -> Result<Response<pb::BatchResponse>, Status> {
        self.0.batch(request.into_inner()).await.map(Response::new)
    }

    async fn claim(
        &self,
        request: Request<pb::ClaimRequest>,
    ) -> Result<Response<pb::ClaimResponse>, Status> {
        self.0.claim(request.into_inner()).await.map(Response::new)
    }

    async fn report(
        &self,
        request: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::ReportResponse>, Status> {
        self.0.report(request.into_inner()).await.map(Response::new)
    }

    async fn declare(
        &self,
        request: Request<pb::DeclareRequest>,
    ) -> Result<Response<pb::DeclareResponse>, Status> {
        self.0
            .declare(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        self.0
            .heartbeat(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn begin_reconcile(
        &self,
        _: Request<pb::BeginReconcileRequest>,
    ) -> Result<Response<pb::BeginReconcileResponse>, Status> {
        Err(unimplemented())
    }

    async fn observe(
        &self,
        _: Request<pb::ObserveRequest>,
    ) -> Result<Response<pb::ObserveResponse>, Status> {
        Err(unimplemented())
    }

    async fn decide(
        &self,
        _: Request<pb::DecideRequest>,
    ) -> Result<Response<pb::DecideResponse>, Status> {
        Err(unimplemented())
    }

    async fn amend(
        &self,
        _: Request<pb::AmendRequest>,
    ) -> Result<Response<pb::AmendResponse>, Status> {
        Err(unimplemented())
    }

    async fn list(
        &self,
        _: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        Err(unimplemented())
    }

    type WatchStream = ledger_node::watch::EventStream;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        self.0.watch(request.into_inner()).await?;
        Err(unimplemented())
    }
}

/// A fake node serving until dropped.
pub struct Served<H> {
    /// Its address, `host:port`.
    pub addr: String,
    /// What answers its calls (and what the test reads back from it).
    pub handler: Arc<H>,
    _stop: oneshot::Sender<()>,
}

/// Serves `handler` on a loopback port of its own.
pub async fn serve<H: Handler>(handler: H) -> Served<H> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address").to_string();
    let handler = Arc::new(handler);
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .add_service(LedgerServer::new(Service(handler.clone())))
        .serve_with_incoming_shutdown(TcpIncoming::from(listener), async {
            let _ = stopped.await;
        });
    tokio::spawn(server);
    Served {
        addr,
        handler,
        _stop: stop,
    }
}
