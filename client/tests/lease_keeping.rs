//! How the effect runner keeps a lease whose claim was answered late (or after its caller
//! gave up, or not at all), a grant it cannot trust, and a report the ledger did not
//! answer. A real node answers at once; a claim held up (an election, a partition
//! healing) or a report lost with its node cannot be made here on demand, so a fake node
//! answers a claim after a pause (for the first few, not at all: UNAVAILABLE), heartbeats
//! at once, and reports at once or, for the first few, not at all.

mod fake;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::Status;

use ledger_client::effect::{EffectCall, EffectRunner, RunError, RunOptions};
use ledger_client::{ClientError, DispatchResult, EffectOutcome, LedgerClient, RetryPolicy};
use ledger_core::{
    Authority, Caller, ClaimOutcome, Command, CommandBody, Declaration, EffectKey, Outcome,
    Refusal, ReplayClass, TenantSettings, ToolName, ToolPolicy, ToolRef,
};
use ledger_proto::pb;

use fake::Handler;

/// The lease the fake grants.
const LEASE_MS: u64 = 1_200;

struct SlowClaims {
    /// How long a claim takes to be answered.
    claim_delay: Duration,
    /// What a claim is answered with, once answered.
    grant: pb::Grant,
    /// How many claims are still to be answered UNAVAILABLE (no leader), as if their
    /// answer had been lost: the command id is remembered, and later answered the grant.
    claims_unavailable: AtomicU32,
    /// The command ids of the claims received.
    claims: Mutex<Vec<String>>,
    /// Heartbeats are answered UNAVAILABLE (no leader), so a late grant cannot be
    /// confirmed.
    heartbeats_fail: bool,
    /// How long a heartbeat takes to be answered.
    heartbeat_delay: Duration,
    heartbeats: AtomicU32,
    /// How many reports are still to be answered UNAVAILABLE (no leader).
    reports_unavailable: AtomicU32,
    reports: Arc<std::sync::Mutex<Vec<pb::ReportRequest>>>,
    /// What a read of the effect finds: its record with an open dispatch attempt of this
    /// holder (a claim of it was applied), or no record.
    held_by: Option<String>,
}

/// The record of [`call`]'s effect with an open dispatch attempt held by `holder`, as a
/// ledger that applied its claim holds it.
fn held_record(holder: &str) -> pb::EffectRecord {
    let mut ledger = ledger_core::Ledger::new();
    let now = 1_000_000;
    let mut apply = |caller: Caller, id: &str, body: CommandBody| {
        let command = Command {
            command_id: id.into(),
            caller,
            body,
        };
        ledger.apply(&command, now)
    };
    let tenant = || Caller::Tenant("acme".into());
    apply(
        Caller::Operator,
        "tenant",
        CommandBody::PutTenant {
            tenant: "acme".into(),
            settings: TenantSettings::default(),
        },
    );
    apply(
        Caller::Operator,
        "policy",
        CommandBody::PutToolPolicy {
            tenant: "acme".into(),
            tool: ToolName {
                provider: "desk".into(),
                name: "create_ticket".into(),
            },
            policy: ToolPolicy::for_class(ReplayClass::UnkeyedCreate),
        },
    );
    let claimed = apply(
        tenant(),
        "claim",
        CommandBody::Claim {
            declaration: call().declaration,
            holder: holder.into(),
            lease_ms: Some(LEASE_MS),
            confirmation: None,
        },
    );
    assert!(
        matches!(claimed, Outcome::Claim(ClaimOutcome::Proceed(_))),
        "{claimed:?}"
    );
    ledger
        .get(&call().declaration.key)
        .expect("declared")
        .into()
}

#[tonic::async_trait]
impl Handler for SlowClaims {
    async fn get(&self, request: pb::GetRequest) -> Result<pb::GetResponse, Status> {
        match &self.held_by {
            Some(holder) => Ok(pb::GetResponse {
                record: Some(held_record(holder)),
                tombstone: None,
            }),
            None => Err(ledger_proto::refusal_to_status(&Refusal::UnknownEffect(
                EffectKey::try_from(request).expect("a key"),
            ))),
        }
    }

    async fn batch(&self, _: pb::BatchRequest) -> Result<pb::BatchResponse, Status> {
        Err(fake::unimplemented())
    }

    async fn claim(&self, request: pb::ClaimRequest) -> Result<pb::ClaimResponse, Status> {
        self.claims.lock().unwrap().push(request.command_id);
        tokio::time::sleep(self.claim_delay).await;
        let unanswered =
            self.claims_unavailable
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if unanswered.is_ok() {
            return Err(Status::unavailable("no leader"));
        }
        Ok(pb::ClaimResponse {
            outcome: Some(pb::claim_response::Outcome::Proceed(self.grant.clone())),
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
    let fake = SlowClaims {
        heartbeats_fail,
        reports_unavailable: AtomicU32::new(reports_unavailable),
        ..slow(claim_delay)
    };
    serve(fake, claims_max).await
}

/// The grant of attempt 1 (token 7) of [`call`]'s effect, with a lease of `LEASE_MS`.
fn grant() -> pb::Grant {
    let granted_at_ms = 1_000_000;
    pb::Grant {
        attempt_id: 1,
        fencing_token: 7,
        lease_until_ms: granted_at_ms + LEASE_MS,
        provider_key: call().declaration.key.provider_key(),
        horizon_deadline_ms: None,
        granted_at_ms,
    }
}

/// A fake node answering claims after `claim_delay` with [`grant`], and everything else at
/// once.
fn slow(claim_delay: Duration) -> SlowClaims {
    SlowClaims {
        claim_delay,
        grant: grant(),
        claims_unavailable: AtomicU32::new(0),
        claims: Mutex::default(),
        heartbeats_fail: false,
        heartbeat_delay: Duration::ZERO,
        heartbeats: AtomicU32::new(0),
        reports_unavailable: AtomicU32::new(0),
        reports: Default::default(),
        held_by: None,
    }
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
    let result = run_committed(&runner).await;
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
            heartbeat_delay: Duration::from_millis(LEASE_MS),
            ..slow(claim_delay)
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

/// A committed report the ledger did not answer (no leader, or overload past the call's
/// budget) is a fact the ledger takes at any time: it is sent again, with the same id and
/// growing pauses, until the ledger answers it, and then no more. Sent once more only, a
/// second loss would leave the known commit to run out into an unknown outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_report_is_sent_until_the_ledger_takes_it() {
    let (served, runner) = fake_node(Duration::ZERO, false, 4, 1).await;
    let result = run_committed(&runner).await;
    assert!(
        matches!(
            result,
            Err(RunError::Unreported {
                result: DispatchResult::Committed { .. },
                ..
            })
        ),
        "{result:?}"
    );
    let reports = reports_after(&served, 5).await;
    assert_eq!(reports.len(), 5, "{reports:?}");
    for report in &reports {
        assert_eq!(report.command_id, reports[0].command_id);
        assert_eq!(report.fencing_token, 7);
    }
    // Taken at the fifth send: none follows (the next pause would be 1.6 to 2.4 s).
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    assert_eq!(served.handler.reports.lock().unwrap().len(), 5);
}

/// A claim applied on the leader whose answer was lost (the call ends unavailable) holds
/// a grant nobody knows of: the caller gets its error at once, and the claim is sent
/// again with its own id, which the ledger answers with the same grant, given back as
/// never sent instead of left to run out into an unknown outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_claim_failed_is_found_and_given_back() {
    let served = run_with_a_failed_claim(Some("server-a")).await;
    assert!(
        served.handler.reports.lock().unwrap().is_empty(),
        "the caller waited for the grant to be given back"
    );
    assert_given_back(&reports_after(&served, 1).await);
    let claims = served.handler.claims.lock().unwrap().clone();
    assert_eq!(claims.len(), 2, "{claims:?}");
    assert_eq!(claims[0], claims[1], "sent again with its own id");
}

/// A claim that failed where the record shows no attempt of its holder open never reached
/// the ledger (or its grant is over): it is not sent again, which would apply it now and
/// spend one of the effect's dispatch attempts on a grant given back at once. Nor is it
/// while another holder's attempt is open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_claim_is_sent_again_only_while_its_holder_holds_an_attempt() {
    for held_by in [None, Some("server-b")] {
        let served = run_with_a_failed_claim(held_by).await;
        // Past the pause before the first send it would make (at most 750 ms).
        tokio::time::sleep(Duration::from_secs(2)).await;
        let claims = served.handler.claims.lock().unwrap().clone();
        assert_eq!(claims.len(), 1, "held by {held_by:?}: {claims:?}");
        assert!(served.handler.reports.lock().unwrap().is_empty());
    }
}

/// Runs [`call`] once against a fake whose read of the effect finds it held by `held_by`
/// and whose one claim is answered UNAVAILABLE (its answer lost); the run fails so, at
/// once, having dispatched nothing.
async fn run_with_a_failed_claim(held_by: Option<&str>) -> fake::Served<SlowClaims> {
    let fake = SlowClaims {
        claims_unavailable: AtomicU32::new(1),
        held_by: held_by.map(str::to_owned),
        ..slow(Duration::ZERO)
    };
    let (served, runner) = serve(fake, 1).await;
    let result = runner
        .effect(call())
        .run(|_| async { panic!("dispatched on a claim that failed") })
        .await;
    assert!(
        matches!(
            result,
            Err(RunError::Ledger(ClientError::Unavailable { .. }))
        ),
        "{result:?}"
    );
    served
}

/// Runs [`call`] once on `runner` with a dispatch that commits at once.
async fn run_committed(runner: &EffectRunner) -> Result<EffectOutcome, RunError> {
    runner
        .effect(call())
        .run(|_| async {
            DispatchResult::Committed {
                receipt: "done".into(),
            }
        })
        .await
}

/// Runs [`call`] against `fake`, once, with a dispatch that counts its calls; returns
/// the run's result, the dispatches, and the fake.
async fn run_counting(
    fake: SlowClaims,
) -> (
    Result<EffectOutcome, RunError>,
    u32,
    fake::Served<SlowClaims>,
) {
    let (served, runner) = serve(fake, 1).await;
    let dispatched = AtomicU32::new(0);
    let result = runner
        .effect(call())
        .run(|_| {
            dispatched.fetch_add(1, Ordering::SeqCst);
            async {
                DispatchResult::Committed {
                    receipt: "done".into(),
                }
            }
        })
        .await;
    (result, dispatched.load(Ordering::SeqCst), served)
}

/// The provider key keeps every attempt of an effect one effect at the provider: a grant
/// naming another is a node's error, refused with a typed error, never sent, and given
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_naming_another_provider_key_is_never_dispatched() {
    let fake = SlowClaims {
        grant: pb::Grant {
            provider_key: "el1_another-effect".into(),
            ..grant()
        },
        ..slow(Duration::ZERO)
    };
    let (result, dispatched, served) = run_counting(fake).await;
    assert!(
        matches!(result, Err(RunError::Ledger(ClientError::Malformed(_)))),
        "{result:?}"
    );
    assert_eq!(dispatched, 0);
    assert_given_back(&reports_after(&served, 1).await);
}

/// A grant without its grant time would read as a lease of decades (its end counted from
/// 1970), which no heartbeat would ever need to keep: it is refused, never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_without_its_grant_time_is_never_dispatched() {
    let fake = SlowClaims {
        grant: pb::Grant {
            granted_at_ms: 0,
            ..grant()
        },
        ..slow(Duration::ZERO)
    };
    let (result, dispatched, _served) = run_counting(fake).await;
    assert!(
        matches!(result, Err(RunError::Ledger(ClientError::Malformed(_)))),
        "{result:?}"
    );
    assert_eq!(dispatched, 0);
}

/// The ledger grants at most the lease asked for: a longer one is not trusted. Answered
/// after four fifths of the lease asked for, which no heartbeat confirms, the grant is
/// given back unused, however long the lease it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_longer_than_the_one_asked_for_is_not_trusted() {
    let granted = grant();
    let fake = SlowClaims {
        grant: pb::Grant {
            lease_until_ms: granted.granted_at_ms + 100 * LEASE_MS,
            ..granted
        },
        heartbeats_fail: true,
        ..slow(Duration::from_millis(LEASE_MS * 4 / 5))
    };
    let (result, dispatched, served) = run_counting(fake).await;
    assert!(
        matches!(result, Ok(EffectOutcome::Unknown { .. })),
        "{result:?}"
    );
    assert_eq!(
        dispatched, 0,
        "a grant that may have run out was dispatched"
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
