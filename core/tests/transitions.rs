//! One test per row of the transition table (DESIGN.md section 4) and per rule under it.

mod common;

use common::*;
use ledger_core::*;

#[test]
fn declare_persists_a_not_started_record_before_anything_is_sent() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let out = h.tenant(CommandBody::Declare {
        declaration: d.clone(),
        slots: 1,
    });
    assert_eq!(
        out,
        Outcome::Declared {
            keys: vec![d.key.clone()],
            created: true
        }
    );
    let rec = h.record(&d);
    assert_eq!(rec.state, EffectState::NotStarted);
    assert!(rec.attempts.is_empty());
    assert_eq!(rec.provider_key, d.key.provider_key());
    assert_eq!(rec.intent, r#"{"queue":"it","title":"printer on fire"}"#);
    assert_eq!(rec.workflow_id, "wf-1");
    assert_eq!(rec.authority.principal, "user:42");
    // Declaring again is a no-op that says so.
    let again = h.tenant(CommandBody::Declare {
        declaration: d.clone(),
        slots: 1,
    });
    assert_eq!(
        again,
        Outcome::Declared {
            keys: vec![d.key],
            created: false
        }
    );
}

#[test]
fn claim_on_not_started_grants_one_attempt_with_token_and_lease() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    assert_eq!(g.attempt_id, 1);
    assert_eq!(g.lease_until_ms, h.now + LEASE_MS);
    assert_eq!(g.provider_key, d.key.provider_key());
    let rec = h.record(&d);
    assert_eq!(rec.state, EffectState::InProgress);
    assert_eq!(rec.attempts.len(), 1);
    assert_eq!(rec.attempts[0].fencing_token, g.fencing_token);
    assert_eq!(rec.attempts[0].holder, "server-a");
    assert_eq!(rec.attempts[0].granted_at_ms, h.now);
}

#[test]
fn claim_on_failed_before_effect_grants_a_new_attempt_with_the_same_provider_key() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g1 = h.proceed(&d);
    let out = h.report(
        &d,
        g1.fencing_token,
        Report::FailedBeforeEffect {
            proof: "HTTP 400 validation".into(),
        },
    );
    assert_eq!(
        out,
        Outcome::Reported {
            state: EffectState::FailedBeforeEffect,
            receipt: None
        }
    );
    let g2 = h.proceed(&d);
    assert_eq!(g2.attempt_id, 2);
    assert!(g2.fencing_token > g1.fencing_token);
    assert_eq!(g2.provider_key, g1.provider_key);
}

#[test]
fn only_one_attempt_is_live_at_a_time() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    let out = h.claim_as(&d, "server-b", None);
    assert_eq!(
        out,
        Outcome::Claim(ClaimOutcome::InFlight {
            holder: "server-a".into(),
            attempt_id: 1,
            lease_until_ms: g.lease_until_ms
        })
    );
    assert_eq!(h.record(&d).attempts.len(), 1);
}

#[test]
fn holder_reporting_committed_stores_the_receipt_and_later_claims_replay_it() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    let out = h.commit(&d, g.fencing_token, "ticket T-77");
    assert_eq!(
        out,
        Outcome::Reported {
            state: EffectState::Committed,
            receipt: Some("ticket T-77".into())
        }
    );
    assert_eq!(
        h.record(&d).attempts[0].outcome,
        Some(AttemptOutcome::Committed)
    );
    h.advance(10 * LEASE_MS);
    assert_eq!(
        h.claim(&d),
        Outcome::Claim(ClaimOutcome::Replay {
            receipt: "ticket T-77".into()
        })
    );
}

#[test]
fn failed_before_effect_needs_a_proof() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    let out = h.report(
        &d,
        g.fencing_token,
        Report::FailedBeforeEffect { proof: "  ".into() },
    );
    assert_eq!(out, Outcome::Refused(Refusal::ProofRequired));
    assert_eq!(h.state(&d), EffectState::InProgress);
}

#[test]
fn timeout_lost_answer_or_5xx_after_send_is_unknown_not_failure() {
    let mut h = Harness::new();
    for (i, reason) in [
        "timeout",
        "connection reset after send",
        "HTTP 503 after send",
    ]
    .iter()
    .enumerate()
    {
        let d = ticket(&format!("t-{i}"));
        let g = h.proceed(&d);
        let out = h.report(
            &d,
            g.fencing_token,
            Report::Unknown {
                reason: reason.to_string(),
            },
        );
        assert_eq!(
            out,
            Outcome::Reported {
                state: EffectState::UnknownAfterDispatch,
                receipt: None
            }
        );
        assert!(h.record(&d).ambiguous);
    }
}

#[test]
fn lease_expiry_turns_in_progress_into_unknown() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    h.proceed(&d);
    h.advance(LEASE_MS - 1);
    assert_eq!(
        h.expire(),
        Outcome::Swept {
            expired: 0,
            collected: 0,
            more: false
        }
    );
    assert_eq!(h.state(&d), EffectState::InProgress);
    h.advance(1);
    assert_eq!(
        h.expire(),
        Outcome::Swept {
            expired: 1,
            collected: 0,
            more: false
        }
    );
    let rec = h.record(&d);
    assert_eq!(rec.state, EffectState::UnknownAfterDispatch);
    assert_eq!(rec.attempts[0].outcome, Some(AttemptOutcome::LeaseExpired));
    assert_eq!(h.ledger.next_lease_expiry_ms(), None);
}

#[test]
fn expired_in_progress_after_a_restart_is_unknown_never_not_started() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    h.proceed(&d);
    // The node restarts from a snapshot taken while the attempt was live; no sweep ran.
    let restored = Ledger::from_snapshot(&h.ledger.to_snapshot()).unwrap();
    h.ledger = restored;
    h.advance(LEASE_MS);
    match h.claim_as(&d, "server-b", None) {
        Outcome::Claim(ClaimOutcome::Reconcile(known)) => {
            assert_eq!(known.dispatches, 1);
            assert_eq!(known.provider_key, d.key.provider_key());
        }
        other => panic!("expected reconcile, got {other:?}"),
    }
}

#[test]
fn reconciliation_proving_committed_attaches_the_receipt() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    h.unknown(&d, g.fencing_token);
    let r = h.reconcile_grant(&d);
    assert!(r.fencing_token > g.fencing_token);
    let out = h.observe(
        &d,
        r.fencing_token,
        ObservationResult::Committed {
            receipt: "ticket T-9".into(),
        },
    );
    assert_eq!(
        out,
        Outcome::Observed {
            state: EffectState::Committed,
            escalated: false
        }
    );
    let rec = h.record(&d);
    assert_eq!(rec.receipt.as_deref(), Some("ticket T-9"));
    assert_eq!(rec.observations.len(), 1);
}

#[test]
fn reconciliation_proving_not_committed_allows_a_new_attempt_with_the_same_provider_key() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g1 = h.proceed(&d);
    h.unknown(&d, g1.fencing_token);
    // Not found proves absence only once the dispatch can no longer land.
    h.advance_until_absence_provable(&d);
    let r = h.reconcile_grant(&d);
    let out = h.observe(&d, r.fencing_token, ObservationResult::NotCommitted);
    assert_eq!(
        out,
        Outcome::Observed {
            state: EffectState::FailedBeforeEffect,
            escalated: false
        }
    );
    let g2 = h.proceed(&d);
    assert_eq!(g2.provider_key, g1.provider_key);
    assert_eq!(g2.attempt_id, 3);
}

#[test]
fn ambiguity_past_the_observation_budget_escalates_and_stops_automatic_attempts() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    h.unknown(&d, g.fencing_token);
    for i in 1..=3 {
        let r = h.reconcile_grant(&d);
        let out = h.observe(&d, r.fencing_token, ObservationResult::StillUnknown);
        assert_eq!(
            out,
            Outcome::Observed {
                state: EffectState::UnknownAfterDispatch,
                escalated: i == 3
            }
        );
    }
    let reason = EscalationReason::ObservationBudgetSpent;
    assert_eq!(
        h.claim(&d),
        Outcome::Claim(ClaimOutcome::Escalated { reason })
    );
    assert_eq!(
        h.begin_reconcile(&d),
        Outcome::Reconcile(ReconcileOutcome::Escalated { reason })
    );
}

/// Escalates `d` (a ticket) after an unknown dispatch whose look-ups stayed ambiguous;
/// returns the token that names the escalation.
fn escalate_ticket(h: &mut Harness, d: &Declaration) -> u64 {
    let g = h.proceed(d);
    h.unknown(d, g.fencing_token);
    for _ in 0..3 {
        let r = h.reconcile_grant(d);
        h.observe(d, r.fencing_token, ObservationResult::StillUnknown);
    }
    h.record(d).escalation_token().expect("escalated")
}

fn decide_escalation(
    h: &mut Harness,
    d: &Declaration,
    escalation_token: u64,
    decision: Decision,
) -> Outcome {
    h.operator(CommandBody::DecideEscalation {
        key: d.key.clone(),
        escalation_token,
        decision,
        operator: "ops:jane".into(),
        note: "nothing at the provider".into(),
    })
}

/// A decision names the escalation it was made on; once that one is settled and the
/// effect escalated anew, the decision (a person's stale finding, or a command re-run
/// from a shell's history) is refused and changes nothing: "not committed" for the first
/// escalation says nothing of the dispatch sent after it. Both escalations are raised
/// at the same ledger time (it may stand still after a change of leader): the token, not
/// the time, tells them apart.
#[test]
fn a_decision_on_an_escalation_no_longer_open_is_refused() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let first = escalate_ticket(&mut h, &d);
    let first_at_ms = h.record(&d).escalation.unwrap().at_ms;
    let out = decide_escalation(&mut h, &d, first, Decision::NotCommitted);
    assert_eq!(
        out,
        Outcome::Decided {
            state: EffectState::FailedBeforeEffect
        }
    );
    // Sent again, lost again, escalated again, within the same millisecond.
    let second = escalate_ticket(&mut h, &d);
    assert!(second > first);
    assert_eq!(h.record(&d).escalation.unwrap().at_ms, first_at_ms);
    let before = h.record(&d);
    let out = decide_escalation(&mut h, &d, first, Decision::NotCommitted);
    assert_eq!(
        out,
        Outcome::Refused(Refusal::EscalationChanged {
            decided_token: first,
            open_token: second,
        })
    );
    assert_eq!(h.record(&d), before);
    // Naming the open escalation decides it; one not escalated is refused as before.
    let out = decide_escalation(
        &mut h,
        &d,
        second,
        Decision::Committed {
            receipt: "ticket 4711".into(),
        },
    );
    assert_eq!(
        out,
        Outcome::Decided {
            state: EffectState::Committed
        }
    );
    assert_eq!(h.record(&d).decision.unwrap().settled.at_ms, first_at_ms);
    let out = decide_escalation(&mut h, &d, second, Decision::NotCommitted);
    assert_eq!(out, Outcome::Refused(Refusal::NotEscalated));
}

#[test]
fn operator_decision_settles_an_escalation_either_way() {
    for decision in [
        Decision::Committed {
            receipt: "found by hand".into(),
        },
        Decision::NotCommitted,
    ] {
        let mut h = Harness::new();
        let d = ticket("t-1");
        let g = h.proceed(&d);
        h.unknown(&d, g.fencing_token);
        for _ in 0..3 {
            let r = h.reconcile_grant(&d);
            h.observe(&d, r.fencing_token, ObservationResult::StillUnknown);
        }
        let out = h.operator(CommandBody::Decide {
            key: d.key.clone(),
            decision: decision.clone(),
            operator: "ops:jane".into(),
            note: "checked the provider console".into(),
        });
        let rec = h.record(&d);
        assert!(rec.escalation.is_none());
        let recorded = rec.decision.as_ref().unwrap();
        assert_eq!(
            recorded.settled.reason,
            EscalationReason::ObservationBudgetSpent
        );
        match decision {
            Decision::Committed { .. } => {
                assert_eq!(
                    out,
                    Outcome::Decided {
                        state: EffectState::Committed
                    }
                );
                assert_eq!(
                    h.claim(&d),
                    Outcome::Claim(ClaimOutcome::Replay {
                        receipt: "found by hand".into()
                    })
                );
            }
            Decision::NotCommitted => {
                assert_eq!(
                    out,
                    Outcome::Decided {
                        state: EffectState::FailedBeforeEffect
                    }
                );
                assert_eq!(h.proceed(&d).provider_key, d.key.provider_key());
            }
        }
    }
}

#[test]
fn a_decision_on_an_effect_that_is_not_escalated_is_refused() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    h.proceed(&d);
    let out = h.operator(CommandBody::Decide {
        key: d.key.clone(),
        decision: Decision::NotCommitted,
        operator: "ops:jane".into(),
        note: String::new(),
    });
    assert_eq!(out, Outcome::Refused(Refusal::NotEscalated));
}

#[test]
fn stale_holder_can_report_committed() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g1 = h.proceed(&d);
    h.advance(LEASE_MS);
    h.expire();
    let r = h.reconcile_grant(&d);
    // The first holder's late answer arrives: the provider did commit.
    let out = h.commit(&d, g1.fencing_token, "ticket T-1");
    assert_eq!(
        out,
        Outcome::Reported {
            state: EffectState::Committed,
            receipt: Some("ticket T-1".into())
        }
    );
    let rec = h.record(&d);
    assert_eq!(rec.attempts[1].fencing_token, r.fencing_token);
    assert_eq!(rec.attempts[1].outcome, Some(AttemptOutcome::Superseded));
}

#[test]
fn stale_holder_cannot_fail_an_effect() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g1 = h.proceed(&d);
    h.unknown(&d, g1.fencing_token);
    h.advance_until_absence_provable(&d);
    let r = h.reconcile_grant(&d);
    h.observe(&d, r.fencing_token, ObservationResult::NotCommitted);
    assert_eq!(h.state(&d), EffectState::FailedBeforeEffect);
    let g2 = h.proceed(&d);
    for stale in [g1.fencing_token, r.fencing_token] {
        let out = h.report(
            &d,
            stale,
            Report::FailedBeforeEffect {
                proof: "it says so".into(),
            },
        );
        assert!(
            matches!(
                out,
                Outcome::Refused(Refusal::StaleToken { .. } | Refusal::WrongAttemptKind(_))
            ),
            "{out:?}"
        );
    }
    assert_eq!(h.state(&d), EffectState::InProgress);
    assert_eq!(
        h.record(&d).open_attempt().unwrap().fencing_token,
        g2.fencing_token
    );
}

#[test]
fn stale_holder_cannot_win_a_grant_or_extend_a_lease() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g1 = h.proceed(&d);
    h.report(
        &d,
        g1.fencing_token,
        Report::FailedBeforeEffect {
            proof: "refused before send".into(),
        },
    );
    // Another instance wins the next grant.
    let out = h.claim_as(&d, "server-b", None);
    let Outcome::Claim(ClaimOutcome::Proceed(g2)) = out else {
        panic!("expected proceed, got {out:?}");
    };
    // The first holder claims again: the live attempt is another's, no grant.
    let out = h.claim_as(&d, "server-a", None);
    assert_eq!(
        out,
        Outcome::Claim(ClaimOutcome::InFlight {
            holder: "server-b".into(),
            attempt_id: g2.attempt_id,
            lease_until_ms: g2.lease_until_ms,
        })
    );
    let out = h.tenant(CommandBody::Heartbeat {
        key: d.key.clone(),
        fencing_token: g1.fencing_token,
        lease_ms: None,
    });
    assert_eq!(
        out,
        Outcome::Refused(Refusal::StaleToken {
            offered: g1.fencing_token,
            latest: Some(g2.fencing_token)
        })
    );
    let open = h.record(&d).open_attempt().cloned().unwrap();
    assert_eq!(
        (open.fencing_token, open.lease_until_ms),
        (g2.fencing_token, g2.lease_until_ms)
    );
    let out = h.tenant(CommandBody::Heartbeat {
        key: d.key.clone(),
        fencing_token: g2.fencing_token,
        lease_ms: Some(5 * LEASE_MS),
    });
    assert_eq!(
        out,
        Outcome::LeaseExtended {
            lease_until_ms: h.now + 5 * LEASE_MS
        }
    );
}

#[test]
fn an_expired_holder_can_no_longer_fail_or_extend_its_attempt() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    h.advance(LEASE_MS);
    let out = h.report(
        &d,
        g.fencing_token,
        Report::FailedBeforeEffect {
            proof: "HTTP 400".into(),
        },
    );
    assert_eq!(
        out,
        Outcome::Refused(Refusal::LeaseExpired {
            lease_until_ms: g.lease_until_ms
        })
    );
    let out = h.tenant(CommandBody::Heartbeat {
        key: d.key.clone(),
        fencing_token: g.fencing_token,
        lease_ms: None,
    });
    assert_eq!(
        out,
        Outcome::Refused(Refusal::LeaseExpired {
            lease_until_ms: g.lease_until_ms
        })
    );
}

#[test]
fn committed_never_goes_back() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    h.commit(&d, g.fencing_token, "ticket T-1");
    let before = h.record(&d).clone();
    let outs = [
        h.report(
            &d,
            g.fencing_token,
            Report::FailedBeforeEffect {
                proof: "nope".into(),
            },
        ),
        h.unknown(&d, g.fencing_token),
        h.commit(&d, g.fencing_token, "another receipt"),
        h.begin_reconcile(&d),
    ];
    h.advance(100 * LEASE_MS);
    h.expire();
    assert_eq!(h.record(&d), before);
    assert_eq!(
        outs[2],
        Outcome::Reported {
            state: EffectState::Committed,
            receipt: Some("ticket T-1".into())
        }
    );
    assert_eq!(
        outs[3],
        Outcome::Reconcile(ReconcileOutcome::Replay {
            receipt: "ticket T-1".into()
        })
    );
}

#[test]
fn same_key_with_a_different_intent_is_a_conflict_naming_both_hashes_and_fields() {
    let mut h = Harness::new();
    let d = refund("r-1");
    h.proceed(&d);
    let mut changed = d.clone();
    changed.intent_json = r#"{"order":"o-1","amount":900,"currency":"EUR","reason":"dup"}"#.into();
    let stored = canonicalize(&d.intent_json, &[]).unwrap().hash;
    let offered = canonicalize(&changed.intent_json, &[]).unwrap().hash;
    let out = h.claim(&changed);
    assert_eq!(
        out,
        Outcome::Claim(ClaimOutcome::Conflict(IntentConflict {
            stored_hash: stored,
            offered_hash: offered,
            differing_fields: vec!["amount".into(), "reason".into()],
        }))
    );
    // A new contract version of the tool is a different intent too.
    let mut new_contract = d.clone();
    new_contract.tool.contract_version = "v2".into();
    match h.claim(&new_contract) {
        Outcome::Claim(ClaimOutcome::Conflict(c)) => assert_eq!(c.differing_fields, vec!["(tool)"]),
        other => panic!("expected conflict, got {other:?}"),
    }
    // Key order, spacing and volatile fields do not make a conflict.
    let mut same = d.clone();
    same.intent_json =
        r#"{ "currency":"EUR", "amount":500.0, "order":"o-1", "request_id":"retry-2" }"#.into();
    assert!(matches!(
        h.claim(&same),
        Outcome::Claim(ClaimOutcome::InFlight { .. })
    ));
}

#[test]
fn a_clock_that_goes_back_does_not_revive_a_lease() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    h.proceed(&d);
    h.advance(2 * LEASE_MS);
    h.expire();
    // A new leader whose clock is behind stamps an earlier time.
    h.now -= 10 * LEASE_MS;
    assert!(matches!(
        h.claim_as(&d, "server-b", None),
        Outcome::Claim(ClaimOutcome::Reconcile(_))
    ));
    assert_eq!(h.ledger.clock_ms(), h.now + 10 * LEASE_MS);
}

#[test]
fn failed_proof_from_a_resend_does_not_settle_an_earlier_unknown_dispatch() {
    let mut h = Harness::new();
    let d = refund("r-1");
    let g1 = h.proceed(&d);
    h.unknown(&d, g1.fencing_token);
    // Keyed tool inside its horizon: a re-send is granted.
    let g2 = h.proceed(&d);
    let out = h.report(
        &d,
        g2.fencing_token,
        Report::FailedBeforeEffect {
            proof: "connection refused".into(),
        },
    );
    // The first dispatch may still have taken effect.
    assert_eq!(
        out,
        Outcome::Reported {
            state: EffectState::UnknownAfterDispatch,
            receipt: None
        }
    );
}
