//! The world of an end-to-end test, all real processes but the proxy and the agent: a
//! ledger cluster, the fake providers, two MCP server instances, a proxy that can lose
//! answers, and agents (MCP clients) that call through it.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use http::Method;
use ledger_mcp_example::agent::{self, Agent, Session};
use ledger_mcp_example::http::send_json;
use ledger_mcp_example::proxy::LossyProxy;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult};
use serde_json::{json, Value};

pub use ledger_test_cluster::{ProcessCluster as Cluster, GHOST_KEY, TENANT, TENANT_KEY};

/// The folder this package's binaries were built into.
pub fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_ledger-mcp-server"))
        .parent()
        .expect("binaries live in a folder")
        .to_owned()
}

/// The agent token of tenant `acme` at the MCP servers.
pub const AGENT_TOKEN: &str = "agent-token-acme-00001";
/// The agent token of tenant `ghost`, which the ledger does not know.
pub const GHOST_TOKEN: &str = "agent-token-ghost-0001";

/// The operator's policies for the example's tools. Tenant `ghost` has a ledger API key
/// but was never registered, so the ledger refuses everything it asks.
pub const POLICIES: &str = r#"
[[tenant]]
name = "acme"

[[tool]]
tenant = "acme"
tool = "pay/refund"
class = "keyed_idempotent"
provider_horizon_ms = 86400000
processing_ms_max = 30000
target_fields = ["/order_id"]

[[tool]]
tenant = "acme"
tool = "desk/create_ticket"
class = "unkeyed_create"
processing_ms_max = 2000

[[tool]]
tenant = "acme"
tool = "msg/send_message"
class = "irreversible"
processing_ms_max = 1000
visibility_lag_ms = 200

[[tool]]
tenant = "acme"
tool = "deploy/start_deploy"
class = "long_running_job"
target_fields = ["/service"]
processing_ms_max = 2000

[[tool]]
tenant = "acme"
tool = "pay/get_order"
class = "read_only"
"#;

/// What the servers' policy file adds: a policy for tenant `ghost`, so its calls reach
/// the ledger, which refuses them.
const GHOST_POLICY: &str = r#"
[[tool]]
tenant = "ghost"
tool = "pay/refund"
class = "keyed_idempotent"
"#;

/// A child process that printed `listening <addr>`; killed when dropped.
pub struct Service {
    child: Child,
    _stdout: BufReader<ChildStdout>,
    pub addr: String,
}

impl Service {
    /// Runs this package's binary `name` with `args`, its log in `log`, and waits for it
    /// to print its address.
    fn start(name: &str, args: &[&str], log: &Path) -> Self {
        let binary = bin_dir().join(name);
        let mut child = Command::new(&binary)
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", binary.display()));
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read the address");
        let addr = line
            .trim()
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("{name} did not start: {line:?}; see {}", log.display()))
            .to_owned();
        Service {
            child,
            _stdout: stdout,
            addr,
        }
    }

    /// SIGKILLs the process.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Everything an end-to-end test runs against.
pub struct World {
    pub proxy: LossyProxy,
    pub servers: BTreeMap<String, Service>,
    pub providers: Service,
    pub cluster: Cluster,
    dir: tempfile::TempDir,
}

impl World {
    /// Starts a 3-node ledger, the providers, instances `mcp-a` and `mcp-b` (attempt
    /// leases of `lease_ms`) and the proxy.
    pub async fn start(lease_ms: u64) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let cluster = Cluster::start(3);
        let policies = ledger_client::PolicyFile::from_toml(POLICIES).expect("policies parse");
        cluster.form_with_policies(&policies).await;
        let providers = Service::start(
            "fake-provider",
            &["--message-lag-ms", "200", "--deploy-ms", "500"],
            &dir.path().join("providers.log"),
        );
        let policies = format!("{POLICIES}{GHOST_POLICY}");
        std::fs::write(dir.path().join("policies.toml"), policies).expect("write policies");
        let config = dir.path().join("mcp.toml");
        std::fs::write(&config, server_config(&cluster, &providers.addr, lease_ms))
            .expect("write config");
        let servers: BTreeMap<String, Service> = ["mcp-a", "mcp-b"]
            .into_iter()
            .map(|name| {
                let args = [
                    "--config",
                    config.to_str().expect("utf-8 path"),
                    "--instance",
                    name,
                ];
                let log = dir.path().join(format!("{name}.log"));
                (
                    name.to_owned(),
                    Service::start("ledger-mcp-server", &args, &log),
                )
            })
            .collect();
        let routes = servers
            .iter()
            .map(|(name, s)| (name.clone(), s.addr.clone()))
            .collect();
        let proxy = LossyProxy::start(&dir.path().join("proxy.sock"), routes).expect("proxy");
        World {
            proxy,
            servers,
            providers,
            cluster,
            dir,
        }
    }

    /// The folder holding configs and logs.
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_owned()
    }

    /// A fresh session with instance `host`, as tenant acme's agent that confirms.
    pub async fn agent(&self, host: &str) -> Session {
        self.agent_with(host, AGENT_TOKEN).await
    }

    /// A fresh session with instance `host`, presenting `token`.
    pub async fn agent_with(&self, host: &str, token: &str) -> Session {
        agent::connect(self.proxy.socket(), host, token, Agent { confirms: true })
            .await
            .expect("connect")
    }

    /// Every record of tenant acme in the ledger.
    pub async fn records(&self) -> Vec<ledger_core::EffectRecord> {
        let query = ledger_core::ListQuery {
            tenant: TENANT.into(),
            escalated: false,
            state: None,
            workflow_id: None,
            updated_at_or_before_ms: None,
            after: None,
            limit: 1_000,
        };
        self.cluster
            .client(TENANT_KEY)
            .list(query)
            .await
            .expect("list records")
            .records
    }

    /// Everything the providers hold.
    pub async fn effects(&self) -> Value {
        let answer = send_json(
            &self.providers.addr,
            Method::GET,
            "/admin/effects",
            &[],
            None,
            5_000,
        )
        .await
        .expect("providers answer");
        answer.body
    }

    /// How many of each kind of effect the providers hold.
    pub async fn counts(&self) -> BTreeMap<String, usize> {
        ledger_mcp_example::fake::counts(&self.effects().await)
    }

    /// Arms a provider fault (`POST /admin/faults`).
    pub async fn fault(&self, fault: Value) {
        let answer = send_json(
            &self.providers.addr,
            Method::POST,
            "/admin/faults",
            &[],
            Some(&fault),
            5_000,
        )
        .await
        .expect("providers answer");
        assert_eq!(answer.status, 200, "{:?}", answer.body);
    }

    /// Waits until the providers hold `n` committed requests unanswered.
    pub async fn until_held(&self, n: u64) {
        for _ in 0..200 {
            let answer = send_json(
                &self.providers.addr,
                Method::GET,
                "/admin/held",
                &[],
                None,
                5_000,
            )
            .await
            .expect("providers answer");
            if answer.body["held"].as_u64() == Some(n) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the providers never held {n} requests");
    }
}

fn server_config(cluster: &Cluster, provider_addr: &str, lease_ms: u64) -> String {
    let endpoints: Vec<String> = cluster
        .endpoints()
        .iter()
        .map(|e| format!("{e:?}"))
        .collect();
    format!(
        r#"
listen_addr = "127.0.0.1:0"
instance = "unnamed"
ledger_endpoints = [{endpoints}]
policy_file = "policies.toml"
provider_addr = "{provider_addr}"
request_state_key = "mcp-test-request-state-key-0123456789"
arguments_bytes_max = 4096
lease_ms = {lease_ms}
wait_in_flight_ms = 8000

[[tenants]]
name = "acme"
agent_token = "{AGENT_TOKEN}"
ledger_api_key = "{TENANT_KEY}"

[[tenants]]
name = "ghost"
agent_token = "{GHOST_TOKEN}"
ledger_api_key = "{GHOST_KEY}"
"#,
        endpoints = endpoints.join(", ")
    )
}

/// A call of `tool` in turn `turn` of workflow `wf-e2e`.
pub fn call(tool: &str, turn: &str, arguments: Value) -> CallToolRequestParams {
    agent::call(tool, arguments, agent::turn_meta("wf-e2e", turn))
}

/// The MCP error a call was answered with: its code and message.
pub fn mcp_error(response: Result<CallToolResponse, rmcp::ServiceError>) -> rmcp::model::ErrorData {
    match response {
        Err(rmcp::ServiceError::McpError(e)) => e,
        other => panic!("expected an MCP error, got {other:?}"),
    }
}

/// The completed result of a call, or a panic naming what came instead.
pub fn complete(response: Result<CallToolResponse, rmcp::ServiceError>) -> CallToolResult {
    match response {
        Ok(CallToolResponse::Complete(result)) => result,
        other => panic!("expected a complete result, got {other:?}"),
    }
}

/// The structured content of a successful result.
pub fn body(result: &CallToolResult) -> Value {
    assert_ne!(result.is_error, Some(true), "tool error: {result:?}");
    result
        .structured_content
        .clone()
        .expect("structured content")
}

/// A JSON object of elicitation answers confirming a send.
pub fn confirmed() -> BTreeMap<String, Value> {
    [(
        "confirm".to_owned(),
        serde_json::to_value(agent::confirmation(true)).expect("serialisable"),
    )]
    .into()
}

/// `{"order_id": ..}` etc. as one place to spell the test refund.
pub fn refund_args(amount_cents: u64) -> Value {
    json!({ "order_id": "o-981", "amount_cents": amount_cents, "currency": "EUR" })
}
