//! Messages that lack what the contract requires give a [`WireError`] naming the field,
//! never a panic and never a default value standing in for the missing one.

use ledger_core::{
    Caller, ClaimOutcome, EffectKey, EffectRecord, ListQuery, Outcome, ReconcileOutcome,
    TenantConfig,
};

use crate::convert::fixtures::*;
use crate::convert::{IntoCommand, WireError};
use crate::pb;

fn missing(field: &str) -> WireError {
    WireError::Missing(field.into())
}

fn bad_enum(field: &str, value: i32) -> WireError {
    WireError::BadEnum {
        field: field.into(),
        value,
    }
}

fn bad_length(field: &str, len: usize) -> WireError {
    WireError::BadLength {
        field: field.into(),
        len,
        expected: 32,
    }
}

fn refuse<R: IntoCommand>(request: R) -> WireError {
    request
        .into_command(Caller::Operator)
        .expect_err("malformed request is refused")
}

#[test]
fn requests_without_required_messages_are_refused() {
    assert_eq!(
        refuse(pb::DeclareRequest::default()),
        missing("declaration")
    );
    assert_eq!(refuse(pb::ClaimRequest::default()), missing("declaration"));
    assert_eq!(refuse(pb::AmendRequest::default()), missing("declaration"));
    assert_eq!(refuse(pb::HeartbeatRequest::default()), missing("key"));
    assert_eq!(refuse(pb::BeginReconcileRequest::default()), missing("key"));
    assert_eq!(refuse(pb::PutTenantRequest::default()), missing("settings"));
    assert_eq!(
        refuse(pb::PutToolPolicyRequest::default()),
        missing("policy")
    );
    let key = Some(key().into());
    let report = pb::ReportRequest {
        key: key.clone(),
        ..Default::default()
    };
    assert_eq!(refuse(report), missing("report"));
    let observe = pb::ObserveRequest {
        key: key.clone(),
        ..Default::default()
    };
    assert_eq!(refuse(observe), missing("result"));
    let decide = pb::DecideRequest {
        key,
        ..Default::default()
    };
    assert_eq!(refuse(decide), missing("decision"));
    assert_eq!(
        EffectKey::try_from(pb::GetRequest::default()),
        Err(missing("key"))
    );
}

#[test]
fn nested_gaps_name_their_path() {
    let keyless = pb::Declaration {
        key: None,
        ..declaration().into()
    };
    let claim = pb::ClaimRequest {
        declaration: Some(keyless),
        ..Default::default()
    };
    assert_eq!(refuse(claim), missing("declaration.key"));
    let toolless = pb::Declaration {
        tool: None,
        ..declaration().into()
    };
    let declare = pb::DeclareRequest {
        declaration: Some(toolless),
        ..Default::default()
    };
    assert_eq!(refuse(declare), missing("declaration.tool"));
    let observe = pb::ObserveRequest {
        key: Some(key().into()),
        result: Some(pb::ObservationResult { result: None }),
        ..Default::default()
    };
    assert_eq!(refuse(observe), missing("result.result"));
}

#[test]
fn undefined_enum_numbers_are_refused() {
    for class in [0, 6, -1, i32::MAX] {
        let policy = pb::ToolPolicy {
            class,
            ..tool_policy().into()
        };
        let put = pb::PutToolPolicyRequest {
            policy: Some(policy),
            ..Default::default()
        };
        assert_eq!(refuse(put), bad_enum("policy.class", class));
    }
    let list = pb::ListRequest {
        state: Some(0),
        ..Default::default()
    };
    assert_eq!(ListQuery::try_from(list), Err(bad_enum("state", 0)));
    let report = pb::ReportResponse {
        state: 9,
        receipt: None,
    };
    assert_eq!(Outcome::try_from(report), Err(bad_enum("state", 9)));
    let observe = pb::ObserveResponse::default();
    assert_eq!(Outcome::try_from(observe), Err(bad_enum("state", 0)));
    let decide = pb::DecideResponse { state: -3 };
    assert_eq!(Outcome::try_from(decide), Err(bad_enum("state", -3)));
}

#[test]
fn malformed_claim_responses_are_refused() {
    use pb::claim_response::Outcome as W;
    let read = |outcome: Option<W>| ClaimOutcome::try_from(pb::ClaimResponse { outcome });
    assert_eq!(read(None), Err(missing("outcome")));
    let short = pb::IntentConflict {
        stored_hash: vec![0; 31],
        ..conflict().into()
    };
    assert_eq!(
        read(Some(W::Conflict(short))),
        Err(bad_length("conflict.stored_hash", 31))
    );
    let long = pb::IntentConflict {
        offered_hash: vec![0; 33],
        ..conflict().into()
    };
    assert_eq!(
        read(Some(W::Conflict(long))),
        Err(bad_length("conflict.offered_hash", 33))
    );
    let escalated = pb::Escalated { reason: 4 };
    assert_eq!(
        read(Some(W::Escalated(escalated))),
        Err(bad_enum("escalated.reason", 4))
    );
    let unsettled = pb::Unsettled {
        last_observation: Some(pb::Observation::default()),
        ..Default::default()
    };
    assert_eq!(
        read(Some(W::HorizonPassed(unsettled))),
        Err(missing("horizon_passed.last_observation.result"))
    );
}

/// A change to a grant on the wire.
type GrantEdit = fn(&mut pb::Grant);

/// A grant is acted on as it reads: without its provider key or grant time, or with a
/// lease that does not end after it was granted (which a client would read as a lease of
/// decades, or none), it is refused, in a claim's answer and in a reconciliation's.
#[test]
fn grants_without_what_their_holder_acts_on_are_refused() {
    use pb::begin_reconcile_response::Outcome as R;
    use pb::claim_response::Outcome as W;
    let edited = |edit: GrantEdit| {
        let mut grant = pb::Grant::from(grant());
        edit(&mut grant);
        grant
    };
    let invalid = |until: u64, at: u64| WireError::Invalid {
        field: "lease_until_ms".into(),
        reason: format!("{until} is not after granted_at_ms {at}"),
    };
    let cases: Vec<(GrantEdit, WireError)> = vec![
        (|g| g.provider_key.clear(), missing("provider_key")),
        (|g| g.granted_at_ms = 0, missing("granted_at_ms")),
        (|g| g.lease_until_ms = 0, invalid(0, 60_000)),
        (
            |g| g.lease_until_ms = g.granted_at_ms,
            invalid(60_000, 60_000),
        ),
        (|g| g.lease_until_ms = 59_999, invalid(59_999, 60_000)),
    ];
    for (edit, expected) in cases {
        let claim = pb::ClaimResponse {
            outcome: Some(W::Proceed(edited(edit))),
        };
        assert_eq!(
            ClaimOutcome::try_from(claim),
            Err(expected.clone().within("proceed"))
        );
        let reconcile = pb::BeginReconcileResponse {
            outcome: Some(R::Observe(edited(edit))),
        };
        assert_eq!(
            ReconcileOutcome::try_from(reconcile),
            Err(expected.within("observe"))
        );
    }
    let shortest = edited(|g| g.lease_until_ms = g.granted_at_ms + 1);
    assert!(ledger_core::Grant::try_from(shortest).is_ok());
}

#[test]
fn malformed_reconcile_responses_are_refused() {
    use pb::begin_reconcile_response::Outcome as W;
    let read =
        |outcome: Option<W>| ReconcileOutcome::try_from(pb::BeginReconcileResponse { outcome });
    assert_eq!(read(None), Err(missing("outcome")));
    assert_eq!(read(Some(W::NotNeeded(0))), Err(bad_enum("not_needed", 0)));
    assert_eq!(
        read(Some(W::Escalated(pb::Escalated::default()))),
        Err(bad_enum("escalated.reason", 0))
    );
}

/// The full record on the wire, changed by `edit`, read back.
fn edited_record(edit: impl FnOnce(&mut pb::EffectRecord)) -> Result<EffectRecord, WireError> {
    let mut record = pb::EffectRecord::from(full_record());
    edit(&mut record);
    EffectRecord::try_from(record)
}

/// A change to a record on the wire.
type Edit = fn(&mut pb::EffectRecord);

#[test]
fn malformed_records_are_refused() {
    let cases: Vec<(Edit, WireError)> = vec![
        (|r| r.key = None, missing("key")),
        (|r| r.tool = None, missing("tool")),
        (|r| r.authority = None, missing("authority")),
        (|r| r.policy = None, missing("policy")),
        (|r| r.intent_hash.clear(), bad_length("intent_hash", 0)),
        (|r| r.state = 0, bad_enum("state", 0)),
        (
            |r| r.attempts[1].kind = 42,
            bad_enum("attempts[1].kind", 42),
        ),
        (
            |r| r.attempts[0].outcome = Some(pb::AttemptOutcome::default()),
            missing("attempts[0].outcome.outcome"),
        ),
        (
            |r| r.observations[2].result = None,
            missing("observations[2].result"),
        ),
        (
            |r| r.escalation.as_mut().unwrap().reason = -1,
            bad_enum("escalation.reason", -1),
        ),
        (
            |r| r.decision.as_mut().unwrap().settled = None,
            missing("decision.settled"),
        ),
        (
            |r| r.decision.as_mut().unwrap().decision = None,
            missing("decision.decision"),
        ),
        (
            |r| r.policy.as_mut().unwrap().class = 0,
            bad_enum("policy.class", 0),
        ),
        (
            |r| r.amendments[0].previous_hash.truncate(31),
            bad_length("amendments[0].previous_hash", 31),
        ),
        (
            |r| r.amendments[1].intent_hash.push(0),
            bad_length("amendments[1].intent_hash", 33),
        ),
    ];
    for (edit, expected) in cases {
        assert_eq!(edited_record(edit), Err(expected));
    }
}

#[test]
fn malformed_pages_and_tenants_name_the_element() {
    let mut page: pb::ListResponse = [bare_record(), full_record()].into_iter().collect();
    page.records[1].attempts[6].kind = 0;
    assert_eq!(
        Vec::<EffectRecord>::try_from(page),
        Err(bad_enum("records[1].attempts[6].kind", 0))
    );
    assert_eq!(
        EffectRecord::try_from(pb::GetResponse::default()),
        Err(missing("record"))
    );
    let tenant = pb::GetTenantResponse {
        settings: Some(pb::TenantSettings::default()),
        tools: vec![pb::ToolPolicyEntry::default()],
    };
    assert_eq!(
        TenantConfig::try_from(tenant),
        Err(missing("tools[0].policy"))
    );
    assert_eq!(
        TenantConfig::try_from(pb::GetTenantResponse::default()),
        Err(missing("settings"))
    );
}

#[test]
fn wire_errors_name_their_field() {
    let error = missing("key").within("declaration");
    assert_eq!(error.field(), "declaration.key");
    assert_eq!(error.to_string(), "declaration.key is missing");
    let error = bad_length("stored_hash", 3).within("conflict");
    assert_eq!(
        error.to_string(),
        "conflict.stored_hash is 3 bytes, expected 32"
    );
}

#[test]
fn malformed_amend_responses_are_refused() {
    let good = pb::AmendResponse::try_from(Outcome::Amended {
        previous_hash: hash(1),
        intent_hash: hash(2),
        changed: true,
    })
    .unwrap();
    let short = pb::AmendResponse {
        previous_hash: vec![1; 3],
        ..good.clone()
    };
    assert_eq!(
        Outcome::try_from(short),
        Err(bad_length("previous_hash", 3))
    );
    let empty = pb::AmendResponse {
        intent_hash: vec![],
        ..good
    };
    assert_eq!(Outcome::try_from(empty), Err(bad_length("intent_hash", 0)));
    assert_eq!(
        Outcome::try_from(pb::AmendResponse::default()),
        Err(bad_length("previous_hash", 0))
    );
}

/// Out-of-range provider timing crosses the wire as sent and is refused by `apply` as a
/// typed refusal, never a panic and never clamped into something the operator did not say.
#[test]
fn out_of_range_provider_timing_is_a_typed_refusal() {
    use ledger_core::{CommandBody, Ledger, Refusal, TenantSettings};
    let mut ledger = Ledger::new();
    let put_tenant = pb::PutTenantRequest::new("t", "acme", TenantSettings::default())
        .into_command(Caller::Operator)
        .unwrap();
    ledger.apply(&put_tenant, 1);
    let edits: [fn(&mut pb::ToolPolicy); 4] = [
        |p| p.processing_ms_max = Some(u64::MAX),
        |p| p.visibility_lag_ms = u64::MAX,
        |p| p.retry_window_ms = p.retention_ms + 1,
        |p| p.target_fields = vec!["no-slash".into()],
    ];
    for (i, edit) in edits.into_iter().enumerate() {
        let mut request =
            pb::PutToolPolicyRequest::new("p", "acme", tool().tool_name(), tool_policy());
        edit(request.policy.as_mut().unwrap());
        request.command_id = format!("p-{i}");
        let command = request.into_command(Caller::Operator).expect("well formed");
        assert!(matches!(command.body, CommandBody::PutToolPolicy { .. }));
        let outcome = ledger.apply(&command, 2);
        assert!(
            matches!(outcome, Outcome::Refused(Refusal::InvalidPolicy(_))),
            "edit {i}: {outcome:?}"
        );
    }
    assert!(ledger.tenant("acme").unwrap().tools.is_empty());
}
