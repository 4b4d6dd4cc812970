//! The effect runner against a real (in-process) ledger node: one effect, one dispatch,
//! whatever is retried, lost, cancelled or run from another instance.

mod common;

use std::time::Duration;

use common::*;
use ledger_client::effect::Settled;
use ledger_client::{DispatchResult, EffectOutcome};
use ledger_core::{AttemptOutcome, EffectState, Refusal};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_runs_once_and_a_retry_on_another_instance_replays_its_receipt() {
    let ledger = Ledger::start().await;
    let provider = Provider::default();
    let c = call("pay/refund", "r1", r#"{"order":"o1","amount":5}"#);
    let first = ledger
        .runner("server-a", 30_000)
        .effect(c.clone())
        .run(executing(&provider))
        .await
        .unwrap();
    let EffectOutcome::Done { receipt } = first else {
        panic!("expected done, got {first:?}");
    };
    let again = ledger
        .runner("server-b", 30_000)
        .effect(c)
        .run(must_not_dispatch)
        .await
        .unwrap();
    assert_eq!(again, EffectOutcome::Replayed { receipt });
    assert_eq!(provider.total(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_with_other_arguments_is_a_conflict_naming_the_fields() {
    let ledger = Ledger::start().await;
    let provider = Provider::default();
    let runner = ledger.runner("server-a", 30_000);
    let c = call("pay/refund", "r1", r#"{"order":"o1","amount":5}"#);
    runner.effect(c).run(executing(&provider)).await.unwrap();
    let repaired = call("pay/refund", "r1", r#"{"order":"o1","amount":50}"#);
    match runner
        .effect(repaired)
        .run(must_not_dispatch)
        .await
        .unwrap()
    {
        EffectOutcome::Conflict(c) => {
            assert_eq!(c.differing_fields, vec!["amount".to_owned()]);
            assert_ne!(c.stored_hash, c.offered_hash);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(provider.total(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_dispatch_ends_unknown_never_failed() {
    let ledger = Ledger::start().await;
    let c = call("desk/create_ticket", "t1", r#"{"subject":"help"}"#);
    let runner = ledger.runner("server-a", 30_000);
    let run = runner
        .effect(c.clone())
        .run(|_| std::future::pending::<DispatchResult>());
    assert!(tokio::time::timeout(Duration::from_millis(300), run)
        .await
        .is_err());
    let record = wait_for_state(&ledger, &c, EffectState::UnknownAfterDispatch).await;
    assert!(
        matches!(
            record.attempts[0].outcome,
            Some(AttemptOutcome::Unknown { .. } | AttemptOutcome::LeaseExpired)
        ),
        "{:?}",
        record.attempts[0]
    );
    // A retry is told to reconcile first; nothing is re-sent blindly.
    let again = ledger
        .runner("server-b", 30_000)
        .effect(c)
        .run(must_not_dispatch)
        .await
        .unwrap();
    assert!(
        matches!(again, EffectOutcome::NeedsReconcile(_)),
        "{again:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_vanishes_mid_dispatch_leaves_the_effect_unknown() {
    let ledger = Ledger::start().await;
    let c = call("desk/create_ticket", "t2", r#"{"subject":"help"}"#);
    // A claim whose holder never reports (its process died): only the lease ends it.
    let tenant = ledger.client(TENANT_KEY);
    tenant
        .claim(
            "crashed/claim",
            c.declaration.clone(),
            "crashed",
            Some(200),
            None,
        )
        .await
        .unwrap();
    let record = wait_for_state(&ledger, &c, EffectState::UnknownAfterDispatch).await;
    assert_eq!(
        record.attempts[0].outcome,
        Some(AttemptOutcome::LeaseExpired)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_a_long_dispatch_in_flight_past_its_lease() {
    let ledger = Ledger::start().await;
    let provider = Provider::default();
    let c = call("desk/create_ticket", "t3", r#"{"subject":"slow"}"#);
    let runner = ledger.runner("server-a", 300);
    let (done, record) =
        slow_dispatch_stays_in_flight(&ledger, runner, &c, &provider, 1_200, 800).await;
    assert!(matches!(done, EffectOutcome::Done { .. }), "{done:?}");
    assert_eq!(record.attempts.len(), 1);
    assert_eq!(provider.total(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_flight_answer_is_awaited_until_the_other_attempt_ends() {
    let ledger = Ledger::start().await;
    let provider = Provider::default();
    let c = call("pay/refund", "r2", r#"{"order":"o2","amount":1}"#);
    let a = ledger.runner("server-a", 30_000);
    let first = {
        let (c, provider) = (c.clone(), provider.clone());
        tokio::spawn(async move {
            a.effect(c)
                .run(|attempt| {
                    let provider = provider.clone();
                    async move {
                        tokio::time::sleep(Duration::from_millis(400)).await;
                        DispatchResult::Committed {
                            receipt: provider.execute(&attempt.provider_key),
                        }
                    }
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let b = ledger.runner("server-b", 30_000);
    let impatient = b.effect(c.clone()).run(must_not_dispatch).await.unwrap();
    assert!(matches!(impatient, EffectOutcome::InFlight { .. }));
    let patient = b
        .effect(c)
        .wait_in_flight(5_000)
        .run(must_not_dispatch)
        .await
        .unwrap();
    let EffectOutcome::Done { receipt } = first.await.unwrap().unwrap() else {
        panic!("the first run did not commit");
    };
    assert_eq!(patient, EffectOutcome::Replayed { receipt });
    assert_eq!(provider.total(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_unknown_is_resent_with_the_same_key_inside_the_horizon() {
    let ledger = Ledger::start().await;
    let provider = Provider::default();
    let c = call("pay/refund", "r3", r#"{"order":"o3","amount":9}"#);
    let runner = ledger.runner("server-a", 30_000);
    let mut keys = Vec::new();
    let lost = runner
        .effect(c.clone())
        .run(|attempt| {
            keys.push(attempt.provider_key.clone());
            // The provider executed, the answer was lost.
            provider.execute(&attempt.provider_key);
            std::future::ready(DispatchResult::Unknown {
                reason: "timed out".into(),
            })
        })
        .await
        .unwrap();
    assert!(matches!(lost, EffectOutcome::Unknown { .. }));
    let resent = runner
        .effect(c)
        .run(|attempt| {
            keys.push(attempt.provider_key.clone());
            std::future::ready(DispatchResult::Committed {
                receipt: "refund-1".into(),
            })
        })
        .await
        .unwrap();
    assert!(matches!(resent, EffectOutcome::Done { .. }));
    assert_eq!(keys.len(), 2);
    assert_eq!(
        keys[0], keys[1],
        "a re-send carries the same idempotency key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proof_of_failure_allows_a_new_attempt_and_nothing_else_does() {
    let ledger = Ledger::start().await;
    let provider = Provider::default();
    let c = call("pay/refund", "r4", r#"{"order":"o4","amount":3}"#);
    let runner = ledger.runner("server-a", 30_000);
    let refused = runner
        .effect(c.clone())
        .run(|_| async {
            DispatchResult::NotCommitted {
                proof: "400: card expired".into(),
            }
        })
        .await
        .unwrap();
    assert_eq!(
        refused,
        EffectOutcome::FailedBeforeEffect {
            proof: "400: card expired".into()
        }
    );
    let retried = runner.effect(c).run(executing(&provider)).await.unwrap();
    assert!(matches!(retried, EffectOutcome::Done { .. }));
    assert_eq!(provider.total(), 1);
}

/// What an upstream or provider says has no length limit; the ledger's fields do. A
/// proof or receipt longer than the ledger keeps is fitted to it, so the effect still
/// ends failed (or committed) instead of waiting out its lease as unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_proof_or_receipt_is_fitted_and_the_effect_settles() {
    use ledger_core::limits::{DETAIL_BYTES_MAX, RECEIPT_BYTES_MAX};
    let ledger = Ledger::start().await;
    let runner = ledger.runner("server-a", 30_000);
    let c = call("pay/refund", "r-long", r#"{"order":"o9","amount":3}"#);
    let refused = runner
        .effect(c.clone())
        .run(|_| async {
            DispatchResult::NotCommitted {
                proof: format!("400: {}", "card expired ".repeat(1_000)),
            }
        })
        .await
        .unwrap();
    assert!(
        matches!(refused, EffectOutcome::FailedBeforeEffect { .. }),
        "{refused:?}"
    );
    let record = wait_for_state(&ledger, &c, EffectState::FailedBeforeEffect).await;
    let proof = format!("{:?}", record.attempts[0].outcome);
    assert!(proof.contains("bytes in all"), "{proof}");
    assert!(proof.len() < DETAIL_BYTES_MAX + 100);
    let done = runner
        .effect(c.clone())
        .run(|_| async {
            DispatchResult::Committed {
                receipt: "r".repeat(RECEIPT_BYTES_MAX + 1),
            }
        })
        .await
        .unwrap();
    let EffectOutcome::Done { receipt } = done else {
        panic!("expected done, got {done:?}");
    };
    assert!(receipt.contains("receipt_reduced"), "{receipt}");
    let record = wait_for_state(&ledger, &c, EffectState::Committed).await;
    assert_eq!(record.receipt.as_deref(), Some(receipt.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_intent_with_n_slots_is_n_effects_each_run_once() {
    let ledger = Ledger::start().await;
    let provider = Provider::default();
    let runner = ledger.runner("server-a", 30_000);
    let mut base = call("msg/send", "m1", r#"{"to":["a","b","c"],"text":"hi"}"#);
    let keys = runner.declare(&base.declaration, 3).await.unwrap();
    assert_eq!(keys.len(), 3);
    assert_eq!(keys[2].key, "m1#2");
    // Irreversible: no confirmation, no grant.
    let mut slot = base.clone();
    slot.declaration.key = keys[0].clone();
    let error = runner
        .effect(slot)
        .run(must_not_dispatch)
        .await
        .unwrap_err();
    assert_eq!(error.refusal(), Some(&Refusal::ConfirmationRequired));
    base.confirmation = Some("the user confirmed sending to 3 recipients".into());
    for round in 0..2 {
        for key in &keys {
            let mut slot = base.clone();
            slot.declaration.key = key.clone();
            let outcome = runner.effect(slot).run(executing(&provider)).await.unwrap();
            match (round, outcome) {
                (0, EffectOutcome::Done { .. }) | (1, EffectOutcome::Replayed { .. }) => {}
                other => panic!("round {round}: {other:?}"),
            }
        }
    }
    assert_eq!(provider.total(), 3);
    assert!(keys
        .iter()
        .all(|k| provider.executions(&k.provider_key()) == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_an_effect_without_an_open_attempt_returns_at_once() {
    let ledger = Ledger::start().await;
    let provider = Provider::default();
    let runner = ledger.runner("server-a", 30_000);
    let c = call("pay/refund", "r5", r#"{"order":"o5","amount":3}"#);
    runner
        .effect(c.clone())
        .run(executing(&provider))
        .await
        .unwrap();
    let settled = runner
        .wait_until_settled(&c.declaration.key, 10)
        .await
        .unwrap();
    assert!(matches!(settled, Settled::Ended(r) if r.state == EffectState::Committed));
    let missing = call("pay/refund", "nope", "{}").declaration.key;
    assert_eq!(
        runner.wait_until_settled(&missing, 10).await.unwrap(),
        Settled::Missing
    );
}

/// A wait on another attempt wakes the moment that attempt commits: its poll interval is
/// longer than the whole wait, so only the watch can end it with the record settled. The
/// watch itself starts with the record as it is, then shows the commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_is_woken_by_the_watch_when_the_other_attempt_commits() {
    use ledger_client::effect::RunOptions;
    use ledger_client::{EffectRunner, WatchFilter};
    use ledger_core::{ClaimOutcome, Report};

    let ledger = Ledger::start().await;
    let client = ledger.client(TENANT_KEY);
    let c = call("pay/refund", "w1", r#"{"order":"o9","amount":4}"#);
    let key = c.declaration.key.clone();
    let grant = match client
        .claim("w1-claim", c.declaration.clone(), "server-a", None, None)
        .await
        .unwrap()
    {
        ClaimOutcome::Proceed(grant) => grant,
        other => panic!("a new key proceeds: {other:?}"),
    };
    let mut watch = client.watch(WatchFilter::effect(&key)).await.unwrap();
    let first = watch.next().await.expect("an event").expect("no error");
    assert_eq!(first.key, key);
    assert_eq!(first.record.expect("held").state, EffectState::InProgress);
    let mut committed_only = client
        .watch(WatchFilter {
            state: Some(EffectState::Committed),
            ..WatchFilter::tenant(&key.tenant)
        })
        .await
        .unwrap();

    let waiter =
        EffectRunner::new(ledger.client(TENANT_KEY), "server-b").with_options(RunOptions {
            poll_interval_ms: 600_000,
            ..RunOptions::default()
        });
    let waited_key = key.clone();
    let wait = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let settled = waiter.wait_until_settled(&waited_key, 30_000).await;
        (settled, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    client
        .report(
            "w1-report",
            key.clone(),
            grant.fencing_token,
            Report::Committed {
                receipt: "rf-1".into(),
            },
        )
        .await
        .unwrap();
    let (settled, waited) = wait.await.unwrap();
    assert!(
        matches!(settled.unwrap(), Settled::Ended(r) if r.state == EffectState::Committed),
        "the wait ends with the commit"
    );
    assert!(
        waited < Duration::from_secs(10),
        "woken, not timed out: {waited:?}"
    );
    let next = watch.next().await.expect("an event").expect("no error");
    assert_eq!(next.record.expect("held").state, EffectState::Committed);
    let only = committed_only
        .next()
        .await
        .expect("an event")
        .expect("no error");
    assert_eq!(
        (only.key, only.record.map(|r| r.state)),
        (key, Some(EffectState::Committed)),
        "the in-progress claim is not shown to a watch of committed records"
    );
}
