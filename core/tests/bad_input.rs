//! Bad input is a refusal with a clear type, never a panic, and changes nothing stored.

mod common;

use common::*;
use ledger_core::key::FieldError;
use ledger_core::limits::*;
use ledger_core::*;

/// Applies `body` as `caller` and checks that it was refused and that the state, except
/// for the remembered command id, is as before.
fn refused(h: &mut Harness, caller: Caller, body: CommandBody) -> Refusal {
    let before: Vec<EffectRecord> = h
        .ledger
        .list(&ListQuery {
            tenant: TENANT.into(),
            escalated: false,
            state: None,
            workflow_id: None,
            updated_at_or_before_ms: None,
            after: None,
            limit: usize::MAX,
        })
        .into_iter()
        .collect();
    let len = h.ledger.len();
    let out = h.run(caller, body);
    let after: Vec<EffectRecord> = h
        .ledger
        .list(&ListQuery {
            tenant: TENANT.into(),
            escalated: false,
            state: None,
            workflow_id: None,
            updated_at_or_before_ms: None,
            after: None,
            limit: usize::MAX,
        })
        .into_iter()
        .collect();
    assert_eq!(before, after, "a refusal changed a record");
    assert_eq!(len, h.ledger.len());
    match out {
        Outcome::Refused(r) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn tenant() -> Caller {
    Caller::Tenant(TENANT.into())
}

fn claim_body(d: Declaration) -> CommandBody {
    CommandBody::Claim {
        declaration: d,
        holder: "server-a".into(),
        lease_ms: None,
        confirmation: None,
    }
}

#[test]
fn malformed_keys_are_refused() {
    let mut h = Harness::new();
    let stored = ticket("kept");
    let g = h.proceed(&stored);
    h.commit(&stored, g.fencing_token, "T-1");
    for bad in ["", "has space", "new\nline", "slash#hash", "é"] {
        let r = refused(&mut h, tenant(), claim_body(ticket(bad)));
        assert!(
            matches!(
                r,
                Refusal::InvalidField(FieldError::Empty { .. } | FieldError::BadChar { .. })
            ),
            "{bad:?}: {r:?}"
        );
    }
    let long = "k".repeat(KEY_BYTES_MAX + 1);
    let r = refused(&mut h, tenant(), claim_body(ticket(&long)));
    assert!(
        matches!(r, Refusal::InvalidField(FieldError::TooLong { len, max, .. }) if len == KEY_BYTES_MAX + 1 && max == KEY_BYTES_MAX)
    );
    let mut bad_ns = ticket("k");
    bad_ns.key.namespace = String::new();
    assert!(matches!(
        refused(&mut h, tenant(), claim_body(bad_ns)),
        Refusal::InvalidField(FieldError::Empty { .. })
    ));
    assert_eq!(
        h.claim(&stored),
        Outcome::Claim(ClaimOutcome::Replay {
            receipt: "T-1".into()
        })
    );
}

#[test]
fn oversized_and_malformed_intents_are_refused() {
    let mut h = Harness::new();
    let huge = format!(r#"{{"blob":"{}"}}"#, "x".repeat(INTENT_BYTES_MAX));
    let cases = [
        huge.as_str(),
        "{not json",
        "{\"a\":1,\"a\":2}",
        "\u{0}\u{1}\u{2}",
        "1e999",
    ];
    for bad in cases {
        let r = refused(&mut h, tenant(), claim_body(decl(TICKET, "t-1", bad)));
        assert!(matches!(r, Refusal::InvalidIntent(_)), "{r:?}");
    }
    assert!(h.ledger.get(&ticket("t-1").key).is_none());
}

#[test]
fn oversized_fields_are_refused() {
    let mut h = Harness::new();
    let mut d = ticket("t-1");
    d.workflow_id = "w".repeat(NAME_BYTES_MAX + 1);
    assert!(matches!(
        refused(&mut h, tenant(), claim_body(d)),
        Refusal::InvalidField(FieldError::TooLong { .. })
    ));
    let d = ticket("t-1");
    let g = h.proceed(&d);
    let receipt = "r".repeat(RECEIPT_BYTES_MAX + 1);
    let body = CommandBody::Report {
        key: d.key.clone(),
        fencing_token: g.fencing_token,
        report: Report::Committed { receipt },
    };
    assert!(matches!(
        refused(&mut h, tenant(), body),
        Refusal::InvalidField(FieldError::TooLong { .. })
    ));
    let reason = "r".repeat(DETAIL_BYTES_MAX + 1);
    let body = CommandBody::Report {
        key: d.key.clone(),
        fencing_token: g.fencing_token,
        report: Report::Unknown { reason },
    };
    assert!(matches!(
        refused(&mut h, tenant(), body),
        Refusal::InvalidField(FieldError::TooLong { .. })
    ));
    let body = CommandBody::Declare {
        declaration: ticket("t-2"),
        slots: SLOTS_MAX + 1,
    };
    assert!(matches!(
        refused(&mut h, tenant(), body),
        Refusal::InvalidField(FieldError::OutOfRange { .. })
    ));
    let body = CommandBody::Declare {
        declaration: ticket("t-2"),
        slots: 0,
    };
    assert!(matches!(
        refused(&mut h, tenant(), body),
        Refusal::InvalidField(FieldError::OutOfRange { .. })
    ));
}

#[test]
fn unknown_tool_tenant_and_effect_are_refused() {
    let mut h = Harness::new();
    let r = refused(
        &mut h,
        tenant(),
        claim_body(decl(("pay", "wire_transfer"), "w-1", "{}")),
    );
    assert_eq!(
        r,
        Refusal::UnknownTool(ToolName {
            provider: "pay".into(),
            name: "wire_transfer".into()
        })
    );
    let r = refused(
        &mut h,
        Caller::Tenant("initech".into()),
        claim_body(ticket("t-1")),
    );
    assert_eq!(r, Refusal::UnknownTenant("initech".into()));
    let body = CommandBody::Report {
        key: ticket("nope").key,
        fencing_token: 1,
        report: Report::Unknown {
            reason: String::new(),
        },
    };
    assert_eq!(
        refused(&mut h, tenant(), body),
        Refusal::UnknownEffect(ticket("nope").key)
    );
    let body = CommandBody::BeginReconcile {
        key: ticket("nope").key,
        holder: "r".into(),
        lease_ms: None,
    };
    assert_eq!(
        refused(&mut h, tenant(), body),
        Refusal::UnknownEffect(ticket("nope").key)
    );
}

#[test]
fn a_tenant_cannot_touch_another_tenants_effect() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    let intruder = Caller::Tenant(OTHER_TENANT.into());
    let body = CommandBody::Report {
        key: d.key.clone(),
        fencing_token: g.fencing_token,
        report: Report::Unknown { reason: "x".into() },
    };
    let r = refused(&mut h, intruder.clone(), body);
    assert_eq!(
        r,
        Refusal::WrongTenant {
            caller: OTHER_TENANT.into(),
            owner: TENANT.into()
        }
    );
    assert_eq!(refused(&mut h, intruder, claim_body(d.clone())), r);
    assert_eq!(h.state(&d), EffectState::InProgress);
}

#[test]
fn tenants_cannot_send_operator_commands() {
    let mut h = Harness::new();
    for body in [
        CommandBody::PutTenant {
            tenant: "evil".into(),
            settings: TenantSettings::default(),
        },
        CommandBody::ExpireLeases { limit: 10 },
        CommandBody::Decide {
            key: ticket("t").key,
            decision: Decision::NotCommitted,
            operator: "me".into(),
            note: String::new(),
        },
    ] {
        assert!(matches!(
            refused(&mut h, tenant(), body),
            Refusal::NotPermitted { .. }
        ));
    }
    assert!(h.ledger.tenant("evil").is_none());
}

#[test]
fn reports_on_finished_attempts_are_refused() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    h.report(
        &d,
        g.fencing_token,
        Report::FailedBeforeEffect {
            proof: "HTTP 422".into(),
        },
    );
    let body = CommandBody::Report {
        key: d.key.clone(),
        fencing_token: g.fencing_token,
        report: Report::Unknown {
            reason: "late".into(),
        },
    };
    assert_eq!(
        refused(&mut h, tenant(), body),
        Refusal::AlreadyFinal {
            state: EffectState::FailedBeforeEffect
        }
    );
    let body = CommandBody::Report {
        key: d.key.clone(),
        fencing_token: 999,
        report: Report::Unknown {
            reason: "forged".into(),
        },
    };
    assert_eq!(
        refused(&mut h, tenant(), body),
        Refusal::StaleToken {
            offered: 999,
            latest: Some(g.fencing_token)
        }
    );
}

#[test]
fn invalid_policies_and_command_ids_are_refused() {
    let mut h = Harness::new();
    let body = CommandBody::PutToolPolicy {
        tenant: TENANT.into(),
        tool: ToolName {
            provider: "pay".into(),
            name: "refund".into(),
        },
        policy: ToolPolicy {
            lease_ms: 0,
            ..ToolPolicy::for_class(ReplayClass::KeyedIdempotent)
        },
    };
    assert!(matches!(
        refused(&mut h, Caller::Operator, body),
        Refusal::InvalidPolicy(_)
    ));
    assert_eq!(
        h.ledger.tenant(TENANT).unwrap().tools[&ToolName {
            provider: "pay".into(),
            name: "refund".into()
        }]
            .lease_ms,
        LEASE_MS
    );
    let bad_id = Command {
        command_id: String::new(),
        caller: tenant(),
        body: claim_body(ticket("t-1")),
    };
    assert!(matches!(
        h.apply(&bad_id),
        Outcome::Refused(Refusal::InvalidField(FieldError::Empty { .. }))
    ));
    assert!(h.ledger.get(&ticket("t-1").key).is_none());
}

#[test]
fn garbage_snapshot_bytes_are_an_error_not_a_panic() {
    for bytes in [
        &b""[..],
        &b"\xff\xff\xff\xff\xff\xff\xff\xff\xff"[..],
        &b"\x00garbage"[..],
    ] {
        assert!(Ledger::from_snapshot(bytes).is_err());
    }
    let h = Harness::new();
    let mut bytes = h.ledger.to_snapshot();
    bytes.push(0);
    assert!(Ledger::from_snapshot(&bytes).is_err(), "trailing bytes");
    bytes.pop();
    bytes.truncate(bytes.len() / 2);
    assert!(Ledger::from_snapshot(&bytes).is_err(), "truncated");
}

#[test]
fn snapshot_round_trip_is_byte_identical() {
    let mut h = Harness::new();
    let d = ticket("t-1");
    let g = h.proceed(&d);
    h.unknown(&d, g.fencing_token);
    h.reconcile_grant(&d);
    h.tenant(CommandBody::Declare {
        declaration: message("m-1"),
        slots: 4,
    });
    let bytes = h.ledger.to_snapshot();
    let restored = Ledger::from_snapshot(&bytes).unwrap();
    assert_eq!(restored, h.ledger, "indexes are rebuilt exactly");
    assert_eq!(restored.to_snapshot(), bytes);
}
