//! Effect records and their parts (attempts, slots, escalations, operator decisions),
//! tool policies and tenant configurations: what `Get`, `List` and `GetTenant` return and
//! what the operator configures. (Tenant settings and tombstones are in `tombstone`.)
//!
//! A record crosses the wire whole, so every field maps both ways; the intent hash must
//! be 32 bytes and every message field the record always has (`key`, `tool`,
//! `authority`, `policy`) is required.

use std::collections::BTreeMap;

use ledger_core::{
    Amendment, Attempt, AttemptOutcome, EffectRecord, Escalation, ListPage, OperatorDecision, Slot,
    TenantConfig, ToolName, ToolPolicy,
};

use super::values::{
    effect_state_from_i32, effect_state_to_i32, escalation_reason_from_i32,
    escalation_reason_to_i32,
};
use super::{
    enum_from_i32, intent_hash_from_bytes, intent_hash_to_bytes, optional, repeated, required,
    WireError,
};
use crate::pb;

impl From<ToolPolicy> for pb::ToolPolicy {
    fn from(p: ToolPolicy) -> Self {
        pb::ToolPolicy {
            class: pb::ReplayClass::from(p.class).into(),
            provider_horizon_ms: p.provider_horizon_ms,
            retention_ms: p.retention_ms,
            lease_ms: p.lease_ms,
            lease_ms_max: p.lease_ms_max,
            dispatch_attempts_max: p.dispatch_attempts_max,
            observations_max: p.observations_max,
            confirmation_required: p.confirmation_required,
            volatile_fields: p.volatile_fields,
            target_fields: p.target_fields,
            processing_ms_max: p.processing_ms_max,
            visibility_lag_ms: p.visibility_lag_ms,
            retry_window_ms: p.retry_window_ms,
        }
    }
}

/// `class` must be a defined replay class. The numbers are taken as sent (an absent
/// `retry_window_ms` is 0); whether they make sense together is `ToolPolicy::validate`'s
/// judgement, made by `apply`.
impl TryFrom<pb::ToolPolicy> for ToolPolicy {
    type Error = WireError;

    fn try_from(p: pb::ToolPolicy) -> Result<Self, WireError> {
        Ok(ToolPolicy {
            class: enum_from_i32::<pb::ReplayClass, _>(p.class, "class")?,
            provider_horizon_ms: p.provider_horizon_ms,
            retention_ms: p.retention_ms,
            lease_ms: p.lease_ms,
            lease_ms_max: p.lease_ms_max,
            dispatch_attempts_max: p.dispatch_attempts_max,
            observations_max: p.observations_max,
            confirmation_required: p.confirmation_required,
            volatile_fields: p.volatile_fields,
            target_fields: p.target_fields,
            processing_ms_max: p.processing_ms_max,
            visibility_lag_ms: p.visibility_lag_ms,
            retry_window_ms: p.retry_window_ms,
        })
    }
}

impl From<(ToolName, ToolPolicy)> for pb::ToolPolicyEntry {
    fn from((tool, policy): (ToolName, ToolPolicy)) -> Self {
        pb::ToolPolicyEntry {
            provider: tool.provider,
            name: tool.name,
            policy: Some(policy.into()),
        }
    }
}

/// `policy` is required.
impl TryFrom<pb::ToolPolicyEntry> for (ToolName, ToolPolicy) {
    type Error = WireError;

    fn try_from(e: pb::ToolPolicyEntry) -> Result<Self, WireError> {
        let tool = ToolName {
            provider: e.provider,
            name: e.name,
        };
        Ok((tool, required(e.policy, "policy")?))
    }
}

impl From<TenantConfig> for pb::GetTenantResponse {
    fn from(c: TenantConfig) -> Self {
        pb::GetTenantResponse {
            settings: Some(c.settings.into()),
            tools: c.tools.into_iter().map(Into::into).collect(),
        }
    }
}

/// `settings` is required; tools listed twice keep the last policy.
impl TryFrom<pb::GetTenantResponse> for TenantConfig {
    type Error = WireError;

    fn try_from(r: pb::GetTenantResponse) -> Result<Self, WireError> {
        let tools: Vec<(ToolName, ToolPolicy)> = repeated(r.tools, "tools")?;
        Ok(TenantConfig {
            settings: required(r.settings, "settings")?,
            tools: tools.into_iter().collect::<BTreeMap<_, _>>(),
        })
    }
}

impl From<AttemptOutcome> for pb::AttemptOutcome {
    fn from(o: AttemptOutcome) -> Self {
        use pb::attempt_outcome::Outcome as W;
        let outcome = match o {
            AttemptOutcome::Committed => W::Committed(pb::Empty {}),
            AttemptOutcome::FailedBeforeEffect { proof } => W::FailedBeforeEffectProof(proof),
            AttemptOutcome::Unknown { reason } => W::UnknownReason(reason),
            AttemptOutcome::LeaseExpired => W::LeaseExpired(pb::Empty {}),
            AttemptOutcome::Superseded => W::Superseded(pb::Empty {}),
            AttemptOutcome::Observed => W::Observed(pb::Empty {}),
        };
        pb::AttemptOutcome {
            outcome: Some(outcome),
        }
    }
}

/// The `outcome` oneof is required (an open attempt has no `AttemptOutcome` message at
/// all, not an empty one).
impl TryFrom<pb::AttemptOutcome> for AttemptOutcome {
    type Error = WireError;

    fn try_from(o: pb::AttemptOutcome) -> Result<Self, WireError> {
        use pb::attempt_outcome::Outcome as W;
        Ok(match o.outcome {
            None => return Err(WireError::Missing("outcome".into())),
            Some(W::Committed(_)) => AttemptOutcome::Committed,
            Some(W::FailedBeforeEffectProof(proof)) => AttemptOutcome::FailedBeforeEffect { proof },
            Some(W::UnknownReason(reason)) => AttemptOutcome::Unknown { reason },
            Some(W::LeaseExpired(_)) => AttemptOutcome::LeaseExpired,
            Some(W::Superseded(_)) => AttemptOutcome::Superseded,
            Some(W::Observed(_)) => AttemptOutcome::Observed,
        })
    }
}

impl From<Attempt> for pb::Attempt {
    fn from(a: Attempt) -> Self {
        pb::Attempt {
            attempt_id: a.attempt_id,
            kind: pb::AttemptKind::from(a.kind).into(),
            fencing_token: a.fencing_token,
            holder: a.holder,
            granted_at_ms: a.granted_at_ms,
            lease_until_ms: a.lease_until_ms,
            outcome: a.outcome.map(Into::into),
        }
    }
}

/// `kind` must be defined; an absent `outcome` is an open attempt.
impl TryFrom<pb::Attempt> for Attempt {
    type Error = WireError;

    fn try_from(a: pb::Attempt) -> Result<Self, WireError> {
        Ok(Attempt {
            attempt_id: a.attempt_id,
            kind: enum_from_i32::<pb::AttemptKind, _>(a.kind, "kind")?,
            fencing_token: a.fencing_token,
            holder: a.holder,
            granted_at_ms: a.granted_at_ms,
            lease_until_ms: a.lease_until_ms,
            outcome: optional(a.outcome, "outcome")?,
        })
    }
}

impl From<Slot> for pb::Slot {
    fn from(s: Slot) -> Self {
        pb::Slot {
            index: s.index,
            count: s.count,
        }
    }
}

impl From<pb::Slot> for Slot {
    fn from(s: pb::Slot) -> Self {
        Slot {
            index: s.index,
            count: s.count,
        }
    }
}

impl From<Escalation> for pb::Escalation {
    fn from(e: Escalation) -> Self {
        pb::Escalation {
            at_ms: e.at_ms,
            reason: escalation_reason_to_i32(e.reason),
        }
    }
}

/// `reason` must be defined.
impl TryFrom<pb::Escalation> for Escalation {
    type Error = WireError;

    fn try_from(e: pb::Escalation) -> Result<Self, WireError> {
        Ok(Escalation {
            at_ms: e.at_ms,
            reason: escalation_reason_from_i32(e.reason, "reason")?,
        })
    }
}

impl From<OperatorDecision> for pb::OperatorDecision {
    fn from(d: OperatorDecision) -> Self {
        pb::OperatorDecision {
            at_ms: d.at_ms,
            operator: d.operator,
            decision: Some(d.decision.into()),
            note: d.note,
            settled: Some(d.settled.into()),
        }
    }
}

/// The `decision` oneof and `settled` are required.
impl TryFrom<pb::OperatorDecision> for OperatorDecision {
    type Error = WireError;

    fn try_from(d: pb::OperatorDecision) -> Result<Self, WireError> {
        Ok(OperatorDecision {
            at_ms: d.at_ms,
            operator: d.operator,
            decision: required(d.decision, "decision")?,
            note: d.note,
            settled: required(d.settled, "settled")?,
        })
    }
}

impl From<Amendment> for pb::Amendment {
    fn from(a: Amendment) -> Self {
        pb::Amendment {
            at_ms: a.at_ms,
            previous_hash: intent_hash_to_bytes(&a.previous_hash),
            intent_hash: intent_hash_to_bytes(&a.intent_hash),
        }
    }
}

/// Both hashes must be 32 bytes.
impl TryFrom<pb::Amendment> for Amendment {
    type Error = WireError;

    fn try_from(a: pb::Amendment) -> Result<Self, WireError> {
        Ok(Amendment {
            at_ms: a.at_ms,
            previous_hash: intent_hash_from_bytes(&a.previous_hash, "previous_hash")?,
            intent_hash: intent_hash_from_bytes(&a.intent_hash, "intent_hash")?,
        })
    }
}

impl From<EffectRecord> for pb::EffectRecord {
    fn from(r: EffectRecord) -> Self {
        pb::EffectRecord {
            key: Some(r.key.into()),
            workflow_id: r.workflow_id,
            tool: Some(r.tool.into()),
            authority: Some(r.authority.into()),
            target: r.target,
            intent_json: r.intent,
            intent_hash: intent_hash_to_bytes(&r.intent_hash),
            slot: r.slot.map(Into::into),
            policy: Some(r.policy.into()),
            state: effect_state_to_i32(r.state),
            declared_at_ms: r.declared_at_ms,
            updated_at_ms: r.updated_at_ms,
            attempts: r.attempts.into_iter().map(Into::into).collect(),
            provider_key: r.provider_key,
            receipt: r.receipt,
            horizon_deadline_ms: r.horizon_deadline_ms,
            retention_deadline_ms: r.retention_deadline_ms,
            ambiguous: r.ambiguous,
            dispatches_in_budget: r.dispatches_in_budget,
            observations_in_budget: r.observations_in_budget,
            observations: r.observations.into_iter().map(Into::into).collect(),
            escalation: r.escalation.map(Into::into),
            decision: r.decision.map(Into::into),
            amendments: r.amendments.into_iter().map(Into::into).collect(),
        }
    }
}

/// `key`, `tool`, `authority` and `policy` are required, `intent_hash` and both hashes
/// of every amendment are 32 bytes and `state` is defined.
impl TryFrom<pb::EffectRecord> for EffectRecord {
    type Error = WireError;

    fn try_from(r: pb::EffectRecord) -> Result<Self, WireError> {
        Ok(EffectRecord {
            key: required(r.key, "key")?,
            workflow_id: r.workflow_id,
            tool: required(r.tool, "tool")?,
            authority: required(r.authority, "authority")?,
            target: r.target,
            intent: r.intent_json,
            intent_hash: intent_hash_from_bytes(&r.intent_hash, "intent_hash")?,
            slot: optional(r.slot, "slot")?,
            policy: required(r.policy, "policy")?,
            state: effect_state_from_i32(r.state, "state")?,
            declared_at_ms: r.declared_at_ms,
            updated_at_ms: r.updated_at_ms,
            attempts: repeated(r.attempts, "attempts")?,
            provider_key: r.provider_key,
            receipt: r.receipt,
            horizon_deadline_ms: r.horizon_deadline_ms,
            retention_deadline_ms: r.retention_deadline_ms,
            ambiguous: r.ambiguous,
            dispatches_in_budget: r.dispatches_in_budget,
            observations_in_budget: r.observations_in_budget,
            observations: repeated(r.observations, "observations")?,
            escalation: optional(r.escalation, "escalation")?,
            decision: optional(r.decision, "decision")?,
            amendments: repeated(r.amendments, "amendments")?,
        })
    }
}

impl From<EffectRecord> for pb::GetResponse {
    fn from(r: EffectRecord) -> Self {
        pb::GetResponse {
            record: Some(r.into()),
            tombstone: None,
        }
    }
}

/// `record` is required: the node answers NOT_FOUND instead of an empty response.
impl TryFrom<pb::GetResponse> for EffectRecord {
    type Error = WireError;

    fn try_from(r: pb::GetResponse) -> Result<Self, WireError> {
        required(r.record, "record")
    }
}

impl FromIterator<EffectRecord> for pb::ListResponse {
    fn from_iter<I: IntoIterator<Item = EffectRecord>>(records: I) -> Self {
        pb::ListResponse {
            records: records.into_iter().map(Into::into).collect(),
            continue_after: None,
        }
    }
}

impl From<ListPage> for pb::ListResponse {
    fn from(page: ListPage) -> Self {
        pb::ListResponse {
            records: page.records.into_iter().map(Into::into).collect(),
            continue_after: page.continue_after.map(Into::into),
        }
    }
}

/// Every record must read; `continue_after` as sent (absent from nodes that predate it).
impl TryFrom<pb::ListResponse> for ListPage {
    type Error = WireError;

    fn try_from(r: pb::ListResponse) -> Result<Self, WireError> {
        Ok(ListPage {
            records: repeated(r.records, "records")?,
            continue_after: r.continue_after.map(Into::into),
        })
    }
}

impl TryFrom<pb::ListResponse> for Vec<EffectRecord> {
    type Error = WireError;

    fn try_from(r: pb::ListResponse) -> Result<Self, WireError> {
        repeated(r.records, "records")
    }
}
