//! How the effect runner keeps a lease whose claim was answered late (or after its caller
//! gave up), and a report the ledger did not answer. A real node answers at once; a claim
//! held up (an election, a partition healing) or a report lost with its node cannot be
//! made here on demand, so a fake node answers a claim after a pause, heartbeats at once,
//! and reports at once or, for the first few, not at all (UNAVAILABLE).

mod fake;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tonic::Status;

use ledger_client::effect::{EffectCall, EffectRunner, RunError, RunOptions};
use ledger_client::{DispatchResult, EffectOutcome, LedgerClient, RetryPolicy};
use ledger_core::{Authority, Declaration, EffectKey, ToolRef};
use ledger_proto::pb;

use fake::Handler;

/// The lease the fake grants.
const LEASE_MS: u64 = 1_200;

struct SlowClaims {
    /// How long a claim takes to be answered.
    claim_delay: Duration,
    /// Heartbeats are answered UNAVAILABLE (no leader), so a late grant cannot be
    /// confirmed.
    heartbeats_fail: bool,
    /// How long a heartbeat takes to be answered.
    heartbeat_delay: Duration,
    heartbeats: AtomicU32,
    /// How many reports are still to be answered UNAVAILABLE (no leader).
    reports_unavailable: AtomicU32,
    reports: Arc<std::sync::Mutex<Vec<pb::ReportRequest>>>,
}

#[tonic::async_trait]
impl Handler for SlowClaims {
    async fn batch(&self, _: pb::BatchRequest) -> Result<pb::BatchResponse, Status> {
        Err(fake::unimplemented())
    }

    async fn claim(&self, _: pb::ClaimRequest) -> Result<pb::ClaimResponse, Status> {
        tokio::time::sleep(self.claim_delay).await;
        let granted_at_ms = 1_000_000;
        Ok(pb::ClaimResponse {
            outcome: Some(pb::claim_response::Outcome::Proceed(pb::Grant {
                attempt_id: 1,
                fencing_token: 7,
                lease_until_ms: granted_at_ms + LEASE_MS,
                provider_key: "pk".into(),
                horizon_deadline_ms: None,
                granted_at_ms,
            })),
        })
    }

    async fn heartbeat(
        &self,
        request: pb::HeartbeatRequest,
    ) -> Result<pb::HeartbeatResponse, Status> {
        assert_eq!(request.fencing_token, 7);
        self.heartbeats.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.heartbeat_delay).await;
        if self.heartbeats_fail {
            return Err(Status::unavailable("no leader"));
        }
        Ok(pb::HeartbeatResponse {
            lease_until_ms: 2_000_000,
        })
    }

    async fn report(&self, request: pb::ReportRequest) -> Result<pb::ReportResponse, Status> {
        self.reports.lock().unwrap().push(request.clone());
        let unavailable =
            self.reports_unavailable
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if unavailable.is_ok() {
            return Err(Status::unavailable("no leader"));
        }
        Ok(pb::ReportResponse {
            state: pb::EffectState::Committed as i32,
            receipt: Some("done".into()),
        })
    }
}

fn call() -> EffectCall {
    EffectCall {
        declaration: Declaration {
            key: EffectKey::new("acme", "tests", "late-grant"),
            workflow_id: "wf-1".into(),
            tool: ToolRef {
                provider: "desk".into(),
                name: "create_ticket".into(),
                contract_version: "v1".into(),
            },
            authority: Authority {
                principal: "user:test".into(),
                policy_generation: 1,
            },
            target: "desk:late-grant".into(),
            intent_json: "{}".into(),
        },
        confirmation: None,
    }
}

/// A fake node answering claims after `claim_delay`, and a runner of `LEASE_MS` leases
/// that claims at most `claims_max` times against it.
async fn slow_claims(
    claim_delay: Duration,
    heartbeats_fail: bool,
    claims_max: u32,
) -> (fake::Served<SlowClaims>, EffectRunner) {
    fake_node(claim_delay, heartbeats_fail, 0, claims_max).await
}

/// [`slow_claims`], with the first `reports_unavailable` reports answered UNAVAILABLE.
async fn fake_node(
    claim_delay: Duration,
    heartbeats_fail: bool,
    reports_unavailable: u32,
    claims_max: u32,
) -> (fake::Served<SlowClaims>, EffectRunner) {
    serve(
        SlowClaims {
            claim_delay,
            heartbeats_fail,
            heartbeat_delay: Duration::ZERO,
            heartbeats: AtomicU32::new(0),
            reports_unavailable: AtomicU32::new(reports_unavailable),
            reports: Default::default(),
        },
        claims_max,
    )
    .await
}

/// Serves `fake`, and a runner of `LEASE_MS` leases that claims at most `claims_max` times
/// against it.
async fn serve(fake: SlowClaims, claims_max: u32) -> (fake::Served<SlowClaims>, EffectRunner) {
    let served = fake::serve(fake).await;
    let retry = RetryPolicy {
        attempts: 1,
        ..RetryPolicy::default()
    };
    let client =
        LedgerClient::with_retry(vec![served.addr.clone()], "any-key-0000000001", retry).unwrap();
    let runner = EffectRunner::new(client, "server-a").with_options(RunOptions {
        lease_ms: LEASE_MS,
        claims_max,
        ..RunOptions::default()
    });
    (served, runner)
}

/// A claim answered after 45% of its lease is still live for a fifth of it; the first
/// heartbeat must go out at once, not a third of a lease after the answer (by then the
/// lease's certain part has run out and the runner would drop a dispatch that is going
/// fine, leaving an unknown outcome to reconcile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_answered_late_is_heartbeaten_before_its_certain_part_ends() {
    let claims_max = RunOptions::default().claims_max;
    let (served, runner) = slow_claims(
        Duration::from_millis(LEASE_MS * 45 / 100),
        false,
        claims_max,
    )
    .await;
    let outcome = runner
        .effect(call())
        .run(|_| async {
            // Longer than the lease: only heartbeats keep the attempt live this long.
            tokio::time::sleep(Duration::from_millis(LEASE_MS * 3 / 2)).await;
            DispatchResult::Committed {
                receipt: "done".into(),
            }
        })
        .await
        .unwrap();
    assert!(matches!(outcome, EffectOutcome::Done { .. }), "{outcome:?}");
    assert!(served.handler.heartbeats.load(Ordering::SeqCst) >= 2);
    let reports = served.handler.reports.lock().unwrap();
    assert_eq!(reports.len(), 1);
    assert!(
        matches!(
            reports[0].report,
            Some(pb::report_request::Report::CommittedReceipt(_))
        ),
        "{:?}",
        reports[0]
    );
}

/// A claim answered after more than two thirds of its lease, which no heartbeat can
/// confirm: nothing is sent, and the grant is given back as failed before effect (which
/// it is) instead of being left to expire into an unknown outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_too_late_to_use_is_given_back_unused() {
    let (served, runner) = slow_claims(Duration::from_millis(LEASE_MS * 4 / 5), true, 1).await;
    let outcome = runner
        .effect(call())
        .run(|_| async { panic!("a grant that could not be confirmed was dispatched") })
        .await
        .unwrap();
    assert!(
        matches!(outcome, EffectOutcome::Unknown { .. }),
        "{outcome:?}"
    );
    assert_given_back(&served.handler.reports.lock().unwrap());
}

/// A committed dispatch whose report the ledger did not answer (its node lost, no leader)
/// is not left to run out into an unknown outcome when it can still be told: the caller
/// learns the report is owed (`Unreported`, with the receipt), and the report is sent once
/// more as the attempt ends, with the same command id, so the ledger takes it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_the_ledger_did_not_answer_is_sent_again_with_the_same_id() {
    let (served, runner) = fake_node(Duration::ZERO, false, 1, 1).await;
    let result = runner
        .effect(call())
        .run(|_| async {
            DispatchResult::Committed {
                receipt: "done".into(),
            }
        })
        .await;
    match result {
        Err(RunError::Unreported {
            result: DispatchResult::Committed { receipt },
            ..
        }) => assert_eq!(receipt, "done"),
        other => panic!("expected the committed report owed, got {other:?}"),
    }
    let reports = reports_after(&served, 2).await;
    assert_eq!(reports.len(), 2, "{reports:?}");
    assert_eq!(reports[0].command_id, reports[1].command_id);
    for report in &reports {
        assert_eq!(report.fencing_token, 7);
        assert!(
            matches!(
                &report.report,
                Some(pb::report_request::Report::CommittedReceipt(r)) if r == "done"
            ),
            "{report:?}"
        );
    }
}

/// A run dropped while its claim is on its way (its caller gave up, a request timed out):
/// the grant that then arrives is given back as never sent, instead of holding the lease
/// with nobody to use it until it runs out into an unknown outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_that_arrives_after_its_caller_gave_up_is_given_back() {
    let (served, runner) = slow_claims(Duration::from_millis(300), false, 1).await;
    let run = runner
        .effect(call())
        .run(|_| async { panic!("dispatched for a caller that gave up") });
    let gave_up = tokio::time::timeout(Duration::from_millis(100), run).await;
    assert!(
        gave_up.is_err(),
        "the claim was answered before the caller gave up"
    );
    assert_given_back(&reports_after(&served, 1).await);
}

/// A run dropped while a heartbeat confirms its late grant (its caller gave up): nothing
/// was sent, and the grant is given back as never sent instead of holding the lease until
/// it runs out into an unknown outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_caller_gives_up_while_it_is_confirmed_is_given_back() {
    let claim_delay = Duration::from_millis(LEASE_MS * 4 / 5);
    let (served, runner) = serve(
        SlowClaims {
            claim_delay,
            heartbeats_fail: false,
            heartbeat_delay: Duration::from_millis(LEASE_MS),
            heartbeats: AtomicU32::new(0),
            reports_unavailable: AtomicU32::new(0),
            reports: Default::default(),
        },
        1,
    )
    .await;
    let run = runner
        .effect(call())
        .run(|_| async { panic!("dispatched for a caller that gave up") });
    let gave_up =
        tokio::time::timeout(claim_delay + Duration::from_millis(LEASE_MS / 4), run).await;
    assert!(gave_up.is_err(), "the run ended before its caller gave up");
    assert_eq!(
        served.handler.heartbeats.load(Ordering::SeqCst),
        1,
        "the caller gave up while the grant was being confirmed"
    );
    assert_given_back(&reports_after(&served, 1).await);
}

/// The reports the fake node got, once it has `count` (or after 10 s, however many).
async fn reports_after(served: &fake::Served<SlowClaims>, count: usize) -> Vec<pb::ReportRequest> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let reports = served.handler.reports.lock().unwrap().clone();
        if reports.len() >= count || tokio::time::Instant::now() > deadline {
            return reports;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `reports` is one report, the grant of token 7 given back as never sent.
fn assert_given_back(reports: &[pb::ReportRequest]) {
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].fencing_token, 7);
    match &reports[0].report {
        Some(pb::report_request::Report::FailedBeforeEffectProof(proof)) => {
            assert!(proof.starts_with("never sent"), "{proof}")
        }
        other => panic!("expected a failed-before-effect report, got {other:?}"),
    }
}
