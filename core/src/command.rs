//! Commands: the replicated input of the ledger.
//!
//! Every command carries a command id chosen by its sender. Applying a command id a second
//! time returns the first outcome and changes nothing, so a sender whose answer was lost
//! retries with the same id and gets the same grant, never a second attempt. Sweeps
//! (lease expiry and garbage collection) depend only on time and are not recorded.

use serde::{Deserialize, Serialize};

use crate::key::EffectKey;
use crate::policy::{TenantSettings, ToolName, ToolPolicy, ToolRef};
use crate::record::{Authority, Decision, ObservationResult};

/// Who sent a command, as authenticated by the node that accepted it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Caller {
    /// A tenant's tool server or client; it may act only on its own effects.
    Tenant(String),
    /// The operator: configuration, decisions on escalated effects, sweeps.
    Operator,
}

/// One replicated command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    /// Chosen by the sender; the same id re-sent returns the first outcome.
    pub command_id: String,
    /// Who sent it.
    pub caller: Caller,
    /// What to do.
    pub body: CommandBody,
}

/// Everything needed to create an effect record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Declaration {
    /// Scoped effect key; for a claim, may name a declared slot (`base#i`).
    pub key: EffectKey,
    /// The workflow the effect belongs to.
    pub workflow_id: String,
    /// Tool and contract version.
    pub tool: ToolRef,
    /// Who it is done for.
    pub authority: Authority,
    /// The normalised logical resource it mutates.
    pub target: String,
    /// The intent as JSON text; the ledger canonicalises and hashes it.
    pub intent_json: String,
}

/// What the holder of a dispatch attempt learned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Report {
    /// The provider committed; `receipt` is its result.
    Committed {
        /// The provider's result or resource id.
        receipt: String,
    },
    /// The holder proves nothing took effect (refused before send, validation error,
    /// provider said "not created").
    FailedBeforeEffect {
        /// The proof; must not be empty.
        proof: String,
    },
    /// Timeout, lost answer, 5xx after send, cancellation: ambiguous is not failure.
    Unknown {
        /// What happened.
        reason: String,
    },
}

/// The replicated operations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandBody {
    /// Registers a tenant or changes its settings (operator).
    PutTenant {
        /// Tenant id.
        tenant: String,
        /// Its settings.
        settings: TenantSettings,
    },
    /// Sets the policy of one tool for one tenant (operator).
    PutToolPolicy {
        /// Tenant id.
        tenant: String,
        /// The tool.
        tool: ToolName,
        /// Its policy.
        policy: ToolPolicy,
    },
    /// Persists the record(s) of an effect before anything is sent. With `slots > 1`,
    /// creates `key#0 .. key#(slots-1)`, one effect each.
    Declare {
        /// The effect.
        declaration: Declaration,
        /// Declared multiplicity, at least 1.
        slots: u32,
    },
    /// Asks to dispatch; declares the effect first if it does not exist.
    Claim {
        /// The effect as the caller sees it; compared with the stored intent.
        declaration: Declaration,
        /// The instance that will dispatch.
        holder: String,
        /// Requested lease; the policy's default when absent, capped by its maximum.
        lease_ms: Option<u64>,
        /// The user's confirmation, required by some policies.
        confirmation: Option<String>,
    },
    /// Extends the lease of the caller's open attempt.
    Heartbeat {
        /// The effect.
        key: EffectKey,
        /// The attempt's fencing token.
        fencing_token: u64,
        /// New lease from now; the policy's default when absent.
        lease_ms: Option<u64>,
    },
    /// Reports how a dispatch attempt ended.
    Report {
        /// The effect.
        key: EffectKey,
        /// The attempt's fencing token.
        fencing_token: u64,
        /// What happened.
        report: Report,
    },
    /// Asks for a fenced reconciliation attempt on an unknown effect.
    BeginReconcile {
        /// The effect.
        key: EffectKey,
        /// The reconciler instance.
        holder: String,
        /// Requested lease.
        lease_ms: Option<u64>,
    },
    /// Records what a reconciliation attempt observed at the provider.
    Observe {
        /// The effect.
        key: EffectKey,
        /// The reconciliation attempt's fencing token.
        fencing_token: u64,
        /// What was observed.
        result: ObservationResult,
        /// How (which lookup, what it returned).
        detail: String,
    },
    /// Records an operator's decision on an escalated effect, whichever escalation is
    /// open (operator). [`CommandBody::DecideEscalation`] names the one decided on.
    Decide {
        /// The effect.
        key: EffectKey,
        /// The decision.
        decision: Decision,
        /// Who decided.
        operator: String,
        /// Why.
        note: String,
    },
    /// Turns open attempts whose lease ran out into unknown outcomes (operator, proposed
    /// by the leader's sweeper).
    ExpireLeases {
        /// At most this many attempts.
        limit: u32,
    },
    /// Removes finished records past retention, each leaving a tombstone (a
    /// declaration's slots only all together), tombstones past their tenant's window and
    /// command ids past theirs (operator, proposed by the leader's sweeper).
    CollectGarbage {
        /// At most this many records (a slot group may exceed it), this many tombstones
        /// and this many command ids.
        limit: u32,
    },
    /// Replaces the intent of an existing effect (same key) while nothing can have
    /// happened: the effect is `not_started`, or `failed_before_effect` with no unsettled
    /// dispatch, and is not escalated. The old intent hash stays in the record's
    /// amendments. Tool, target, workflow and authority must be the record's.
    Amend {
        /// The effect with its new intent.
        declaration: Declaration,
    },
    /// [`CommandBody::Decide`] for the escalation `escalation_token` names only: refused
    /// when the effect's open escalation is another one, so a decision made on what the
    /// provider held for one escalation never settles a later one (operator).
    DecideEscalation {
        /// The effect.
        key: EffectKey,
        /// The escalation decided on
        /// ([`EffectRecord::escalation_token`](crate::EffectRecord::escalation_token) as it
        /// was read).
        escalation_token: u64,
        /// The decision.
        decision: Decision,
        /// Who decided.
        operator: String,
        /// Why.
        note: String,
    },
}

impl CommandBody {
    /// Whether re-applying the command's id returns its first outcome. Sweeps are
    /// idempotent by nature and would fill the table.
    pub fn is_recorded(&self) -> bool {
        !matches!(
            self,
            CommandBody::ExpireLeases { .. } | CommandBody::CollectGarbage { .. }
        )
    }

    /// Whether only the operator may send it.
    pub fn is_operator_only(&self) -> bool {
        matches!(
            self,
            CommandBody::PutTenant { .. }
                | CommandBody::PutToolPolicy { .. }
                | CommandBody::Decide { .. }
                | CommandBody::DecideEscalation { .. }
                | CommandBody::ExpireLeases { .. }
                | CommandBody::CollectGarbage { .. }
        )
    }

    /// The effect the command addresses, if it addresses one.
    pub fn effect_key(&self) -> Option<&EffectKey> {
        match self {
            CommandBody::Declare { declaration, .. }
            | CommandBody::Claim { declaration, .. }
            | CommandBody::Amend { declaration } => Some(&declaration.key),
            CommandBody::Heartbeat { key, .. }
            | CommandBody::Report { key, .. }
            | CommandBody::BeginReconcile { key, .. }
            | CommandBody::Observe { key, .. }
            | CommandBody::Decide { key, .. }
            | CommandBody::DecideEscalation { key, .. } => Some(key),
            CommandBody::PutTenant { .. }
            | CommandBody::PutToolPolicy { .. }
            | CommandBody::ExpireLeases { .. }
            | CommandBody::CollectGarbage { .. } => None,
        }
    }

    /// A short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            CommandBody::PutTenant { .. } => "put_tenant",
            CommandBody::PutToolPolicy { .. } => "put_tool_policy",
            CommandBody::Declare { .. } => "declare",
            CommandBody::Claim { .. } => "claim",
            CommandBody::Heartbeat { .. } => "heartbeat",
            CommandBody::Report { .. } => "report",
            CommandBody::BeginReconcile { .. } => "begin_reconcile",
            CommandBody::Observe { .. } => "observe",
            CommandBody::Decide { .. } => "decide",
            CommandBody::DecideEscalation { .. } => "decide_escalation",
            CommandBody::ExpireLeases { .. } => "expire_leases",
            CommandBody::CollectGarbage { .. } => "collect_garbage",
            CommandBody::Amend { .. } => "amend",
        }
    }
}
