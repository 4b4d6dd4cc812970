//! How the effect runner keeps a lease whose claim was answered late. A real node answers
//! at once; a claim held up (an election, a partition healing) cannot be made here on
//! demand, so a fake node answers it after a pause, and answers heartbeats and the report
//! at once.

mod fake;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tonic::Status;

use ledger_client::effect::{EffectCall, EffectRunner, RunOptions};
use ledger_client::{DispatchResult, EffectOutcome, LedgerClient, RetryPolicy};
use ledger_core::{Authority, Declaration, EffectKey, ToolRef};
use ledger_proto::pb;

use fake::Handler;

/// The lease the fake grants.
const LEASE_MS: u64 = 1_200;

struct SlowClaims {
    /// How long a claim takes to be answered.
    claim_delay: Duration,
    heartbeats: AtomicU32,
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
        Ok(pb::HeartbeatResponse {
            lease_until_ms: 2_000_000,
        })
    }

    async fn report(&self, request: pb::ReportRequest) -> Result<pb::ReportResponse, Status> {
        self.reports.lock().unwrap().push(request.clone());
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

/// A claim answered after 45% of its lease is still live for a fifth of it; the first
/// heartbeat must go out at once, not a third of a lease after the answer (by then the
/// lease's certain part has run out and the runner would drop a dispatch that is going
/// fine, leaving an unknown outcome to reconcile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_answered_late_is_heartbeaten_before_its_certain_part_ends() {
    let served = fake::serve(SlowClaims {
        claim_delay: Duration::from_millis(LEASE_MS * 45 / 100),
        heartbeats: AtomicU32::new(0),
        reports: Default::default(),
    })
    .await;
    let retry = RetryPolicy {
        attempts: 1,
        ..RetryPolicy::default()
    };
    let client =
        LedgerClient::with_retry(vec![served.addr.clone()], "any-key-0000000001", retry).unwrap();
    let runner = EffectRunner::new(client, "server-a").with_options(RunOptions {
        lease_ms: LEASE_MS,
        ..RunOptions::default()
    });
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
