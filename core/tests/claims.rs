//! Every claim outcome of DESIGN.md section 5, the replay classes of section 6, declared
//! multiplicity, and command-id idempotency.

mod common;

use common::*;
use ledger_core::store::Pair;
use ledger_core::*;

#[test]
fn proceed_on_a_new_key_declares_and_grants_in_one_command() {
    let mut h = Harness::new();
    let d = refund("r-1");
    let g = h.proceed(&d);
    assert_eq!(g.horizon_deadline_ms, Some(h.now + HORIZON_MS));
    assert_eq!(h.state(&d), EffectState::InProgress);
}

/// A store that remembers every write it is asked for.
#[derive(Default)]
struct Recording {
    inner: MemStore,
    writes: Vec<(Table, Vec<u8>, bool)>,
}

impl Store for Recording {
    fn get(&self, table: Table, key: &[u8]) -> Option<Vec<u8>> {
        self.inner.get(table, key)
    }
    fn scan(&self, table: Table, from: &[u8], to: Option<&[u8]>, limit: usize) -> Vec<Pair> {
        self.inner.scan(table, from, to, limit)
    }
    fn put(&mut self, table: Table, key: Vec<u8>, value: Vec<u8>) {
        self.writes.push((table, key.clone(), true));
        self.inner.put(table, key, value);
    }
    fn delete(&mut self, table: Table, key: &[u8]) {
        self.writes.push((table, key.to_vec(), false));
        self.inner.delete(table, key);
    }
    fn corrupt(&self, table: Table, key: &[u8], what: &str) {
        self.inner.corrupt(table, key, what);
    }
}

#[test]
fn a_claim_that_declares_writes_the_record_and_its_entries_once_and_deletes_nothing() {
    let h = Harness::new();
    let now = h.now;
    let mut ledger = Ledger::on(Recording {
        inner: h.ledger.into_store(),
        writes: Vec::new(),
    });
    let claim = Command {
        command_id: "c-1".into(),
        caller: Caller::Tenant(TENANT.into()),
        body: CommandBody::Claim {
            declaration: refund("r-1"),
            holder: "server-a".into(),
            lease_ms: None,
            confirmation: None,
        },
    };
    assert!(matches!(
        ledger.apply(&claim, now),
        Outcome::Claim(ClaimOutcome::Proceed(_))
    ));
    let writes = &ledger.store().writes;
    assert!(
        writes.iter().all(|(_, _, put)| *put),
        "a new record has no earlier entries to remove: {writes:?}"
    );
    let per_record = |table| writes.iter().filter(|(t, _, _)| *t == table).count();
    for table in [
        Table::Records,
        Table::ByState,
        Table::ByWorkflow,
        Table::Leases,
    ] {
        assert_eq!(per_record(table), 1, "{table:?} written once: {writes:?}");
    }
    assert_eq!(per_record(Table::Retention), 0, "an open attempt is kept");
}

#[test]
fn replay_returns_the_stored_receipt_and_dispatches_nothing() {
    let mut h = Harness::new();
    let d = refund("r-1");
    let g = h.proceed(&d);
    h.commit(&d, g.fencing_token, r#"{"refund":"re_1"}"#);
    let attempts = h.record(&d).attempts.len();
    assert_eq!(
        h.claim(&d),
        Outcome::Claim(ClaimOutcome::Replay {
            receipt: r#"{"refund":"re_1"}"#.into()
        })
    );
    assert_eq!(h.record(&d).attempts.len(), attempts);
}

#[test]
fn in_flight_names_the_live_holder() {
    let mut h = Harness::new();
    let d = deploy("d-1");
    h.proceed(&d);
    match h.claim_as(&d, "server-b", None) {
        Outcome::Claim(ClaimOutcome::InFlight {
            holder, attempt_id, ..
        }) => {
            assert_eq!((holder.as_str(), attempt_id), ("server-a", 1));
        }
        other => panic!("expected in_flight, got {other:?}"),
    }
}

#[test]
fn reconcile_is_required_for_an_unknown_unkeyed_create() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    h.unknown(&d, g.fencing_token);
    match h.claim(&d) {
        Outcome::Claim(ClaimOutcome::Reconcile(u)) => {
            assert_eq!(u.dispatches, 1);
            assert_eq!(u.last_observation, None);
        }
        other => panic!("expected reconcile, got {other:?}"),
    }
}

#[test]
fn conflict_on_a_slot_count_that_differs_from_the_declaration() {
    let mut h = Harness::new();
    let d = message("m-1");
    h.tenant(CommandBody::Declare {
        declaration: d.clone(),
        slots: 3,
    });
    match h.tenant(CommandBody::Declare {
        declaration: d.clone(),
        slots: 2,
    }) {
        Outcome::Refused(Refusal::Conflict(c)) => assert_eq!(c.differing_fields, vec!["(slots)"]),
        other => panic!("expected conflict, got {other:?}"),
    }
    // The plain key cannot be claimed beside its slot group.
    match h.claim(&d) {
        Outcome::Refused(Refusal::Conflict(c)) => assert_eq!(c.differing_fields, vec!["(slots)"]),
        other => panic!("expected conflict, got {other:?}"),
    }
}

#[test]
fn escalated_when_the_dispatch_budget_is_spent() {
    let mut h = Harness::new();
    let d = ticket("t-1");
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
    let reason = EscalationReason::DispatchBudgetSpent;
    assert_eq!(
        h.claim(&d),
        Outcome::Claim(ClaimOutcome::Escalated { reason })
    );
    assert!(h.record(&d).escalation.is_some());
    assert_eq!(h.record(&d).attempts.len(), 3);
}

/// Escalations are indexed: listed for their tenant, counted with the oldest's time, and
/// gone from both once an operator decides; a store written before the index existed gets
/// it when upgraded, once.
#[test]
fn escalations_are_listed_counted_and_indexed_in_older_stores() {
    let mut h = Harness::new();
    let spend_budget = |h: &mut Harness, d: &Declaration| {
        for _ in 0..3 {
            let g = h.proceed(d);
            h.report(
                d,
                g.fencing_token,
                Report::FailedBeforeEffect {
                    proof: "HTTP 429 before processing".into(),
                },
            );
        }
        assert!(matches!(
            h.claim(d),
            Outcome::Claim(ClaimOutcome::Escalated { .. })
        ));
    };
    let (first, second, calm) = (ticket("t-1"), ticket("t-2"), ticket("t-3"));
    let first_at = h.now;
    spend_budget(&mut h, &first);
    h.advance(1_000);
    spend_budget(&mut h, &second);
    h.proceed(&calm);
    let escalated = ListQuery {
        tenant: TENANT.into(),
        escalated: true,
        state: None,
        workflow_id: None,
        updated_at_or_before_ms: None,
        after: None,
        limit: 10,
    };
    let keys = |records: Vec<EffectRecord>| records.into_iter().map(|r| r.key).collect::<Vec<_>>();
    assert_eq!(
        keys(h.ledger.list(&escalated)),
        vec![first.key.clone(), second.key.clone()]
    );
    let other_tenant = ListQuery {
        tenant: OTHER_TENANT.into(),
        ..escalated.clone()
    };
    assert!(h.ledger.list(&other_tenant).is_empty());
    assert_eq!(
        h.ledger.escalations(),
        Escalations {
            open: 2,
            oldest_at_ms: Some(first_at)
        }
    );

    // A store of the previous version: the same records, no escalation index.
    let mut old = h.ledger.clone();
    for key in [&first.key, &second.key] {
        old.store_mut()
            .delete(Table::Escalations, &ledger_core::keycode::key(key));
    }
    old.store_mut().delete(Table::Counts, b"escalations");
    assert!(old.list(&escalated).is_empty());
    assert_eq!(old.upgrade_indexes(), 2);
    assert_eq!(keys(old.list(&escalated)), keys(h.ledger.list(&escalated)));
    assert_eq!(old.escalations(), h.ledger.escalations());
    assert_eq!(old.upgrade_indexes(), 0, "once");
    assert_eq!(
        h.ledger.upgrade_indexes(),
        0,
        "an indexed store gains nothing"
    );

    let decided = h.operator(CommandBody::Decide {
        key: first.key.clone(),
        decision: Decision::NotCommitted,
        operator: "ops".into(),
        note: "provider has no such ticket".into(),
    });
    assert!(matches!(decided, Outcome::Decided { .. }), "{decided:?}");
    assert_eq!(keys(h.ledger.list(&escalated)), vec![second.key.clone()]);
    assert_eq!(
        h.ledger.escalations(),
        Escalations {
            open: 1,
            oldest_at_ms: Some(first_at + 1_000)
        }
    );
}

#[test]
fn horizon_passed_when_a_keyed_provider_has_forgotten_the_key() {
    let mut h = Harness::new();
    let d = refund("r-1");
    let g = h.proceed(&d);
    h.unknown(&d, g.fencing_token);
    h.advance(HORIZON_MS);
    match h.claim(&d) {
        Outcome::Claim(ClaimOutcome::HorizonPassed(u)) => {
            assert_eq!(u.horizon_deadline_ms, g.horizon_deadline_ms);
            assert_eq!(u.provider_key, g.provider_key);
        }
        other => panic!("expected horizon_passed, got {other:?}"),
    }
    // Reconciliation is the way on, but a look-up that finds nothing proves nothing now:
    // the provider no longer remembers the key, and a look-up by it misses an effect that
    // happened. Each such look-up counts; the budget spent, a person decides.
    let observations_max = h.record(&d).policy.observations_max;
    for _ in 0..observations_max {
        let r = h.reconcile_grant(&d);
        h.observe(&d, r.fencing_token, ObservationResult::NotCommitted);
        assert_eq!(h.state(&d), EffectState::UnknownAfterDispatch);
        let detail = h.record(&d).observations.last().unwrap().detail.clone();
        assert!(detail.contains("horizon may have passed"), "{detail}");
    }
    assert!(
        matches!(h.claim(&d), Outcome::Claim(ClaimOutcome::Escalated { .. })),
        "never dispatched again without a person's decision"
    );
}

/// An irreversible tool whose provider keeps keys for a horizon (a bank's wire transfer)
/// is looked up by the key too: past the horizon a miss proves nothing, and a passed
/// horizon on an irreversible tool ends with a person.
#[test]
fn an_irreversible_tool_is_not_settled_by_a_miss_past_its_horizon() {
    let mut h = Harness::new();
    let d = message("m-1");
    let g = h.proceed(&d);
    h.unknown(&d, g.fencing_token);
    h.advance(HORIZON_MS);
    let r = h.reconcile_grant(&d);
    h.observe(&d, r.fencing_token, ObservationResult::NotCommitted);
    let record = h.record(&d);
    assert_eq!(record.state, EffectState::UnknownAfterDispatch);
    assert!(record.is_escalated(), "{record:?}");
    let detail = &record.observations.last().unwrap().detail;
    assert!(detail.contains(ledger_core::PAST_HORIZON_NOTE), "{detail}");
}

#[test]
fn a_look_up_that_may_follow_the_horizon_proves_nothing_and_one_before_it_does() {
    let mut h = Harness::new();
    let d = refund("r-1");
    let g = h.proceed(&d);
    h.unknown(&d, g.fencing_token);
    let horizon_ms = g
        .horizon_deadline_ms
        .expect("a keyed dispatch has a horizon");
    // Looked up and reported before the horizon (and after the absence deadline): proof.
    h.advance_until_absence_provable(&d);
    assert!(h.now + LEASE_MS < horizon_ms);
    let r = h.reconcile_grant(&d);
    h.observe(&d, r.fencing_token, ObservationResult::NotCommitted);
    assert_eq!(h.state(&d), EffectState::FailedBeforeEffect);
    // The same, reported when real time may have reached the horizon: no proof.
    let mut h = Harness::new();
    let g = h.proceed(&d);
    h.unknown(&d, g.fencing_token);
    h.now = horizon_ms - LEASE_MS;
    let r = h.reconcile_grant(&d);
    h.now = horizon_ms;
    h.observe(&d, r.fencing_token, ObservationResult::NotCommitted);
    assert_eq!(h.state(&d), EffectState::UnknownAfterDispatch);
    // A look-up that finds it settles it whenever it is made.
    let r = h.reconcile_grant(&d);
    h.observe(
        &d,
        r.fencing_token,
        ObservationResult::Committed {
            receipt: "rf_1".into(),
        },
    );
    assert_eq!(h.state(&d), EffectState::Committed);
}

#[test]
fn keyed_idempotent_unknown_inside_the_horizon_may_resend_with_the_same_key() {
    let mut h = Harness::new();
    let d = refund("r-1");
    let g1 = h.proceed(&d);
    h.unknown(&d, g1.fencing_token);
    h.advance(HORIZON_MS / 2);
    let g2 = h.proceed(&d);
    assert_eq!(g2.provider_key, g1.provider_key);
    // The horizon still counts from the first dispatch the provider may have seen.
    assert_eq!(g2.horizon_deadline_ms, g1.horizon_deadline_ms);
}

#[test]
fn a_keyed_resend_must_reach_the_provider_inside_its_horizon() {
    // A re-send may dispatch for a whole lease and then take the processing bound to
    // reach the provider; it is granted only while both fit before the horizon, and its
    // lease is never extended past that point.
    let mut h = Harness::new();
    let d = refund("r-1");
    let g1 = h.proceed(&d);
    h.unknown(&d, g1.fencing_token);
    let horizon_ms = g1
        .horizon_deadline_ms
        .expect("a keyed dispatch has a horizon");
    let resend_deadline_ms = horizon_ms - PROCESSING_MS;
    h.now = resend_deadline_ms - LEASE_MS + 1;
    assert!(matches!(
        h.claim(&d),
        Outcome::Claim(ClaimOutcome::HorizonPassed(_))
    ));
    let mut h = Harness::new();
    let g1 = h.proceed(&d);
    h.unknown(&d, g1.fencing_token);
    h.now = resend_deadline_ms - LEASE_MS;
    let g2 = h.proceed(&d);
    assert!(g2.lease_until_ms <= resend_deadline_ms);
    h.advance(LEASE_MS / 2);
    let out = h.tenant(CommandBody::Heartbeat {
        key: d.key.clone(),
        fencing_token: g2.fencing_token,
        lease_ms: Some(LEASE_MS),
    });
    assert_eq!(
        out,
        Outcome::Refused(Refusal::LeaseExpired {
            lease_until_ms: resend_deadline_ms
        })
    );
}

#[test]
fn a_keyed_tool_with_no_declared_processing_bound_reconciles_instead_of_resending() {
    // Without the bound nothing says when a re-send would reach the provider, so none is
    // covered by the horizon, however early: the unknown outcome is looked up first.
    let mut h = Harness::new();
    h.put_policy(
        TENANT,
        REFUND,
        ToolPolicy {
            processing_ms_max: None,
            ..policy(ReplayClass::KeyedIdempotent)
        },
    );
    let d = refund("r-1");
    let g1 = h.proceed(&d);
    assert!(
        h.record(&d).resend_deadline_ms().is_none(),
        "no re-send deadline without a bound"
    );
    h.unknown(&d, g1.fencing_token);
    h.advance(LEASE_MS);
    match h.claim(&d) {
        Outcome::Claim(ClaimOutcome::Reconcile(u)) => {
            assert_eq!(u.provider_key, g1.provider_key);
        }
        other => panic!("expected reconcile, got {other:?}"),
    }
    // A look-up that finds the refund settles it, and the retry replays it.
    let r = h.reconcile_grant(&d);
    h.observe(
        &d,
        r.fencing_token,
        ObservationResult::Committed {
            receipt: "refund re_1".into(),
        },
    );
    assert!(matches!(
        h.claim(&d),
        Outcome::Claim(ClaimOutcome::Replay { .. })
    ));
}

#[test]
fn a_keyed_tool_with_no_declared_processing_bound_past_its_horizon_is_told_so() {
    let mut h = Harness::new();
    h.put_policy(
        TENANT,
        REFUND,
        ToolPolicy {
            processing_ms_max: None,
            ..policy(ReplayClass::KeyedIdempotent)
        },
    );
    let d = refund("r-1");
    let g = h.proceed(&d);
    h.unknown(&d, g.fencing_token);
    h.advance(HORIZON_MS);
    assert!(matches!(
        h.claim(&d),
        Outcome::Claim(ClaimOutcome::HorizonPassed(_))
    ));
}

#[test]
fn a_blank_confirmation_confirms_nothing() {
    let mut h = Harness::new();
    let d = message("m-1");
    for blank in ["", "   ", "\t\n"] {
        assert_eq!(
            h.claim_as(&d, "server-a", Some(blank)),
            Outcome::Refused(Refusal::ConfirmationRequired),
            "{blank:?}"
        );
    }
    assert!(
        h.ledger.get(&d.key).is_none(),
        "a refused claim declares nothing"
    );
    assert!(matches!(
        h.claim_as(&d, "server-a", Some("yes")),
        Outcome::Claim(ClaimOutcome::Proceed(_))
    ));
}

#[test]
fn irreversible_tools_need_confirmation_and_stop_at_a_person() {
    let mut h = Harness::new();
    let d = message("m-1");
    assert_eq!(
        h.claim_as(&d, "server-a", None),
        Outcome::Refused(Refusal::ConfirmationRequired)
    );
    assert!(
        h.ledger.get(&d.key).is_none(),
        "a refused claim declares nothing"
    );
    let g = h.proceed(&d);
    h.unknown(&d, g.fencing_token);
    h.advance(HORIZON_MS);
    // Past the horizon, one ambiguous observation ends in escalation.
    let r = h.reconcile_grant(&d);
    let out = h.observe(&d, r.fencing_token, ObservationResult::StillUnknown);
    assert_eq!(
        out,
        Outcome::Observed {
            state: EffectState::UnknownAfterDispatch,
            escalated: true
        }
    );
    assert_eq!(
        h.record(&d).escalation.as_ref().unwrap().reason,
        EscalationReason::HorizonPassedOnIrreversible
    );
}

#[test]
fn unknown_irreversible_effect_is_reconciled_not_resent() {
    let mut h = Harness::new();
    let d = message("m-1");
    let g = h.proceed(&d);
    h.unknown(&d, g.fencing_token);
    assert!(matches!(
        h.claim(&d),
        Outcome::Claim(ClaimOutcome::Reconcile(_))
    ));
}

#[test]
fn a_retried_long_running_job_returns_the_job_never_a_second_one() {
    let mut h = Harness::new();
    let d = deploy("d-1");
    let g = h.proceed(&d);
    assert!(matches!(
        h.claim(&d),
        Outcome::Claim(ClaimOutcome::InFlight { .. })
    ));
    h.commit(&d, g.fencing_token, r#"{"job":"job-17"}"#);
    assert_eq!(
        h.claim(&d),
        Outcome::Claim(ClaimOutcome::Replay {
            receipt: r#"{"job":"job-17"}"#.into()
        })
    );
}

#[test]
fn read_only_tools_bypass_the_ledger() {
    let mut h = Harness::new();
    let d = decl(ORDER, "o-1", r#"{"order":"o-1"}"#);
    let out = h.claim(&d);
    assert_eq!(
        out,
        Outcome::Refused(Refusal::ReadOnlyTool(ToolName {
            provider: "shop".into(),
            name: "get_order".into()
        }))
    );
}

#[test]
fn declared_multiplicity_makes_one_effect_per_slot() {
    let mut h = Harness::new();
    let d = message("m-1");
    let out = h.tenant(CommandBody::Declare {
        declaration: d.clone(),
        slots: 3,
    });
    let keys: Vec<EffectKey> = (0..3).map(|i| d.key.slot_key(i)).collect();
    assert_eq!(
        out,
        Outcome::Declared {
            keys: keys.clone(),
            created: true
        }
    );
    let providers: std::collections::BTreeSet<String> =
        keys.iter().map(|k| k.provider_key()).collect();
    assert_eq!(providers.len(), 3);
    let mut slot1 = d.clone();
    slot1.key = keys[1].clone();
    let g = h.proceed(&slot1);
    h.commit(&slot1, g.fencing_token, "msg-1");
    assert_eq!(h.record(&slot1).slot, Some(Slot { index: 1, count: 3 }));
    let mut slot0 = d.clone();
    slot0.key = keys[0].clone();
    assert!(matches!(
        h.claim(&slot0),
        Outcome::Claim(ClaimOutcome::Proceed(_))
    ));
    // An undeclared slot is unknown: claims never create slots.
    let mut slot7 = d.clone();
    slot7.key = d.key.slot_key(7);
    assert_eq!(
        h.claim(&slot7),
        Outcome::Refused(Refusal::UnknownEffect(slot7.key.clone()))
    );
}

#[test]
fn a_retried_claim_whose_answer_was_lost_gets_the_same_grant() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let claim = Command {
        command_id: "claim-t-1-from-server-a".into(),
        caller: Caller::Tenant(TENANT.into()),
        body: CommandBody::Claim {
            declaration: d.clone(),
            holder: "server-a".into(),
            lease_ms: None,
            confirmation: None,
        },
    };
    let first = h.apply(&claim);
    let snapshot = h.ledger.to_snapshot();
    h.advance(LEASE_MS / 2);
    let again = h.apply(&claim);
    assert_eq!(again, first);
    assert!(matches!(first, Outcome::Claim(ClaimOutcome::Proceed(_))));
    assert_eq!(
        h.ledger.to_snapshot(),
        snapshot,
        "a re-applied command id changes nothing"
    );
    assert_eq!(h.record(&d).attempts.len(), 1);
}

#[test]
fn a_command_id_reused_for_a_different_command_is_refused() {
    let mut h = Harness::new();
    let caller = Caller::Tenant(TENANT.into());
    let first = Command {
        command_id: "c-1".into(),
        caller: caller.clone(),
        body: CommandBody::Declare {
            declaration: ticket("t-1"),
            slots: 1,
        },
    };
    let second = Command {
        body: CommandBody::Declare {
            declaration: ticket("t-2"),
            slots: 1,
        },
        ..first.clone()
    };
    h.apply(&first);
    assert_eq!(
        h.apply(&second),
        Outcome::Refused(Refusal::CommandIdReused("c-1".into()))
    );
    assert!(h.ledger.get(&ticket("t-2").key).is_none());
    // Another caller may use the same id for its own command.
    let other = Command {
        caller: Caller::Tenant(OTHER_TENANT.into()),
        body: CommandBody::Declare {
            declaration: Declaration {
                key: EffectKey::new(OTHER_TENANT, "n", "t-2"),
                ..ticket("t-2")
            },
            slots: 1,
        },
        ..first
    };
    assert!(matches!(
        h.apply(&other),
        Outcome::Declared { created: true, .. }
    ));
}

#[test]
fn records_are_collected_after_retention_and_unknown_ones_never() {
    let mut h = Harness::new();
    let done = ticket("t-done");
    let lost = ticket("t-lost");
    let g = h.proceed(&done);
    h.commit(&done, g.fencing_token, "T-1");
    let g = h.proceed(&lost);
    h.unknown(&lost, g.fencing_token);
    let gc = |h: &mut Harness| h.operator(CommandBody::CollectGarbage { limit: 1000 });
    h.advance(RETENTION_MS - 1);
    gc(&mut h);
    assert!(h.ledger.get(&done.key).is_some());
    h.advance(1);
    assert!(matches!(gc(&mut h), Outcome::Swept { collected, .. } if collected > 0));
    assert!(h.ledger.get(&done.key).is_none());
    assert_eq!(h.state(&lost), EffectState::UnknownAfterDispatch);
    h.advance(100 * RETENTION_MS);
    gc(&mut h);
    assert_eq!(h.state(&lost), EffectState::UnknownAfterDispatch);
    // Command ids are forgotten after their own retention; sweeps are never remembered.
    assert_eq!(h.ledger.remembered_commands(), 0);
}

#[test]
fn sweeps_are_bounded_by_their_limit() {
    let mut h = Harness::new();
    for i in 0..5 {
        h.proceed(&ticket(&format!("t-{i}")));
    }
    h.advance(LEASE_MS);
    let sweep = |h: &mut Harness| h.operator(CommandBody::ExpireLeases { limit: 2 });
    assert_eq!(
        sweep(&mut h),
        Outcome::Swept {
            expired: 2,
            collected: 0,
            more: true
        }
    );
    assert_eq!(
        sweep(&mut h),
        Outcome::Swept {
            expired: 2,
            collected: 0,
            more: true
        }
    );
    assert_eq!(
        sweep(&mut h),
        Outcome::Swept {
            expired: 1,
            collected: 0,
            more: false
        }
    );
    assert_eq!(h.ledger.counts()[&EffectState::UnknownAfterDispatch], 5);
}

#[test]
fn a_crashed_reconciler_counts_against_the_observation_budget() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    h.unknown(&d, g.fencing_token);
    for _ in 0..3 {
        h.reconcile_grant(&d);
        h.advance(LEASE_MS);
        h.expire();
    }
    assert!(h.record(&d).escalation.is_some());
    assert_eq!(h.record(&d).observations.len(), 3);
}

#[test]
fn list_pages_by_state_and_workflow() {
    let mut h = Harness::new();
    for i in 0..5 {
        let mut d = ticket(&format!("t-{i}"));
        d.workflow_id = format!("wf-{}", i % 2);
        let g = h.proceed(&d);
        if i % 2 == 0 {
            h.unknown(&d, g.fencing_token);
        }
    }
    let query = ListQuery {
        tenant: TENANT.into(),
        escalated: false,
        state: Some(EffectState::UnknownAfterDispatch),
        workflow_id: None,
        updated_at_or_before_ms: None,
        after: None,
        limit: 2,
    };
    let page1: Vec<String> = h
        .ledger
        .list(&query)
        .iter()
        .map(|r| r.key.key.clone())
        .collect();
    assert_eq!(page1, vec!["t-0", "t-2"]);
    let next = ListQuery {
        after: Some(EffectKey::new(TENANT, "agent-runtime", "t-2")),
        ..query.clone()
    };
    let page2: Vec<String> = h
        .ledger
        .list(&next)
        .iter()
        .map(|r| r.key.key.clone())
        .collect();
    assert_eq!(page2, vec!["t-4"]);
    let by_workflow = ListQuery {
        state: None,
        workflow_id: Some("wf-1".into()),
        limit: 10,
        ..query.clone()
    };
    let keys: Vec<String> = h
        .ledger
        .list(&by_workflow)
        .iter()
        .map(|r| r.key.key.clone())
        .collect();
    assert_eq!(keys, vec!["t-1", "t-3"]);
    let other_tenant = ListQuery {
        tenant: OTHER_TENANT.into(),
        escalated: false,
        state: None,
        limit: 10,
        ..query
    };
    assert!(h.ledger.list(&other_tenant).is_empty());
}

#[test]
fn a_page_visits_a_bounded_number_of_entries_and_says_where_to_go_on() {
    let mut h = Harness::new();
    // Twenty effects, a few of them stuck unknown; the state filter walks the state index,
    // the time filter every record.
    let stuck = [3, 11, 12, 19];
    for i in 0..20 {
        let d = ticket(&format!("t-{i:02}"));
        let g = h.proceed(&d);
        if stuck.contains(&i) {
            h.unknown(&d, g.fencing_token);
        } else {
            h.commit(&d, g.fencing_token, "done");
        }
        h.advance(10);
    }
    let by_state = ListQuery {
        tenant: TENANT.into(),
        escalated: false,
        state: Some(EffectState::UnknownAfterDispatch),
        workflow_id: None,
        updated_at_or_before_ms: None,
        after: None,
        limit: 3,
    };
    let by_time = ListQuery {
        state: None,
        updated_at_or_before_ms: Some(h.record(&ticket("t-05")).updated_at_ms),
        ..by_state.clone()
    };
    for (query, visits) in [
        (&by_state, 2),
        (&by_state, 1_000),
        (&by_time, 4),
        (&by_time, 1),
    ] {
        let whole: Vec<EffectKey> = h.ledger.list(query).iter().map(|r| r.key.clone()).collect();
        let mut pages = Vec::new();
        let mut paged = Vec::new();
        let mut q = query.clone();
        loop {
            let page = h.ledger.list_page(&q, visits);
            assert!(page.records.len() <= visits.min(q.limit), "{page:?}");
            paged.extend(page.records.iter().map(|r| r.key.clone()));
            pages.push(page.records.len());
            match page.continue_after {
                Some(next) => {
                    // Where it goes on is past everything it returned.
                    assert!(page.records.iter().all(|r| r.key <= next));
                    q.after = Some(next);
                }
                None => break,
            }
            assert!(pages.len() <= 40, "the pages do not end: {pages:?}");
        }
        // Pages read one after the other give the records of one unbounded walk, limited
        // to the query's limit each.
        let mut expected = Vec::new();
        let mut q = query.clone();
        loop {
            let page = h.ledger.list(&q);
            expected.extend(page.iter().map(|r| r.key.clone()));
            match page.last() {
                Some(last) if page.len() >= q.limit => q.after = Some(last.key.clone()),
                _ => break,
            }
        }
        assert_eq!(paged, expected, "visits {visits}, pages {pages:?}");
        assert!(whole.iter().all(|k| paged.contains(k)));
        if visits < query.limit {
            // The visits end pages early, and the last page is the one that reached the
            // end of the range, never an empty one after it.
            assert!(pages.len() > 1, "visits {visits}, pages {pages:?}");
            assert!(
                pages.iter().all(|&n| n <= visits),
                "visits {visits}, pages {pages:?}"
            );
        }
        if query.state.is_none() && visits == 1 {
            // Walking every record for a few: pages that found nothing but go on.
            assert!(pages[..pages.len() - 1].contains(&0), "pages {pages:?}");
        }
    }
    let stuck_keys: Vec<String> = stuck.iter().map(|i| format!("t-{i:02}")).collect();
    let mut q = by_state.clone();
    q.limit = 10;
    let all = h.ledger.list_page(&q, 1_000);
    assert_eq!(
        all.records
            .iter()
            .map(|r| r.key.key.clone())
            .collect::<Vec<_>>(),
        stuck_keys
    );
    assert_eq!(all.continue_after, None, "the walk reached the end");
    // A full page goes on only if another entry follows it.
    q.limit = 4;
    assert_eq!(h.ledger.list_page(&q, 1_000).continue_after, None);
    q.limit = 3;
    let full = h.ledger.list_page(&q, 1_000);
    assert_eq!(full.continue_after, Some(full.records[2].key.clone()));
    // Nor does a page cut short by its visits when its last visit ends the range.
    q.limit = 10;
    assert_eq!(h.ledger.list_page(&q, 4).records.len(), 4);
    assert_eq!(h.ledger.list_page(&q, 4).continue_after, None);
    let mut q = by_state;
    q.tenant = OTHER_TENANT.into();
    assert_eq!(h.ledger.list_page(&q, 1), ListPage::default());
}
