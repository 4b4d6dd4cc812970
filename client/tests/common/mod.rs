//! A single-node ledger served in process on loopback (memory disk, fast sweeper), with a
//! tenant and its tool policies applied from a policy file, and a counting fake provider.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ledger_client::effect::EffectCall;
use ledger_client::{
    AttemptInfo, DispatchResult, EffectOutcome, EffectRunner, LedgerClient, PolicyFile,
    RetryPolicy, RunOptions,
};
use ledger_core::{Authority, Declaration, EffectKey, EffectRecord, EffectState, ToolRef};
use ledger_node::NodeConfig;
use ledger_raft_store::SimDisk;
use tokio::sync::oneshot;

pub const OPERATOR_KEY: &str = "client-test-operator-01";
pub const TENANT_KEY: &str = "client-test-tenant-acme";
pub const TENANT: &str = "acme";

/// The policies every test runs under. `desk/create_ticket`'s provider makes a request
/// durable before answering (a processing bound of zero), so "not found" proves absence
/// once the dispatch's lease has ended; `desk/late_ticket`'s takes up to 1.5 s;
/// `desk/observe_twice` declares no bound and escalates after two ambiguous observations;
/// `pay/refund`'s provider takes up to 1 s (so an unknown outcome is re-sent inside its
/// horizon); `pay/short_lease` clamps every lease to 300 ms.
pub const POLICIES: &str = r#"
[[tenant]]
name = "acme"

[[tool]]
tenant = "acme"
tool = "pay/refund"
class = "keyed_idempotent"
processing_ms_max = 1000

[[tool]]
tenant = "acme"
tool = "pay/short_lease"
class = "keyed_idempotent"
lease_ms = 300
lease_ms_max = 300

[[tool]]
tenant = "acme"
tool = "desk/create_ticket"
class = "unkeyed_create"
processing_ms_max = 0

[[tool]]
tenant = "acme"
tool = "desk/late_ticket"
class = "unkeyed_create"
processing_ms_max = 1500

[[tool]]
tenant = "acme"
tool = "desk/observe_twice"
class = "unkeyed_create"
observations_max = 2

[[tool]]
tenant = "acme"
tool = "msg/send"
class = "irreversible"
"#;

/// A ledger node in this process; stopped when dropped.
pub struct Ledger {
    addr: String,
    stop: Option<oneshot::Sender<()>>,
}

impl Ledger {
    /// Starts, forms a one-node cluster and applies [`POLICIES`].
    pub async fn start() -> Self {
        // Bound here and handed to the node, so the port is known and held before it serves.
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let addr = listener.local_addr().expect("local addr").to_string();
        let text = format!(
            r#"
node_id = 1
listen_addr = "{addr}"
data_dir = "/nonexistent"
storage = "memory"
cluster_secret = "client-test-cluster-secret"
[[api_keys]]
key = "{OPERATOR_KEY}"
operator = true
[[api_keys]]
key = "{TENANT_KEY}"
tenant = "{TENANT}"
[raft]
heartbeat_interval_ms = 50
election_timeout_min_ms = 150
election_timeout_max_ms = 300
[sweeper]
interval_ms = 50
"#
        );
        let config = NodeConfig::from_toml(&text, Path::new("client-test.toml")).expect("config");
        let (stop, stopped) = oneshot::channel::<()>();
        let disk = Arc::new(SimDisk::new());
        tokio::spawn(ledger_node::run_on(config, disk, listener, async {
            let _ = stopped.await;
        }));
        let ledger = Ledger {
            addr,
            stop: Some(stop),
        };
        let operator = ledger.client(OPERATOR_KEY);
        for _ in 0..100 {
            if operator.status_of(0).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        operator
            .initialize(&[(1, ledger.addr.clone())])
            .await
            .expect("initialize");
        operator.wait_for_leader(10_000).await.expect("a leader");
        PolicyFile::from_toml(POLICIES)
            .expect("policies parse")
            .apply(&operator)
            .await
            .expect("policies apply");
        ledger
    }

    /// A client with `key`.
    pub fn client(&self, key: &str) -> LedgerClient {
        self.client_of(vec![self.addr.clone()], key)
    }

    /// A client of `endpoints` with `key`.
    pub fn client_of(&self, endpoints: Vec<String>, key: &str) -> LedgerClient {
        let retry = RetryPolicy {
            attempts: 5,
            attempt_timeout_ms: 2_000,
            ..RetryPolicy::default()
        };
        LedgerClient::with_retry(endpoints, key, retry).expect("client")
    }

    /// The node's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// A runner for the tool-server instance `holder`, with `lease_ms` leases.
    pub fn runner(&self, holder: &str, lease_ms: u64) -> EffectRunner {
        EffectRunner::new(self.client(TENANT_KEY), holder).with_options(RunOptions {
            lease_ms,
            poll_interval_ms: 20,
            ..RunOptions::default()
        })
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The call of an effect with tool `provider/name`, key `key` and intent `intent`.
pub fn call(tool: &str, key: &str, intent: &str) -> EffectCall {
    let (provider, name) = tool.split_once('/').expect("provider/name");
    EffectCall {
        declaration: Declaration {
            key: EffectKey::new(TENANT, "tests", key),
            workflow_id: "wf-1".into(),
            tool: ToolRef {
                provider: provider.into(),
                name: name.into(),
                contract_version: "v1".into(),
            },
            authority: Authority {
                principal: "user:test".into(),
                policy_generation: 1,
            },
            target: format!("{tool}:{key}"),
            intent_json: intent.into(),
        },
        confirmation: None,
    }
}

/// A provider that counts what it executed, per provider key.
#[derive(Clone, Default)]
pub struct Provider {
    executed: Arc<Mutex<BTreeMap<String, u32>>>,
}

impl Provider {
    /// Executes the effect for `provider_key`; returns its receipt.
    pub fn execute(&self, provider_key: &str) -> String {
        *self
            .executed
            .lock()
            .unwrap()
            .entry(provider_key.into())
            .or_default() += 1;
        format!("receipt-{provider_key}")
    }

    /// How many times the effect for `provider_key` was executed.
    pub fn executions(&self, provider_key: &str) -> u32 {
        self.executed
            .lock()
            .unwrap()
            .get(provider_key)
            .copied()
            .unwrap_or(0)
    }

    /// Executions over all keys.
    pub fn total(&self) -> u32 {
        self.executed.lock().unwrap().values().sum()
    }
}

/// A dispatch that must never run: the effect was committed or is held by another.
pub async fn must_not_dispatch(attempt: AttemptInfo) -> DispatchResult {
    panic!("{} was dispatched again", attempt.key)
}

/// A dispatch that executes at `provider` and reports the receipt.
pub fn executing(
    provider: &Provider,
) -> impl FnMut(AttemptInfo) -> std::future::Ready<DispatchResult> + '_ {
    |attempt| {
        std::future::ready(DispatchResult::Committed {
            receipt: provider.execute(&attempt.provider_key),
        })
    }
}

/// Polls the record of `c` until it is in `state`.
pub async fn wait_for_state(ledger: &Ledger, c: &EffectCall, state: EffectState) -> EffectRecord {
    let client = ledger.client(TENANT_KEY);
    for _ in 0..100 {
        if let Some(record) = client.get(c.declaration.key.clone()).await.unwrap() {
            if record.state == state {
                return record;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{} never reached {state}", c.declaration.key);
}

/// Runs `c` through `runner` in the background with a dispatch that takes `dispatch_ms`
/// and then executes at `provider`; `probe_after_ms` into it, another instance's run of
/// the same effect must be answered in flight, held by `runner`'s instance. Returns the
/// first run's outcome and the effect's record once it is committed.
pub async fn slow_dispatch_stays_in_flight(
    ledger: &Ledger,
    runner: EffectRunner,
    c: &EffectCall,
    provider: &Provider,
    dispatch_ms: u64,
    probe_after_ms: u64,
) -> (EffectOutcome, EffectRecord) {
    let holder = runner.holder().to_owned();
    let slow = {
        let (c, provider) = (c.clone(), provider.clone());
        tokio::spawn(async move {
            runner
                .effect(c)
                .run(|attempt| {
                    let provider = provider.clone();
                    async move {
                        tokio::time::sleep(Duration::from_millis(dispatch_ms)).await;
                        DispatchResult::Committed {
                            receipt: provider.execute(&attempt.provider_key),
                        }
                    }
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(probe_after_ms)).await;
    let meanwhile = ledger
        .runner("server-probe", 300)
        .effect(c.clone())
        .run(must_not_dispatch)
        .await
        .unwrap();
    assert!(
        matches!(meanwhile, EffectOutcome::InFlight { holder: ref h, .. } if *h == holder),
        "{meanwhile:?}"
    );
    let outcome = slow.await.unwrap().unwrap();
    (
        outcome,
        wait_for_state(ledger, c, EffectState::Committed).await,
    )
}
