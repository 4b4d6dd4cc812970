//! Provider horizons judged on the stamp's bounds on real time, leases on ledger time: the
//! case of a ledger whose time lags real time after an outage no node measured.

use super::Stamp;
use crate::command::{Caller, Command, CommandBody, Declaration, Report};
use crate::key::EffectKey;
use crate::ledger::Ledger;
use crate::outcome::{ClaimOutcome, Grant, Outcome, ReconcileOutcome, Refusal};
use crate::policy::{ReplayClass, TenantSettings, ToolName, ToolPolicy, ToolRef};
use crate::record::{Authority, EffectState, EscalationReason, ObservationResult};

const TENANT: &str = "acme";
const HORIZON_MS: u64 = 60_000;
const LEASE_MS: u64 = 1_000;
const PROCESSING_MS: u64 = 5_000;
/// Ledger time of the first dispatch.
const T0: u64 = 1_780_000_000_000;
/// How far ledger time lags real time after the outage: longer than the horizon.
const OUTAGE_MS: u64 = 2 * HORIZON_MS;

/// A ledger with one tool of `class`, and a fresh command id per command.
struct Bench {
    ledger: Ledger,
    seq: u32,
}

impl Bench {
    fn new(class: ReplayClass) -> Bench {
        let mut bench = Bench {
            ledger: Ledger::new(),
            seq: 0,
        };
        let policy = ToolPolicy {
            provider_horizon_ms: HORIZON_MS,
            lease_ms: LEASE_MS,
            lease_ms_max: 10 * LEASE_MS,
            processing_ms_max: Some(PROCESSING_MS),
            retention_ms: 3_600_000,
            retry_window_ms: 3_600_000,
            dispatch_attempts_max: 5,
            ..ToolPolicy::for_class(class)
        };
        bench.run(
            Caller::Operator,
            CommandBody::PutTenant {
                tenant: TENANT.into(),
                settings: TenantSettings::default(),
            },
            Stamp::at(T0),
        );
        let out = bench.run(
            Caller::Operator,
            CommandBody::PutToolPolicy {
                tenant: TENANT.into(),
                tool: ToolName {
                    provider: "pay".into(),
                    name: "tool".into(),
                },
                policy,
            },
            Stamp::at(T0),
        );
        assert_eq!(out, Outcome::Configured);
        bench
    }

    fn run(&mut self, caller: Caller, body: CommandBody, stamp: Stamp) -> Outcome {
        self.seq += 1;
        let command = Command {
            command_id: format!("c-{}", self.seq),
            caller,
            body,
        };
        self.ledger.apply_stamped(&command, stamp)
    }

    fn tenant(&mut self, body: CommandBody, stamp: Stamp) -> Outcome {
        self.run(Caller::Tenant(TENANT.into()), body, stamp)
    }

    fn claim(&mut self, stamp: Stamp) -> Outcome {
        self.tenant(
            CommandBody::Claim {
                declaration: declaration(),
                holder: "server-a".into(),
                lease_ms: None,
                confirmation: Some("the user said yes".into()),
            },
            stamp,
        )
    }

    /// A first dispatch at `T0`, reported unknown (the answer was lost).
    fn dispatched_then_unknown(&mut self) -> Grant {
        let grant = proceed(self.claim(Stamp::at(T0)));
        let out = self.tenant(
            CommandBody::Report {
                key: key(),
                fencing_token: grant.fencing_token,
                report: Report::Unknown {
                    reason: "timeout after send".into(),
                },
            },
            Stamp::at(T0 + 100),
        );
        assert!(matches!(
            out,
            Outcome::Reported {
                state: EffectState::UnknownAfterDispatch,
                ..
            }
        ));
        grant
    }
}

fn key() -> EffectKey {
    EffectKey::new(TENANT, "ns", "e-1")
}

fn declaration() -> Declaration {
    Declaration {
        key: key(),
        workflow_id: "wf".into(),
        tool: ToolRef {
            provider: "pay".into(),
            name: "tool".into(),
            contract_version: "v1".into(),
        },
        authority: Authority {
            principal: "user-1".into(),
            policy_generation: 1,
        },
        target: "order:1".into(),
        intent_json: r#"{"amount":5}"#.into(),
    }
}

fn proceed(outcome: Outcome) -> Grant {
    match outcome {
        Outcome::Claim(ClaimOutcome::Proceed(grant)) => grant,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// After the outage: ledger time resumed a little after the last stamp, real time is
/// `OUTAGE_MS` later, and the leader knows it only within `uncertainty_ms`.
fn after_outage(uncertainty_ms: u64) -> Stamp {
    let ledger_ms = T0 + 2_000;
    Stamp {
        ledger_ms,
        real_ms_min: ledger_ms + OUTAGE_MS - uncertainty_ms,
        real_ms_max: ledger_ms + OUTAGE_MS + uncertainty_ms,
    }
}

#[test]
fn a_keyed_resend_past_the_horizon_in_real_time_is_not_granted_while_ledger_time_lags() {
    let mut bench = Bench::new(ReplayClass::KeyedIdempotent);
    let first = bench.dispatched_then_unknown();
    assert_eq!(first.horizon_deadline_ms, Some(T0 + HORIZON_MS));
    // By ledger time alone a whole lease still fits before the horizon.
    let stamp = after_outage(2_000);
    assert!(stamp.ledger_ms + LEASE_MS + PROCESSING_MS < T0 + HORIZON_MS);
    let before = bench.ledger.clone();
    match bench.claim(stamp) {
        Outcome::Claim(ClaimOutcome::HorizonPassed(unsettled)) => {
            assert_eq!(unsettled.dispatches, 1);
            assert_eq!(unsettled.horizon_deadline_ms, Some(T0 + HORIZON_MS));
        }
        other => panic!("a re-send after the provider forgot the key: {other:?}"),
    }
    assert_eq!(
        bench.ledger.get(&key()),
        before.get(&key()),
        "no second dispatch attempt was granted"
    );
    // The unknown outcome goes to reconciliation: an observation finds the effect.
    let observer = match bench.tenant(
        CommandBody::BeginReconcile {
            key: key(),
            holder: "reconciler".into(),
            lease_ms: None,
        },
        stamp,
    ) {
        Outcome::Reconcile(ReconcileOutcome::Observe(grant)) => grant,
        other => panic!("expected a reconciliation attempt, got {other:?}"),
    };
    let out = bench.tenant(
        CommandBody::Observe {
            key: key(),
            fencing_token: observer.fencing_token,
            result: ObservationResult::Committed {
                receipt: "refund-1".into(),
            },
            detail: "found by provider key".into(),
        },
        stamp,
    );
    assert_eq!(
        out,
        Outcome::Observed {
            state: EffectState::Committed,
            escalated: false
        }
    );
}

#[test]
fn the_same_resend_is_granted_when_the_stamp_knows_only_ledger_time() {
    // The contrast: the stamp's real-time bounds, not ledger time, decide.
    let mut bench = Bench::new(ReplayClass::KeyedIdempotent);
    bench.dispatched_then_unknown();
    let grant = proceed(bench.claim(Stamp::at(after_outage(0).ledger_ms)));
    assert_eq!(grant.attempt_id, 2);
}

#[test]
fn a_keyed_resend_lease_ends_before_real_time_may_reach_the_resend_deadline() {
    let mut bench = Bench::new(ReplayClass::KeyedIdempotent);
    bench.dispatched_then_unknown();
    let resend_deadline_ms = T0 + HORIZON_MS - PROCESSING_MS;
    // Real time may be up to 3 s ahead of ledger time, and a lease and a half fits before
    // the re-send deadline at the latest real time.
    let lead_ms = 3_000;
    let ledger_ms = resend_deadline_ms - lead_ms - LEASE_MS - LEASE_MS / 2;
    let stamp = Stamp {
        ledger_ms,
        real_ms_min: ledger_ms,
        real_ms_max: ledger_ms + lead_ms,
    };
    let grant = proceed(bench.tenant(
        CommandBody::Claim {
            declaration: declaration(),
            holder: "server-b".into(),
            lease_ms: Some(5 * LEASE_MS),
            confirmation: None,
        },
        stamp,
    ));
    // Asked for five leases, it gets what fits before the deadline in real time.
    assert_eq!(grant.lease_until_ms, resend_deadline_ms - lead_ms);
    // Half a lease on, a heartbeat asking for a whole lease would run past it.
    let later = Stamp {
        ledger_ms: ledger_ms + LEASE_MS / 2 + 1,
        real_ms_min: ledger_ms + LEASE_MS / 2 + 1,
        real_ms_max: ledger_ms + lead_ms + LEASE_MS / 2 + 1,
    };
    let out = bench.tenant(
        CommandBody::Heartbeat {
            key: key(),
            fencing_token: grant.fencing_token,
            lease_ms: Some(LEASE_MS),
        },
        later,
    );
    assert_eq!(
        out,
        Outcome::Refused(Refusal::LeaseExpired {
            lease_until_ms: resend_deadline_ms - lead_ms
        })
    );
}

#[test]
fn an_irreversible_effect_escalates_once_real_time_may_be_past_its_horizon() {
    let mut bench = Bench::new(ReplayClass::Irreversible);
    bench.dispatched_then_unknown();
    let stamp = after_outage(2_000);
    assert!(
        matches!(
            bench.claim(stamp),
            Outcome::Claim(ClaimOutcome::Reconcile(_))
        ),
        "an irreversible tool is never re-sent on an unknown outcome"
    );
    let observer = match bench.tenant(
        CommandBody::BeginReconcile {
            key: key(),
            holder: "reconciler".into(),
            lease_ms: None,
        },
        stamp,
    ) {
        Outcome::Reconcile(ReconcileOutcome::Observe(grant)) => grant,
        other => panic!("expected a reconciliation attempt, got {other:?}"),
    };
    let out = bench.tenant(
        CommandBody::Observe {
            key: key(),
            fencing_token: observer.fencing_token,
            result: ObservationResult::StillUnknown,
            detail: "the provider cannot tell".into(),
        },
        stamp,
    );
    assert_eq!(
        out,
        Outcome::Observed {
            state: EffectState::UnknownAfterDispatch,
            escalated: true
        },
        "ledger time is inside the horizon, real time may be past it: a person decides"
    );
    let record = bench.ledger.get(&key()).expect("kept");
    assert_eq!(
        record.escalation.as_ref().map(|e| e.reason),
        Some(EscalationReason::HorizonPassedOnIrreversible)
    );
}

#[test]
fn a_lapsed_reconciliation_escalates_an_irreversible_effect_past_its_horizon() {
    let mut bench = Bench::new(ReplayClass::Irreversible);
    bench.dispatched_then_unknown();
    let begun = bench.tenant(
        CommandBody::BeginReconcile {
            key: key(),
            holder: "reconciler".into(),
            lease_ms: None,
        },
        Stamp::at(T0 + 200),
    );
    assert!(matches!(
        begun,
        Outcome::Reconcile(ReconcileOutcome::Observe(_))
    ));
    // The reconciler vanished; the sweep after the outage closes its lapsed lease.
    let out = bench.run(
        Caller::Operator,
        CommandBody::ExpireLeases { limit: 10 },
        after_outage(2_000),
    );
    assert!(matches!(out, Outcome::Swept { expired: 1, .. }));
    let record = bench.ledger.get(&key()).expect("kept");
    assert_eq!(
        record.escalation.as_ref().map(|e| e.reason),
        Some(EscalationReason::HorizonPassedOnIrreversible)
    );
}

#[test]
fn a_first_dispatch_starts_its_horizon_at_the_earliest_real_time() {
    let mut bench = Bench::new(ReplayClass::KeyedIdempotent);
    let stamp = after_outage(2_000);
    let grant = proceed(bench.claim(stamp));
    assert_eq!(
        grant.horizon_deadline_ms,
        Some(stamp.real_ms_min + HORIZON_MS)
    );
    // Leases stay in ledger time.
    assert_eq!(grant.granted_at_ms, stamp.ledger_ms);
    assert_eq!(grant.lease_until_ms, stamp.ledger_ms + LEASE_MS);
}

#[test]
fn bounds_below_ledger_time_are_raised_to_it() {
    let stamp = Stamp {
        ledger_ms: 500,
        real_ms_min: 100,
        real_ms_max: 200,
    };
    assert_eq!(stamp.applied(0), Stamp::at(500));
    assert_eq!(Stamp::at(300).applied(900), Stamp::at(900));
    let lagging = Stamp {
        ledger_ms: 500,
        real_ms_min: 700,
        real_ms_max: 600,
    };
    assert_eq!(
        lagging.applied(0),
        Stamp {
            ledger_ms: 500,
            real_ms_min: 600,
            real_ms_max: 600
        }
    );
    assert_eq!(lagging.ledger_ms_before(1_000), 900);
    assert_eq!(lagging.ledger_ms_before(50), 0);
}
