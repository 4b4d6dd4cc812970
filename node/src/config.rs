//! Node configuration: a TOML file, with the few per-node values overridable by flags.
//!
//! Everything has a default except the node id, the listen address and the data folder,
//! so a three-node cluster on loopback needs three lines per node (see `deploy/`).
//!
//! Secrets. The cluster secret and each API key may be written in the file
//! (`cluster_secret = "..."`, `key = "..."`) or kept in a file of their own, named by a
//! `_file` field (`cluster_secret_file = "/run/secrets/cluster"`, `key_file = "..."`):
//! the file's content, without its trailing newline, is the secret. One scheme, files,
//! because a file can change under a running node: every secret file and certificate is
//! read again at SIGHUP (environment variables cannot change). An API key is better given
//! as its SHA-256 (`key_sha256 = "<64 hex digits>"`, `printf %s "$KEY" | sha256sum`): the
//! node keeps only digests either way, and a configuration holding only digests gives a
//! reader no key. A plain `key` is accepted with a warning at start.
//!
//! TLS. With a `[tls]` table the one listener speaks TLS only: `cert_file` and `key_file`
//! (PEM) are the node's certificate and key, which it presents to its callers and, as its
//! client certificate, to its peers (so the certificate needs both the serverAuth and
//! clientAuth usages, and must be signed by `client_ca_file`); `client_ca_file` is the CA
//! whose certificates are accepted from callers. The internal Raft service requires one;
//! the ledger and admin APIs require one only with `require_client_cert = true` (tool
//! servers authenticate with API keys). `deploy/gen-certs.sh` makes a local CA and
//! certificates. Without `[tls]` everything is plaintext.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use ledger_core::Caller;
use ledger_raft_store::RocksOptions;

use crate::proposer::COMMAND_BYTES_MAX;

/// What the example configurations in `deploy/` hold where a secret or key goes; a node
/// refuses to start on one, so a forgotten edit never serves with a published key.
const PLACEHOLDER: &str = "REPLACE-ME";

/// Whether `secret` can travel in an HTTP header as it is: visible ASCII, spaces and tabs
/// (what a header value may hold), but not at either end, where a header loses them.
fn header_safe(secret: &str) -> bool {
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let bytes = secret.as_bytes();
    bytes.iter().all(|b| b.is_ascii_graphic() || blank(b))
        && !bytes.first().is_some_and(blank)
        && !bytes.last().is_some_and(blank)
}

/// Values given on the command line, which take precedence over the file's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// The node's Raft id.
    pub node_id: Option<u64>,
    /// Where the gRPC services listen.
    pub listen_addr: Option<SocketAddr>,
    /// The data folder.
    pub data_dir: Option<PathBuf>,
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this configuration.
    #[error("invalid configuration {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The values do not make sense together.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// Where the node keeps its Raft log, vote and snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageKind {
    /// RocksDB under `data_dir` (the default; survives crashes).
    #[default]
    Rocksdb,
    /// In memory; lost when the process ends. For experiments only.
    Memory,
}

/// One API key and whom it authenticates. Exactly one of `key`, `key_file` and
/// `key_sha256` gives the key.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    /// The bearer token callers send (`authorization: Bearer <key>`), in the clear.
    #[serde(default)]
    pub key: Option<String>,
    /// A file holding the key (read at start and at every SIGHUP).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// The key's SHA-256, 64 hex digits: the node never needs the key itself.
    #[serde(default)]
    pub key_sha256: Option<String>,
    /// The tenant it acts for; absent for the operator key.
    #[serde(default)]
    pub tenant: Option<String>,
    /// Whether it is an operator key (configuration, decisions, membership).
    #[serde(default)]
    pub operator: bool,
}

impl ApiKey {
    /// A key given in the clear, for `tenant` or, with `None`, the operator.
    pub fn plain(key: &str, tenant: Option<&str>) -> Self {
        ApiKey {
            key: Some(key.to_owned()),
            tenant: tenant.map(str::to_owned),
            operator: tenant.is_none(),
            ..ApiKey::default()
        }
    }

    /// The SHA-256 of the key, read from wherever it is given. Keys in the clear and
    /// from files must be at least 16 characters.
    pub fn digest(&self) -> Result<[u8; 32], ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        let plain = match (&self.key, &self.key_file, &self.key_sha256) {
            (Some(key), None, None) => key.clone(),
            (None, Some(path), None) => read_secret(path)?,
            (None, None, Some(hex)) => {
                return parse_sha256(hex).ok_or_else(|| {
                    ConfigError::Invalid(format!(
                        "key_sha256 {hex:?} is not 64 hex digits (the SHA-256 of the key)"
                    ))
                })
            }
            _ => {
                return invalid("an api key needs exactly one of key, key_file, key_sha256".into())
            }
        };
        if plain.len() < 16 {
            return invalid("api keys must be at least 16 characters".into());
        }
        if !header_safe(&plain) {
            return invalid(
                "api keys must be visible ASCII (spaces inside allowed): they travel in an \
                 HTTP header, where other bytes would never match"
                    .into(),
            );
        }
        if plain.contains(PLACEHOLDER) {
            return invalid(format!(
                "an api key is still the example's placeholder ({PLACEHOLDER}...): set a key \
                 of your own"
            ));
        }
        Ok(Sha256::digest(plain.as_bytes()).into())
    }

    /// Whom the key authenticates (validated: a tenant's or the operator's).
    pub fn caller(&self) -> Caller {
        match (&self.tenant, self.operator) {
            (_, true) => Caller::Operator,
            (Some(t), false) => Caller::Tenant(t.clone()),
            (None, false) => unreachable!("validated: a key is a tenant's or the operator's"),
        }
    }

    /// A name for the key in messages that does not give it away.
    pub fn describe(&self) -> String {
        match (&self.tenant, self.operator) {
            (_, true) => "the operator key".into(),
            (Some(t), false) => format!("a key of tenant {t}"),
            (None, false) => "a key of no tenant".into(),
        }
    }
}

/// The 32 bytes written as 64 hex digits in `hex`.
pub fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The secret kept in the file at `path`, without its trailing newline.
pub fn read_secret(path: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    Ok(text.trim_end_matches(['\n', '\r']).to_owned())
}

/// Transport security of the listener and of the connections to peers (see the module's
/// documentation). Every file is read at start and again at SIGHUP.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// The node's certificate chain, PEM, leaf first.
    pub cert_file: PathBuf,
    /// The certificate's private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// The CA (PEM, one or more certificates) whose certificates callers may present:
    /// it signs the peers' certificates, and the clients' when they have any.
    pub client_ca_file: PathBuf,
    /// Whether the ledger and admin APIs refuse a caller without a certificate. The Raft
    /// service always does when TLS is on.
    #[serde(default)]
    pub require_client_cert: bool,
}

/// Raft timing and log compaction.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaftSettings {
    /// Leader heartbeat interval.
    pub heartbeat_interval_ms: u64,
    /// Shortest election timeout.
    pub election_timeout_min_ms: u64,
    /// Longest election timeout.
    pub election_timeout_max_ms: u64,
    /// Build a snapshot after this many log entries since the last one.
    pub snapshot_after_logs: u64,
    /// Log entries kept behind the snapshot so lagging followers catch up from the log.
    pub logs_kept_after_snapshot: u64,
    /// Most entries in one AppendEntries message.
    pub max_payload_entries: u64,
    /// Deadline of an AppendEntries that carries entries. openraft asks for
    /// `heartbeat_interval_ms`, which a follower that decodes and syncs a large batch under
    /// load can miss; the abandoned call is then sent again, larger, and the resets it
    /// leaves on the connection add to the load. Heartbeats keep openraft's deadline.
    pub append_timeout_ms: u64,
}

impl Default for RaftSettings {
    fn default() -> Self {
        RaftSettings {
            heartbeat_interval_ms: 100,
            election_timeout_min_ms: 500,
            election_timeout_max_ms: 1000,
            snapshot_after_logs: 10_000,
            logs_kept_after_snapshot: 1_000,
            max_payload_entries: 32,
            append_timeout_ms: 2_000,
        }
    }
}

/// Group commit: how client commands are batched into Raft entries.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProposerSettings {
    /// Most commands in one Raft entry.
    pub max_batch_commands: usize,
    /// Approximate upper bound of one entry's size.
    pub max_batch_bytes: usize,
    /// Entries proposed and not yet committed at once; commands arriving meanwhile wait
    /// and form the next batch.
    pub max_in_flight_batches: usize,
    /// Commands waiting for a batch before callers are told the node is overloaded; at
    /// least `admitted_calls_max`, so that admission, not this queue, turns calls away.
    pub queue_capacity: usize,
    /// How long a command may take from arrival to outcome before the caller is told to
    /// retry (with the same command id).
    pub request_timeout_ms: u64,
    /// Client calls (commands and reads, the node's own and those forwarded to it) this
    /// node serves at once; one more is answered `RESOURCE_EXHAUSTED` at once (see
    /// `admission`).
    pub admitted_calls_max: usize,
    /// Approximate bytes of the client calls this node serves at once.
    pub admitted_bytes_max: usize,
    /// The wait suggested to a caller turned away (`retry-after-ms`).
    pub overloaded_retry_after_ms: u64,
}

impl Default for ProposerSettings {
    fn default() -> Self {
        ProposerSettings {
            max_batch_commands: 512,
            max_batch_bytes: 1 << 20,
            max_in_flight_batches: 2,
            queue_capacity: 16_384,
            request_timeout_ms: 5_000,
            admitted_calls_max: 1_024,
            admitted_bytes_max: 64 << 20,
            overloaded_retry_after_ms: 100,
        }
    }
}

/// The leader's sweeper, which proposes lease expiry and garbage collection.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SweeperSettings {
    /// How often the leader looks for expired leases and collectable records.
    pub interval_ms: u64,
    /// Most records one sweep command touches.
    pub limit: u32,
}

impl Default for SweeperSettings {
    fn default() -> Self {
        SweeperSettings {
            interval_ms: 200,
            limit: 1_000,
        }
    }
}

/// Smallest accepted [`RocksOptions::block_cache_bytes`]: the index and filter blocks
/// the cache pins, and a working set of data blocks, must fit.
pub const BLOCK_CACHE_BYTES_MIN: usize = 8 << 20;

/// Smallest accepted [`RocksOptions::write_buffer_bytes`]: below it memtables flush
/// so often that the files they leave are compacted again and again.
pub const WRITE_BUFFER_BYTES_MIN: usize = 4 << 20;

/// Largest accepted budget of either kind.
pub const ROCKSDB_BUDGET_BYTES_MAX: usize = 1 << 40;

/// A node's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// This node's Raft id; unique in the cluster, never reused.
    pub node_id: u64,
    /// Where the gRPC services listen.
    pub listen_addr: SocketAddr,
    /// Where the Prometheus endpoint (`GET /metrics`, plain HTTP) listens; none when
    /// absent. Serve it on an address only the monitoring system reaches.
    #[serde(default)]
    pub metrics_listen_addr: Option<SocketAddr>,
    /// Where the standard gRPC health service is served a second time, alone and in
    /// plaintext, for probes that cannot speak TLS (Kubernetes' gRPC probes); none when
    /// absent. It says only whether the node is ready.
    #[serde(default)]
    pub health_listen_addr: Option<SocketAddr>,
    /// Folder for the RocksDB store.
    pub data_dir: PathBuf,
    /// Storage engine.
    #[serde(default)]
    pub storage: StorageKind,
    /// RocksDB's memory budgets (with `storage = "rocksdb"`): `block_cache_bytes`, one
    /// LRU cache for every column family's data, index and filter blocks;
    /// `write_buffer_bytes`, all memtables together (smaller makes each write cheaper and
    /// flushes, and compacts, more often).
    #[serde(default)]
    pub rocksdb: RocksOptions,
    /// Shared by the cluster's nodes: authenticates the internal Raft service (with the
    /// peer's certificate when TLS is on). Given here or by `cluster_secret_file`.
    #[serde(default)]
    pub cluster_secret: String,
    /// A file holding the cluster secret instead of `cluster_secret` (read at start and
    /// at every SIGHUP; [`NodeConfig::load`] puts its content in `cluster_secret`).
    #[serde(default)]
    pub cluster_secret_file: Option<PathBuf>,
    /// Secrets also accepted from peers, never sent: the old secret while a new one is
    /// rolled out node by node (docs/operations.md, "The cluster secret"), so that nodes
    /// between two reloads still hear each other.
    #[serde(default)]
    pub previous_cluster_secrets: Vec<String>,
    /// API keys of tenants and the operator.
    #[serde(default)]
    pub api_keys: Vec<ApiKey>,
    /// TLS on the listener and towards peers; plaintext when absent.
    #[serde(default)]
    pub tls: Option<TlsSettings>,
    /// Raft timing and compaction.
    #[serde(default)]
    pub raft: RaftSettings,
    /// Group commit.
    #[serde(default)]
    pub proposer: ProposerSettings,
    /// The leader's sweeper.
    #[serde(default)]
    pub sweeper: SweeperSettings,
    /// How far (ms) the leader's wall clock may move ledger time beyond what its monotonic
    /// clock says has passed (and how far it may hold ledger time back). A wall clock
    /// outside this bound, stepped days ahead or back, is logged and ledger time follows
    /// the monotonic clock instead, so it cannot expire leases or collect records early
    /// (see `stamp_bound`). Ledger time may still run this much ahead of real time, so
    /// keep it well below the margin clients keep before a lease ends (`EffectRunner`
    /// dispatches only in the first two thirds of a lease: a third of the shortest lease).
    #[serde(default = "default_clock_skew_ms_max")]
    pub clock_skew_ms_max: u64,
    /// Connections the node serves at once, from clients and peers alike; the next is
    /// accepted when one closes (the kernel's backlog holds it meanwhile). A connection
    /// must send its first bytes within 10 s of its acceptance. Keeps a flood of
    /// connections from taking the file descriptors RocksDB and the peers need: keep it
    /// well under the process's descriptor limit, and above the number of client
    /// processes (each keeps a connection to each node it calls) plus the peers.
    #[serde(default = "default_connections_max")]
    pub connections_max: usize,
}

/// Default of [`NodeConfig::connections_max`]: a quarter of the descriptors the shipped
/// systemd unit allows (`LimitNOFILE=65536`), leaving the rest to RocksDB and the peers.
/// Whoever reaches the port can still hold that many connections open (a slot is taken
/// before anyone is authenticated), keeping new ones waiting; keep the port reachable
/// by clients and peers only.
pub const CONNECTIONS_MAX_DEFAULT: usize = 16_384;

/// Largest accepted [`NodeConfig::connections_max`].
pub const CONNECTIONS_LIMIT: usize = 1 << 20;

fn default_connections_max() -> usize {
    CONNECTIONS_MAX_DEFAULT
}

/// Default of [`NodeConfig::clock_skew_ms_max`]: far above what NTP keeps servers to,
/// far below a third of the default 30 s lease.
pub const CLOCK_SKEW_MS_MAX_DEFAULT: u64 = 2_000;

/// Largest accepted [`NodeConfig::clock_skew_ms_max`]: beyond it the bound would let a
/// wrong wall clock expire any lease a tool may ask for (`ToolPolicy::lease_ms_max`
/// defaults to 10 minutes).
pub const CLOCK_SKEW_MS_MAX_LIMIT: u64 = 60_000;

/// Largest accepted [`ProposerSettings::admitted_calls_max`]: beyond it the limit no longer
/// protects a node (each call holds a task and its request in memory).
pub const ADMITTED_CALLS_LIMIT: usize = 1 << 20;

/// Smallest accepted [`ProposerSettings::admitted_bytes_max`]: one call of the largest
/// size the gRPC decoder accepts (4 MiB) must fit.
pub const ADMITTED_BYTES_MIN: usize = 4 << 20;

/// Largest accepted [`ProposerSettings::admitted_bytes_max`] (the admission counts bytes
/// in 32 bits).
pub const ADMITTED_BYTES_LIMIT: usize = u32::MAX as usize;

/// Largest accepted [`ProposerSettings::overloaded_retry_after_ms`]: a longer hint turns
/// a moment of overload into a minute of idle callers.
pub const OVERLOADED_RETRY_AFTER_MS_LIMIT: u64 = 10_000;

/// Largest accepted [`ProposerSettings::request_timeout_ms`]: a second under how long a
/// follower waits for the leader to answer a forwarded call
/// ([`crate::forwarder::FORWARD_TIMEOUT_MS`]), so that the leader's answer, a timeout
/// included, reaches the follower's callers instead of the follower giving up first.
pub const REQUEST_TIMEOUT_MS_LIMIT: u64 = crate::forwarder::FORWARD_TIMEOUT_MS - 1_000;

/// Largest accepted [`SweeperSettings::interval_ms`] (an hour): leases must expire and
/// records be collected on some schedule.
pub const SWEEP_INTERVAL_MS_LIMIT: u64 = 3_600_000;

/// Most bytes of entries one message to a follower may carry: a peer message's limit,
/// less room for the rest of the message.
pub const PEER_PAYLOAD_BYTES_MAX: usize = crate::network::PEER_MESSAGE_BYTES_MAX - (1 << 20);

fn default_clock_skew_ms_max() -> u64 {
    CLOCK_SKEW_MS_MAX_DEFAULT
}

impl NodeConfig {
    /// Parses a configuration from TOML text.
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let mut config: NodeConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        config.read_secret_files()?;
        config.validate()?;
        Ok(config)
    }

    /// Loads the configuration file at `path` and applies `overrides` (the command
    /// line's).
    pub fn load(path: &Path, overrides: Overrides) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut config: NodeConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        if let Some(node_id) = overrides.node_id {
            config.node_id = node_id;
        }
        if let Some(listen_addr) = overrides.listen_addr {
            config.listen_addr = listen_addr;
        }
        if let Some(data_dir) = overrides.data_dir {
            config.data_dir = data_dir;
        }
        config.read_secret_files()?;
        config.validate()?;
        Ok(config)
    }

    /// Puts the content of `cluster_secret_file` in `cluster_secret`.
    fn read_secret_files(&mut self) -> Result<(), ConfigError> {
        if let Some(path) = &self.cluster_secret_file {
            if !self.cluster_secret.is_empty() {
                return Err(ConfigError::Invalid(
                    "give cluster_secret or cluster_secret_file, not both".into(),
                ));
            }
            self.cluster_secret = read_secret(path)?;
        }
        Ok(())
    }

    /// Whom an API key authenticates (a linear search; the node uses
    /// `credentials::Credentials`, which compares digests in constant time).
    pub fn caller_for(&self, key: &str) -> Option<Caller> {
        let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        self.api_keys
            .iter()
            .find(|k| k.digest().ok() == Some(digest))
            .map(ApiKey::caller)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        if self.cluster_secret.len() < 16 {
            return invalid("cluster_secret must be at least 16 characters".into());
        }
        if self.previous_cluster_secrets.iter().any(|s| s.len() < 16) {
            return invalid("previous_cluster_secrets must be at least 16 characters each".into());
        }
        if std::iter::once(&self.cluster_secret)
            .chain(&self.previous_cluster_secrets)
            .any(|s| s.contains(PLACEHOLDER))
        {
            return invalid(format!(
                "the cluster secret is still the example's placeholder ({PLACEHOLDER}...): set \
                 a secret of your own"
            ));
        }
        if !header_safe(&self.cluster_secret)
            || !self.previous_cluster_secrets.iter().all(|s| header_safe(s))
        {
            return invalid(
                "cluster secrets must be visible ASCII (spaces inside allowed): they travel \
                 in an HTTP header, where other bytes would never authenticate a peer"
                    .into(),
            );
        }
        for key in &self.api_keys {
            if key.operator == key.tenant.is_some() {
                return invalid(format!(
                    "{} must name a tenant or be the operator key, not both",
                    key.describe()
                ));
            }
            key.digest()?;
            if let Some(t) = &key.tenant {
                if let Err(e) = ledger_core::key::validate_tenant(t) {
                    return invalid(e.to_string());
                }
            }
        }
        let r = &self.raft;
        if r.heartbeat_interval_ms == 0 || r.election_timeout_min_ms <= r.heartbeat_interval_ms {
            return invalid("election_timeout_min_ms must exceed heartbeat_interval_ms > 0".into());
        }
        if r.election_timeout_max_ms <= r.election_timeout_min_ms {
            return invalid("election_timeout_max_ms must exceed election_timeout_min_ms".into());
        }
        let p = &self.proposer;
        if p.max_batch_commands == 0
            || p.max_batch_bytes == 0
            || p.max_in_flight_batches == 0
            || p.queue_capacity == 0
        {
            return invalid("proposer sizes must be positive".into());
        }
        if p.request_timeout_ms == 0 || p.request_timeout_ms > REQUEST_TIMEOUT_MS_LIMIT {
            return invalid(format!(
                "proposer.request_timeout_ms must be in 1..={REQUEST_TIMEOUT_MS_LIMIT}"
            ));
        }
        // An entry is at most max_batch_bytes and one more command; one message to a
        // follower carries at most max_payload_entries of them.
        let entry_bytes_max = p.max_batch_bytes.saturating_add(COMMAND_BYTES_MAX);
        if r.max_payload_entries == 0
            || (r.max_payload_entries as usize).saturating_mul(entry_bytes_max)
                > PEER_PAYLOAD_BYTES_MAX
        {
            return invalid(format!(
                "raft.max_payload_entries times (proposer.max_batch_bytes + {COMMAND_BYTES_MAX}) \
                 must be in 1..={PEER_PAYLOAD_BYTES_MAX}: a follower could never receive a \
                 larger message"
            ));
        }
        if r.append_timeout_ms < r.heartbeat_interval_ms {
            return invalid("append_timeout_ms must be at least heartbeat_interval_ms".into());
        }
        if p.admitted_calls_max == 0 || p.admitted_calls_max > ADMITTED_CALLS_LIMIT {
            return invalid(format!(
                "proposer.admitted_calls_max must be in 1..={ADMITTED_CALLS_LIMIT}"
            ));
        }
        if p.queue_capacity < p.admitted_calls_max {
            // Every admitted command fits the queue, so a command admitted is never turned
            // away there: a forwarded group answered overloaded then proposed none of it.
            return invalid(
                "proposer.queue_capacity must be at least proposer.admitted_calls_max".into(),
            );
        }
        if p.admitted_bytes_max < ADMITTED_BYTES_MIN || p.admitted_bytes_max > ADMITTED_BYTES_LIMIT
        {
            return invalid(format!(
                "proposer.admitted_bytes_max must be in {ADMITTED_BYTES_MIN}..={ADMITTED_BYTES_LIMIT}"
            ));
        }
        if p.overloaded_retry_after_ms == 0
            || p.overloaded_retry_after_ms > OVERLOADED_RETRY_AFTER_MS_LIMIT
        {
            return invalid(format!(
                "proposer.overloaded_retry_after_ms must be in 1..={OVERLOADED_RETRY_AFTER_MS_LIMIT}"
            ));
        }
        if self.clock_skew_ms_max > CLOCK_SKEW_MS_MAX_LIMIT {
            return invalid(format!(
                "clock_skew_ms_max must be at most {CLOCK_SKEW_MS_MAX_LIMIT}"
            ));
        }
        if self.connections_max == 0 || self.connections_max > CONNECTIONS_LIMIT {
            return invalid(format!(
                "connections_max must be in 1..={CONNECTIONS_LIMIT}"
            ));
        }
        let rocksdb = &self.rocksdb;
        if !(BLOCK_CACHE_BYTES_MIN..=ROCKSDB_BUDGET_BYTES_MAX).contains(&rocksdb.block_cache_bytes)
        {
            return invalid(format!(
                "rocksdb.block_cache_bytes must be in {BLOCK_CACHE_BYTES_MIN}..={ROCKSDB_BUDGET_BYTES_MAX}"
            ));
        }
        if !(WRITE_BUFFER_BYTES_MIN..=ROCKSDB_BUDGET_BYTES_MAX)
            .contains(&rocksdb.write_buffer_bytes)
        {
            return invalid(format!(
                "rocksdb.write_buffer_bytes must be in {WRITE_BUFFER_BYTES_MIN}..={ROCKSDB_BUDGET_BYTES_MAX}"
            ));
        }
        if self.sweeper.interval_ms == 0 || self.sweeper.interval_ms > SWEEP_INTERVAL_MS_LIMIT {
            return invalid(format!(
                "sweeper.interval_ms must be in 1..={SWEEP_INTERVAL_MS_LIMIT}"
            ));
        }
        if self.sweeper.limit == 0 || self.sweeper.limit > ledger_core::limits::SWEEP_LIMIT_MAX {
            return invalid(format!(
                "sweeper.limit must be in 1..={}",
                ledger_core::limits::SWEEP_LIMIT_MAX
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
