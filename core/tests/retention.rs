//! Retention you can rely on (DESIGN.md section 4): a collected record leaves a tombstone
//! for the tenant's window, so a late retry is told "expired" and never becomes a second
//! effect; a declaration's slots are collected together; tombstones are state, kept in
//! snapshots, and collected themselves once their window has passed.

mod common;

use common::*;
use ledger_core::*;

fn collect(h: &mut Harness, limit: u32) -> Outcome {
    h.operator(CommandBody::CollectGarbage { limit })
}

/// A ticket claimed and committed with `receipt`, then left past its retention and
/// collected.
fn committed_and_collected(h: &mut Harness, key: &str, receipt: &str) -> Declaration {
    let d = ticket(key);
    let g = h.proceed(&d);
    h.commit(&d, g.fencing_token, receipt);
    h.advance(RETENTION_MS);
    collect(h, 100);
    assert!(h.ledger.get(&d.key).is_none(), "{key} was collected");
    d
}

fn slot(d: &Declaration, index: u32) -> Declaration {
    let mut slot = d.clone();
    slot.key = d.key.slot_key(index);
    slot
}

#[test]
fn late_retry_after_gc_is_expired_not_granted() {
    let mut h = Harness::new();
    let d = committed_and_collected(&mut h, "t-late", "T-1");
    let collected_at_ms = h.now;
    let expected = ExpiredEffect {
        key: d.key.clone(),
        intent_hash: canonicalize(&d.intent_json, &[]).unwrap().hash,
        final_state: EffectState::Committed,
        receipt_digest: Some(ReceiptDigest::of("T-1")),
        collected_at_ms,
    };
    let tombstone = h.ledger.tombstone(&d.key).expect("a tombstone is kept");
    assert_eq!(tombstone.expired(), expected);
    assert_eq!(
        tombstone.expires_at_ms,
        collected_at_ms + TenantSettings::TOMBSTONE_RETENTION_MS_DEFAULT
    );

    h.advance(1);
    // The retry that comes after retention: same key, same intent.
    assert_eq!(
        h.claim(&d),
        Outcome::Claim(ClaimOutcome::Expired(expected.clone()))
    );
    // A changed intent is no way round it either.
    let mut changed = d.clone();
    changed.intent_json = r#"{"title":"printer still on fire","queue":"it"}"#.into();
    assert_eq!(
        h.claim(&changed),
        Outcome::Claim(ClaimOutcome::Expired(expected.clone()))
    );
    let declare = h.tenant(CommandBody::Declare {
        declaration: d.clone(),
        slots: 1,
    });
    assert_eq!(
        declare,
        Outcome::Refused(Refusal::Expired(Box::new(expected.clone())))
    );
    // Re-declaring the base as a slot group is the same effect's key too.
    let as_slots = h.tenant(CommandBody::Declare {
        declaration: d.clone(),
        slots: 2,
    });
    assert_eq!(
        as_slots,
        Outcome::Refused(Refusal::Expired(Box::new(expected.clone())))
    );
    assert_eq!(
        h.begin_reconcile(&d),
        Outcome::Reconcile(ReconcileOutcome::Expired(expected.clone()))
    );
    assert_eq!(
        h.commit(&d, 1, "T-2"),
        Outcome::Refused(Refusal::Expired(Box::new(expected)))
    );
    // Nothing was created by any of it.
    assert!(h.ledger.get(&d.key).is_none());
    assert_eq!(h.ledger.len(), 0);
    assert_eq!(h.ledger.tombstone_count(), 1);
}

#[test]
fn a_collected_not_started_or_failed_effect_is_expired_with_its_state() {
    let mut h = Harness::new();
    let never = ticket("t-never");
    h.tenant(CommandBody::Declare {
        declaration: never.clone(),
        slots: 1,
    });
    let failed = ticket("t-failed");
    let g = h.proceed(&failed);
    h.report(
        &failed,
        g.fencing_token,
        Report::FailedBeforeEffect {
            proof: "HTTP 400".into(),
        },
    );
    h.advance(RETENTION_MS);
    collect(&mut h, 100);
    for (d, state) in [
        (&never, EffectState::NotStarted),
        (&failed, EffectState::FailedBeforeEffect),
    ] {
        match h.claim(d) {
            Outcome::Claim(ClaimOutcome::Expired(e)) => {
                assert_eq!(e.final_state, state);
                assert_eq!(e.receipt_digest, None);
            }
            other => panic!("expected expired, got {other:?}"),
        }
    }
}

#[test]
fn slots_of_a_declaration_are_collected_together() {
    let mut h = Harness::new();
    let d = ticket("t-group");
    h.tenant(CommandBody::Declare {
        declaration: d.clone(),
        slots: 3,
    });
    for index in [0, 1] {
        let g = h.proceed(&slot(&d, index));
        h.commit(&slot(&d, index), g.fencing_token, &format!("T-{index}"));
    }
    // Slot 2 dispatches and its outcome is unknown: it is never collectable.
    let g = h.proceed(&slot(&d, 2));
    h.unknown(&slot(&d, 2), g.fencing_token);
    h.advance(RETENTION_MS);
    collect(&mut h, 100);
    for index in 0..3 {
        assert!(
            h.ledger.get(&d.key.slot_key(index)).is_some(),
            "slot {index} collected while slot 2 is unsettled"
        );
    }
    // Nothing is due: the blocked group does not make the sweeper spin.
    assert!(h.ledger.next_collection_ms().is_none_or(|t| t > h.now));

    // Settle slot 2 later; the group is due at its latest slot's deadline.
    h.advance(RETENTION_MS);
    let rg = h.reconcile_grant(&slot(&d, 2));
    let observed = h.observe(
        &slot(&d, 2),
        rg.fencing_token,
        ObservationResult::Committed {
            receipt: "T-2".into(),
        },
    );
    assert!(matches!(observed, Outcome::Observed { .. }));
    let due_ms = h.now + RETENTION_MS;
    assert_eq!(h.ledger.next_collection_ms(), Some(due_ms));
    h.advance(RETENTION_MS - 1);
    collect(&mut h, 100);
    assert_eq!(
        h.ledger.len(),
        3,
        "collected before the latest slot's deadline"
    );

    // Due: all three go in one sweep, even with a limit of one record.
    h.advance(1);
    assert!(matches!(
        collect(&mut h, 1),
        Outcome::Swept { collected, .. } if collected >= 3
    ));
    assert_eq!(h.ledger.len(), 0);
    for index in 0..3 {
        let tombstone = h.ledger.tombstone(&d.key.slot_key(index)).unwrap();
        assert_eq!(
            tombstone.receipt_digest,
            Some(ReceiptDigest::of(&format!("T-{index}")))
        );
    }
    assert!(matches!(
        h.claim(&slot(&d, 1)),
        Outcome::Claim(ClaimOutcome::Expired(_))
    ));
}

#[test]
fn tombstones_expire_after_tenant_window() {
    let mut h = Harness::new();
    let window_ms = 5 * RETENTION_MS;
    h.operator(CommandBody::PutTenant {
        tenant: TENANT.into(),
        settings: TenantSettings {
            command_retention_ms: RETENTION_MS,
            tombstone_retention_ms: window_ms,
            ..TenantSettings::default()
        },
    });
    let d = committed_and_collected(&mut h, "t-window", "T-1");
    let collected_at_ms = h.now;
    assert_eq!(h.ledger.usage(TENANT).tombstones, 1);
    // The sweeper's next collection accounts for the tombstone: nothing else is due
    // before it (the tenant's command ids went with the record, the operator's are
    // remembered for a day).
    assert_eq!(
        h.ledger.next_collection_ms(),
        Some(collected_at_ms + window_ms)
    );

    h.now = collected_at_ms + window_ms - 1;
    collect(&mut h, 100);
    assert!(h.ledger.tombstone(&d.key).is_some());
    assert!(matches!(
        h.claim(&d),
        Outcome::Claim(ClaimOutcome::Expired(_))
    ));

    h.now = collected_at_ms + window_ms;
    collect(&mut h, 100);
    assert!(h.ledger.tombstone(&d.key).is_none());
    assert_eq!(h.ledger.usage(TENANT), TenantUsage::default());
    // After the window the key is unknown again: the operator chose how long that is.
    assert!(matches!(
        h.claim(&d),
        Outcome::Claim(ClaimOutcome::Proceed(_))
    ));
}

#[test]
fn tombstone_windows_are_per_tenant() {
    let mut h = Harness::new();
    h.operator(CommandBody::PutTenant {
        tenant: OTHER_TENANT.into(),
        settings: TenantSettings {
            tombstone_retention_ms: 1,
            ..TenantSettings::default()
        },
    });
    let mine = ticket("t-mine");
    let mut theirs = ticket("t-theirs");
    theirs.key.tenant = OTHER_TENANT.into();
    for (d, caller) in [(&mine, TENANT), (&theirs, OTHER_TENANT)] {
        h.run(
            Caller::Tenant(caller.into()),
            CommandBody::Declare {
                declaration: d.clone(),
                slots: 1,
            },
        );
    }
    h.advance(RETENTION_MS);
    collect(&mut h, 100);
    h.advance(1);
    collect(&mut h, 100);
    assert!(h.ledger.tombstone(&mine.key).is_some());
    assert!(h.ledger.tombstone(&theirs.key).is_none());
    assert_eq!(h.ledger.tombstones(TENANT).len(), 1);
    assert_eq!(h.ledger.tombstones(OTHER_TENANT).len(), 0);
}

#[test]
fn snapshot_round_trip_keeps_tombstones_and_counters() {
    let mut h = Harness::new();
    committed_and_collected(&mut h, "t-gone", "T-1");
    let kept = ticket("t-kept");
    let g = h.proceed(&kept);
    h.commit(&kept, g.fencing_token, "T-2");
    let group = ticket("t-group");
    h.tenant(CommandBody::Declare {
        declaration: group.clone(),
        slots: 2,
    });
    let usage = h.ledger.usage(TENANT);
    assert_eq!(usage.live_records, 3);
    assert_eq!(usage.tombstones, 1);

    let bytes = h.ledger.to_snapshot();
    let restored = Ledger::from_snapshot(&bytes).expect("own snapshot restores");
    assert_eq!(
        restored, h.ledger,
        "tombstones, indexes and counters restored"
    );
    assert_eq!(restored.to_snapshot(), bytes, "byte-identical");
    assert_eq!(restored.usage(TENANT), usage);
    assert_eq!(restored.tombstone_count(), 1);
    assert_eq!(restored.next_collection_ms(), h.ledger.next_collection_ms());

    // The restored ledger goes on exactly like the original: collect both and compare.
    let mut original = h;
    let mut copy = Harness::new();
    copy.ledger = restored;
    copy.now = original.now;
    for h in [&mut original, &mut copy] {
        h.advance(RETENTION_MS);
        collect(h, 100);
    }
    assert_eq!(copy.ledger, original.ledger);
    assert_eq!(copy.ledger.to_snapshot(), original.ledger.to_snapshot());
    assert_eq!(copy.ledger.tombstone_count(), 4);
    assert_eq!(copy.ledger.usage(TENANT).live_records, 0);
}
