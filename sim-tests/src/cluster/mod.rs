//! The cluster harness: ledger nodes as simulated machines, their disks, clients, and the
//! faults a scenario injects.
//!
//! Each ledger node is a madsim node with its own IP whose init task starts the real node
//! code (`ledger_node::start`, then `ledger_node::serve`). Its [`SimDisk`] is
//! owned here, outside the simulated machine, so it outlives a kill: a restart runs the
//! init task again, which reopens the same disk.
//! - crash: madsim `kill` then `restart`; everything written survives, as after a
//!   process crash;
//! - power failure: `kill`, then [`SimDisk::power_fail_torn`] with a seed drawn from the
//!   run's RNG (unsynced writes are lost, the last one possibly torn), then `restart`;
//! - bit flip: a bit of a synced value flipped on a stopped node's disk; the node then
//!   recovers safely or refuses to start on damaged data, and a node that refuses stays
//!   down for the rest of the run (an operator would wipe it and add it back): checkers
//!   and waits count only the members that have not refused ([`Cluster::live_ids`]);
//! - isolation: `clog_node` cuts a node off from everyone, clients included;
//!   `cut_from_peers` clogs only the links to the other ledger nodes, so clients can still
//!   reach a minority leader; partitions split the ledger nodes into groups, both ways or
//!   one way only ([`faults`]);
//! - membership: spare machines start outside the cluster and are added (and members
//!   removed) through the admin API while it serves ([`membership`]);
//! - clocks: each node reads a clock of its own over the simulator's single one
//!   ([`SimClock`]), kept here like its disk: an offset from the start, a wall clock
//!   stepped ahead or back, a drift ([`faults`]).
//!
//! The harness keeps each running node's [`LedgerNode`], so checkers read every replica's
//! applied ledger directly ([`ReplicaView`]); clients run on separate simulated machines
//! and see the cluster only through `ledger-client`.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use madsim::rand::{thread_rng, Rng};
use madsim::runtime::{Handle, NodeHandle};
use madsim::task::{JoinHandle, NodeId};

use ledger_client::{LedgerClient, RetryPolicy};
use ledger_core::TenantSettings;
use ledger_node::LedgerNode;
use ledger_proto::pb;
use ledger_raft_store::{DiskRef, SimDisk};

use crate::fixtures::{self, ClusterSettings, ToolKind, OPERATOR_KEY, TENANT};
use crate::replica::ReplicaView;
use crate::trace::Trace;
use crate::wait;

mod clock;
mod faults;
mod membership;

pub use clock::SimClock;
pub use faults::{kill_machine, restart_machine};

/// How long a freshly formed cluster may take to elect its first leader.
const FIRST_LEADER_TIMEOUT: Duration = Duration::from_secs(15);

/// The retry policy of every simulated client: quick failover, bounded attempts; the
/// workloads retry an unavailable command themselves, with the same command id.
pub fn client_retry() -> RetryPolicy {
    RetryPolicy {
        attempts: 6,
        backoff_ms: 50,
        backoff_ms_max: 500,
        attempt_timeout_ms: 3_000,
    }
}

/// A ledger node's simulated machine, disk, clock and, while it runs, its node handle.
struct Member {
    sim: NodeHandle,
    disk: Arc<SimDisk>,
    clock: Arc<SimClock>,
    /// The wall clock's offset from the simulator's when no fault is active (ms).
    clock_offset_ms: i64,
    running: Arc<Mutex<Option<LedgerNode>>>,
    /// Why the node refused to start on its damaged disk, if it did.
    refused: Arc<Mutex<Option<String>>>,
}

/// A simulated machine for clients (tool servers, operators), with its own IP.
#[derive(Clone)]
pub struct ClientNode {
    /// Its name, also the holder name its workload uses.
    pub name: String,
    /// Its IP address.
    pub ip: IpAddr,
    sim: NodeHandle,
}

impl ClientNode {
    /// Runs `future` on this machine: its connections come from this machine's IP and it
    /// dies with the machine.
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.sim.spawn(future)
    }

    /// The simulator's id of the machine.
    pub fn sim_id(&self) -> NodeId {
        self.sim.id()
    }
}

/// A simulated ledger cluster.
pub struct Cluster {
    handle: Handle,
    members: BTreeMap<u64, Member>,
    voters: Mutex<BTreeSet<u64>>,
    clients_created: Mutex<u32>,
    operator: ClientNode,
    operator_client: LedgerClient,
    trace: Trace,
}

impl Cluster {
    /// Creates the nodes (ids `1..=settings.nodes`, then the spares) and an operator
    /// machine, and starts every node; the cluster is not formed yet (see
    /// [`Cluster::form`]).
    pub fn start(settings: ClusterSettings, trace: Trace) -> Arc<Cluster> {
        let handle = Handle::current();
        let members: BTreeMap<u64, Member> = (1..=settings.nodes + settings.spares)
            .map(|id| (id, Self::create_member(&handle, &settings, id)))
            .collect();
        let voters = (1..=settings.nodes).collect();
        let operator = create_client_node(&handle, 0, "operator");
        let endpoints = members
            .keys()
            .map(|id| fixtures::node_addr(*id).to_string())
            .collect();
        let operator_client = LedgerClient::with_retry(endpoints, OPERATOR_KEY, client_retry())
            .expect("valid endpoints");
        Arc::new(Cluster {
            handle,
            members,
            voters: Mutex::new(voters),
            clients_created: Mutex::new(1),
            operator,
            operator_client,
            trace,
        })
    }

    fn create_member(handle: &Handle, settings: &ClusterSettings, id: u64) -> Member {
        let disk = Arc::new(SimDisk::new());
        let running: Arc<Mutex<Option<LedgerNode>>> = Arc::new(Mutex::new(None));
        let config = settings.node_config(id);
        let clock_offset_ms = match settings.clock_offset_ms_max as i64 {
            0 => 0,
            max => thread_rng().gen_range(-max..=max),
        };
        let clock = SimClock::with_offset(clock_offset_ms);
        let refused: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let (init_disk, init_running, init_clock) = (disk.clone(), running.clone(), clock.clone());
        let init_refused = refused.clone();
        let sim = handle
            .create_node()
            .name(format!("ledger-{id}"))
            .ip(fixtures::node_ip(id))
            .init(move || {
                let config = config.clone();
                let disk: DiskRef = init_disk.clone();
                let running = init_running.clone();
                let clock: ledger_node::ClockRef = init_clock.clone();
                let refused = init_refused.clone();
                async move {
                    let node = match ledger_node::start_with_clock(&config, disk, clock).await {
                        Ok(node) => node,
                        // Refusing damaged data is the required behaviour, not a failure.
                        Err(ledger_node::RunError::Storage(e)) if e.is_damaged_data() => {
                            *refused.lock().expect("member lock") = Some(e.to_string());
                            return;
                        }
                        Err(e) => panic!("node {id} cannot start: {e}"),
                    };
                    *running.lock().expect("member lock") = Some(node.clone());
                    // A simulated node stops by being killed, never by a shutdown signal.
                    let never = std::future::pending::<()>();
                    if let Err(e) = ledger_node::serve(node, &config, never).await {
                        panic!("node {id} stopped serving: {e}");
                    }
                }
            })
            .build();
        Member {
            sim,
            disk,
            clock,
            clock_offset_ms,
            running,
            refused,
        }
    }

    /// The run's trace of notable events.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// The ids of the cluster's current members, ascending.
    pub fn ids(&self) -> Vec<u64> {
        self.voters
            .lock()
            .expect("voters lock")
            .iter()
            .copied()
            .collect()
    }

    /// The members that have not refused to start on a damaged disk, ascending.
    pub fn live_ids(&self) -> Vec<u64> {
        self.ids()
            .into_iter()
            .filter(|id| self.refused(*id).is_none())
            .collect()
    }

    /// Why node `id` refused to start on its damaged disk, if it did.
    pub fn refused(&self, id: u64) -> Option<String> {
        self.members[&id]
            .refused
            .lock()
            .expect("member lock")
            .clone()
    }

    /// The ids of every ledger machine, members or not (spares, removed members).
    pub fn all_ids(&self) -> Vec<u64> {
        self.members.keys().copied().collect()
    }

    /// Every ledger machine's address (`ip:port`), by ascending id: clients know the
    /// spares too, so they can reach them once they join.
    pub fn endpoints(&self) -> Vec<String> {
        self.all_ids()
            .into_iter()
            .map(|id| fixtures::node_addr(id).to_string())
            .collect()
    }

    /// Creates a client machine called `name` with the next free client IP.
    pub fn client_node(&self, name: &str) -> ClientNode {
        let mut created = self.clients_created.lock().expect("client counter lock");
        let node = create_client_node(&self.handle, *created, name);
        *created += 1;
        node
    }

    /// A ledger client for `endpoints` with `api_key` and the simulation retry policy.
    pub fn client(&self, endpoints: Vec<String>, api_key: &str) -> LedgerClient {
        LedgerClient::with_retry(endpoints, api_key, client_retry()).expect("valid endpoints")
    }

    /// Runs `f` with the operator's client on the operator machine.
    pub async fn as_operator<T, F, Fut>(&self, f: F) -> T
    where
        F: FnOnce(LedgerClient) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let work = f(self.operator_client.clone());
        self.operator
            .spawn(work)
            .await
            .expect("the operator machine is never killed")
    }

    /// Forms the cluster through node 1, waits for a leader, then registers the tenant
    /// and both tool policies. Returns the first leader.
    pub async fn form(&self) -> u64 {
        let members: Vec<(u64, String)> = self
            .ids()
            .into_iter()
            .map(|id| (id, fixtures::node_addr(id).to_string()))
            .collect();
        self.as_operator(move |client| async move {
            wait::until_async("cluster initialised", Duration::from_secs(10), || {
                let (client, members) = (client.clone(), members.clone());
                async move { client.initialize(&members).await.map_err(|e| e.to_string()) }
            })
            .await
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let leader = self
            .wait_for_leader(&self.ids(), FIRST_LEADER_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        self.as_operator(|client| async move {
            client
                .put_tenant("setup-tenant", TENANT, TenantSettings::default())
                .await
                .unwrap_or_else(|e| panic!("registering the tenant failed: {e}"));
            for tool in ToolKind::ALL {
                let command_id = format!("setup-tool-{}", tool.tool_name().name);
                client
                    .put_tool_policy(&command_id, TENANT, tool.tool_name(), tool.policy())
                    .await
                    .unwrap_or_else(|e| panic!("configuring {tool:?} failed: {e}"));
            }
        })
        .await;
        self.trace.note(format!("formed; leader {leader}"));
        leader
    }

    /// The running node `id`, if it is up.
    pub fn node(&self, id: u64) -> Option<LedgerNode> {
        self.members[&id]
            .running
            .lock()
            .expect("member lock")
            .clone()
    }

    /// Waits until one node of `among` is leader and every running node of `among` knows
    /// it. Nodes outside `among` (an isolated old leader) are ignored.
    pub async fn wait_for_leader(&self, among: &[u64], timeout: Duration) -> Result<u64, String> {
        let what = format!("a leader agreed by nodes {among:?}");
        wait::until(&what, timeout, || {
            let nodes: Vec<LedgerNode> = among.iter().filter_map(|id| self.node(*id)).collect();
            let leader = nodes
                .iter()
                .find(|n| n.raft.is_leader())
                .map(|n| n.id)
                .ok_or_else(|| "no node of the group is leader".to_string())?;
            let views: Vec<(u64, Option<u64>)> =
                nodes.iter().map(|n| (n.id, n.current_leader())).collect();
            if views.iter().all(|(_, l)| *l == Some(leader)) {
                Ok(leader)
            } else {
                Err(format!("leader {leader}, but nodes see {views:?}"))
            }
        })
        .await
    }

    /// The applied state of node `id`, if it is running.
    pub fn view(&self, id: u64) -> Option<ReplicaView> {
        self.node(id).map(|n| ReplicaView::read(&n))
    }

    /// The applied state of every running node.
    pub fn views(&self) -> Vec<ReplicaView> {
        self.ids()
            .into_iter()
            .filter_map(|id| self.view(id))
            .collect()
    }

    /// The applied index of node `id`, if it is running.
    pub fn applied_index(&self, id: u64) -> Option<u64> {
        self.node(id)
            .map(|n| n.reader.last_applied_index().unwrap_or(0))
    }

    /// Waits until every live node runs (all but those that refused to start on a
    /// damaged disk, which must stay a minority), agrees on one leader, and holds
    /// byte-identical ledger snapshots at the same applied index; returns their views.
    pub async fn wait_converged(&self, timeout: Duration) -> Result<Vec<ReplicaView>, String> {
        let ids = self.live_ids();
        let members = self.ids().len();
        if 2 * ids.len() <= members {
            return Err(format!(
                "only {} of {members} members have an undamaged disk",
                ids.len()
            ));
        }
        self.wait_for_leader(&ids, timeout).await?;
        wait::until("all replicas converged", timeout, || {
            let views: Vec<ReplicaView> = ids.iter().filter_map(|id| self.view(*id)).collect();
            if views.len() != ids.len() {
                return Err(format!("only {} of {} nodes run", views.len(), ids.len()));
            }
            let indexes: Vec<(u64, u64, String)> = views
                .iter()
                .map(|v| {
                    (
                        v.node,
                        v.applied_index,
                        format!("{:016x}", crate::fnv64(&v.snapshot)),
                    )
                })
                .collect();
            if crate::check::check_identical(&views).is_empty() {
                Ok(views)
            } else {
                Err(format!("(node, applied index, ledger hash): {indexes:?}"))
            }
        })
        .await
    }

    /// Node `id`'s status as its public admin API reports it.
    pub async fn status(&self, id: u64) -> Result<pb::StatusResponse, String> {
        let index = self
            .all_ids()
            .iter()
            .position(|i| *i == id)
            .expect("a member id");
        self.as_operator(move |client| async move {
            client.status_of(index).await.map_err(|e| e.to_string())
        })
        .await
    }
}

/// Creates a client machine with the `index`-th client IP.
pub fn create_client_node(handle: &Handle, index: u32, name: &str) -> ClientNode {
    let ip = fixtures::client_ip(index);
    let sim = handle.create_node().name(name).ip(ip).build();
    ClientNode {
        name: name.into(),
        ip,
        sim,
    }
}
