//! Amend (DESIGN.md section 2): repairing an effect's intent only while nothing can have
//! happened, keeping the old intent hash in the record's history.

mod common;

use common::*;
use ledger_core::limits::AMENDMENTS_MAX;
use ledger_core::*;

const REPAIRED: &str = r#"{"order":"o-1","amount":900,"currency":"EUR"}"#;

fn hash_of(intent: &str) -> IntentHash {
    canonicalize(intent, &["/request_id".to_string()])
        .unwrap()
        .hash
}

fn repaired(d: &Declaration) -> Declaration {
    Declaration {
        intent_json: REPAIRED.into(),
        ..d.clone()
    }
}

fn amend(h: &mut Harness, d: &Declaration) -> Outcome {
    h.tenant(CommandBody::Amend {
        declaration: d.clone(),
    })
}

fn declare(h: &mut Harness, d: &Declaration) {
    let out = h.tenant(CommandBody::Declare {
        declaration: d.clone(),
        slots: 1,
    });
    assert!(matches!(out, Outcome::Declared { created: true, .. }));
}

#[test]
fn amend_of_not_started_changes_the_hash_and_keeps_the_old_one() {
    let mut h = Harness::new();
    let d = refund("r-1");
    declare(&mut h, &d);
    let old = hash_of(&d.intent_json);
    let new = hash_of(REPAIRED);
    h.advance(5);
    assert_eq!(
        amend(&mut h, &repaired(&d)),
        Outcome::Amended {
            previous_hash: old,
            intent_hash: new,
            changed: true
        }
    );
    let rec = h.record(&d);
    assert_eq!(rec.state, EffectState::NotStarted);
    assert_eq!(rec.intent_hash, new);
    assert_eq!(
        rec.intent,
        r#"{"amount":900,"currency":"EUR","order":"o-1"}"#
    );
    assert_eq!(
        rec.amendments,
        vec![Amendment {
            at_ms: h.now,
            previous_hash: old,
            intent_hash: new
        }]
    );
    assert_eq!(rec.updated_at_ms, h.now);
}

#[test]
fn a_claim_after_amend_proceeds_with_the_new_intent_and_conflicts_with_the_old() {
    let mut h = Harness::new();
    let d = refund("r-1");
    declare(&mut h, &d);
    amend(&mut h, &repaired(&d));
    match h.claim(&d) {
        Outcome::Claim(ClaimOutcome::Conflict(c)) => {
            assert_eq!(c.stored_hash, hash_of(REPAIRED));
            assert_eq!(c.offered_hash, hash_of(&d.intent_json));
            assert_eq!(c.differing_fields, vec!["amount"]);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let g = h.proceed(&repaired(&d));
    assert_eq!(g.provider_key, d.key.provider_key());
    assert_eq!(h.state(&d), EffectState::InProgress);
}

#[test]
fn amend_after_failed_before_effect_with_proof_is_allowed() {
    let mut h = Harness::new();
    let d = refund("r-1");
    let g1 = h.proceed(&d);
    h.report(
        &d,
        g1.fencing_token,
        Report::FailedBeforeEffect {
            proof: "HTTP 400 amount exceeds charge".into(),
        },
    );
    assert!(matches!(
        amend(&mut h, &repaired(&d)),
        Outcome::Amended { changed: true, .. }
    ));
    let g2 = h.proceed(&repaired(&d));
    assert_eq!(g2.provider_key, g1.provider_key);
    assert_eq!(g2.attempt_id, 2);
}

#[test]
fn amend_after_reconciliation_proved_absence_is_allowed() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    h.unknown(&d, g.fencing_token);
    h.advance_until_absence_provable(&d);
    let r = h.reconcile_grant(&d);
    h.observe(&d, r.fencing_token, ObservationResult::NotCommitted);
    assert_eq!(h.state(&d), EffectState::FailedBeforeEffect);
    let changed = Declaration {
        intent_json: r#"{"title":"printer on fire","queue":"facilities"}"#.into(),
        ..d.clone()
    };
    assert!(matches!(
        amend(&mut h, &changed),
        Outcome::Amended { changed: true, .. }
    ));
}

fn refused_to_amend(h: &mut Harness, d: &Declaration) -> Refusal {
    refused_to_amend_to(h, &repaired(d))
}

#[test]
fn amend_while_in_progress_committed_unknown_or_escalated_is_refused() {
    let not_allowed = |state, escalated| Refusal::AmendNotAllowed { state, escalated };
    let mut h = Harness::new();
    // In progress.
    let d = refund("r-1");
    h.proceed(&d);
    assert_eq!(
        refused_to_amend(&mut h, &d),
        not_allowed(EffectState::InProgress, false)
    );
    // Its lease ran out, no sweep yet: it may have dispatched.
    h.advance(LEASE_MS);
    assert_eq!(
        refused_to_amend(&mut h, &d),
        not_allowed(EffectState::UnknownAfterDispatch, false)
    );
    // Committed.
    let d = refund("r-2");
    let g2 = h.proceed(&d);
    h.commit(&d, g2.fencing_token, "re_1");
    assert_eq!(
        refused_to_amend(&mut h, &d),
        not_allowed(EffectState::Committed, false)
    );
    // Unknown.
    let d = ticket("t-1");
    let g3 = h.proceed(&d);
    h.unknown(&d, g3.fencing_token);
    assert_eq!(
        refused_to_amend(&mut h, &d),
        not_allowed(EffectState::UnknownAfterDispatch, false)
    );
    // Failed before effect with proof, but the dispatch budget is spent: escalated.
    let d = refund("r-3");
    for _ in 0..3 {
        let g = h.proceed(&d);
        h.report(
            &d,
            g.fencing_token,
            Report::FailedBeforeEffect {
                proof: "HTTP 429 before processing".into(),
            },
        );
    }
    assert!(matches!(
        h.claim(&d),
        Outcome::Claim(ClaimOutcome::Escalated { .. })
    ));
    assert_eq!(
        refused_to_amend(&mut h, &d),
        not_allowed(EffectState::FailedBeforeEffect, true)
    );
}

#[test]
fn a_failed_resend_does_not_make_an_unsettled_dispatch_amendable() {
    let mut h = Harness::new();
    let d = refund("r-1");
    let g1 = h.proceed(&d);
    h.unknown(&d, g1.fencing_token);
    let g2 = h.proceed(&d);
    h.report(
        &d,
        g2.fencing_token,
        Report::FailedBeforeEffect {
            proof: "connection refused".into(),
        },
    );
    assert_eq!(
        refused_to_amend(&mut h, &d),
        Refusal::AmendNotAllowed {
            state: EffectState::UnknownAfterDispatch,
            escalated: false
        }
    );
}

#[test]
fn amend_to_the_same_intent_is_a_no_op_success_in_any_state() {
    let mut h = Harness::new();
    let d = refund("r-1");
    let g = h.proceed(&d);
    h.commit(&d, g.fencing_token, "re_1");
    let before = h.record(&d).clone();
    // Key order, number spelling and volatile fields do not change the intent.
    let same = Declaration {
        intent_json: r#"{"currency":"EUR","amount":500.0,"order":"o-1","request_id":"x"}"#.into(),
        ..d.clone()
    };
    let hash = hash_of(&d.intent_json);
    assert_eq!(
        amend(&mut h, &same),
        Outcome::Amended {
            previous_hash: hash,
            intent_hash: hash,
            changed: false
        }
    );
    assert_eq!(h.record(&d), before);
}

#[test]
fn amend_keeps_tool_target_workflow_and_authority() {
    let mut h = Harness::new();
    let d = refund("r-1");
    declare(&mut h, &d);
    let mut other = repaired(&d);
    other.target = "pay:another-order".into();
    other.tool.contract_version = "v2".into();
    other.workflow_id = "wf-2".into();
    other.authority.principal = "user:43".into();
    match amend(&mut h, &other) {
        Outcome::Refused(Refusal::Conflict(c)) => {
            assert_eq!(
                c.differing_fields,
                vec!["(tool)", "(target)", "(workflow_id)", "(authority)"]
            );
            assert_eq!(c.stored_hash, hash_of(&d.intent_json));
            assert_eq!(c.offered_hash, hash_of(REPAIRED));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(h.record(&d).amendments.is_empty());
}

#[test]
fn amend_of_a_missing_effect_or_a_bad_intent_is_refused() {
    let mut h = Harness::new();
    let d = refund("r-1");
    assert_eq!(
        amend(&mut h, &d),
        Outcome::Refused(Refusal::UnknownEffect(d.key.clone()))
    );
    declare(&mut h, &d);
    for bad in ["{not json", &format!("\"{}\"", "x".repeat(70_000))] {
        let out = amend(
            &mut h,
            &Declaration {
                intent_json: bad.to_string(),
                ..d.clone()
            },
        );
        assert!(
            matches!(out, Outcome::Refused(Refusal::InvalidIntent(_))),
            "{out:?}"
        );
    }
    let mut bad_key = d.clone();
    bad_key.key.key = String::new();
    assert!(matches!(
        amend(&mut h, &bad_key),
        Outcome::Refused(Refusal::InvalidField(_))
    ));
    let out = h.run(
        Caller::Tenant(OTHER_TENANT.into()),
        CommandBody::Amend {
            declaration: repaired(&d),
        },
    );
    assert!(matches!(out, Outcome::Refused(Refusal::WrongTenant { .. })));
    assert!(h.record(&d).amendments.is_empty());
}

#[test]
fn amendments_are_bounded() {
    let mut h = Harness::new();
    let d = refund("r-1");
    declare(&mut h, &d);
    let intents = [REPAIRED, d.intent_json.as_str()];
    for i in 0..AMENDMENTS_MAX {
        let next = Declaration {
            intent_json: intents[i % 2].into(),
            ..d.clone()
        };
        assert!(matches!(
            amend(&mut h, &next),
            Outcome::Amended { changed: true, .. }
        ));
    }
    assert_eq!(
        refused_to_amend(&mut h, &d),
        Refusal::TooManyAmendments {
            max: AMENDMENTS_MAX as u32
        }
    );
    assert_eq!(h.record(&d).amendments.len(), AMENDMENTS_MAX);
}

#[test]
fn an_amend_retried_with_its_command_id_answers_the_first_outcome() {
    let mut h = Harness::new();
    let d = refund("r-1");
    declare(&mut h, &d);
    let first = Command {
        command_id: "amend-1".into(),
        caller: Caller::Tenant(TENANT.into()),
        body: CommandBody::Amend {
            declaration: repaired(&d),
        },
    };
    let out = h.apply(&first);
    assert!(matches!(out, Outcome::Amended { changed: true, .. }));
    // Amended back by another command; the retry of the first changes nothing.
    amend(&mut h, &d);
    let before = h.record(&d).clone();
    assert_eq!(h.apply(&first), out);
    assert_eq!(h.record(&d), before);
    let reused = Command {
        body: CommandBody::Amend {
            declaration: d.clone(),
        },
        ..first
    };
    assert_eq!(
        h.apply(&reused),
        Outcome::Refused(Refusal::CommandIdReused("amend-1".into()))
    );
}

#[test]
fn amendments_survive_a_snapshot() {
    let mut h = Harness::new();
    let d = refund("r-1");
    declare(&mut h, &d);
    amend(&mut h, &repaired(&d));
    let bytes = h.ledger.to_snapshot();
    let restored = Ledger::from_snapshot(&bytes).unwrap();
    assert_eq!(restored.get(&d.key), Some(h.record(&d)));
    assert_eq!(restored.to_snapshot(), bytes);
}

#[test]
fn a_larger_intent_must_fit_the_byte_quota() {
    let mut h = Harness::new();
    let d = refund("r-1");
    declare(&mut h, &d);
    let used = h.ledger.usage(TENANT).stored_bytes;
    h.operator(CommandBody::PutTenant {
        tenant: TENANT.into(),
        settings: TenantSettings {
            command_retention_ms: RETENTION_MS,
            stored_bytes_max: used + 2,
            ..TenantSettings::default()
        },
    });
    let larger = Declaration {
        intent_json: r#"{"order":"o-1","amount":500000,"currency":"EUR"}"#.into(),
        ..d.clone()
    };
    assert!(matches!(
        refused_to_amend_to(&mut h, &larger),
        Refusal::QuotaExceeded {
            what: Quota::StoredBytes,
            requested: 3,
            ..
        }
    ));
    // Growing by what is left, or shrinking, is fine.
    let fits = Declaration {
        intent_json: r#"{"order":"o-1","amount":50000,"currency":"EUR"}"#.into(),
        ..d.clone()
    };
    assert!(matches!(
        amend(&mut h, &fits),
        Outcome::Amended { changed: true, .. }
    ));
    assert!(matches!(
        amend(&mut h, &d),
        Outcome::Amended { changed: true, .. }
    ));
}

fn refused_to_amend_to(h: &mut Harness, d: &Declaration) -> Refusal {
    let before = h.record(d).clone();
    let out = amend(h, d);
    assert_eq!(h.record(d), before, "a refused amend changes nothing");
    match out {
        Outcome::Refused(r) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}
