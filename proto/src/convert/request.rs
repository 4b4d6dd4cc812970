//! Requests: the client builds them from core values, the node reads them back as core
//! [`Command`]s (with [`IntoCommand`]) or queries.
//!
//! The wire carries no caller: the node authenticates the API key and supplies the
//! [`Caller`] itself. Two defaults are applied here, where the wire's zero means "not
//! set": a declaration's `slots` of 0 reads as 1, and a list's `limit` of 0 reads as
//! [`LIST_LIMIT_DEFAULT`] (any limit is capped at [`LIST_LIMIT_MAX`]).

use ledger_core::{
    Caller, Command, CommandBody, Decision, Declaration, EffectKey, EffectRecord, EffectState,
    ListQuery, ObservationResult, Report, TenantSettings, ToolName, ToolPolicy,
};

use super::values::{effect_state_from_i32, effect_state_to_i32};
use super::{required, WireError};
use crate::pb;

/// Records in a list page when the request asks for none (`limit` 0).
pub const LIST_LIMIT_DEFAULT: u32 = 100;

/// Most records in one list page, whatever the request asks for.
pub const LIST_LIMIT_MAX: u32 = 1000;

/// The page size for a requested `limit`: 0 is [`LIST_LIMIT_DEFAULT`], anything above
/// [`LIST_LIMIT_MAX`] is capped.
pub fn list_limit(requested: u32) -> usize {
    let limit = match requested {
        0 => LIST_LIMIT_DEFAULT,
        n => n.min(LIST_LIMIT_MAX),
    };
    limit as usize
}

/// A mutating request read as the replicated command it asks for.
pub trait IntoCommand {
    /// The command, sent by `caller` (as the node authenticated it). Fails only when the
    /// message lacks a field the contract requires; contents are judged by `apply`.
    fn into_command(self, caller: Caller) -> Result<Command, WireError>;
}

fn command(command_id: String, caller: Caller, body: CommandBody) -> Command {
    Command {
        command_id,
        caller,
        body,
    }
}

impl pb::DeclareRequest {
    /// Declares `declaration` with multiplicity `slots` (0 and 1 both mean one effect).
    pub fn new(command_id: impl Into<String>, declaration: Declaration, slots: u32) -> Self {
        pb::DeclareRequest {
            command_id: command_id.into(),
            declaration: Some(declaration.into()),
            slots,
        }
    }
}

/// `declaration` (with its `key`, `tool`, `authority`) is required; `slots` 0 reads as 1.
impl IntoCommand for pb::DeclareRequest {
    fn into_command(self, caller: Caller) -> Result<Command, WireError> {
        let body = CommandBody::Declare {
            declaration: required(self.declaration, "declaration")?,
            slots: self.slots.max(1),
        };
        Ok(command(self.command_id, caller, body))
    }
}

impl pb::ClaimRequest {
    /// Claims `declaration` for `holder`.
    pub fn new(
        command_id: impl Into<String>,
        declaration: Declaration,
        holder: impl Into<String>,
        lease_ms: Option<u64>,
        confirmation: Option<String>,
    ) -> Self {
        pb::ClaimRequest {
            command_id: command_id.into(),
            declaration: Some(declaration.into()),
            holder: holder.into(),
            lease_ms,
            confirmation,
        }
    }
}

/// `declaration` (with its `key`, `tool`, `authority`) is required.
impl IntoCommand for pb::ClaimRequest {
    fn into_command(self, caller: Caller) -> Result<Command, WireError> {
        let body = CommandBody::Claim {
            declaration: required(self.declaration, "declaration")?,
            holder: self.holder,
            lease_ms: self.lease_ms,
            confirmation: self.confirmation,
        };
        Ok(command(self.command_id, caller, body))
    }
}

impl pb::HeartbeatRequest {
    /// Extends the lease of the attempt holding `fencing_token` on `key`.
    pub fn new(
        command_id: impl Into<String>,
        key: EffectKey,
        fencing_token: u64,
        lease_ms: Option<u64>,
    ) -> Self {
        pb::HeartbeatRequest {
            command_id: command_id.into(),
            key: Some(key.into()),
            fencing_token,
            lease_ms,
        }
    }
}

/// `key` is required.
impl IntoCommand for pb::HeartbeatRequest {
    fn into_command(self, caller: Caller) -> Result<Command, WireError> {
        let body = CommandBody::Heartbeat {
            key: required(self.key, "key")?,
            fencing_token: self.fencing_token,
            lease_ms: self.lease_ms,
        };
        Ok(command(self.command_id, caller, body))
    }
}

impl pb::ReportRequest {
    /// Reports how the attempt holding `fencing_token` on `key` ended.
    pub fn new(
        command_id: impl Into<String>,
        key: EffectKey,
        fencing_token: u64,
        report: Report,
    ) -> Self {
        pb::ReportRequest {
            command_id: command_id.into(),
            key: Some(key.into()),
            fencing_token,
            report: Some(report.into()),
        }
    }
}

/// `key` and the `report` oneof are required.
impl IntoCommand for pb::ReportRequest {
    fn into_command(self, caller: Caller) -> Result<Command, WireError> {
        let body = CommandBody::Report {
            key: required(self.key, "key")?,
            fencing_token: self.fencing_token,
            report: required(self.report, "report")?,
        };
        Ok(command(self.command_id, caller, body))
    }
}

impl pb::BeginReconcileRequest {
    /// Asks for a reconciliation attempt on `key` for `holder`.
    pub fn new(
        command_id: impl Into<String>,
        key: EffectKey,
        holder: impl Into<String>,
        lease_ms: Option<u64>,
    ) -> Self {
        pb::BeginReconcileRequest {
            command_id: command_id.into(),
            key: Some(key.into()),
            holder: holder.into(),
            lease_ms,
        }
    }
}

/// `key` is required.
impl IntoCommand for pb::BeginReconcileRequest {
    fn into_command(self, caller: Caller) -> Result<Command, WireError> {
        let body = CommandBody::BeginReconcile {
            key: required(self.key, "key")?,
            holder: self.holder,
            lease_ms: self.lease_ms,
        };
        Ok(command(self.command_id, caller, body))
    }
}

impl pb::ObserveRequest {
    /// Records what the reconciliation attempt holding `fencing_token` observed.
    pub fn new(
        command_id: impl Into<String>,
        key: EffectKey,
        fencing_token: u64,
        result: ObservationResult,
        detail: impl Into<String>,
    ) -> Self {
        pb::ObserveRequest {
            command_id: command_id.into(),
            key: Some(key.into()),
            fencing_token,
            result: Some(result.into()),
            detail: detail.into(),
        }
    }
}

/// `key` and `result` (with its oneof set) are required.
impl IntoCommand for pb::ObserveRequest {
    fn into_command(self, caller: Caller) -> Result<Command, WireError> {
        let body = CommandBody::Observe {
            key: required(self.key, "key")?,
            fencing_token: self.fencing_token,
            result: required(self.result, "result")?,
            detail: self.detail,
        };
        Ok(command(self.command_id, caller, body))
    }
}

impl pb::DecideRequest {
    /// Records `operator`'s decision on the escalated effect `key`: on the escalation
    /// `escalation_token` names only, when given, else on whichever is open.
    pub fn new(
        command_id: impl Into<String>,
        key: EffectKey,
        escalation_token: Option<u64>,
        decision: Decision,
        operator: impl Into<String>,
        note: impl Into<String>,
    ) -> Self {
        pb::DecideRequest {
            command_id: command_id.into(),
            key: Some(key.into()),
            decision: Some(decision.into()),
            operator: operator.into(),
            note: note.into(),
            escalation_token,
        }
    }
}

/// `key` and the `decision` oneof are required. With `escalation_token` it is a
/// [`CommandBody::DecideEscalation`]; without, the [`CommandBody::Decide`] older clients
/// send (and older nodes read).
impl IntoCommand for pb::DecideRequest {
    fn into_command(self, caller: Caller) -> Result<Command, WireError> {
        let (key, decision) = (
            required(self.key, "key")?,
            required(self.decision, "decision")?,
        );
        let (operator, note) = (self.operator, self.note);
        let body = match self.escalation_token {
            Some(escalation_token) => CommandBody::DecideEscalation {
                key,
                escalation_token,
                decision,
                operator,
                note,
            },
            None => CommandBody::Decide {
                key,
                decision,
                operator,
                note,
            },
        };
        Ok(command(self.command_id, caller, body))
    }
}

impl pb::AmendRequest {
    /// Amends the intent of the effect `declaration` names to its `intent_json`.
    pub fn new(command_id: impl Into<String>, declaration: Declaration) -> Self {
        pb::AmendRequest {
            command_id: command_id.into(),
            declaration: Some(declaration.into()),
        }
    }
}

/// `declaration` (with its `key`, `tool`, `authority`) is required.
impl IntoCommand for pb::AmendRequest {
    fn into_command(self, caller: Caller) -> Result<Command, WireError> {
        let body = CommandBody::Amend {
            declaration: required(self.declaration, "declaration")?,
        };
        Ok(command(self.command_id, caller, body))
    }
}

impl pb::PutTenantRequest {
    /// Registers `tenant` or changes its settings.
    pub fn new(
        command_id: impl Into<String>,
        tenant: impl Into<String>,
        settings: TenantSettings,
    ) -> Self {
        pb::PutTenantRequest {
            command_id: command_id.into(),
            tenant: tenant.into(),
            settings: Some(settings.into()),
        }
    }
}

/// `settings` is required.
impl IntoCommand for pb::PutTenantRequest {
    fn into_command(self, caller: Caller) -> Result<Command, WireError> {
        let body = CommandBody::PutTenant {
            tenant: self.tenant,
            settings: required(self.settings, "settings")?,
        };
        Ok(command(self.command_id, caller, body))
    }
}

impl pb::PutToolPolicyRequest {
    /// Sets `tool`'s policy for `tenant`.
    pub fn new(
        command_id: impl Into<String>,
        tenant: impl Into<String>,
        tool: ToolName,
        policy: ToolPolicy,
    ) -> Self {
        pb::PutToolPolicyRequest {
            command_id: command_id.into(),
            tenant: tenant.into(),
            provider: tool.provider,
            name: tool.name,
            policy: Some(policy.into()),
        }
    }
}

/// `policy` (with a defined `class`) is required.
impl IntoCommand for pb::PutToolPolicyRequest {
    fn into_command(self, caller: Caller) -> Result<Command, WireError> {
        let tool = ToolName {
            provider: self.provider,
            name: self.name,
        };
        let body = CommandBody::PutToolPolicy {
            tenant: self.tenant,
            tool,
            policy: required(self.policy, "policy")?,
        };
        Ok(command(self.command_id, caller, body))
    }
}

impl From<EffectKey> for pb::GetRequest {
    fn from(key: EffectKey) -> Self {
        pb::GetRequest {
            key: Some(key.into()),
        }
    }
}

/// `key` is required.
impl TryFrom<pb::GetRequest> for EffectKey {
    type Error = WireError;

    fn try_from(r: pb::GetRequest) -> Result<Self, WireError> {
        required(r.key, "key")
    }
}

/// A `limit` above `u32::MAX` is sent as `u32::MAX` (the server caps it anyway).
impl From<ListQuery> for pb::ListRequest {
    fn from(q: ListQuery) -> Self {
        pb::ListRequest {
            tenant: q.tenant,
            state: q.state.map(effect_state_to_i32),
            workflow_id: q.workflow_id,
            updated_at_or_before_ms: q.updated_at_or_before_ms,
            after: q.after.map(Into::into),
            limit: u32::try_from(q.limit).unwrap_or(u32::MAX),
            escalated: q.escalated,
            // This crate's readers of a page read `continue_after`.
            follows_continue_after: true,
        }
    }
}

/// `state`, when set, must be defined; `limit` goes through [`list_limit`].
impl TryFrom<pb::ListRequest> for ListQuery {
    type Error = WireError;

    fn try_from(r: pb::ListRequest) -> Result<Self, WireError> {
        Ok(ListQuery {
            tenant: r.tenant,
            escalated: r.escalated,
            state: r
                .state
                .map(|s| effect_state_from_i32(s, "state"))
                .transpose()?,
            workflow_id: r.workflow_id,
            updated_at_or_before_ms: r.updated_at_or_before_ms,
            after: r.after.map(Into::into),
            limit: list_limit(r.limit),
        })
    }
}

/// What a watch follows: the records of `tenant`, or one of its effects, narrowed by
/// their state, escalation and workflow after each change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchFilter {
    /// Whose records.
    pub tenant: String,
    /// One effect only.
    pub key: Option<EffectKey>,
    /// Only records in this state.
    pub state: Option<EffectState>,
    /// Only escalated records.
    pub escalated: bool,
    /// Only records of this workflow.
    pub workflow_id: Option<String>,
}

impl WatchFilter {
    /// Every change to the records of `tenant`.
    pub fn tenant(tenant: &str) -> Self {
        WatchFilter {
            tenant: tenant.to_owned(),
            key: None,
            state: None,
            escalated: false,
            workflow_id: None,
        }
    }

    /// Every change to the record of `key`.
    pub fn effect(key: &EffectKey) -> Self {
        WatchFilter {
            key: Some(key.clone()),
            ..WatchFilter::tenant(&key.tenant)
        }
    }

    /// Whether a change to `key`, leaving `record` (absent when collected), is followed.
    /// A collected record matches only a watch of its key.
    pub fn matches(&self, key: &EffectKey, record: Option<&EffectRecord>) -> bool {
        if key.tenant != self.tenant || self.key.as_ref().is_some_and(|k| k != key) {
            return false;
        }
        match record {
            None => self.key.is_some(),
            Some(rec) => {
                self.state.is_none_or(|s| rec.state == s)
                    && (!self.escalated || rec.escalation.is_some())
                    && self
                        .workflow_id
                        .as_ref()
                        .is_none_or(|w| rec.workflow_id == *w)
            }
        }
    }
}

impl From<WatchFilter> for pb::WatchRequest {
    fn from(f: WatchFilter) -> Self {
        pb::WatchRequest {
            tenant: f.tenant,
            key: f.key.map(Into::into),
            state: f.state.map(effect_state_to_i32),
            escalated: f.escalated,
            workflow_id: f.workflow_id,
        }
    }
}

/// `state`, when set, must be defined.
impl TryFrom<pb::WatchRequest> for WatchFilter {
    type Error = WireError;

    fn try_from(r: pb::WatchRequest) -> Result<Self, WireError> {
        Ok(WatchFilter {
            tenant: r.tenant,
            key: r.key.map(Into::into),
            state: r
                .state
                .map(|s| effect_state_from_i32(s, "state"))
                .transpose()?,
            escalated: r.escalated,
            workflow_id: r.workflow_id,
        })
    }
}
