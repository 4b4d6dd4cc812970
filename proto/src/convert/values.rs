//! The small values every message carries: effect keys, tools, authorities,
//! declarations, the closed enums, observations, reports and decisions.
//!
//! Each enum's `UNSPECIFIED` zero exists only because proto3 needs a default; it maps to
//! no core value and reads as [`WireError::BadEnum`].

use ledger_core::{
    AttemptKind, Authority, Decision, Declaration, EffectKey, EffectState, EscalationReason,
    Observation, ObservationResult, ReplayClass, Report, ToolRef,
};

use super::{enum_from_i32, required, WireError};
use crate::pb;

impl From<EffectKey> for pb::EffectKey {
    fn from(k: EffectKey) -> Self {
        pb::EffectKey {
            tenant: k.tenant,
            namespace: k.namespace,
            key: k.key,
        }
    }
}

impl From<pb::EffectKey> for EffectKey {
    fn from(k: pb::EffectKey) -> Self {
        EffectKey {
            tenant: k.tenant,
            namespace: k.namespace,
            key: k.key,
        }
    }
}

impl From<ToolRef> for pb::ToolRef {
    fn from(t: ToolRef) -> Self {
        pb::ToolRef {
            provider: t.provider,
            name: t.name,
            contract_version: t.contract_version,
        }
    }
}

impl From<pb::ToolRef> for ToolRef {
    fn from(t: pb::ToolRef) -> Self {
        ToolRef {
            provider: t.provider,
            name: t.name,
            contract_version: t.contract_version,
        }
    }
}

impl From<Authority> for pb::Authority {
    fn from(a: Authority) -> Self {
        pb::Authority {
            principal: a.principal,
            policy_generation: a.policy_generation,
        }
    }
}

impl From<pb::Authority> for Authority {
    fn from(a: pb::Authority) -> Self {
        Authority {
            principal: a.principal,
            policy_generation: a.policy_generation,
        }
    }
}

impl From<Declaration> for pb::Declaration {
    fn from(d: Declaration) -> Self {
        pb::Declaration {
            key: Some(d.key.into()),
            workflow_id: d.workflow_id,
            tool: Some(d.tool.into()),
            authority: Some(d.authority.into()),
            target: d.target,
            intent_json: d.intent_json,
        }
    }
}

/// `key`, `tool` and `authority` are required.
impl TryFrom<pb::Declaration> for Declaration {
    type Error = WireError;

    fn try_from(d: pb::Declaration) -> Result<Self, WireError> {
        Ok(Declaration {
            key: required(d.key, "key")?,
            workflow_id: d.workflow_id,
            tool: required(d.tool, "tool")?,
            authority: required(d.authority, "authority")?,
            target: d.target,
            intent_json: d.intent_json,
        })
    }
}

/// The error of an enum's `UNSPECIFIED` zero; the caller adds the field name.
fn unspecified() -> WireError {
    WireError::BadEnum {
        field: String::new(),
        value: 0,
    }
}

impl From<EffectState> for pb::EffectState {
    fn from(s: EffectState) -> Self {
        match s {
            EffectState::NotStarted => pb::EffectState::NotStarted,
            EffectState::InProgress => pb::EffectState::InProgress,
            EffectState::Committed => pb::EffectState::Committed,
            EffectState::FailedBeforeEffect => pb::EffectState::FailedBeforeEffect,
            EffectState::UnknownAfterDispatch => pb::EffectState::UnknownAfterDispatch,
        }
    }
}

impl TryFrom<pb::EffectState> for EffectState {
    type Error = WireError;

    fn try_from(s: pb::EffectState) -> Result<Self, WireError> {
        match s {
            pb::EffectState::Unspecified => Err(unspecified()),
            pb::EffectState::NotStarted => Ok(EffectState::NotStarted),
            pb::EffectState::InProgress => Ok(EffectState::InProgress),
            pb::EffectState::Committed => Ok(EffectState::Committed),
            pb::EffectState::FailedBeforeEffect => Ok(EffectState::FailedBeforeEffect),
            pb::EffectState::UnknownAfterDispatch => Ok(EffectState::UnknownAfterDispatch),
        }
    }
}

/// An effect state as its wire number.
pub fn effect_state_to_i32(state: EffectState) -> i32 {
    pb::EffectState::from(state).into()
}

/// Reads an effect state field.
pub fn effect_state_from_i32(value: i32, field: &str) -> Result<EffectState, WireError> {
    enum_from_i32::<pb::EffectState, _>(value, field)
}

impl From<EscalationReason> for pb::EscalationReason {
    fn from(r: EscalationReason) -> Self {
        match r {
            EscalationReason::ObservationBudgetSpent => {
                pb::EscalationReason::ObservationBudgetSpent
            }
            EscalationReason::DispatchBudgetSpent => pb::EscalationReason::DispatchBudgetSpent,
            EscalationReason::HorizonPassedOnIrreversible => {
                pb::EscalationReason::HorizonPassedOnIrreversible
            }
        }
    }
}

impl TryFrom<pb::EscalationReason> for EscalationReason {
    type Error = WireError;

    fn try_from(r: pb::EscalationReason) -> Result<Self, WireError> {
        match r {
            pb::EscalationReason::Unspecified => Err(unspecified()),
            pb::EscalationReason::ObservationBudgetSpent => {
                Ok(EscalationReason::ObservationBudgetSpent)
            }
            pb::EscalationReason::DispatchBudgetSpent => Ok(EscalationReason::DispatchBudgetSpent),
            pb::EscalationReason::HorizonPassedOnIrreversible => {
                Ok(EscalationReason::HorizonPassedOnIrreversible)
            }
        }
    }
}

/// An escalation reason as its wire number.
pub fn escalation_reason_to_i32(reason: EscalationReason) -> i32 {
    pb::EscalationReason::from(reason).into()
}

/// Reads an escalation reason field.
pub fn escalation_reason_from_i32(value: i32, field: &str) -> Result<EscalationReason, WireError> {
    enum_from_i32::<pb::EscalationReason, _>(value, field)
}

impl From<ReplayClass> for pb::ReplayClass {
    fn from(c: ReplayClass) -> Self {
        match c {
            ReplayClass::ReadOnly => pb::ReplayClass::ReadOnly,
            ReplayClass::KeyedIdempotent => pb::ReplayClass::KeyedIdempotent,
            ReplayClass::UnkeyedCreate => pb::ReplayClass::UnkeyedCreate,
            ReplayClass::Irreversible => pb::ReplayClass::Irreversible,
            ReplayClass::LongRunningJob => pb::ReplayClass::LongRunningJob,
        }
    }
}

impl TryFrom<pb::ReplayClass> for ReplayClass {
    type Error = WireError;

    fn try_from(c: pb::ReplayClass) -> Result<Self, WireError> {
        match c {
            pb::ReplayClass::Unspecified => Err(unspecified()),
            pb::ReplayClass::ReadOnly => Ok(ReplayClass::ReadOnly),
            pb::ReplayClass::KeyedIdempotent => Ok(ReplayClass::KeyedIdempotent),
            pb::ReplayClass::UnkeyedCreate => Ok(ReplayClass::UnkeyedCreate),
            pb::ReplayClass::Irreversible => Ok(ReplayClass::Irreversible),
            pb::ReplayClass::LongRunningJob => Ok(ReplayClass::LongRunningJob),
        }
    }
}

impl From<AttemptKind> for pb::AttemptKind {
    fn from(k: AttemptKind) -> Self {
        match k {
            AttemptKind::Dispatch => pb::AttemptKind::Dispatch,
            AttemptKind::Reconcile => pb::AttemptKind::Reconcile,
        }
    }
}

impl TryFrom<pb::AttemptKind> for AttemptKind {
    type Error = WireError;

    fn try_from(k: pb::AttemptKind) -> Result<Self, WireError> {
        match k {
            pb::AttemptKind::Unspecified => Err(unspecified()),
            pb::AttemptKind::Dispatch => Ok(AttemptKind::Dispatch),
            pb::AttemptKind::Reconcile => Ok(AttemptKind::Reconcile),
        }
    }
}

impl From<ObservationResult> for pb::ObservationResult {
    fn from(r: ObservationResult) -> Self {
        use pb::observation_result::Result as W;
        let result = match r {
            ObservationResult::Committed { receipt } => W::CommittedReceipt(receipt),
            ObservationResult::NotCommitted => W::NotCommitted(pb::Empty {}),
            ObservationResult::StillUnknown => W::StillUnknown(pb::Empty {}),
        };
        pb::ObservationResult {
            result: Some(result),
        }
    }
}

/// The `result` oneof is required.
impl TryFrom<pb::ObservationResult> for ObservationResult {
    type Error = WireError;

    fn try_from(r: pb::ObservationResult) -> Result<Self, WireError> {
        use pb::observation_result::Result as W;
        match r.result {
            None => Err(WireError::Missing("result".into())),
            Some(W::CommittedReceipt(receipt)) => Ok(ObservationResult::Committed { receipt }),
            Some(W::NotCommitted(_)) => Ok(ObservationResult::NotCommitted),
            Some(W::StillUnknown(_)) => Ok(ObservationResult::StillUnknown),
        }
    }
}

impl From<Observation> for pb::Observation {
    fn from(o: Observation) -> Self {
        pb::Observation {
            at_ms: o.at_ms,
            fencing_token: o.fencing_token,
            result: Some(o.result.into()),
            detail: o.detail,
        }
    }
}

/// `result` is required.
impl TryFrom<pb::Observation> for Observation {
    type Error = WireError;

    fn try_from(o: pb::Observation) -> Result<Self, WireError> {
        Ok(Observation {
            at_ms: o.at_ms,
            fencing_token: o.fencing_token,
            result: required(o.result, "result")?,
            detail: o.detail,
        })
    }
}

impl From<Report> for pb::report_request::Report {
    fn from(r: Report) -> Self {
        use pb::report_request::Report as W;
        match r {
            Report::Committed { receipt } => W::CommittedReceipt(receipt),
            Report::FailedBeforeEffect { proof } => W::FailedBeforeEffectProof(proof),
            Report::Unknown { reason } => W::UnknownReason(reason),
        }
    }
}

impl From<pb::report_request::Report> for Report {
    fn from(r: pb::report_request::Report) -> Self {
        use pb::report_request::Report as W;
        match r {
            W::CommittedReceipt(receipt) => Report::Committed { receipt },
            W::FailedBeforeEffectProof(proof) => Report::FailedBeforeEffect { proof },
            W::UnknownReason(reason) => Report::Unknown { reason },
        }
    }
}

impl From<Decision> for pb::decide_request::Decision {
    fn from(d: Decision) -> Self {
        use pb::decide_request::Decision as W;
        match d {
            Decision::Committed { receipt } => W::CommittedReceipt(receipt),
            Decision::NotCommitted => W::NotCommitted(pb::Empty {}),
        }
    }
}

impl From<pb::decide_request::Decision> for Decision {
    fn from(d: pb::decide_request::Decision) -> Self {
        use pb::decide_request::Decision as W;
        match d {
            W::CommittedReceipt(receipt) => Decision::Committed { receipt },
            W::NotCommitted(_) => Decision::NotCommitted,
        }
    }
}

impl From<Decision> for pb::operator_decision::Decision {
    fn from(d: Decision) -> Self {
        use pb::operator_decision::Decision as W;
        match d {
            Decision::Committed { receipt } => W::CommittedReceipt(receipt),
            Decision::NotCommitted => W::NotCommitted(pb::Empty {}),
        }
    }
}

impl From<pb::operator_decision::Decision> for Decision {
    fn from(d: pb::operator_decision::Decision) -> Self {
        use pb::operator_decision::Decision as W;
        match d {
            W::CommittedReceipt(receipt) => Decision::Committed { receipt },
            W::NotCommitted(_) => Decision::NotCommitted,
        }
    }
}
