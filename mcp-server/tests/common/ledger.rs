//! A ledger cluster of real `ledger-node` processes (RocksDB, one folder each).
//!
//! `ledger-node` is another package's binary, so Cargo does not hand its path to these
//! tests. `cargo test --workspace` builds it (the node package has integration tests,
//! which need it) before any test runs; it is taken from the same target folder as this
//! package's binaries, and built with `cargo build -p ledger-node` when it is missing
//! (for example under `cargo test -p ledger-mcp-example` on a fresh clone). One that is
//! there is used as it is: after changing the node, test the workspace or build it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ledger_client::{LedgerClient, PolicyFile, RetryPolicy};

pub const OPERATOR_KEY: &str = "mcp-test-operator-key-01";
pub const TENANT_KEY: &str = "mcp-test-tenant-acme-0001";
pub const GHOST_KEY: &str = "mcp-test-tenant-ghost-001";
pub const TENANT: &str = "acme";
const SECRET: &str = "mcp-test-cluster-secret-1";

/// The folder the test's own binaries were built into.
pub fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_ledger-mcp-server"))
        .parent()
        .expect("binaries live in a folder")
        .to_owned()
}

/// The `ledger-node` binary, built if missing.
fn ledger_node_binary() -> PathBuf {
    let path = bin_dir().join("ledger-node");
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
        let status = Command::new(cargo)
            .args([
                "build",
                "-p",
                "ledger-node",
                "--bin",
                "ledger-node",
                "--manifest-path",
            ])
            .arg(manifest)
            .status()
            .expect("run cargo build -p ledger-node");
        assert!(status.success(), "cargo build -p ledger-node failed");
    }
    path
}

/// `n` node processes; killed when dropped.
pub struct Cluster {
    dir: PathBuf,
    ports: Vec<u16>,
    children: Vec<Option<Child>>,
}

impl Cluster {
    /// Starts `n` nodes under `dir` and forms a cluster of them.
    pub async fn start(dir: &Path, n: usize) -> Self {
        let ports = (0..n).map(|_| super::free_port()).collect();
        let mut cluster = Cluster {
            dir: dir.to_owned(),
            ports,
            children: (0..n).map(|_| None).collect(),
        };
        for i in 0..n {
            cluster.write_config(i);
            cluster.spawn(i);
        }
        cluster.form().await;
        cluster
    }

    fn config_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("node{}.toml", i + 1))
    }

    fn write_config(&self, i: usize) {
        let text = format!(
            r#"
node_id = {id}
listen_addr = "127.0.0.1:{port}"
data_dir = "{data}"
cluster_secret = "{SECRET}"
[[api_keys]]
key = "{OPERATOR_KEY}"
operator = true
[[api_keys]]
key = "{TENANT_KEY}"
tenant = "{TENANT}"
[[api_keys]]
key = "{GHOST_KEY}"
tenant = "ghost"
[raft]
heartbeat_interval_ms = 50
election_timeout_min_ms = 300
election_timeout_max_ms = 600
[sweeper]
interval_ms = 100
"#,
            id = i + 1,
            port = self.ports[i],
            data = self.dir.join(format!("node{}", i + 1)).display(),
        );
        std::fs::write(self.config_path(i), text).expect("write node config");
    }

    /// Starts node `i` (0-based) on its data.
    pub fn spawn(&mut self, i: usize) {
        let log = std::fs::File::create(self.dir.join(format!("node{}.log", i + 1)))
            .expect("node log file");
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

    /// A client of every node with `key`.
    pub fn client(&self, key: &str) -> LedgerClient {
        let retry = RetryPolicy {
            attempts: 20,
            attempt_timeout_ms: 3_000,
            ..RetryPolicy::default()
        };
        LedgerClient::with_retry(self.endpoints(), key, retry).expect("ledger client")
    }

    async fn form(&self) {
        let operator = self.client(OPERATOR_KEY);
        for i in 0..self.ports.len() {
            let mut tries = 0;
            while operator.status_of(i).await.is_err() {
                tries += 1;
                assert!(tries < 300, "ledger node {} never answered", i + 1);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let members: Vec<(u64, String)> = (1..).zip(self.endpoints()).collect();
        operator.initialize(&members).await.expect("initialize");
        operator.wait_for_leader(20_000).await.expect("a leader");
        PolicyFile::from_toml(super::POLICIES)
            .expect("policies parse")
            .apply(&operator)
            .await
            .expect("policies apply");
    }

    /// The leader's 0-based index.
    pub async fn leader(&self) -> usize {
        let (id, _) = self
            .client(OPERATOR_KEY)
            .wait_for_leader(20_000)
            .await
            .expect("a leader");
        id as usize - 1
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }
}
