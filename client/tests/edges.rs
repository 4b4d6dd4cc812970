//! The edges of a dispatch, against a real (in-process) ledger node: a provider that
//! commits after the call gave up, a lease the ledger clamped, a lease that cannot be
//! kept, and a ledger that goes away after the dispatch. In every case nothing is done
//! twice, and what may have happened is answered unknown, never "nothing was sent".

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use ledger_client::reconcile::BoxFuture;
use ledger_client::{
    DispatchResult, EffectOutcome, Observation, ProviderAdapter, ReconcileOptions, RunError,
};
use ledger_core::{EffectRecord, EffectState};

/// A provider whose requests land some time after they were sent, and whose look-up
/// finds only what has landed.
#[derive(Clone, Default)]
struct LateProvider {
    landed: Arc<Mutex<BTreeMap<String, u32>>>,
    sent: Arc<Mutex<u32>>,
}

impl LateProvider {
    /// Sends a request that lands after `delay_ms`, whatever the sender does meanwhile.
    fn send(&self, provider_key: &str, delay_ms: u64) {
        *self.sent.lock().unwrap() += 1;
        let (landed, key) = (self.landed.clone(), provider_key.to_owned());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            *landed.lock().unwrap().entry(key).or_default() += 1;
        });
    }

    fn landed(&self) -> u32 {
        self.landed.lock().unwrap().values().sum()
    }

    fn sent(&self) -> u32 {
        *self.sent.lock().unwrap()
    }
}

impl ProviderAdapter for LateProvider {
    fn observe<'a>(&'a self, effect: &'a EffectRecord) -> BoxFuture<'a, Observation> {
        let found = self
            .landed
            .lock()
            .unwrap()
            .get(&effect.provider_key)
            .copied();
        Box::pin(std::future::ready(match found {
            Some(_) => Observation::Committed {
                receipt: format!("ticket for {}", effect.provider_key),
                detail: "found by external reference".into(),
            },
            None => Observation::NotCommitted {
                detail: "no ticket with this external reference".into(),
            },
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_commits_late_makes_one_ticket_not_two() {
    // The policy declares a processing bound of 1.5 s; the request lands after 1 s, long
    // after the dispatch gave up. A look-up right away finds nothing, which proves nothing.
    let ledger = Ledger::start().await;
    let provider = LateProvider::default();
    let c = call("desk/late_ticket", "late-1", r#"{"subject":"slow desk"}"#);
    let outcome = ledger
        .runner("server-a", 300)
        .effect(c.clone())
        .reconcile_with(&provider)
        .run(|attempt| {
            provider.send(&attempt.provider_key, 1_000);
            std::future::ready(DispatchResult::Unknown {
                reason: "no answer within the provider timeout".into(),
            })
        })
        .await
        .unwrap();
    assert!(
        matches!(outcome, EffectOutcome::Done { .. }),
        "the late ticket is found once it can have landed: {outcome:?}"
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!((provider.sent(), provider.landed()), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_found_within_the_processing_bound_leaves_the_outcome_unknown() {
    // The call may not wait for the bound: it answers unknown and sends nothing again,
    // and a later retry (after the bound) settles it by observation.
    let ledger = Ledger::start().await;
    let provider = LateProvider::default();
    let c = call("desk/late_ticket", "late-2", r#"{"subject":"slow desk"}"#);
    let impatient = ReconcileOptions {
        rounds_max: 1,
        absence_wait_ms_max: 100,
        ..ReconcileOptions::default()
    };
    let first = ledger
        .runner("server-a", 300)
        .effect(c.clone())
        .reconcile_with(&provider)
        .reconcile_options(impatient)
        .run(|attempt| {
            provider.send(&attempt.provider_key, 1_000);
            std::future::ready(DispatchResult::Unknown {
                reason: "no answer within the provider timeout".into(),
            })
        })
        .await
        .unwrap();
    assert!(
        matches!(first, EffectOutcome::Unknown { .. }),
        "nothing proves absence before the bound: {first:?}"
    );
    let record = wait_for_state(&ledger, &c, EffectState::UnknownAfterDispatch).await;
    assert!(record.escalation.is_none(), "an early look costs no budget");
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let retry = ledger
        .runner("server-b", 300)
        .effect(c)
        .reconcile_with(&provider)
        .run(must_not_dispatch)
        .await
        .unwrap();
    assert!(matches!(retry, EffectOutcome::Replayed { .. }), "{retry:?}");
    assert_eq!((provider.sent(), provider.landed()), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_declared_processing_bound_not_found_never_allows_a_resend() {
    let ledger = Ledger::start().await;
    let provider = LateProvider::default();
    let c = call("desk/observe_twice", "unbounded-1", r#"{"subject":"lost"}"#);
    let mut dispatches = 0;
    let outcome = ledger
        .runner("server-a", 300)
        .effect(c.clone())
        .reconcile_with(&provider)
        .run(|_| {
            dispatches += 1;
            std::future::ready(DispatchResult::Unknown {
                reason: "connection reset after sending".into(),
            })
        })
        .await
        .unwrap();
    assert_eq!(
        dispatches, 1,
        "nothing proved absence, so nothing was re-sent"
    );
    assert!(
        matches!(outcome, EffectOutcome::Escalated { .. }),
        "an unkeyed create whose look-ups cannot prove absence goes to a person: {outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_follow_the_lease_the_ledger_granted_not_the_one_asked_for() {
    // The runner asks for 30 s; the policy clamps the lease to 300 ms. Heartbeats every
    // 10 s would let the lease run out under a 1.2 s dispatch, and the keyed effect's
    // unknown outcome would be granted to a second instance while the first still sends.
    let ledger = Ledger::start().await;
    let provider = Provider::default();
    let c = call(
        "pay/short_lease",
        "clamped-1",
        r#"{"order":"o1","amount":5}"#,
    );
    let runner = ledger.runner("server-a", 30_000);
    let (outcome, record) =
        slow_dispatch_stays_in_flight(&ledger, runner, &c, &provider, 1_200, 700).await;
    assert!(matches!(outcome, EffectOutcome::Done { .. }), "{outcome:?}");
    assert_eq!(record.attempts.len(), 1);
    assert_eq!(provider.total(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_cannot_be_kept_stops_the_dispatch_and_ends_unknown() {
    // A dispatch in two steps; the ledger goes away after the first, so no heartbeat is
    // answered: the second step is never sent, and the outcome is unknown.
    let ledger = Ledger::start().await;
    let runner = ledger.runner("server-a", 300);
    let provider = Provider::default();
    let c = call(
        "desk/create_ticket",
        "fenced-1",
        r#"{"subject":"two steps"}"#,
    );
    let ledger = Arc::new(Mutex::new(Some(ledger)));
    let result = runner
        .effect(c)
        .run(|attempt| {
            let (provider, ledger) = (provider.clone(), ledger.clone());
            async move {
                provider.execute(&format!("{}/step-1", attempt.provider_key));
                drop(ledger.lock().unwrap().take());
                tokio::time::sleep(Duration::from_millis(2_000)).await;
                provider.execute(&format!("{}/step-2", attempt.provider_key));
                DispatchResult::Committed {
                    receipt: "both steps".into(),
                }
            }
        })
        .await;
    assert_eq!(
        provider.total(),
        1,
        "nothing was sent after the lease was lost"
    );
    match result {
        Ok(EffectOutcome::Unknown { .. }) => {}
        Err(RunError::Unreported {
            result: DispatchResult::Unknown { reason },
            ..
        }) => assert!(reason.contains("lease"), "{reason}"),
        other => panic!("expected unknown, got {other:?}"),
    }
}

/// An adapter that takes the ledger away when it is asked, then says nothing was found.
struct LedgerVanishes {
    ledger: Mutex<Option<Ledger>>,
}

impl ProviderAdapter for LedgerVanishes {
    fn observe<'a>(&'a self, _effect: &'a EffectRecord) -> BoxFuture<'a, Observation> {
        drop(self.ledger.lock().unwrap().take());
        Box::pin(std::future::ready(Observation::NotCommitted {
            detail: "no ticket".into(),
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_unreachable_after_the_dispatch_is_unknown_not_nothing_sent() {
    let ledger = Ledger::start().await;
    let runner = ledger.runner("server-a", 30_000);
    let adapter = LedgerVanishes {
        ledger: Mutex::new(Some(ledger)),
    };
    let c = call(
        "desk/create_ticket",
        "vanish-1",
        r#"{"subject":"then silence"}"#,
    );
    let outcome = runner
        .effect(c)
        .reconcile_with(&adapter)
        .run(|_| {
            std::future::ready(DispatchResult::Unknown {
                reason: "timed out after sending".into(),
            })
        })
        .await;
    match outcome {
        Ok(EffectOutcome::Unknown { reason }) => {
            assert!(reason.contains("may have happened"), "{reason}")
        }
        other => panic!("a dispatched effect must be answered unknown, got {other:?}"),
    }
}
