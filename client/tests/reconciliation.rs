//! Unknown outcomes settled by observing the provider through an adapter: committed,
//! proven not committed (then dispatched again with the same provider key), or
//! escalated when observation stays ambiguous past the policy's budget.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::*;
use ledger_client::reconcile::BoxFuture;
use ledger_client::{
    DispatchResult, EffectOutcome, Observation, ProviderAdapter, ReconcileOptions,
};
use ledger_core::{EffectRecord, EscalationReason};

/// A provider adapter that always says the same, and counts how often it was asked.
struct FixedAdapter {
    answer: Observation,
    looks: AtomicU32,
}

impl FixedAdapter {
    fn new(answer: Observation) -> Self {
        FixedAdapter {
            answer,
            looks: AtomicU32::new(0),
        }
    }
}

impl ProviderAdapter for FixedAdapter {
    fn observe<'a>(&'a self, _effect: &'a EffectRecord) -> BoxFuture<'a, Observation> {
        self.looks.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::ready(self.answer.clone()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_dispatch_is_settled_by_observing_the_provider() {
    let ledger = Ledger::start().await;
    let c = call("desk/create_ticket", "t4", r#"{"subject":"lost answer"}"#);
    let adapter = FixedAdapter::new(Observation::Committed {
        receipt: "ticket-77".into(),
        detail: "found by external reference".into(),
    });
    let outcome = ledger
        .runner("server-a", 30_000)
        .effect(c.clone())
        .reconcile_with(&adapter)
        .run(|_| async {
            DispatchResult::Unknown {
                reason: "connection reset after the request was sent".into(),
            }
        })
        .await
        .unwrap();
    assert_eq!(
        outcome,
        EffectOutcome::Done {
            receipt: "ticket-77".into()
        }
    );
    let again = ledger
        .runner("server-b", 30_000)
        .effect(c)
        .run(must_not_dispatch)
        .await
        .unwrap();
    assert_eq!(
        again,
        EffectOutcome::Replayed {
            receipt: "ticket-77".into()
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_observed_not_committed_is_dispatched_again_with_the_same_provider_key() {
    let ledger = Ledger::start().await;
    let c = call("desk/create_ticket", "t5", r#"{"subject":"never arrived"}"#);
    let adapter = FixedAdapter::new(Observation::NotCommitted {
        detail: "no ticket with this external reference".into(),
    });
    let mut seen = Vec::new();
    let outcome = ledger
        .runner("server-a", 30_000)
        .effect(c)
        .reconcile_with(&adapter)
        .run(|attempt| {
            seen.push(attempt.clone());
            let lost = seen.len() == 1;
            async move {
                if lost {
                    DispatchResult::Unknown {
                        reason: "timed out".into(),
                    }
                } else {
                    DispatchResult::Committed {
                        receipt: "ticket-2".into(),
                    }
                }
            }
        })
        .await
        .unwrap();
    assert_eq!(
        outcome,
        EffectOutcome::Done {
            receipt: "ticket-2".into()
        }
    );
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].provider_key, seen[1].provider_key);
    assert!(seen[1].fencing_token > seen[0].fencing_token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguity_past_the_observation_budget_escalates() {
    let ledger = Ledger::start().await;
    let c = call("desk/observe_twice", "t6", r#"{"subject":"who knows"}"#);
    let adapter = FixedAdapter::new(Observation::Unknown {
        detail: "the provider's search is down".into(),
    });
    let outcome = ledger
        .runner("server-a", 30_000)
        .effect(c)
        .reconcile_with(&adapter)
        .reconcile_options(ReconcileOptions {
            rounds_max: 5,
            round_interval_ms: 10,
            ..ReconcileOptions::default()
        })
        .run(|_| async {
            DispatchResult::Unknown {
                reason: "502 after send".into(),
            }
        })
        .await
        .unwrap();
    assert_eq!(
        outcome,
        EffectOutcome::Escalated {
            reason: EscalationReason::ObservationBudgetSpent
        }
    );
    assert_eq!(adapter.looks.load(Ordering::SeqCst), 2);
}

/// An adapter that takes `look_ms` to say it found nothing.
struct SlowAdapter {
    look_ms: u64,
}

impl ProviderAdapter for SlowAdapter {
    fn observe<'a>(&'a self, _effect: &'a EffectRecord) -> BoxFuture<'a, Observation> {
        let look = Duration::from_millis(self.look_ms);
        Box::pin(async move {
            tokio::time::sleep(look).await;
            Observation::NotCommitted {
                detail: "no ticket with this external reference".into(),
            }
        })
    }
}

/// A look-up that outlives its reconciliation lease is not recorded (the ledger refuses
/// it, `LeaseExpired`), which leaves the outcome as unknown as it was: the run says so,
/// instead of failing with the refusal of a step inside it, which a caller would take as
/// the ledger's final word on the effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_up_that_outlives_its_lease_leaves_the_outcome_unknown() {
    let ledger = Ledger::start().await;
    let c = call("desk/create_ticket", "t7", r#"{"subject":"slow search"}"#);
    let first = ledger
        .runner("server-a", 30_000)
        .effect(c.clone())
        .run(|_| async {
            DispatchResult::Unknown {
                reason: "timed out after sending".into(),
            }
        })
        .await
        .unwrap();
    assert!(matches!(first, EffectOutcome::Unknown { .. }), "{first:?}");
    let adapter = SlowAdapter { look_ms: 600 };
    let outcome = ledger
        .runner("server-b", 30_000)
        .effect(c)
        .reconcile_with(&adapter)
        .reconcile_options(ReconcileOptions {
            rounds_max: 1,
            lease_ms: 200,
            ..ReconcileOptions::default()
        })
        .run(must_not_dispatch)
        .await;
    assert!(
        matches!(outcome, Ok(EffectOutcome::NeedsReconcile(_))),
        "{outcome:?}"
    );
}
