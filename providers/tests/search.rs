//! A search's observations from the answers a provider can give, and the dispatch's
//! classification through a transport.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use ledger_client::reconcile::BoxFuture;
use ledger_client::{DispatchResult, Observation, ProviderAdapter};
use ledger_core::{
    Authority, EffectKey, EffectRecord, EffectState, IntentHash, ReplayClass, ToolPolicy, ToolRef,
};
use ledger_providers::{
    example, JsonAnswer, Method, ProviderClient, ProviderRequest, ProviderTransport, Search,
    SearchSpec, SendError, Unobservable, HORIZON_PASSED,
};

/// Answers every request with one scripted answer and remembers the requests.
struct Scripted {
    answer: Result<JsonAnswer, SendError>,
    seen: Mutex<Vec<ProviderRequest>>,
}

impl ProviderTransport for Scripted {
    fn send<'a>(
        &'a self,
        request: &'a ProviderRequest,
    ) -> BoxFuture<'a, Result<JsonAnswer, SendError>> {
        self.seen.lock().unwrap().push(request.clone());
        Box::pin(async move { self.answer.clone() })
    }
}

fn scripted(answer: Result<JsonAnswer, SendError>) -> (Arc<Scripted>, ProviderClient) {
    let transport = Arc::new(Scripted {
        answer,
        seen: Mutex::new(Vec::new()),
    });
    (transport.clone(), ProviderClient::new(transport))
}

fn ok(body: Value) -> Result<JsonAnswer, SendError> {
    Ok(JsonAnswer { status: 200, body })
}

/// A declared record whose first dispatch set `horizon_deadline_ms`.
fn record(horizon_deadline_ms: Option<u64>) -> EffectRecord {
    let key = EffectKey::new("t", "ns", "k");
    EffectRecord {
        provider_key: key.provider_key(),
        key,
        workflow_id: "wf".into(),
        tool: ToolRef {
            provider: "pay".into(),
            name: "refund".into(),
            contract_version: "v1".into(),
        },
        authority: Authority {
            principal: "user".into(),
            policy_generation: 1,
        },
        target: "order:o-1".into(),
        intent: "{}".into(),
        intent_hash: IntentHash([0; 32]),
        slot: None,
        policy: ToolPolicy::for_class(ReplayClass::KeyedIdempotent),
        state: EffectState::InProgress,
        declared_at_ms: 0,
        updated_at_ms: 0,
        attempts: Vec::new(),
        receipt: None,
        horizon_deadline_ms,
        retention_deadline_ms: None,
        ambiguous: true,
        dispatches_in_budget: 1,
        observations_in_budget: 0,
        observations: Vec::new(),
        escalation: None,
        decision: None,
        amendments: Vec::new(),
    }
}

async fn observe(
    spec: SearchSpec,
    answer: Result<JsonAnswer, SendError>,
    r: &EffectRecord,
) -> Observation {
    let (_, client) = scripted(answer);
    Search::new(&client, spec).observe(r).await
}

#[tokio::test]
async fn a_search_asks_by_provider_key_and_takes_the_first_match_as_the_receipt() {
    let r = record(None);
    let (transport, client) = scripted(ok(json!({ "jobs": [
        { "job_id": "job_1", "status": "running" }, { "job_id": "job_2" }
    ]})));
    let seen = Search::new(&client, example::deploy_jobs())
        .observe(&r)
        .await;
    let Observation::Committed { receipt, .. } = seen else {
        panic!("a match is the effect: {seen:?}");
    };
    assert_eq!(receipt, r#"{"job_id":"job_1"}"#);
    let request = transport.seen.lock().unwrap()[0].clone();
    assert_eq!(request.method, Method::Get);
    assert_eq!(
        request.path,
        format!("/deploy/jobs?job_ref={}", r.provider_key)
    );
}

#[tokio::test]
async fn an_empty_list_is_not_found_and_anything_else_is_unknown() {
    let r = record(None);
    assert!(matches!(
        observe(example::refunds(), ok(json!({ "refunds": [] })), &r).await,
        Observation::NotCommitted { .. }
    ));
    for answer in [
        ok(json!({ "tickets": [] })),
        ok(json!({ "refunds": "none" })),
        Ok(JsonAnswer {
            status: 503,
            body: json!({ "refunds": [] }),
        }),
        Ok(JsonAnswer {
            status: 404,
            body: Value::Null,
        }),
        Err(SendError::AfterSend("reset".into())),
        Err(SendError::NotSent("refused".into())),
    ] {
        let seen = observe(example::refunds(), answer.clone(), &r).await;
        assert!(
            matches!(seen, Observation::Unknown { .. }),
            "{answer:?} gave {seen:?}"
        );
    }
}

#[tokio::test]
async fn a_forgetting_provider_proves_nothing_by_a_miss_after_its_horizon() {
    let forgets = SearchSpec {
        forgets_after_horizon: true,
        ..SearchSpec::new("/bank/wires?idempotency_key={provider_key}", "wires")
    };
    let empty = || ok(json!({ "wires": [] }));
    let passed = record(Some(1));
    let seen = observe(forgets.clone(), empty(), &passed).await;
    assert_eq!(
        seen,
        Observation::Unknown {
            detail: HORIZON_PASSED.into()
        }
    );
    let live = record(Some(u64::MAX));
    assert!(matches!(
        observe(forgets.clone(), empty(), &live).await,
        Observation::NotCommitted { .. }
    ));
    let found = ok(json!({ "wires": [{ "id": "w1" }] }));
    assert!(matches!(
        observe(forgets, found, &passed).await,
        Observation::Committed { .. }
    ));
    // A provider that keeps what it searches: a miss is a miss, horizon or not.
    assert!(matches!(
        observe(example::refunds(), ok(json!({ "refunds": [] })), &passed).await,
        Observation::NotCommitted { .. }
    ));
}

/// Answers every request with an empty list of wires after `delay`.
struct SlowEmpty {
    delay: std::time::Duration,
}

impl ProviderTransport for SlowEmpty {
    fn send<'a>(
        &'a self,
        _request: &'a ProviderRequest,
    ) -> BoxFuture<'a, Result<JsonAnswer, SendError>> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            ok(json!({ "wires": [] }))
        })
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The horizon is judged once the look-up has returned, and early by the clocks' margin:
/// a miss the provider may have answered after it forgot the key proves nothing.
#[tokio::test]
async fn a_forgetting_providers_miss_near_its_horizon_proves_nothing() {
    let forgets = SearchSpec {
        forgets_after_horizon: true,
        clock_margin_ms: 0,
        ..SearchSpec::new("/bank/wires?idempotency_key={provider_key}", "wires")
    };
    // Sent 300 ms before the horizon, answered 500 ms later.
    let slow = ProviderClient::new(Arc::new(SlowEmpty {
        delay: std::time::Duration::from_millis(500),
    }));
    let seen = Search::new(&slow, forgets.clone())
        .observe(&record(Some(now_ms() + 300)))
        .await;
    assert_eq!(
        seen,
        Observation::Unknown {
            detail: HORIZON_PASSED.into()
        }
    );
    // Answered at once, a second before the horizon: within the default margin.
    let margin = SearchSpec {
        clock_margin_ms: ledger_providers::CLOCK_MARGIN_MS_DEFAULT,
        ..forgets
    };
    let empty = ok(json!({ "wires": [] }));
    let seen = observe(
        margin.clone(),
        empty.clone(),
        &record(Some(now_ms() + 1_000)),
    )
    .await;
    assert!(matches!(seen, Observation::Unknown { .. }), "{seen:?}");
    // An hour before it, a miss is a miss.
    let seen = observe(margin, empty, &record(Some(now_ms() + 3_600_000))).await;
    assert!(matches!(seen, Observation::NotCommitted { .. }), "{seen:?}");
}

#[tokio::test]
async fn an_unobservable_provider_is_always_unknown() {
    assert!(matches!(
        Unobservable.observe(&record(None)).await,
        Observation::Unknown { .. }
    ));
}

#[tokio::test]
async fn a_create_carries_its_key_and_body_and_is_classified() {
    let (transport, client) = scripted(Ok(JsonAnswer {
        status: 201,
        body: json!({ "id": 7 }),
    }));
    let result = client
        .create(example::REFUNDS, Some("el1_k"), json!({ "a": 1 }))
        .await;
    assert_eq!(
        result,
        DispatchResult::Committed {
            receipt: r#"{"id":7}"#.into()
        }
    );
    let request = transport.seen.lock().unwrap()[0].clone();
    assert_eq!(request.method, Method::Post);
    assert_eq!(request.idempotency_key.as_deref(), Some("el1_k"));
    assert_eq!(request.body, Some(json!({ "a": 1 })));
    let (_, lost) = scripted(Err(SendError::AfterSend("no answer".into())));
    assert!(matches!(
        lost.create(example::TICKETS, None, json!({})).await,
        DispatchResult::Unknown { .. }
    ));
}
