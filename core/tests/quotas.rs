//! Bounded cost per request: one declaration's stored bytes are capped, and each tenant's
//! records and bytes are held to its quotas. A refused declare or claim creates nothing
//! and loses nothing already stored.

mod common;

use common::*;
use ledger_core::limits::{DECLARATION_BYTES_MAX, INTENT_BYTES_MAX, SLOTS_MAX};
use ledger_core::*;

/// A ticket whose canonical intent is exactly `bytes` long.
fn ticket_of_bytes(key: &str, bytes: usize) -> Declaration {
    let wrapper = r#"{"body":""}"#.len();
    let intent = format!(r#"{{"body":"{}"}}"#, "x".repeat(bytes - wrapper));
    assert_eq!(intent.len(), bytes);
    decl(TICKET, key, &intent)
}

fn with_settings(h: &mut Harness, settings: TenantSettings) {
    let out = h.operator(CommandBody::PutTenant {
        tenant: TENANT.into(),
        settings,
    });
    assert_eq!(out, Outcome::Configured);
}

fn declare(h: &mut Harness, d: &Declaration, slots: u32) -> Outcome {
    h.tenant(CommandBody::Declare {
        declaration: d.clone(),
        slots,
    })
}

#[test]
fn declaration_over_byte_cap_refused() {
    let mut h = Harness::new();
    let d = ticket_of_bytes("t-big", INTENT_BYTES_MAX);
    assert_eq!(
        declare(&mut h, &d, SLOTS_MAX),
        Outcome::Refused(Refusal::DeclarationTooLarge {
            slots: 1024,
            intent_bytes: 64 * 1024,
            bytes_max: DECLARATION_BYTES_MAX,
        })
    );
    assert!(h.ledger.is_empty());
    assert_eq!(h.ledger.usage(TENANT), TenantUsage::default());
    // One slot of the same intent is fine, and so are 1024 slots of a 4 KiB intent:
    // exactly the cap.
    assert!(matches!(
        declare(&mut h, &d, 1),
        Outcome::Declared { created: true, .. }
    ));
    let bytes = (DECLARATION_BYTES_MAX / u64::from(SLOTS_MAX)) as usize;
    let many = ticket_of_bytes("t-many", bytes);
    assert!(matches!(
        declare(&mut h, &many, SLOTS_MAX),
        Outcome::Declared { created: true, .. }
    ));
    let over = ticket_of_bytes("t-over", bytes + 1);
    assert!(matches!(
        declare(&mut h, &over, SLOTS_MAX),
        Outcome::Refused(Refusal::DeclarationTooLarge { .. })
    ));
    assert_eq!(h.ledger.len(), 1 + SLOTS_MAX as usize);
}

#[test]
fn live_record_quota_refuses_new_effects_and_keeps_old() {
    let mut h = Harness::new();
    with_settings(
        &mut h,
        TenantSettings {
            command_retention_ms: RETENTION_MS,
            live_records_max: 3,
            ..TenantSettings::default()
        },
    );
    declare(&mut h, &ticket("t-1"), 1);
    let first = h.proceed(&ticket("t-2"));
    let third = h.proceed(&ticket("t-3"));
    let stored = |h: &Harness| {
        let records = ["t-1", "t-2", "t-3"].map(|k| h.ledger.get(&ticket(k).key));
        (records, h.ledger.len(), h.ledger.usage(TENANT))
    };
    let before = stored(&h);
    let refused = Outcome::Refused(Refusal::QuotaExceeded {
        what: Quota::LiveRecords,
        used: 3,
        requested: 1,
        limit: 3,
    });
    assert_eq!(h.claim(&ticket("t-4")), refused);
    assert_eq!(declare(&mut h, &ticket("t-4"), 1), refused);
    // A declaration is all or nothing.
    assert!(matches!(
        declare(&mut h, &ticket("t-5"), 2),
        Outcome::Refused(Refusal::QuotaExceeded {
            what: Quota::LiveRecords,
            requested: 2,
            ..
        })
    ));
    assert_eq!(stored(&h), before, "a refusal changed what is stored");
    // What is stored goes on: claims, reports and re-declarations need no new record.
    assert!(matches!(
        h.commit(&ticket("t-2"), first.fencing_token, "T-2"),
        Outcome::Reported {
            state: EffectState::Committed,
            ..
        }
    ));
    assert!(matches!(
        h.claim(&ticket("t-2")),
        Outcome::Claim(ClaimOutcome::Replay { .. })
    ));
    assert!(matches!(
        h.claim(&ticket("t-1")),
        Outcome::Claim(ClaimOutcome::Proceed(_))
    ));
    assert!(matches!(
        declare(&mut h, &ticket("t-1"), 1),
        Outcome::Declared { created: false, .. }
    ));
    h.commit(&ticket("t-3"), third.fencing_token, "T-3");
    // Collection frees the quota; tombstones do not count as live records.
    h.advance(RETENTION_MS);
    h.operator(CommandBody::CollectGarbage { limit: 100 });
    let usage = h.ledger.usage(TENANT);
    assert_eq!((usage.live_records, usage.tombstones), (1, 2));
    assert!(matches!(
        h.claim(&ticket("t-4")),
        Outcome::Claim(ClaimOutcome::Proceed(_))
    ));
}

#[test]
fn stored_bytes_quota_refuses_new_effects_and_keeps_old() {
    let mut h = Harness::new();
    let small = ticket_of_bytes("t-small", 100);
    declare(&mut h, &small, 1);
    let one_record = h.ledger.usage(TENANT).stored_bytes;
    assert!(one_record > 100, "the key, intent and overhead count");
    with_settings(
        &mut h,
        TenantSettings {
            stored_bytes_max: 2 * one_record,
            ..TenantSettings::default()
        },
    );
    // A second record of the same size fits exactly; a larger one does not.
    let large = ticket_of_bytes("t-large", 101);
    let out = declare(&mut h, &large, 1);
    let Outcome::Refused(Refusal::QuotaExceeded {
        what: Quota::StoredBytes,
        used,
        requested,
        limit,
    }) = out
    else {
        panic!("expected a byte quota refusal, got {out:?}");
    };
    assert_eq!(
        (used, requested, limit),
        (one_record, one_record + 1, 2 * one_record)
    );
    assert!(h.ledger.get(&large.key).is_none());
    let same = ticket_of_bytes("t-equal", 100);
    assert!(matches!(
        declare(&mut h, &same, 1),
        Outcome::Declared { created: true, .. }
    ));
    assert_eq!(h.ledger.usage(TENANT).stored_bytes, 2 * one_record);
    // A committed fact is never refused for quota: the receipt is stored and counted.
    let g = h.proceed(&small);
    assert!(matches!(
        h.commit(&small, g.fencing_token, "receipt-over-quota"),
        Outcome::Reported {
            state: EffectState::Committed,
            ..
        }
    ));
    let usage = h.ledger.usage(TENANT);
    assert_eq!(
        usage.stored_bytes,
        2 * one_record + "receipt-over-quota".len() as u64
    );
    assert!(matches!(
        h.claim(&ticket_of_bytes("t-next", 100)),
        Outcome::Refused(Refusal::QuotaExceeded {
            what: Quota::StoredBytes,
            ..
        })
    ));
    // The other tenant is untouched by this one's usage.
    let mut theirs = ticket_of_bytes("t-theirs", 100);
    theirs.key.tenant = OTHER_TENANT.into();
    let out = h.run(
        Caller::Tenant(OTHER_TENANT.into()),
        CommandBody::Declare {
            declaration: theirs,
            slots: 1,
        },
    );
    assert!(matches!(out, Outcome::Declared { created: true, .. }));
}

#[test]
fn usage_counters_follow_every_write_and_match_a_rebuild() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    let declared = h.ledger.usage(TENANT);
    assert_eq!(declared.live_records, 1);
    h.commit(&d, g.fencing_token, "RECEIPT");
    let committed = h.ledger.usage(TENANT);
    assert_eq!(committed.stored_bytes, declared.stored_bytes + 7);
    declare(&mut h, &ticket("t-group"), 3);
    assert_eq!(h.ledger.usage(TENANT).live_records, 4);
    let rebuilt = Ledger::from_snapshot(&h.ledger.to_snapshot()).unwrap();
    let before_gc = h.ledger.usage(TENANT);
    assert_eq!(rebuilt.usage(TENANT), before_gc);
    h.advance(RETENTION_MS);
    h.operator(CommandBody::CollectGarbage { limit: 100 });
    let collected = h.ledger.usage(TENANT);
    assert_eq!((collected.live_records, collected.tombstones), (0, 4));
    assert!(collected.stored_bytes < before_gc.stored_bytes);
    let rebuilt = Ledger::from_snapshot(&h.ledger.to_snapshot()).unwrap();
    assert_eq!(rebuilt.usage(TENANT), collected);
    assert_eq!(h.ledger.usage(OTHER_TENANT), TenantUsage::default());
}
