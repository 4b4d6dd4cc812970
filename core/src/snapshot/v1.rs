//! The first snapshot format, kept readable.
//!
//! A V1 snapshot predates amendments, the provider timing and target fields of tool
//! policies, and the retry window. Decoding one migrates it: records get no amendments;
//! policies get no target fields, no visibility lag, a retry window of the default 24 h
//! capped at their retention (so every migrated policy stays valid), and no declared
//! processing bound, so a look-up never proves an old effect absent until the operator
//! declares one for new effects. Nothing is guessed in the unsafe direction.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::command::Caller;
use crate::intent::IntentHash;
use crate::key::EffectKey;
use crate::ledger::{CommandEntry, State, TenantConfig};
use crate::policy::{
    ReplayClass, TenantSettings, ToolName, ToolPolicy, ToolRef, RETRY_WINDOW_MS_DEFAULT,
};
use crate::record::{
    Attempt, Authority, EffectRecord, EffectState, Escalation, Observation, OperatorDecision, Slot,
};

/// The ledger state as V1 encoded it.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct StateV1 {
    pub(super) clock_ms: u64,
    pub(super) next_fencing_token: u64,
    pub(super) tenants: BTreeMap<String, TenantConfigV1>,
    pub(super) effects: BTreeMap<EffectKey, EffectRecordV1>,
    pub(super) commands: BTreeMap<(Caller, String), CommandEntry>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct TenantSettingsV1 {
    pub(super) command_retention_ms: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct TenantConfigV1 {
    pub(super) settings: TenantSettingsV1,
    pub(super) tools: BTreeMap<ToolName, ToolPolicyV1>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ToolPolicyV1 {
    pub(super) class: ReplayClass,
    pub(super) provider_horizon_ms: u64,
    pub(super) retention_ms: u64,
    pub(super) lease_ms: u64,
    pub(super) lease_ms_max: u64,
    pub(super) dispatch_attempts_max: u32,
    pub(super) observations_max: u32,
    pub(super) confirmation_required: bool,
    pub(super) volatile_fields: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) struct EffectRecordV1 {
    pub(super) key: EffectKey,
    pub(super) workflow_id: String,
    pub(super) tool: ToolRef,
    pub(super) authority: Authority,
    pub(super) target: String,
    pub(super) intent: String,
    pub(super) intent_hash: IntentHash,
    pub(super) slot: Option<Slot>,
    pub(super) policy: ToolPolicyV1,
    pub(super) state: EffectState,
    pub(super) declared_at_ms: u64,
    pub(super) updated_at_ms: u64,
    pub(super) attempts: Vec<Attempt>,
    pub(super) provider_key: String,
    pub(super) receipt: Option<String>,
    pub(super) horizon_deadline_ms: Option<u64>,
    pub(super) retention_deadline_ms: Option<u64>,
    pub(super) ambiguous: bool,
    pub(super) dispatches_in_budget: u32,
    pub(super) observations_in_budget: u32,
    pub(super) observations: Vec<Observation>,
    pub(super) escalation: Option<Escalation>,
    pub(super) decision: Option<OperatorDecision>,
}

impl From<ToolPolicyV1> for ToolPolicy {
    fn from(p: ToolPolicyV1) -> Self {
        ToolPolicy {
            class: p.class,
            provider_horizon_ms: p.provider_horizon_ms,
            retention_ms: p.retention_ms,
            lease_ms: p.lease_ms,
            lease_ms_max: p.lease_ms_max,
            dispatch_attempts_max: p.dispatch_attempts_max,
            observations_max: p.observations_max,
            confirmation_required: p.confirmation_required,
            volatile_fields: p.volatile_fields,
            target_fields: Vec::new(),
            processing_ms_max: None,
            visibility_lag_ms: 0,
            retry_window_ms: RETRY_WINDOW_MS_DEFAULT.min(p.retention_ms),
        }
    }
}

impl From<TenantSettingsV1> for TenantSettings {
    // Settings added after V1 take their defaults.
    #[allow(clippy::needless_update)]
    fn from(s: TenantSettingsV1) -> Self {
        TenantSettings {
            command_retention_ms: s.command_retention_ms,
            ..TenantSettings::default()
        }
    }
}

impl From<TenantConfigV1> for TenantConfig {
    fn from(c: TenantConfigV1) -> Self {
        TenantConfig {
            settings: c.settings.into(),
            tools: c.tools.into_iter().map(|(t, p)| (t, p.into())).collect(),
        }
    }
}

impl From<EffectRecordV1> for EffectRecord {
    fn from(r: EffectRecordV1) -> Self {
        EffectRecord {
            key: r.key,
            workflow_id: r.workflow_id,
            tool: r.tool,
            authority: r.authority,
            target: r.target,
            intent: r.intent,
            intent_hash: r.intent_hash,
            slot: r.slot,
            policy: r.policy.into(),
            state: r.state,
            declared_at_ms: r.declared_at_ms,
            updated_at_ms: r.updated_at_ms,
            attempts: r.attempts,
            provider_key: r.provider_key,
            receipt: r.receipt,
            horizon_deadline_ms: r.horizon_deadline_ms,
            retention_deadline_ms: r.retention_deadline_ms,
            ambiguous: r.ambiguous,
            dispatches_in_budget: r.dispatches_in_budget,
            observations_in_budget: r.observations_in_budget,
            observations: r.observations,
            escalation: r.escalation,
            decision: r.decision,
            amendments: Vec::new(),
        }
    }
}

impl From<StateV1> for State {
    // Parts of the state added after V1 start empty.
    #[allow(clippy::needless_update)]
    fn from(s: StateV1) -> Self {
        State {
            clock_ms: s.clock_ms,
            next_fencing_token: s.next_fencing_token,
            tenants: s.tenants.into_iter().map(|(t, c)| (t, c.into())).collect(),
            effects: s.effects.into_iter().map(|(k, r)| (k, r.into())).collect(),
            commands: s.commands,
            ..State::default()
        }
    }
}

/// The V1 shape of a current state, dropping what V1 did not have: for tests that need
/// V1 bytes.
#[cfg(test)]
pub(super) fn downgrade(state: &State) -> StateV1 {
    let policy = |p: &ToolPolicy| ToolPolicyV1 {
        class: p.class,
        provider_horizon_ms: p.provider_horizon_ms,
        retention_ms: p.retention_ms,
        lease_ms: p.lease_ms,
        lease_ms_max: p.lease_ms_max,
        dispatch_attempts_max: p.dispatch_attempts_max,
        observations_max: p.observations_max,
        confirmation_required: p.confirmation_required,
        volatile_fields: p.volatile_fields.clone(),
    };
    let tenants = state.tenants.iter().map(|(t, c)| {
        let config = TenantConfigV1 {
            settings: TenantSettingsV1 {
                command_retention_ms: c.settings.command_retention_ms,
            },
            tools: c
                .tools
                .iter()
                .map(|(n, p)| (n.clone(), policy(p)))
                .collect(),
        };
        (t.clone(), config)
    });
    let effects = state.effects.iter().map(|(k, r)| {
        let record = EffectRecordV1 {
            key: r.key.clone(),
            workflow_id: r.workflow_id.clone(),
            tool: r.tool.clone(),
            authority: r.authority.clone(),
            target: r.target.clone(),
            intent: r.intent.clone(),
            intent_hash: r.intent_hash,
            slot: r.slot,
            policy: policy(&r.policy),
            state: r.state,
            declared_at_ms: r.declared_at_ms,
            updated_at_ms: r.updated_at_ms,
            attempts: r.attempts.clone(),
            provider_key: r.provider_key.clone(),
            receipt: r.receipt.clone(),
            horizon_deadline_ms: r.horizon_deadline_ms,
            retention_deadline_ms: r.retention_deadline_ms,
            ambiguous: r.ambiguous,
            dispatches_in_budget: r.dispatches_in_budget,
            observations_in_budget: r.observations_in_budget,
            observations: r.observations.clone(),
            escalation: r.escalation.clone(),
            decision: r.decision.clone(),
        };
        (k.clone(), record)
    });
    StateV1 {
        clock_ms: state.clock_ms,
        next_fencing_token: state.next_fencing_token,
        tenants: tenants.collect(),
        effects: effects.collect(),
        commands: state.commands.clone(),
    }
}
