//! A ledger cluster of real `ledger-node` processes on loopback, each on its own RocksDB
//! folder under one temporary directory, for the end-to-end tests of every package (the
//! node's, the example MCP server's, the gateway's), and certificates made at test time
//! ([`certs`]).
//!
//! The `ledger-node` binary is the one beside the test executable's folder (cargo puts
//! integration tests in `target/<profile>/deps/` and binaries in `target/<profile>/`).
//! The node package's own tests get it built by cargo before they run; any other
//! package's tests build it with `cargo build -p ledger-node` when it is missing (for
//! example under `cargo test -p ledger-mcp-example` on a fresh clone). One that is there
//! is used as it is: after changing the node, test the workspace or build it.

pub mod certs;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ledger_client::{LedgerClient, OverloadPolicy, PolicyFile, RetryPolicy, TlsOptions};
use ledger_core::{ReplayClass, TenantSettings, ToolName, ToolPolicy};

/// The operator's API key.
pub const OPERATOR_KEY: &str = "test-operator-key-0001";
/// Tenant acme's API key.
pub const TENANT_KEY: &str = "test-tenant-acme-0001";
/// The API key of tenant ghost, which has no configuration.
pub const GHOST_KEY: &str = "test-tenant-ghost-0001";
/// The tenant [`ProcessCluster::form`] registers.
pub const TENANT: &str = "acme";
/// The nodes' cluster secret.
pub const SECRET: &str = "test-cluster-secret-01";

/// The `ledger-node` binary beside the running test executable, built if missing.
pub fn ledger_node_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("tests run from target/<profile>/deps");
    let path = profile_dir.join("ledger-node");
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
        let mut build = Command::new(cargo);
        build
            .args([
                "build",
                "-p",
                "ledger-node",
                "--bin",
                "ledger-node",
                "--manifest-path",
            ])
            .arg(manifest);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build -p ledger-node");
        assert!(status.success(), "cargo build -p ledger-node failed");
    }
    path
}

/// Real node processes; killed when dropped.
pub struct ProcessCluster {
    dir: tempfile::TempDir,
    ports: Vec<u16>,
    metrics_ports: Vec<u16>,
    health_ports: Vec<u16>,
    /// Each node's cluster secret and the previous secrets it also accepts.
    secrets: Vec<(String, Vec<String>)>,
    children: Vec<Option<Child>>,
    /// The `[[api_keys]]` tables every node's configuration holds.
    keys_toml: String,
    /// Where the certificates are (`certs::write_pki`'s layout), when TLS is on.
    tls_dir: Option<PathBuf>,
}

/// The API keys of [`ProcessCluster::start`]: the operator, tenant acme and tenant ghost.
pub fn default_keys_toml() -> String {
    format!(
        "[[api_keys]]\nkey = \"{OPERATOR_KEY}\"\noperator = true\n\
         [[api_keys]]\nkey = \"{TENANT_KEY}\"\ntenant = \"{TENANT}\"\n\
         [[api_keys]]\nkey = \"{GHOST_KEY}\"\ntenant = \"ghost\"\n"
    )
}

/// Ports handed to nodes come from below Linux's ephemeral range (32768 and up), where no
/// outgoing connection's source port can take one between its choice and the node's
/// bind; a counter keeps them apart within the process, and a random starting point
/// makes test processes running side by side unlikely to walk the same ports.
const NODE_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A port no other node of this process was given, free when chosen.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    static OFFSET: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let span = u32::from(NODE_PORTS.end - NODE_PORTS.start);
    // std's hasher keys are random per process.
    let offset = *OFFSET.get_or_init(|| {
        (std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
            % u64::from(span)) as u32
    });
    for _ in 0..span {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = NODE_PORTS.start + ((offset + n) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {NODE_PORTS:?}");
}

/// Sends signal `name` (`HUP`, `TERM`) to process `pid`.
fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid}");
}

impl ProcessCluster {
    /// Starts `n` nodes (not yet forming a cluster).
    pub fn start(n: usize) -> Self {
        Self::start_with(n, default_keys_toml(), None)
    }

    /// Starts `n` nodes with `keys_toml` as their API keys and, with `tls_dir`, TLS on
    /// with the certificates there (`certs::write_pki`).
    pub fn start_with(n: usize, keys_toml: String, tls_dir: Option<PathBuf>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let metrics_ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let health_ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let mut cluster = ProcessCluster {
            dir,
            ports,
            metrics_ports,
            health_ports,
            secrets: (0..n).map(|_| (SECRET.to_owned(), Vec::new())).collect(),
            children: (0..n).map(|_| None).collect(),
            keys_toml,
            tls_dir,
        };
        for i in 0..n {
            cluster.write_config(i);
            cluster.spawn(i);
        }
        cluster
    }

    fn config_path(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("node{}.toml", i + 1))
    }

    /// The folder of the nodes' data, configurations and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The nodes that do not answer `operator`'s status call.
    async fn silent(&self, operator: &LedgerClient) -> Vec<usize> {
        let mut silent = Vec::new();
        for i in 0..self.ports.len() {
            if operator.status_of(i).await.is_err() {
                silent.push(i);
            }
        }
        silent
    }

    /// What the silent nodes `silent` wrote last, for a failure message.
    fn diagnosis(&self, silent: &[usize]) -> String {
        silent
            .iter()
            .map(|&i| {
                let log = self.log(i);
                let tail: Vec<&str> = log.lines().rev().take(10).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!(
                    "node {} (port {}) silent, its log ends:\n{}",
                    i + 1,
                    self.ports[i],
                    tail.join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Node `i`'s log so far.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("node{}.log", i + 1)))
            .unwrap_or_default()
    }

    /// Rewrites every node's configuration with `keys_toml` as its API keys (in force
    /// at the next start or SIGHUP).
    pub fn set_keys(&mut self, keys_toml: String) {
        self.keys_toml = keys_toml;
        for i in 0..self.ports.len() {
            self.write_config(i);
        }
    }

    /// Rewrites node `i`'s configuration with `secret` as its cluster secret and
    /// `previous` as the secrets it also accepts (in force at its next start or SIGHUP).
    pub fn set_secret(&mut self, i: usize, secret: &str, previous: &[&str]) {
        self.secrets[i] = (
            secret.to_owned(),
            previous.iter().map(|s| (*s).to_owned()).collect(),
        );
        self.write_config(i);
    }

    /// Sends SIGHUP to node `i`.
    pub fn hangup(&self, i: usize) {
        signal(self.children[i].as_ref().expect("node running").id(), "HUP");
    }

    /// The TLS options of a client trusting the test CA, without a client certificate;
    /// `None` when TLS is off.
    pub fn tls_options(&self) -> Option<TlsOptions> {
        let dir = self.tls_dir.as_ref()?;
        Some(TlsOptions::from_files(&dir.join("ca.pem"), None, None).expect("read the CA"))
    }

    fn tls_toml(&self, i: usize) -> String {
        let Some(dir) = &self.tls_dir else {
            return String::new();
        };
        format!(
            "[tls]\ncert_file = {:?}\nkey_file = {:?}\nclient_ca_file = {:?}\n",
            dir.join(format!("node{}.pem", i + 1)).display().to_string(),
            dir.join(format!("node{}.key", i + 1)).display().to_string(),
            dir.join("ca.pem").display().to_string(),
        )
    }

    fn write_config(&self, i: usize) {
        let text = format!(
            r#"
node_id = {id}
listen_addr = "127.0.0.1:{port}"
metrics_listen_addr = "127.0.0.1:{metrics_port}"
health_listen_addr = "127.0.0.1:{health_port}"
data_dir = "{data}"
cluster_secret = "{secret}"
previous_cluster_secrets = {previous:?}
{keys}
{tls}
[raft]
heartbeat_interval_ms = 50
election_timeout_min_ms = 300
election_timeout_max_ms = 600
snapshot_after_logs = 200
logs_kept_after_snapshot = 50
[sweeper]
interval_ms = 100
"#,
            id = i + 1,
            port = self.ports[i],
            metrics_port = self.metrics_ports[i],
            health_port = self.health_ports[i],
            secret = self.secrets[i].0,
            previous = self.secrets[i].1,
            data = self.dir.path().join(format!("node{}", i + 1)).display(),
            keys = self.keys_toml,
            tls = self.tls_toml(i),
        );
        std::fs::write(self.config_path(i), text).expect("write config");
    }

    /// Starts node `i` (0-based) on its data.
    pub fn spawn(&mut self, i: usize) {
        let log = std::fs::File::create(self.dir.path().join(format!("node{}.log", i + 1)))
            .expect("log file");
        let child = Command::new(ledger_node_binary())
            .arg("--config")
            .arg(self.config_path(i))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn ledger-node");
        self.children[i] = Some(child);
    }

    /// Sends SIGTERM to node `i` and waits up to `within` for it to exit; its exit status
    /// and how long it took, or `None` (the node SIGKILLed) when it had not exited.
    pub fn terminate(
        &mut self,
        i: usize,
        within: std::time::Duration,
    ) -> Option<(std::process::ExitStatus, std::time::Duration)> {
        let mut child = self.children[i].take().expect("node running");
        signal(child.id(), "TERM");
        #[allow(clippy::disallowed_methods)]
        let sent = std::time::Instant::now();
        while sent.elapsed() < within {
            if let Some(status) = child.try_wait().expect("poll the child") {
                return Some((status, sent.elapsed()));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        None
    }

    /// SIGKILLs node `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.children[i].take() {
            child.kill().expect("SIGKILL");
            child.wait().expect("reap");
        }
    }

    /// `127.0.0.1:port` of every node.
    pub fn endpoints(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect()
    }

    /// `127.0.0.1:port` of node `i`'s plaintext health service (`health_listen_addr`).
    pub fn health_endpoint(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.health_ports[i])
    }

    /// Node `i`'s Prometheus page (`GET /metrics`), read with a plain HTTP/1.0 request.
    pub fn scrape(&self, i: usize) -> std::io::Result<String> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.metrics_ports[i]))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
        let mut page = String::new();
        stream.read_to_string(&mut page)?;
        Ok(page)
    }

    /// A client of every node with `key`.
    pub fn client(&self, key: &str) -> LedgerClient {
        let retry = RetryPolicy {
            attempts: 20,
            attempt_timeout_ms: 3_000,
            ..RetryPolicy::default()
        };
        LedgerClient::with_tls(
            self.endpoints(),
            key,
            retry,
            OverloadPolicy::default(),
            self.tls_options(),
        )
        .expect("client")
    }

    /// A client of node `i` alone.
    pub fn client_of(&self, i: usize, key: &str) -> LedgerClient {
        LedgerClient::with_tls(
            vec![self.endpoints()[i].clone()],
            key,
            RetryPolicy::default(),
            OverloadPolicy::default(),
            self.tls_options(),
        )
        .expect("client")
    }

    /// Forms the cluster of all nodes, waits for a leader, registers the tenant and its
    /// tools.
    pub async fn form(&self) {
        self.form_with(self.ports.len()).await
    }

    /// Initializes the cluster of the first `voters` nodes and waits for a leader.
    async fn form_members(&self, voters: usize) {
        let operator = self.client(OPERATOR_KEY);
        if !poll_until(30_000, || async { self.silent(&operator).await.is_empty() }).await {
            let silent = self.silent(&operator).await;
            panic!(
                "timed out after 30000 ms waiting until every node answers; {}",
                self.diagnosis(&silent)
            );
        }
        let members: Vec<(u64, String)> = self
            .endpoints()
            .into_iter()
            .enumerate()
            .take(voters)
            .map(|(i, e)| (i as u64 + 1, e))
            .collect();
        operator.initialize(&members).await.expect("initialize");
        operator.wait_for_leader(20_000).await.expect("a leader");
    }

    /// Forms the cluster of the first `voters` nodes; the others stay uninitialised, to be
    /// added later.
    pub async fn form_with(&self, voters: usize) {
        self.form_members(voters).await;
        let operator = self.client(OPERATOR_KEY);
        operator
            .put_tenant("setup-tenant", TENANT, TenantSettings::default())
            .await
            .expect("put tenant");
        for (provider, name, class) in [
            ("pay", "refund", ReplayClass::KeyedIdempotent),
            ("desk", "create_ticket", ReplayClass::UnkeyedCreate),
        ] {
            let tool = ToolName {
                provider: provider.into(),
                name: name.into(),
            };
            let id = format!("setup-tool-{name}");
            operator
                .put_tool_policy(&id, TENANT, tool, ToolPolicy::for_class(class))
                .await
                .expect("put tool policy");
        }
    }

    /// Forms the cluster of all nodes, waits for a leader, and applies `policies` (tenants
    /// and tool policies, as `ledgerctl policy apply` does).
    pub async fn form_with_policies(&self, policies: &PolicyFile) {
        self.form_members(self.ports.len()).await;
        policies
            .apply(&self.client(OPERATOR_KEY))
            .await
            .expect("policies apply");
    }

    /// The leader's 0-based index.
    pub async fn leader(&self) -> usize {
        let operator = self.client(OPERATOR_KEY);
        let (id, _) = operator.wait_for_leader(20_000).await.expect("a leader");
        id as usize - 1
    }

    /// Waits until every node has applied the same index and holds byte-identical ledger
    /// state; returns that index.
    pub async fn converged(&self) -> u64 {
        self.converged_among(&(0..self.ports.len()).collect::<Vec<_>>())
            .await
    }

    /// [`ProcessCluster::converged`] for the nodes `among` (0-based).
    pub async fn converged_among(&self, among: &[usize]) -> u64 {
        let operator = self.client(OPERATOR_KEY);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let mut seen = Vec::new();
            for &i in among {
                if let Ok(s) = operator.status_with_digest(i).await {
                    seen.push((s.state_digest_index, s.state_digest));
                }
            }
            let all_answered = seen.len() == among.len();
            if all_answered && seen[0].0.is_some() && seen.windows(2).all(|w| w[0] == w[1]) {
                return seen[0].0.unwrap_or(0);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "replicas did not converge: {:?}",
                seen.iter().map(|(index, _)| index).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for ProcessCluster {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }
}

/// Polls `condition` every 100 ms until it holds; panics after `timeout_ms`.
pub async fn wait_until<F, Fut>(what: &str, timeout_ms: u64, condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    assert!(
        poll_until(timeout_ms, condition).await,
        "timed out after {timeout_ms} ms waiting until {what}"
    );
}

/// Polls `condition` every 100 ms until it holds or `timeout_ms` have passed; whether it
/// held.
pub async fn poll_until<F, Fut>(timeout_ms: u64, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
    while !condition().await {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    true
}
