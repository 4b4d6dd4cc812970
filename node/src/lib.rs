//! The effect ledger node: a Raft member that serves the ledger to stateless tool servers.
//!
//! One gRPC listener carries four services: the ledger API (`ledger_service`), cluster
//! administration and operator configuration (`admin_service`), the standard health
//! service (`health`), and the internal Raft transport with follower-to-leader forwarding
//! (`raft_service`). Any node accepts every
//! call. The same code runs on real tokio and tonic and, under `--cfg madsim`, in the
//! deterministic simulator; only the disk differs (RocksDB or the simulated disk).
//!
//! Map of the modules:
//! - [`config`]: the TOML configuration and flags.
//! - [`node`]: [`LedgerNode`], routing writes and linearizable reads to the leader.
//! - [`proposer`]: group commit; each entry carries the leader's time stamp.
//! - [`forwarder`]: a follower's commands grouped into forwarded calls to the leader.
//! - [`admission`]: the bounded number of client calls and bytes a node serves at once;
//!   beyond it a call is answered `RESOURCE_EXHAUSTED` with a suggested wait.
//! - [`clock`]: the wall and monotonic clocks, behind one seam; [`stamp_bound`]: the pure
//!   rule that keeps ledger time from jumping with a wrong wall clock; [`real_time`]: the
//!   pure bounds on real time, for provider horizons, when ledger time lags it after an
//!   outage no node measured; [`ledger_time`]: all of them together, the only source of
//!   the stamps.
//! - [`sweeper`]: the leader's lease-expiry and garbage-collection proposals.
//! - [`network`] and [`raft_service`]: the Raft transport, client and server sides; Raft's
//!   messages travel on connections of their own, apart from forwarded client calls.
//! - [`ledger_service`], [`admin_service`]: the public gRPC services; [`health`]: the
//!   standard gRPC health service (ready: a leader is known and the log is applied).
//! - [`auth`]: API keys to callers; [`credentials`]: the cluster secret and the keys'
//!   digests, compared in constant time; [`security`]: those and the TLS material in
//!   one handle, reloaded at SIGHUP; `tls` (real network only): the listener's TLS, with
//!   client certificates, and TLS towards peers; `connections` (real network only): how
//!   many connections the port serves at once, and none that stays silent. [`error`]: failures and their gRPC
//!   statuses.
//! - [`metrics`]: the names of what a node measures (stage times of a command, calls by
//!   result, outcomes and refusals, sweeps); [`gauges`]: its Raft and ledger state,
//!   sampled; the binary exports them for Prometheus.
//! - [`watch`]: streams of records as this node applies changes to them.
//! - [`wire`]: versioned payloads between nodes.

pub mod admin_service;
pub mod admission;
pub mod auth;
#[cfg(not(madsim))]
mod cert_dates;
pub mod clock;
pub mod config;
#[cfg(not(madsim))]
pub mod connections;
pub mod credentials;
pub mod error;
pub mod forwarder;
pub mod gauges;
pub mod health;
pub mod ledger_service;
pub mod ledger_time;
pub mod metrics;
pub mod network;
pub mod node;
pub mod proposer;
pub mod raft_service;
pub mod real_time;
pub mod security;
pub mod stamp_bound;
pub mod sweeper;
#[cfg(not(madsim))]
pub mod tls;
pub mod watch;
pub mod wire;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use openraft::SnapshotPolicy;
use tonic::transport::Server;

use ledger_raft_store::{DiskRef, Raft};

pub use clock::{Clock, ClockRef, SystemClock};

/// Locks `mutex` whether or not a panic poisoned it: the node's shared maps and queues
/// are only changed by whole inserts and removals, so a panicking holder leaves them
/// whole.
pub(crate) fn locked<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
pub use config::NodeConfig;
pub use node::LedgerNode;

/// Streams one connection may have open at once. Well above what a node admits, so that
/// a call beyond the admission limit is answered `RESOURCE_EXHAUSTED` at once instead of
/// waiting, unseen, for a stream in the caller's HTTP/2 queue.
const STREAMS_PER_CONNECTION_MAX: u32 = 8_192;

/// Streams a caller may reset before the server has taken them up. h2's default (20)
/// treats more as an attack and closes the whole connection; under load a node takes up
/// new streams late and callers that give up on calls (timeouts) reset many of them,
/// which must cost those calls, not every call on the connection.
const PENDING_RESETS_PER_CONNECTION_MAX: usize = 4_096;

/// Interval of HTTP/2 pings on an idle connection, so that a dead peer's connection is
/// noticed and replaced before a call needs it.
const KEEPALIVE_INTERVAL_MS: u64 = 10_000;

/// Why a node could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The Raft configuration is invalid.
    #[error("raft configuration: {0}")]
    RaftConfig(String),
    /// The store could not be opened.
    #[error("storage: {0}")]
    Storage(#[from] ledger_raft_store::StoreError),
    /// Raft could not start.
    #[error("raft: {0}")]
    Raft(String),
    /// The gRPC server failed.
    #[error("server: {0}")]
    Server(String),
    /// The secrets or certificates could not be loaded.
    #[error("security: {0}")]
    Security(String),
}

/// The openraft configuration for `config`.
pub fn raft_config(config: &NodeConfig) -> Result<openraft::Config, RunError> {
    let r = &config.raft;
    openraft::Config {
        cluster_name: "effect-ledger".into(),
        heartbeat_interval: r.heartbeat_interval_ms,
        election_timeout_min: r.election_timeout_min_ms,
        election_timeout_max: r.election_timeout_max_ms,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(r.snapshot_after_logs),
        max_in_snapshot_log_to_keep: r.logs_kept_after_snapshot,
        max_payload_entries: r.max_payload_entries,
        enable_pre_vote: Some(true),
        // A leader that restarts must win an election in a new term, as in standard Raft.
        // Restoring leadership at startup in its old term is unsafe here: a power failure
        // can cost the leader log entries it had replicated but not yet synced, which the
        // followers committed; restored in the same term it would serve reads without them
        // and could write different entries under the same log ids. In an election its
        // shorter log loses to a follower that holds them.
        enable_leader_restore: Some(false),
        ..Default::default()
    }
    .validate()
    .map_err(|e| RunError::RaftConfig(e.to_string()))
}

/// Starts Raft on `disk` and returns the node, without serving gRPC yet. The node reads
/// the system's clocks.
pub async fn start(config: &NodeConfig, disk: DiskRef) -> Result<LedgerNode, RunError> {
    start_with_clock(config, disk, SystemClock::shared()).await
}

/// [`start`], with the node reading `clock` for its wall and monotonic time (the
/// simulator gives each node a clock of its own).
pub async fn start_with_clock(
    config: &NodeConfig,
    disk: DiskRef,
    clock: ClockRef,
) -> Result<LedgerNode, RunError> {
    let (log_store, state_machine) = ledger_raft_store::open(disk.clone()).await?;
    let reader = state_machine.reader();
    let logged_ms = log_store.latest_stamp().await?.map_or(0, |s| s.ledger_ms);
    let time =
        ledger_time::LedgerTime::new(clock, reader.clone(), logged_ms, config.clock_skew_ms_max);
    let security = security::Security::new(config).map_err(RunError::Security)?;
    let network = network::Network::new(security.clone(), config.raft.append_timeout_ms);
    let raft = Raft::new(
        config.node_id,
        Arc::new(raft_config(config)?),
        network,
        log_store,
        state_machine,
    )
    .await
    .map_err(|e| RunError::Raft(e.to_string()))?;
    let proposer = proposer::Proposer::start(raft.clone(), time.clone(), &config.proposer);
    let route = forwarder::Route::new(raft.clone(), network::Channels::new(security.clone()));
    let forwarder = forwarder::Forwarder::new(route.clone(), &config.proposer);
    Ok(LedgerNode::new(
        config.node_id,
        raft,
        reader,
        disk,
        time,
        proposer,
        admission::Admission::new(&config.proposer),
        route,
        forwarder,
        security,
    ))
}

/// Runs a node until `shutdown` resolves, then stops serving, stops Raft and returns.
pub async fn run(
    config: NodeConfig,
    disk: DiskRef,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    let node = start(&config, disk).await?;
    serve(node, &config, shutdown).await
}

/// [`run`] on a listener its caller bound to `config.listen_addr` (the address the node
/// gives its peers): a caller that needs a free port, as a test that starts nodes in its
/// own process, binds port 0 first and writes the address it got into the configuration,
/// instead of guessing a port another process may take.
#[cfg(not(madsim))]
pub async fn run_on(
    config: NodeConfig,
    disk: DiskRef,
    listener: std::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    let bound = listener
        .local_addr()
        .map_err(|e| RunError::Server(format!("listener: {e}")))?;
    if bound != config.listen_addr {
        return Err(RunError::Server(format!(
            "the listener is bound to {bound}, the configuration says listen_addr = {}",
            config.listen_addr
        )));
    }
    let node = start(&config, disk).await?;
    serve_with(node, &config, Some(listener), shutdown).await
}

/// Serves a started node (its gRPC services and the leader's sweeper) until `shutdown`
/// resolves, then stops Raft. Split from [`run`] so that a caller that must keep the
/// [`LedgerNode`] (the simulator reads every replica's state) serves it the same way.
pub async fn serve(
    node: LedgerNode,
    config: &NodeConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    serve_with(node, config, None, shutdown).await
}

/// [`serve`] on `listener` when given, else on `config.listen_addr`.
async fn serve_with(
    node: LedgerNode,
    config: &NodeConfig,
    listener: Option<std::net::TcpListener>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    let sweeper = tokio::spawn(sweeper::run(node.clone(), config.sweeper.clone()));
    let gauges = config
        .metrics_listen_addr
        .map(|_| tokio::spawn(gauges::sample(node.clone())));
    let health = config.health_listen_addr.map(|addr| {
        tracing::info!(%addr, "serving the health service in plaintext");
        let service = ledger_proto::health::health_server::HealthServer::new(
            health::HealthService::new(node.clone()),
        );
        tokio::spawn(async move {
            if let Err(e) = Server::builder().add_service(service).serve(addr).await {
                tracing::error!(%addr, error = %e, "the plaintext health service stopped");
            }
        })
    });
    let auth = auth::Authenticator::new(node.security.clone());
    tracing::info!(
        node_id = config.node_id,
        addr = %config.listen_addr,
        tls = node.security.tls_enabled(),
        "serving"
    );
    // Streams a caller keeps open (a watch, a leader's replication) end when the node
    // stops, so that the server's graceful shutdown does not wait for their callers.
    let (stopping, stopped_signal) = tokio::sync::watch::channel(false);
    let router = Server::builder()
        .max_concurrent_streams(STREAMS_PER_CONNECTION_MAX)
        .http2_max_pending_accept_reset_streams(Some(PENDING_RESETS_PER_CONNECTION_MAX))
        .http2_keepalive_interval(Some(Duration::from_millis(KEEPALIVE_INTERVAL_MS)))
        .tcp_nodelay(true)
        .add_service(checked::ledger(
            ledger_service::LedgerService::new(node.clone(), auth.clone(), stopped_signal.clone()),
            &auth,
        ))
        .add_service(checked::admin(
            admin_service::AdminService::new(node.clone(), auth.clone()),
            &auth,
        ))
        .add_service(ledger_proto::health::health_server::HealthServer::new(
            health::HealthService::new(node.clone()),
        ))
        .add_service(checked::raft(
            raft_service::RaftService::new(node.clone(), stopped_signal),
            &node.security,
        ));
    let shutdown = async move {
        shutdown.await;
        let _ = stopping.send(true);
    };
    let served = listen(
        router,
        &node.security,
        config.listen_addr,
        listener,
        config.connections_max,
        shutdown,
    )
    .await;
    tracing::info!(node_id = config.node_id, "shutting down");
    sweeper.abort();
    for task in [gauges, health].into_iter().flatten() {
        task.abort();
    }
    let stopped = node.raft.shutdown().await;
    served?;
    stopped.map_err(|e| RunError::Raft(format!("shutdown: {e:?}")))
}

/// Serves `router` on `bound` if given, else on `addr`, until `shutdown` resolves: over
/// TLS when `security` has it.
async fn listen(
    router: tonic::transport::server::Router,
    security: &security::Security,
    addr: std::net::SocketAddr,
    bound: Option<std::net::TcpListener>,
    connections_max: usize,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    #[cfg(not(madsim))]
    {
        let listener = match bound {
            Some(bound) => bound
                .set_nonblocking(true)
                .and_then(|()| tokio::net::TcpListener::from_std(bound))
                .map_err(|e| RunError::Server(format!("listener for {addr}: {e}")))?,
            None => tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| RunError::Server(format!("bind {addr}: {e}")))?,
        };
        let slots = connections::Slots::new(connections_max);
        let silence = connections::SILENCE_TIMEOUT;
        let served = match security.tls() {
            Some(tls) => {
                let incoming = tls::incoming(listener, tls.clone(), slots, silence);
                router
                    .serve_with_incoming_shutdown(incoming, shutdown)
                    .await
            }
            None => {
                let incoming = connections::incoming(listener, slots, silence);
                router
                    .serve_with_incoming_shutdown(incoming, shutdown)
                    .await
            }
        };
        served.map_err(|e| RunError::Server(e.to_string()))
    }
    #[cfg(madsim)]
    {
        if bound.is_some() {
            return Err(RunError::Server(
                "the simulated network takes no bound listener".into(),
            ));
        }
        let _ = (security, connections_max);
        router
            .serve_with_shutdown(addr, shutdown)
            .await
            .map_err(|e| RunError::Server(e.to_string()))
    }
}

/// The services a node serves, each behind a check of its caller's credentials on the
/// request's headers, made before the request's body is read (`auth::KeyCheck`,
/// `raft_service::PeerCheck`); each call checks again for itself.
mod checked {
    use ledger_proto::pb;

    use crate::admin_service::AdminService;
    use crate::auth::{Authenticator, KeyCheck};
    use crate::ledger_service::LedgerService;
    use crate::raft_service::{PeerCheck, RaftService};
    use crate::security::Security;

    #[cfg(not(madsim))]
    type Checked<S, F> = tonic::service::interceptor::InterceptedService<S, F>;
    #[cfg(not(madsim))]
    type Ledger = Checked<pb::ledger_server::LedgerServer<LedgerService>, KeyCheck>;
    #[cfg(not(madsim))]
    type Admin = Checked<pb::admin_server::AdminServer<AdminService>, KeyCheck>;
    #[cfg(not(madsim))]
    type Raft = Checked<pb::raft_server::RaftServer<RaftService>, PeerCheck>;
    // The simulated transport's servers take the interceptor themselves.
    #[cfg(madsim)]
    type Ledger = pb::ledger_server::LedgerServer<LedgerService, KeyCheck>;
    #[cfg(madsim)]
    type Admin = pb::admin_server::AdminServer<AdminService, KeyCheck>;
    #[cfg(madsim)]
    type Raft = pb::raft_server::RaftServer<RaftService, PeerCheck>;

    pub fn ledger(service: LedgerService, auth: &Authenticator) -> Ledger {
        pb::ledger_server::LedgerServer::with_interceptor(service, KeyCheck::new(auth.clone()))
    }

    pub fn admin(service: AdminService, auth: &Authenticator) -> Admin {
        pb::admin_server::AdminServer::with_interceptor(service, KeyCheck::new(auth.clone()))
    }

    #[cfg(not(madsim))]
    pub fn raft(service: RaftService, security: &Security) -> Raft {
        Checked::new(
            ledger_proto::raft_server(service),
            PeerCheck::new(security.clone()),
        )
    }

    /// (The simulated transport has no message limits to set.)
    #[cfg(madsim)]
    pub fn raft(service: RaftService, security: &Security) -> Raft {
        pb::raft_server::RaftServer::with_interceptor(service, PeerCheck::new(security.clone()))
    }
}
