//! Admission control on a real node served in process (memory disk): a call beyond the
//! node's limit is answered `RESOURCE_EXHAUSTED` with the suggested wait and proposes
//! nothing, and every call the node admitted is applied.

use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tonic::Code;

use ledger_client::transport::{OverloadPolicy, RETRY_AFTER_MS_METADATA};
use ledger_client::{ClientError, LedgerClient, RetryPolicy};
use ledger_core::{
    Authority, Declaration, EffectKey, ReplayClass, TenantSettings, ToolName, ToolPolicy, ToolRef,
};
use ledger_node::NodeConfig;
use ledger_proto::pb;
use ledger_raft_store::SimDisk;

const OPERATOR_KEY: &str = "admission-operator-01";
const TENANT_KEY: &str = "admission-tenant-acme-01";
const TENANT: &str = "acme";
const RETRY_AFTER_MS: u64 = 70;

/// A node in this process, not yet part of a cluster; stopped when dropped.
struct Node {
    addr: String,
    _stop: oneshot::Sender<()>,
}

impl Node {
    async fn start(admitted_calls_max: usize) -> Node {
        // Bound here and handed to the node, so the port is known and held before it serves.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let text = format!(
            r#"
node_id = 1
listen_addr = "{addr}"
data_dir = "/nonexistent"
storage = "memory"
cluster_secret = "admission-test-cluster-secret"
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
[proposer]
admitted_calls_max = {admitted_calls_max}
overloaded_retry_after_ms = {RETRY_AFTER_MS}
"#
        );
        let config = NodeConfig::from_toml(&text, Path::new("admission.toml")).unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let disk = Arc::new(SimDisk::new());
        tokio::spawn(ledger_node::run_on(config, disk, listener, async {
            let _ = stopped.await;
        }));
        let node = Node { addr, _stop: stop };
        let operator = node.client(OPERATOR_KEY, OverloadPolicy::default());
        for _ in 0..100 {
            if operator.status_of(0).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        node
    }

    /// A client with one attempt per call and `overload` for overload answers.
    fn client(&self, key: &str, overload: OverloadPolicy) -> LedgerClient {
        let retry = RetryPolicy {
            attempts: 1,
            ..RetryPolicy::default()
        };
        LedgerClient::with_policies(vec![self.addr.clone()], key, retry, overload).unwrap()
    }

    /// Forms a one-node cluster and registers the tenant and a tool.
    async fn form(&self) {
        let operator = self.client(OPERATOR_KEY, OverloadPolicy::default());
        operator
            .initialize(&[(1, self.addr.clone())])
            .await
            .unwrap();
        operator.wait_for_leader(10_000).await.unwrap();
        operator
            .put_tenant("setup-tenant", TENANT, TenantSettings::default())
            .await
            .unwrap();
        let tool = ToolName {
            provider: "pay".into(),
            name: "refund".into(),
        };
        let policy = ToolPolicy::for_class(ReplayClass::KeyedIdempotent);
        operator
            .put_tool_policy("setup-tool", TENANT, tool, policy)
            .await
            .unwrap();
    }
}

fn declaration(key: &str) -> Declaration {
    Declaration {
        key: EffectKey::new(TENANT, "tests", key),
        workflow_id: "wf-1".into(),
        tool: ToolRef {
            provider: "pay".into(),
            name: "refund".into(),
            contract_version: "v1".into(),
        },
        authority: Authority {
            principal: "user:test".into(),
            policy_generation: 1,
        },
        target: format!("pay/refund:{key}"),
        intent_json: format!(r#"{{"order":"{key}"}}"#),
    }
}

fn no_waiting() -> OverloadPolicy {
    OverloadPolicy {
        wait_ms_max: 0,
        ..OverloadPolicy::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_beyond_the_limit_is_resource_exhausted_with_the_hint_and_proposes_nothing() {
    // The node and the client library must agree on the hint's metadata key.
    assert_eq!(
        ledger_node::error::RETRY_AFTER_MS_METADATA,
        RETRY_AFTER_MS_METADATA
    );
    let node = Node::start(1).await;
    // Before the cluster is formed an admitted read waits for a leader (seconds) and
    // holds the node's only admission meanwhile.
    let waiting = node.client(TENANT_KEY, no_waiting());
    let held = tokio::spawn(async move { waiting.get(EffectKey::new(TENANT, "tests", "x")).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !held.is_finished(),
        "the read should still wait for a leader"
    );

    let tenant = node.client(TENANT_KEY, no_waiting());
    let request = pb::DeclareRequest::new("declare-1", declaration("k1"), 1);
    let mut raw = pb::ledger_client::LedgerClient::new(tenant.transport().channel(0));
    let status = raw
        .declare(tenant.transport().request(request))
        .await
        .expect_err("the node admits one call and serves one");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(ledger_proto::status_to_refusal(&status).is_none());
    let hint = status.metadata().get(RETRY_AFTER_MS_METADATA).unwrap();
    assert_eq!(hint.to_str().unwrap(), RETRY_AFTER_MS.to_string());

    // The client library turns it into a typed "try later" when it may not wait.
    match tenant.declare("declare-1", declaration("k1"), 1).await {
        Err(ClientError::Overloaded { retry_after_ms, .. }) => {
            assert_eq!(retry_after_ms, RETRY_AFTER_MS)
        }
        other => panic!("expected overloaded, got {other:?}"),
    }

    // Once the cluster is formed (the operator's calls wait out the held admission), the
    // same command is new: nothing of the turned-away tries was applied.
    node.form().await;
    let _ = held.await;
    let patient = node.client(TENANT_KEY, OverloadPolicy::default());
    let (keys, created) = patient
        .declare("declare-1", declaration("k1"), 1)
        .await
        .unwrap();
    assert!(
        created,
        "a turned-away declare must not have created {keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admitted_call_is_applied_and_every_turned_away_one_left_nothing() {
    let node = Node::start(2).await;
    node.form().await;
    let impatient = node.client(TENANT_KEY, no_waiting());
    let mut admitted = Vec::new();
    let mut turned_away = Vec::new();
    // Bursts of concurrent declares against two admissions; repeated until some are turned
    // away (the first burst almost always suffices).
    for burst in 0..20 {
        let calls = (0..48).map(|i| {
            let client = impatient.clone();
            let key = format!("b{burst}-{i}");
            tokio::spawn(async move {
                let result = client
                    .declare(&format!("cmd-{key}"), declaration(&key), 1)
                    .await;
                (key, result)
            })
        });
        for call in futures::future::join_all(calls).await {
            match call.unwrap() {
                (key, Ok((_, true))) => admitted.push(key),
                (key, Err(ClientError::Overloaded { retry_after_ms, .. })) => {
                    assert_eq!(retry_after_ms, RETRY_AFTER_MS);
                    turned_away.push(key);
                }
                (key, other) => panic!("{key}: {other:?}"),
            }
        }
        if !turned_away.is_empty() {
            break;
        }
    }
    assert!(
        !turned_away.is_empty(),
        "two admissions never turned a call away"
    );
    assert!(!admitted.is_empty(), "no call was admitted");

    let patient = node.client(TENANT_KEY, OverloadPolicy::default());
    for key in &admitted {
        let record = patient
            .get(EffectKey::new(TENANT, "tests", key))
            .await
            .unwrap();
        assert!(record.is_some(), "admitted declare {key} was lost");
    }
    for key in &turned_away {
        let record = patient
            .get(EffectKey::new(TENANT, "tests", key))
            .await
            .unwrap();
        assert!(record.is_none(), "turned-away declare {key} was applied");
        // Sent again with the same command id, after the wait, it is applied once.
        let (_, created) = patient
            .declare(&format!("cmd-{key}"), declaration(key), 1)
            .await
            .unwrap();
        assert!(created, "{key}");
    }
}
