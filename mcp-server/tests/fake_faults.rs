//! The fake providers' per-route faults do what they say: a late commit is applied after
//! its hold even when the client gave up, a failure after commit answers 5xx with the
//! effect stored, and a visibility lag keeps a committed effect out of look-ups until it
//! passes. The providers run in this process; no ledger is involved.

use std::time::{Duration, Instant};

use http::Method;
use ledger_mcp_example::fake::{self, Settings};
use ledger_mcp_example::http::{send_json, JsonAnswer, SendError};
use serde_json::{json, Value};

struct Providers {
    addr: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Providers {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Providers {
    async fn start() -> Self {
        let (addr, task) = fake::start("127.0.0.1:0".parse().unwrap(), Settings::default())
            .await
            .expect("start the providers");
        Providers {
            addr: addr.to_string(),
            task,
        }
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
        timeout_ms: u64,
    ) -> Result<JsonAnswer, SendError> {
        send_json(&self.addr, method, path, headers, body.as_ref(), timeout_ms).await
    }

    async fn get(&self, path: &str) -> Value {
        let answer = self.send(Method::GET, path, &[], None, 5_000).await;
        let answer = answer.expect("the providers answer");
        assert_eq!(answer.status, 200, "GET {path}: {:?}", answer.body);
        answer.body
    }

    async fn fault(&self, fault: Value) {
        let answer = self
            .send(Method::POST, "/admin/faults", &[], Some(fault), 5_000)
            .await
            .expect("the providers answer");
        assert_eq!(answer.status, 200, "{:?}", answer.body);
    }

    async fn count(&self, kind: &str) -> usize {
        fake::counts(&self.get("/admin/effects").await)[kind]
    }

    /// Waits until no request is held before being applied.
    async fn until_nothing_pending(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while self.get("/admin/held").await["pending"] != 0 {
            assert!(Instant::now() < deadline, "requests still pending");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn ticket(external_ref: &str) -> Value {
    json!({ "subject": "s", "body": "b", "priority": "normal", "external_ref": external_ref })
}

fn refund() -> Value {
    json!({ "order_id": "o-1", "amount_cents": 500, "currency": "EUR" })
}

#[tokio::test]
async fn a_late_commit_is_applied_after_the_hold_even_when_the_client_gave_up() {
    let providers = Providers::start().await;
    providers
        .fault(json!({ "route": "ticket", "commit_delay_ms": 600 }))
        .await;
    let started = Instant::now();
    let gave_up = providers
        .send(Method::POST, "/desk/tickets", &[], Some(ticket("r-1")), 100)
        .await;
    assert!(
        matches!(gave_up, Err(SendError::AfterSend(_))),
        "{gave_up:?}"
    );
    assert_eq!(providers.get("/admin/held").await["pending"], 1);
    assert_eq!(providers.count("tickets").await, 0, "not applied yet");
    let search = providers.get("/desk/tickets?external_ref=r-1").await;
    assert_eq!(search["tickets"], json!([]));
    // Other routes are not held.
    let refunded = providers
        .send(
            Method::POST,
            "/pay/refunds",
            &[("idempotency-key", "k-1")],
            Some(refund()),
            5_000,
        )
        .await
        .unwrap();
    assert_eq!(refunded.status, 201);

    providers
        .until_nothing_pending(Duration::from_secs(5))
        .await;
    assert!(started.elapsed() >= Duration::from_millis(600));
    assert_eq!(
        providers.count("tickets").await,
        1,
        "applied after the hold"
    );
    let search = providers.get("/desk/tickets?external_ref=r-1").await;
    assert_eq!(search["tickets"].as_array().unwrap().len(), 1);

    // A patient client gets the answer after the hold.
    let started = Instant::now();
    let answer = providers
        .send(
            Method::POST,
            "/desk/tickets",
            &[],
            Some(ticket("r-2")),
            5_000,
        )
        .await
        .unwrap();
    assert_eq!(answer.status, 201);
    assert_eq!(answer.body["external_ref"], "r-2");
    assert!(started.elapsed() >= Duration::from_millis(600));
}

#[tokio::test]
async fn a_failure_after_commit_answers_5xx_with_the_effect_stored() {
    let providers = Providers::start().await;
    providers
        .fault(json!({ "route": "refund", "fail_after_commit": true }))
        .await;
    let send = || {
        providers.send(
            Method::POST,
            "/pay/refunds",
            &[("idempotency-key", "k-1")],
            Some(refund()),
            5_000,
        )
    };
    let failed = send().await.unwrap();
    assert_eq!(failed.status, 503, "{:?}", failed.body);
    assert_eq!(providers.count("refunds").await, 1, "stored all the same");
    let found = providers.get("/pay/refunds?idempotency_key=k-1").await;
    assert_eq!(found["refunds"].as_array().unwrap().len(), 1);
    // The key replays the stored refund; the answer still fails until the fault is
    // cleared.
    assert_eq!(send().await.unwrap().status, 503);
    let cleared = providers
        .send(Method::DELETE, "/admin/faults", &[], None, 5_000)
        .await
        .unwrap();
    assert_eq!(cleared.status, 200);
    let replayed = send().await.unwrap();
    assert_eq!(replayed.status, 200, "a replay: {:?}", replayed.body);
    assert_eq!(replayed.body, found["refunds"][0]);
    assert_eq!(providers.count("refunds").await, 1);
    // A refusal is no commit: the fault leaves it alone.
    providers
        .fault(json!({ "route": "refund", "fail_after_commit": true }))
        .await;
    let mut zero = refund();
    zero["amount_cents"] = json!(0);
    let refused = providers
        .send(
            Method::POST,
            "/pay/refunds",
            &[("idempotency-key", "k-2")],
            Some(zero),
            5_000,
        )
        .await
        .unwrap();
    assert_eq!(refused.status, 400);
}

#[tokio::test]
async fn a_visibility_lag_hides_a_committed_effect_from_look_ups_until_it_passes() {
    const LAG_MS: u64 = 1_000;
    let providers = Providers::start().await;
    for route in ["message", "deploy"] {
        providers
            .fault(json!({ "route": route, "visibility_lag_ms": LAG_MS }))
            .await;
    }
    let routes = providers.get("/admin/faults").await;
    assert_eq!(routes["message"]["visibility_lag_ms"], LAG_MS, "{routes}");
    let started = Instant::now();
    let message = json!({ "to": "a@example.com", "text": "hi", "client_ref": "c-1" });
    let sent = providers
        .send(Method::POST, "/msg/messages", &[], Some(message), 5_000)
        .await
        .unwrap();
    assert_eq!(sent.status, 202);
    let job = json!({ "service": "api", "version": "1.2", "job_ref": "j-1" });
    let started_job = providers
        .send(Method::POST, "/deploy/jobs", &[], Some(job), 5_000)
        .await
        .unwrap();
    assert_eq!(started_job.status, 201);
    let job_path = format!(
        "/deploy/jobs/{}",
        started_job.body["job_id"].as_str().unwrap()
    );

    let search = providers.get("/msg/messages?client_ref=c-1").await;
    let jobs = providers.get("/deploy/jobs?job_ref=j-1").await;
    let by_id = providers
        .send(Method::GET, &job_path, &[], None, 5_000)
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(LAG_MS),
        "too slow to tell"
    );
    assert_eq!(search["messages"], json!([]), "not visible yet");
    assert_eq!(jobs["jobs"], json!([]), "not visible yet");
    assert_eq!(by_id.status, 404, "not visible yet");
    // The ground truth shows both at once.
    assert_eq!(providers.count("messages").await, 1);
    assert_eq!(providers.count("jobs").await, 1);

    let lag = Duration::from_millis(LAG_MS + 50);
    tokio::time::sleep(lag.saturating_sub(started.elapsed())).await;
    let search = providers.get("/msg/messages?client_ref=c-1").await;
    assert_eq!(search["messages"][0], sent.body);
    let jobs = providers.get("/deploy/jobs?job_ref=j-1").await;
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(providers.get(&job_path).await["job_ref"], "j-1");
}

#[tokio::test]
async fn malformed_faults_are_refused() {
    let providers = Providers::start().await;
    for bad in [
        json!({ "route": "tickets", "commit_delay_ms": 1 }),
        json!({ "route": "ticket", "delay_ms": 1 }),
        json!({ "path": "/desk/tickets", "action": "explode" }),
    ] {
        let answer = providers
            .send(Method::POST, "/admin/faults", &[], Some(bad.clone()), 5_000)
            .await
            .unwrap();
        assert_eq!(answer.status, 400, "{bad}: {:?}", answer.body);
    }
}
