//! The fixed cast of a simulated run: addresses, API keys, the tenant, its two tools and
//! their policies, and the node configuration built in code.
//!
//! Every scenario uses the same tenant with one keyed idempotent tool (the provider
//! honours the idempotency token) and one unkeyed create tool (an unknown outcome must be
//! reconciled before any re-send). Budgets are generous so that a long unlucky run settles
//! every effect instead of escalating it; leases are short enough that an expiry fits in a
//! few simulated seconds.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use ledger_core::{Authority, Declaration, EffectKey, ReplayClass, ToolName, ToolPolicy, ToolRef};
use ledger_node::config::{
    ApiKey, NodeConfig, ProposerSettings, RaftSettings, StorageKind, SweeperSettings,
    CLOCK_SKEW_MS_MAX_DEFAULT,
};
use ledger_raft_store::RocksOptions;

/// The tenant every workload acts for.
pub const TENANT: &str = "acme";
/// The tenant's API key.
pub const TENANT_KEY: &str = "tenant-acme-sim-key-0001";
/// The operator's API key (configuration, membership, status).
pub const OPERATOR_KEY: &str = "operator-sim-key-00001";
/// Shared by the nodes; authenticates the internal Raft service.
pub const CLUSTER_SECRET: &str = "sim-cluster-secret-0001";
/// The port every node listens on, each at its own IP.
pub const NODE_PORT: u16 = 7000;
/// The namespace of every workload effect.
pub const NAMESPACE: &str = "sim";
/// Default lease of the workload tools.
pub const LEASE_MS: u64 = 10_000;
/// Longest lease a claim may ask for.
pub const LEASE_MS_MAX: u64 = 120_000;

/// The IP of ledger node `id` (1-based).
pub fn node_ip(id: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, id as u8))
}

/// The gRPC address of ledger node `id`.
pub fn node_addr(id: u64) -> SocketAddr {
    SocketAddr::new(node_ip(id), NODE_PORT)
}

/// The IP of client node `n` (0-based); clients live in their own subnet.
pub fn client_ip(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        10,
        0,
        1 + (n / 250) as u8,
        1 + (n % 250) as u8,
    ))
}

/// Timing and sizes of one simulated cluster.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// Number of ledger nodes the cluster is formed with, ids `1..=nodes`.
    pub nodes: u64,
    /// Spare machines, ids `nodes+1..=nodes+spares`: started but not members, so that a
    /// scenario can add them (and remove others) while the cluster serves.
    pub spares: u64,
    /// Raft timing and compaction.
    pub raft: RaftSettings,
    /// Group commit.
    pub proposer: ProposerSettings,
    /// The leader's sweeper.
    pub sweeper: SweeperSettings,
    /// The nodes' `clock_skew_ms_max`: how far a wall clock may move ledger time beyond
    /// the real time that passed.
    pub clock_skew_ms_max: u64,
    /// Each node's wall clock starts up to this far (ms) off the simulator's, either way,
    /// drawn from the run's RNG; zero draws nothing.
    pub clock_offset_ms_max: u64,
    /// How far ledger time may run ahead of the simulator's clock in this run (ms): zero
    /// while every node's clock is right; the checkers that compare the two allow it.
    pub ledger_time_lead_ms_max: u64,
    /// How far a node's wall clock may run ahead of the simulator's clock in this run
    /// (ms), a wrong clock included. A leader's upper bound on real time is never below
    /// its wall clock plus the skew (`ledger_node::real_time`), so horizons may be judged
    /// passed that much early; the linearizability checker allows it.
    pub wall_clock_lead_ms_max: u64,
}

impl ClusterSettings {
    /// `nodes` nodes with production timing, and snapshots every 64 entries (keeping 16
    /// behind) so that runs exercise compaction and snapshot installation.
    pub fn new(nodes: u64) -> Self {
        ClusterSettings {
            nodes,
            spares: 0,
            raft: RaftSettings {
                snapshot_after_logs: 64,
                logs_kept_after_snapshot: 16,
                ..RaftSettings::default()
            },
            proposer: ProposerSettings::default(),
            sweeper: SweeperSettings::default(),
            clock_skew_ms_max: CLOCK_SKEW_MS_MAX_DEFAULT,
            clock_offset_ms_max: 0,
            ledger_time_lead_ms_max: 0,
            wall_clock_lead_ms_max: 0,
        }
    }

    /// The configuration of node `id`. Storage fields are placeholders: the harness hands
    /// the node its simulated disk directly.
    pub fn node_config(&self, id: u64) -> NodeConfig {
        NodeConfig {
            node_id: id,
            listen_addr: node_addr(id),
            metrics_listen_addr: None,
            health_listen_addr: None,
            data_dir: PathBuf::from(format!("/sim/node{id}")),
            storage: StorageKind::Memory,
            rocksdb: RocksOptions::default(),
            cluster_secret: CLUSTER_SECRET.into(),
            cluster_secret_file: None,
            previous_cluster_secrets: Vec::new(),
            api_keys: vec![
                ApiKey::plain(OPERATOR_KEY, None),
                ApiKey::plain(TENANT_KEY, Some(TENANT)),
            ],
            tls: None,
            raft: self.raft.clone(),
            proposer: self.proposer.clone(),
            sweeper: self.sweeper.clone(),
            clock_skew_ms_max: self.clock_skew_ms_max,
            connections_max: ledger_node::config::CONNECTIONS_MAX_DEFAULT,
        }
    }
}

/// Which of the two configured tools an effect goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ToolKind {
    /// The provider deduplicates the provider key: a re-send is harmless.
    Keyed,
    /// The provider takes no token: a second send is a second effect.
    Unkeyed,
}

impl ToolKind {
    /// The tool as effects record it.
    pub fn tool_ref(self) -> ToolRef {
        let (provider, name) = match self {
            ToolKind::Keyed => ("payments", "refund"),
            ToolKind::Unkeyed => ("tickets", "create"),
        };
        ToolRef {
            provider: provider.into(),
            name: name.into(),
            contract_version: "v1".into(),
        }
    }

    /// The tool as its policy names it.
    pub fn tool_name(self) -> ToolName {
        self.tool_ref().tool_name()
    }

    /// The operator's policy for the tool.
    pub fn policy(self) -> ToolPolicy {
        let class = match self {
            ToolKind::Keyed => ReplayClass::KeyedIdempotent,
            ToolKind::Unkeyed => ReplayClass::UnkeyedCreate,
        };
        ToolPolicy {
            lease_ms: LEASE_MS,
            lease_ms_max: LEASE_MS_MAX,
            dispatch_attempts_max: 20,
            observations_max: 20,
            // The simulated provider applies a send the instant it arrives, and a workload
            // client sends only while its lease has a margin left that exceeds any clock
            // skew: nothing lands after the latest lease end.
            processing_ms_max: Some(0),
            ..ToolPolicy::for_class(class)
        }
    }

    /// Both tools.
    pub const ALL: [ToolKind; 2] = [ToolKind::Keyed, ToolKind::Unkeyed];
}

/// The key of workload effect `name`.
pub fn effect_key(name: &str) -> EffectKey {
    EffectKey::new(TENANT, NAMESPACE, name)
}

/// The declaration of effect `name` through `tool`; its intent is fixed by the name, so
/// every client offering it offers the same intent.
pub fn declaration(name: &str, tool: ToolKind) -> Declaration {
    Declaration {
        key: effect_key(name),
        workflow_id: format!("wf-{name}"),
        tool: tool.tool_ref(),
        authority: Authority {
            principal: "user-1".into(),
            policy_generation: 1,
        },
        target: format!("resource-{name}"),
        intent_json: format!(r#"{{"effect":"{name}","amount":100}}"#),
    }
}
