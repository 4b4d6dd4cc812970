//! Core -> protobuf -> bytes -> protobuf -> core gives back the same value, for every
//! type and every enum variant and oneof arm.

use std::collections::BTreeMap;
use std::fmt::Debug;

use ledger_core::{
    Caller, ClaimOutcome, Command, CommandBody, EffectRecord, EffectState, ListPage, ListQuery,
    Outcome, ReconcileOutcome, Report, TenantConfig, TenantSettings, ToolName, ToolPolicy,
};
use prost::Message;

use super::via_wire;
use crate::convert::fixtures::*;
use crate::convert::values::{effect_state_from_i32, effect_state_to_i32};
use crate::convert::{list_limit, IntoCommand, OutcomeError, WireError, LIST_LIMIT_MAX};
use crate::pb;

fn round_trip<C, P>(value: &C)
where
    C: Clone + PartialEq + Debug + Into<P> + TryFrom<P>,
    <C as TryFrom<P>>::Error: Debug,
    P: Message + Default,
{
    let wire: P = value.clone().into();
    let back = C::try_from(via_wire(&wire)).expect("well-formed message converts");
    assert_eq!(&back, value);
}

#[test]
fn values_round_trip() {
    round_trip::<_, pb::EffectKey>(&key());
    round_trip::<_, pb::ToolRef>(&tool());
    round_trip::<_, pb::Authority>(&declaration().authority);
    round_trip::<_, pb::Declaration>(&declaration());
    round_trip::<_, pb::Grant>(&grant());
    round_trip::<_, pb::IntentConflict>(&conflict());
    round_trip::<_, pb::Unsettled>(&unsettled(None));
    for amendment in amendments() {
        round_trip::<_, pb::Amendment>(&amendment);
    }
    for observation in observations() {
        round_trip::<_, pb::Observation>(&observation);
        round_trip::<_, pb::Unsettled>(&unsettled(Some(observation)));
    }
    for result in observation_results() {
        round_trip::<_, pb::ObservationResult>(&result);
    }
}

#[test]
fn every_enum_value_round_trips() {
    for state in EffectState::ALL {
        assert_eq!(
            effect_state_from_i32(effect_state_to_i32(state), "s"),
            Ok(state)
        );
    }
    for reason in REASONS {
        let escalation = ledger_core::Escalation { at_ms: 1, reason };
        round_trip::<_, pb::Escalation>(&escalation);
    }
    for class in CLASSES {
        round_trip::<_, pb::ToolPolicy>(&ToolPolicy::for_class(class));
    }
}

#[test]
fn policies_and_tenants_round_trip() {
    round_trip::<_, pb::ToolPolicy>(&tool_policy());
    // An undeclared processing bound stays undeclared, never a bound of 0.
    let undeclared = ToolPolicy {
        processing_ms_max: None,
        ..tool_policy()
    };
    round_trip::<_, pb::ToolPolicy>(&undeclared);
    let zero = ToolPolicy {
        processing_ms_max: Some(0),
        ..tool_policy()
    };
    round_trip::<_, pb::ToolPolicy>(&zero);
    round_trip::<_, pb::TenantSettings>(&TenantSettings::default());
    let tools: BTreeMap<ToolName, ToolPolicy> = CLASSES
        .iter()
        .enumerate()
        .map(|(i, class)| {
            let name = ToolName {
                provider: "p".into(),
                name: format!("tool-{i}"),
            };
            (name, ToolPolicy::for_class(*class))
        })
        .collect();
    let config = TenantConfig {
        settings: TenantSettings {
            command_retention_ms: 42,
            tombstone_retention_ms: 43,
            live_records_max: 44,
            stored_bytes_max: 45,
        },
        tools,
    };
    round_trip::<_, pb::GetTenantResponse>(&config);
    round_trip::<_, pb::GetTenantResponse>(&TenantConfig::default());
}

#[test]
fn full_and_bare_records_round_trip() {
    round_trip::<_, pb::EffectRecord>(&full_record());
    round_trip::<_, pb::EffectRecord>(&bare_record());
    round_trip::<_, pb::GetResponse>(&full_record());
    for attempt in attempts() {
        round_trip::<_, pb::Attempt>(&attempt);
    }
    let page = vec![bare_record(), full_record()];
    let wire: pb::ListResponse = page.clone().into_iter().collect();
    assert_eq!(
        Vec::<EffectRecord>::try_from(via_wire(&wire)),
        Ok(page.clone())
    );
    for continue_after in [None, Some(full_record().key)] {
        let page = ListPage {
            records: page.clone(),
            continue_after,
        };
        round_trip::<_, pb::ListResponse>(&page);
    }
}

#[test]
fn claim_and_reconcile_outcomes_round_trip() {
    for outcome in claim_outcomes() {
        round_trip::<ClaimOutcome, pb::ClaimResponse>(&outcome);
    }
    for outcome in reconcile_outcomes() {
        round_trip::<ReconcileOutcome, pb::BeginReconcileResponse>(&outcome);
    }
}

/// The outcome as the node sends it and the client reads it back.
fn through<P>(outcome: &Outcome) -> Outcome
where
    P: TryFrom<Outcome, Error = OutcomeError> + Message + Default,
    Outcome: TryFrom<P, Error = WireError>,
{
    let response = P::try_from(outcome.clone()).expect("outcome matches its response");
    Outcome::try_from(via_wire(&response)).expect("response converts back")
}

fn through_response(outcome: &Outcome) -> Outcome {
    match outcome {
        Outcome::Configured => through::<pb::Empty>(outcome),
        Outcome::Declared { .. } => through::<pb::DeclareResponse>(outcome),
        Outcome::Claim(_) => through::<pb::ClaimResponse>(outcome),
        Outcome::LeaseExtended { .. } => through::<pb::HeartbeatResponse>(outcome),
        Outcome::Reported { .. } => through::<pb::ReportResponse>(outcome),
        Outcome::Reconcile(_) => through::<pb::BeginReconcileResponse>(outcome),
        Outcome::Observed { .. } => through::<pb::ObserveResponse>(outcome),
        Outcome::Decided { .. } => through::<pb::DecideResponse>(outcome),
        Outcome::Amended { .. } => through::<pb::AmendResponse>(outcome),
        Outcome::Swept { .. } | Outcome::Refused(_) => panic!("no response for {outcome:?}"),
    }
}

#[test]
fn every_outcome_round_trips_through_its_response() {
    for outcome in outcomes() {
        assert_eq!(through_response(&outcome), outcome);
    }
}

#[test]
fn wrong_outcome_for_a_response_is_an_error_not_a_panic() {
    let swept = Outcome::Swept {
        expired: 1,
        collected: 2,
        more: false,
    };
    assert_eq!(
        pb::ClaimResponse::try_from(swept),
        Err(OutcomeError::Mismatch {
            rpc: "claim",
            got: "swept"
        })
    );
    assert_eq!(
        pb::DeclareResponse::try_from(Outcome::Configured),
        Err(OutcomeError::Mismatch {
            rpc: "declare",
            got: "configured"
        })
    );
    let refused = Outcome::Refused(ledger_core::Refusal::NotEscalated);
    assert_eq!(
        pb::DecideResponse::try_from(refused),
        Err(OutcomeError::Refused(ledger_core::Refusal::NotEscalated))
    );
}

/// Every command body a client can send, with every report, observation and decision.
fn bodies() -> Vec<CommandBody> {
    let mut bodies = vec![
        CommandBody::PutTenant {
            tenant: "acme".into(),
            settings: TenantSettings::default(),
        },
        CommandBody::PutToolPolicy {
            tenant: "acme".into(),
            tool: tool().tool_name(),
            policy: tool_policy(),
        },
        CommandBody::Declare {
            declaration: declaration(),
            slots: 3,
        },
        CommandBody::Claim {
            declaration: declaration(),
            holder: "ts-1".into(),
            lease_ms: Some(10_000),
            confirmation: Some("yes, refund".into()),
        },
        CommandBody::Claim {
            declaration: declaration(),
            holder: "ts-1".into(),
            lease_ms: None,
            confirmation: None,
        },
        CommandBody::Heartbeat {
            key: key(),
            fencing_token: 9,
            lease_ms: Some(1),
        },
        CommandBody::BeginReconcile {
            key: key(),
            holder: "rec-1".into(),
            lease_ms: None,
        },
        CommandBody::Amend {
            declaration: declaration(),
        },
    ];
    let reports = [
        Report::Committed {
            receipt: "re_1".into(),
        },
        Report::FailedBeforeEffect {
            proof: "400".into(),
        },
        Report::Unknown {
            reason: "timeout".into(),
        },
    ];
    bodies.extend(reports.map(|report| CommandBody::Report {
        key: key(),
        fencing_token: 9,
        report,
    }));
    bodies.extend(
        observation_results()
            .into_iter()
            .map(|result| CommandBody::Observe {
                key: key(),
                fencing_token: 11,
                result,
                detail: "GET /refunds".into(),
            }),
    );
    bodies.extend(decisions().into_iter().map(|decision| CommandBody::Decide {
        key: key(),
        decision,
        operator: "ops:bo".into(),
        note: "checked".into(),
    }));
    bodies.extend(
        decisions()
            .into_iter()
            .map(|decision| CommandBody::DecideEscalation {
                key: key(),
                escalation_token: 42,
                decision,
                operator: "ops:bo".into(),
                note: "checked the escalation after attempt 42".into(),
            }),
    );
    bodies
}

fn read<R: IntoCommand + Message + Default>(request: R, caller: Caller) -> Command {
    via_wire(&request)
        .into_command(caller)
        .expect("well-formed request converts")
}

/// The command as the client sends it and the node reads it back.
fn through_request(id: &str, caller: Caller, body: CommandBody) -> Command {
    match body {
        CommandBody::PutTenant { tenant, settings } => {
            read(pb::PutTenantRequest::new(id, tenant, settings), caller)
        }
        CommandBody::PutToolPolicy {
            tenant,
            tool,
            policy,
        } => read(
            pb::PutToolPolicyRequest::new(id, tenant, tool, policy),
            caller,
        ),
        CommandBody::Declare { declaration, slots } => {
            read(pb::DeclareRequest::new(id, declaration, slots), caller)
        }
        CommandBody::Claim {
            declaration,
            holder,
            lease_ms,
            confirmation,
        } => read(
            pb::ClaimRequest::new(id, declaration, holder, lease_ms, confirmation),
            caller,
        ),
        CommandBody::Heartbeat {
            key,
            fencing_token,
            lease_ms,
        } => read(
            pb::HeartbeatRequest::new(id, key, fencing_token, lease_ms),
            caller,
        ),
        CommandBody::Report {
            key,
            fencing_token,
            report,
        } => read(
            pb::ReportRequest::new(id, key, fencing_token, report),
            caller,
        ),
        CommandBody::BeginReconcile {
            key,
            holder,
            lease_ms,
        } => read(
            pb::BeginReconcileRequest::new(id, key, holder, lease_ms),
            caller,
        ),
        CommandBody::Observe {
            key,
            fencing_token,
            result,
            detail,
        } => read(
            pb::ObserveRequest::new(id, key, fencing_token, result, detail),
            caller,
        ),
        CommandBody::Decide {
            key,
            decision,
            operator,
            note,
        } => read(
            pb::DecideRequest::new(id, key, None, decision, operator, note),
            caller,
        ),
        CommandBody::DecideEscalation {
            key,
            escalation_token,
            decision,
            operator,
            note,
        } => read(
            pb::DecideRequest::new(id, key, Some(escalation_token), decision, operator, note),
            caller,
        ),
        CommandBody::Amend { declaration } => read(pb::AmendRequest::new(id, declaration), caller),
        CommandBody::ExpireLeases { .. } | CommandBody::CollectGarbage { .. } => {
            panic!("sweeps are not sent over the ledger API")
        }
    }
}

#[test]
fn every_request_reads_back_as_its_command() {
    for (i, body) in bodies().into_iter().enumerate() {
        for caller in [Caller::Tenant("acme".into()), Caller::Operator] {
            let id = format!("cmd-{i}");
            let expected = Command {
                command_id: id.clone(),
                caller: caller.clone(),
                body: body.clone(),
            };
            assert_eq!(through_request(&id, caller, body.clone()), expected);
        }
    }
}

#[test]
fn zero_slots_read_as_one() {
    let request = pb::DeclareRequest::new("c", declaration(), 0);
    let command = request.into_command(Caller::Operator).unwrap();
    assert!(matches!(
        command.body,
        CommandBody::Declare { slots: 1, .. }
    ));
}

#[test]
fn get_and_list_requests_round_trip() {
    let get: pb::GetRequest = key().into();
    assert_eq!(ledger_core::EffectKey::try_from(via_wire(&get)), Ok(key()));
    let query = ListQuery {
        tenant: "acme".into(),
        escalated: false,
        state: Some(EffectState::UnknownAfterDispatch),
        workflow_id: Some("wf-7".into()),
        updated_at_or_before_ms: Some(77),
        after: Some(key()),
        limit: 250,
    };
    let wire: pb::ListRequest = query.clone().into();
    assert_eq!(ListQuery::try_from(via_wire(&wire)), Ok(query));
    let open = ListQuery {
        tenant: "acme".into(),
        escalated: false,
        state: None,
        workflow_id: None,
        updated_at_or_before_ms: None,
        after: None,
        limit: 1,
    };
    let wire: pb::ListRequest = open.clone().into();
    assert_eq!(ListQuery::try_from(via_wire(&wire)), Ok(open));
}

#[test]
fn list_limit_defaults_and_caps() {
    assert_eq!(list_limit(0), 100);
    assert_eq!(list_limit(1), 1);
    assert_eq!(list_limit(1000), 1000);
    assert_eq!(list_limit(1001), LIST_LIMIT_MAX as usize);
    assert_eq!(list_limit(u32::MAX), 1000);
    let huge = pb::ListRequest::from(ListQuery {
        tenant: "t".into(),
        escalated: false,
        state: None,
        workflow_id: None,
        updated_at_or_before_ms: None,
        after: None,
        limit: usize::MAX,
    });
    assert_eq!(ListQuery::try_from(huge).unwrap().limit, 1000);
}
