//! "Not found proves nothing until nothing can still land" (DESIGN.md section 7): a
//! not-committed observation settles an unknown effect only after the latest dispatch's
//! lease end plus the provider's declared processing bound and visibility lag, and never
//! for a provider that declares no bound. The ledger enforces it for every adapter.

mod common;

use common::*;
use ledger_core::*;
use proptest::prelude::*;

/// A ticket whose first dispatch ended unknown at once; returns its grant.
fn unknown_ticket(h: &mut Harness, d: &Declaration) -> Grant {
    let g = h.proceed(d);
    h.unknown(d, g.fencing_token);
    g
}

/// Begins a reconciliation and records a not-found look-up.
fn not_found(h: &mut Harness, d: &Declaration) -> Outcome {
    let r = h.reconcile_grant(d);
    h.observe(d, r.fencing_token, ObservationResult::NotCommitted)
}

const STILL_UNKNOWN: Outcome = Outcome::Observed {
    state: EffectState::UnknownAfterDispatch,
    escalated: false,
};

const PROVEN_ABSENT: Outcome = Outcome::Observed {
    state: EffectState::FailedBeforeEffect,
    escalated: false,
};

#[test]
fn not_found_before_processing_bound_proves_nothing() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = unknown_ticket(&mut h, &d);
    // The holder reported at once, which ended its lease then.
    let provable_at_ms = g.granted_at_ms + PROCESSING_MS + VISIBILITY_LAG_MS;
    // More look-ups than the observation budget (3): none counts, none escalates.
    for _ in 0..5 {
        assert_eq!(not_found(&mut h, &d), STILL_UNKNOWN);
        h.advance(LEASE_MS);
    }
    assert!(h.now < provable_at_ms);
    let rec = h.record(&d);
    assert_eq!(rec.state, EffectState::UnknownAfterDispatch);
    assert!(rec.ambiguous);
    assert_eq!(rec.observations_in_budget, 0);
    assert!(rec.escalation.is_none());
    assert_eq!(rec.observations.len(), 5);
    let last = rec.observations.last().unwrap();
    assert_eq!(last.result, ObservationResult::NotCommitted);
    assert!(
        last.detail
            .contains(&format!("proves nothing before {provable_at_ms} ms")),
        "{}",
        last.detail
    );
    assert_eq!(
        rec.attempts.last().unwrap().outcome,
        Some(AttemptOutcome::Observed)
    );
    assert!(matches!(
        h.claim(&d),
        Outcome::Claim(ClaimOutcome::Reconcile(_))
    ));
}

#[test]
fn not_found_after_lease_end_plus_bound_plus_lag_proves_absence() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = unknown_ticket(&mut h, &d);
    // The holder reported at once, which ended its lease then.
    let provable_at_ms = g.granted_at_ms + PROCESSING_MS + VISIBILITY_LAG_MS;
    assert_eq!(h.record(&d).absence_provable_at_ms(), Some(provable_at_ms));
    // One millisecond short: the dispatch might still become visible.
    h.now = provable_at_ms - 1;
    assert_eq!(not_found(&mut h, &d), STILL_UNKNOWN);
    h.now = provable_at_ms;
    assert_eq!(not_found(&mut h, &d), PROVEN_ABSENT);
    let rec = h.record(&d);
    assert!(!rec.ambiguous);
    assert_eq!(
        rec.observations.last().unwrap().detail,
        "looked up by provider key"
    );
    assert_eq!(h.proceed(&d).provider_key, g.provider_key);
}

/// A look-up is made once its reconciliation attempt is granted; its report can arrive
/// much later (a partition, a pause, a clock jump). Judged by the report's arrival, a
/// look-up made before the dispatch could land would "prove" an absence it never saw.
#[test]
fn not_found_reported_late_is_judged_by_its_grant() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = unknown_ticket(&mut h, &d);
    let provable_at_ms = g.granted_at_ms + PROCESSING_MS + VISIBILITY_LAG_MS;
    // Granted (and looked up) before the dispatch could have landed ...
    h.now = provable_at_ms - 1;
    let r = h.reconcile_grant(&d);
    assert!(r.lease_until_ms > provable_at_ms);
    // ... reported after, within the attempt's lease: it still proves nothing.
    h.now = provable_at_ms;
    let out = h.observe(&d, r.fencing_token, ObservationResult::NotCommitted);
    assert_eq!(out, STILL_UNKNOWN);
    let rec = h.record(&d);
    assert_eq!(
        rec.looked_after_ms(r.fencing_token),
        Some(provable_at_ms - 1)
    );
    assert_eq!(rec.early_not_found_observations(), 1);
    assert_eq!(rec.observations_in_budget, 0);
    // A look-up under an attempt granted from then on proves absence.
    assert_eq!(not_found(&mut h, &d), PROVEN_ABSENT);
}

#[test]
fn not_found_without_declared_bound_never_proves_absence() {
    let mut h = Harness::new();
    h.put_policy(
        TENANT,
        TICKET,
        ToolPolicy {
            processing_ms_max: None,
            ..policy(ReplayClass::UnkeyedCreate)
        },
    );
    let d = ticket("t-1");
    unknown_ticket(&mut h, &d);
    assert_eq!(h.record(&d).absence_provable_at_ms(), None);
    // However long everyone waits, a look-up is one more ambiguous observation.
    h.advance(RETENTION_MS);
    for i in 1..=3 {
        let out = not_found(&mut h, &d);
        assert_eq!(
            out,
            Outcome::Observed {
                state: EffectState::UnknownAfterDispatch,
                escalated: i == 3
            }
        );
        h.advance(HORIZON_MS);
    }
    let rec = h.record(&d);
    assert_eq!(
        rec.escalation.as_ref().map(|e| e.reason),
        Some(EscalationReason::ObservationBudgetSpent)
    );
    assert!(rec
        .observations
        .iter()
        .all(|o| o.detail.contains("declares no processing bound")));
    // A person may still decide it was not committed.
    let out = h.operator(CommandBody::Decide {
        key: d.key.clone(),
        decision: Decision::NotCommitted,
        operator: "ops:jane".into(),
        note: "searched the provider console by hand".into(),
    });
    assert_eq!(
        out,
        Outcome::Decided {
            state: EffectState::FailedBeforeEffect
        }
    );
}

#[test]
fn heartbeat_extends_the_absence_deadline() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    let out = h.tenant(CommandBody::Heartbeat {
        key: d.key.clone(),
        fencing_token: g.fencing_token,
        lease_ms: Some(5 * LEASE_MS),
    });
    let Outcome::LeaseExtended { lease_until_ms } = out else {
        panic!("expected a longer lease, got {out:?}");
    };
    assert!(lease_until_ms > g.lease_until_ms);
    // The holder vanishes: its extended lease runs out.
    h.now = lease_until_ms;
    h.expire();
    assert_eq!(h.state(&d), EffectState::UnknownAfterDispatch);
    let provable_at_ms = lease_until_ms + PROCESSING_MS + VISIBILITY_LAG_MS;
    assert_eq!(h.record(&d).absence_provable_at_ms(), Some(provable_at_ms));
    // The deadline of the original lease is not enough.
    h.now = g.lease_until_ms + PROCESSING_MS + VISIBILITY_LAG_MS;
    assert_eq!(not_found(&mut h, &d), STILL_UNKNOWN);
    h.now = provable_at_ms;
    assert_eq!(not_found(&mut h, &d), PROVEN_ABSENT);
}

#[test]
fn a_holders_report_ends_its_lease_for_the_deadline() {
    // A holder sends nothing after it reported, so the deadline counts from the report,
    // not from the end of a lease it no longer holds.
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    h.advance(LEASE_MS / 10);
    let reported_at_ms = h.now;
    h.unknown(&d, g.fencing_token);
    let provable_at_ms = reported_at_ms + PROCESSING_MS + VISIBILITY_LAG_MS;
    assert!(provable_at_ms < g.lease_until_ms + PROCESSING_MS + VISIBILITY_LAG_MS);
    assert_eq!(h.record(&d).absence_provable_at_ms(), Some(provable_at_ms));
    h.now = provable_at_ms - 1;
    assert_eq!(not_found(&mut h, &d), STILL_UNKNOWN);
    h.now = provable_at_ms;
    assert_eq!(not_found(&mut h, &d), PROVEN_ABSENT);
}

#[test]
fn the_latest_dispatch_lease_sets_the_deadline() {
    let mut h = Harness::new();
    let d = refund("r-1");
    let g1 = h.proceed(&d);
    h.unknown(&d, g1.fencing_token);
    h.advance(2 * LEASE_MS);
    // A keyed re-send inside the horizon, also lost; both holders reported at once.
    let g2 = h.proceed(&d);
    h.unknown(&d, g2.fencing_token);
    let provable_at_ms = g2.granted_at_ms + PROCESSING_MS + VISIBILITY_LAG_MS;
    assert_eq!(h.record(&d).absence_provable_at_ms(), Some(provable_at_ms));
    h.now = g1.granted_at_ms + PROCESSING_MS + VISIBILITY_LAG_MS;
    assert_eq!(not_found(&mut h, &d), STILL_UNKNOWN);
    h.now = provable_at_ms;
    assert_eq!(not_found(&mut h, &d), PROVEN_ABSENT);
}

#[test]
fn a_dispatch_whose_lease_ran_out_can_still_land_for_the_bound() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    h.advance(LEASE_MS);
    h.expire();
    assert_eq!(h.now, g.lease_until_ms);
    assert_eq!(not_found(&mut h, &d), STILL_UNKNOWN);
    h.advance_until_absence_provable(&d);
    assert_eq!(not_found(&mut h, &d), PROVEN_ABSENT);
}

#[test]
fn a_record_never_dispatched_has_nothing_that_could_land() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    h.tenant(CommandBody::Declare {
        declaration: d.clone(),
        slots: 1,
    });
    assert_eq!(h.record(&d).absence_provable_at_ms(), Some(0));
}

#[test]
fn the_deadline_saturates_instead_of_overflowing() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    h.proceed(&d);
    let mut rec = h.record(&d).clone();
    rec.attempts[0].lease_until_ms = u64::MAX - 1;
    assert_eq!(rec.absence_provable_at_ms(), Some(u64::MAX));
}

#[test]
fn early_look_ups_beyond_the_limit_count_against_the_budget() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    h.unknown(&d, g.fencing_token);
    // Every look-up below is made at once, before the deadline: none can prove absence.
    let provable_at_ms = h.record(&d).absence_provable_at_ms().unwrap();
    assert!(h.now < provable_at_ms);
    for _ in 0..limits::EARLY_NOT_FOUND_MAX {
        assert_eq!(not_found(&mut h, &d), STILL_UNKNOWN);
    }
    assert_eq!(h.record(&d).observations_in_budget, 0);
    assert_eq!(
        h.record(&d).early_not_found_observations(),
        limits::EARLY_NOT_FOUND_MAX
    );
    // From now on each early look-up is an ambiguous observation like any other.
    for i in 1..=3 {
        let out = not_found(&mut h, &d);
        assert_eq!(
            out,
            Outcome::Observed {
                state: EffectState::UnknownAfterDispatch,
                escalated: i == 3
            }
        );
    }
    let rec = h.record(&d);
    assert_eq!(rec.observations_in_budget, 3);
    assert!(rec.observations.last().unwrap().detail.contains("counted"));
    assert!(h.now < provable_at_ms);
}

/// How a dispatch attempt of the property below ends.
#[derive(Debug, Clone, Copy)]
enum DispatchEnd {
    /// Its holder reports unknown this many ms after the grant (within the lease).
    ReportedAfter(u64),
    /// Its holder heartbeats to this many leases, then vanishes; the lease runs out.
    ExpiredAfterLeases(u64),
}

fn dispatch_end() -> impl Strategy<Value = DispatchEnd> {
    prop_oneof![
        (0..LEASE_MS).prop_map(DispatchEnd::ReportedAfter),
        (1..=5u64).prop_map(DispatchEnd::ExpiredAfterLeases),
    ]
}

/// How long after the dispatch ended a reconciliation is granted: mostly around when a
/// look-up starts to prove absence, sometimes around the provider's horizon.
fn grant_delay() -> impl Strategy<Value = u64> {
    let bound = PROCESSING_MS + VISIBILITY_LAG_MS;
    prop_oneof![
        3 => (bound - LEASE_MS)..(bound + LEASE_MS),
        1 => (HORIZON_MS - 10 * LEASE_MS)..(HORIZON_MS + LEASE_MS),
        1 => 0..(2 * HORIZON_MS),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// One dispatch ends unknown (reported or expired), a reconciliation is granted some
    /// time later and reports "not found" within its lease. Written out independently of
    /// the ledger: the look-up proves absence exactly when its attempt was granted at or
    /// after the dispatch's lease end (its report, or the lease's last extension) plus the
    /// processing bound and visibility lag, and, for a provider that keeps keys for a
    /// horizon, it is reported before the horizon counted from the dispatch's grant.
    /// Otherwise the effect stays unknown; a look-up past the horizon is counted and
    /// annotated (and escalates an irreversible tool's effect), one before the bound is
    /// not counted.
    #[test]
    fn a_not_found_look_up_proves_absence_exactly_when_the_rule_says(
        tool in 0..3usize,
        end in dispatch_end(),
        delay in grant_delay(),
        reported_after in 0..LEASE_MS,
    ) {
        let mut h = Harness::new();
        let d = [refund("e-1"), deploy("e-1"), message("e-1")][tool].clone();
        let horizon_ms = if tool == 1 { 0 } else { HORIZON_MS };
        let g = h.proceed(&d);
        let lease_end_ms = match end {
            DispatchEnd::ReportedAfter(ms) => {
                h.advance(ms);
                h.unknown(&d, g.fencing_token);
                h.now
            }
            DispatchEnd::ExpiredAfterLeases(n) => {
                let out = h.tenant(CommandBody::Heartbeat {
                    key: d.key.clone(),
                    fencing_token: g.fencing_token,
                    lease_ms: Some(n * LEASE_MS),
                });
                let Outcome::LeaseExtended { lease_until_ms } = out else {
                    panic!("expected a lease, got {out:?}");
                };
                h.now = lease_until_ms;
                h.expire();
                lease_until_ms
            }
        };
        prop_assert_eq!(h.state(&d), EffectState::UnknownAfterDispatch);
        h.advance(delay);
        let r = h.reconcile_grant(&d);
        h.advance(reported_after);
        let out = h.observe(&d, r.fencing_token, ObservationResult::NotCommitted);

        let provable = r.granted_at_ms >= lease_end_ms + PROCESSING_MS + VISIBILITY_LAG_MS;
        let past_horizon = horizon_ms > 0 && h.now >= g.granted_at_ms + horizon_ms;
        let rec = h.record(&d);
        let detail = &rec.observations.last().unwrap().detail;
        if past_horizon {
            // Counted; an irreversible tool past its horizon escalates at once.
            let escalated = tool == 2;
            prop_assert_eq!(
                out,
                Outcome::Observed { state: EffectState::UnknownAfterDispatch, escalated }
            );
            prop_assert!(detail.contains(PAST_HORIZON_NOTE), "{}", detail);
            prop_assert_eq!(rec.observations_in_budget, 1);
        } else if provable {
            prop_assert_eq!(out, PROVEN_ABSENT);
            prop_assert!(!rec.ambiguous);
        } else {
            prop_assert_eq!(out, STILL_UNKNOWN);
            prop_assert!(detail.contains("proves nothing before"), "{}", detail);
            prop_assert_eq!(rec.observations_in_budget, 0);
        }
    }
}
