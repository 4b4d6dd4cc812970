//! Outcomes: what applying a command answers.
//!
//! Domain refusals (a conflict, a stale fencing token, a malformed key) are values that
//! every replica computes identically, never errors that abort `apply`. A refusal changes
//! no record.

use serde::{Deserialize, Serialize};

use crate::intent::{IntentError, IntentHash};
use crate::key::{EffectKey, FieldError};
use crate::policy::ToolName;
use crate::record::{EffectState, EscalationReason, Observation};
use crate::tombstone::ExpiredEffect;

/// The right to act on an effect now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// 1-based attempt number within the effect.
    pub attempt_id: u32,
    /// Send this with every heartbeat, report or observation.
    pub fencing_token: u64,
    /// When the attempt was granted (ledger time, ms); with `lease_until_ms` it gives the
    /// lease's length, which a holder whose answer arrived late compares with the time it
    /// waited for it.
    pub granted_at_ms: u64,
    /// The lease runs out at this ledger time (ms); report or heartbeat before.
    pub lease_until_ms: u64,
    /// The idempotency token to send to the provider.
    pub provider_key: String,
    /// Until when the provider deduplicates `provider_key`, if it does.
    pub horizon_deadline_ms: Option<u64>,
}

/// Same key, different intent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntentConflict {
    /// Hash of the intent the effect was declared with.
    pub stored_hash: IntentHash,
    /// Hash of the intent offered now.
    pub offered_hash: IntentHash,
    /// Top-level intent members that differ (`$` for the whole intent, `(tool)` when the
    /// tool or its contract version differs).
    pub differing_fields: Vec<String>,
}

/// What is known about an effect whose outcome is unknown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unsettled {
    /// The provider key every attempt sent.
    pub provider_key: String,
    /// Dispatch attempts so far.
    pub dispatches: u32,
    /// Until when the provider deduplicates the key, if it does.
    pub horizon_deadline_ms: Option<u64>,
    /// The latest observation, if any.
    pub last_observation: Option<Observation>,
}

/// The answer to a claim (DESIGN.md section 5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClaimOutcome {
    /// Dispatch now.
    Proceed(Grant),
    /// Already committed: return the stored receipt, do nothing.
    Replay {
        /// The provider's result.
        receipt: String,
    },
    /// Another attempt is live: wait or poll, do not dispatch.
    InFlight {
        /// Its holder.
        holder: String,
        /// Its attempt number.
        attempt_id: u32,
        /// When its lease runs out (ledger time, ms).
        lease_until_ms: u64,
    },
    /// The outcome is unknown: observe the provider before anything else.
    Reconcile(Unsettled),
    /// Same key, different intent.
    Conflict(IntentConflict),
    /// Automatic handling has stopped; a person must decide.
    Escalated {
        /// Why.
        reason: EscalationReason,
    },
    /// The provider no longer deduplicates the key, so a re-send is not protected:
    /// reconcile, never re-dispatch blindly.
    HorizonPassed(Unsettled),
    /// The effect's record was collected after its retention; its tombstone says what is
    /// known. Never dispatch: reconcile with the provider if the caller must know more.
    Expired(ExpiredEffect),
}

/// The answer to a request to reconcile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReconcileOutcome {
    /// Observe the provider now and record what it says.
    Observe(Grant),
    /// Already committed.
    Replay {
        /// The provider's result.
        receipt: String,
    },
    /// Another attempt is live.
    InFlight {
        /// Its holder.
        holder: String,
        /// Its attempt number.
        attempt_id: u32,
        /// When its lease runs out.
        lease_until_ms: u64,
    },
    /// Automatic handling has stopped.
    Escalated {
        /// Why.
        reason: EscalationReason,
    },
    /// Nothing is unknown: the effect is in this state.
    NotNeeded {
        /// The state.
        state: EffectState,
    },
    /// The effect's record was collected; its tombstone says what is known.
    Expired(ExpiredEffect),
}

/// Why a command was refused. A refusal changes no record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Refusal {
    /// A field is malformed, empty or too long.
    #[error(transparent)]
    InvalidField(#[from] FieldError),
    /// The intent cannot be canonicalised.
    #[error(transparent)]
    InvalidIntent(#[from] IntentError),
    /// The tenant is not registered.
    #[error("unknown tenant {0:?}")]
    UnknownTenant(String),
    /// The caller acts for another tenant than the effect's.
    #[error("caller is tenant {caller:?} but the effect belongs to {owner:?}")]
    WrongTenant {
        /// The caller's tenant.
        caller: String,
        /// The effect's tenant.
        owner: String,
    },
    /// The command is for the operator only.
    #[error("only the operator may send {command}")]
    NotPermitted {
        /// The command's name.
        command: String,
    },
    /// No policy is configured for the tool.
    #[error("no policy for tool {0}")]
    UnknownTool(ToolName),
    /// The tool is read-only and bypasses the ledger.
    #[error("tool {0} is read-only and bypasses the ledger")]
    ReadOnlyTool(ToolName),
    /// The policy is inconsistent.
    #[error("invalid policy: {0}")]
    InvalidPolicy(String),
    /// No record has this key.
    #[error("no effect {0}")]
    UnknownEffect(EffectKey),
    /// The command conflicts with the effect's declaration.
    #[error("intent conflict: stored {} offered {}", .0.stored_hash, .0.offered_hash)]
    Conflict(IntentConflict),
    /// The fencing token is not the effect's open attempt.
    #[error("fencing token {offered} is stale (latest is {latest:?})")]
    StaleToken {
        /// The token sent.
        offered: u64,
        /// The newest token of the effect.
        latest: Option<u64>,
    },
    /// The attempt's lease ran out; only a committed fact is still accepted from it.
    #[error("the lease ran out at {lease_until_ms}")]
    LeaseExpired {
        /// When it ran out.
        lease_until_ms: u64,
    },
    /// The token belongs to the other kind of attempt (a report from a reconciler, an
    /// observation from a dispatcher).
    #[error("fencing token {0} is not an attempt of the right kind for this command")]
    WrongAttemptKind(u64),
    /// The effect is already final in this state.
    #[error("the effect is already {state}")]
    AlreadyFinal {
        /// Its state.
        state: EffectState,
    },
    /// `failed_before_effect` needs a proof.
    #[error("failed_before_effect needs a proof that nothing started")]
    ProofRequired,
    /// The tool's policy requires the user's confirmation.
    #[error("the tool requires the user's confirmation")]
    ConfirmationRequired,
    /// A decision was offered for an effect that is not escalated.
    #[error("the effect is not escalated")]
    NotEscalated,
    /// The command id was used before for a different command.
    #[error("command id {0:?} was already used for a different command")]
    CommandIdReused(String),
    /// An amend was offered for an effect where something may have happened, or that a
    /// person must decide on.
    #[error(
        "the effect is {state}{}: an amend needs not_started, or failed_before_effect with \
         nothing unsettled",
        and_escalated(.escalated)
    )]
    AmendNotAllowed {
        /// The effect's state (an in-progress attempt past its lease counts as unknown).
        state: EffectState,
        /// Whether the effect is escalated.
        escalated: bool,
    },
    /// The effect has been amended as often as a record keeps.
    #[error("the effect was amended {max} times already, the most a record keeps")]
    TooManyAmendments {
        /// The most amendments a record keeps.
        max: u32,
    },
    /// The effect's record was collected after its retention and only its tombstone is
    /// left: a late command on it changes nothing and is never a new effect.
    #[error("effect {} expired: collected at {} ms in state {}", .0.key, .0.collected_at_ms, .0.final_state)]
    Expired(Box<ExpiredEffect>),
    /// The tenant's quota would be exceeded by the records this command would create;
    /// nothing was created and nothing stored was touched.
    #[error("{what} quota exceeded: {used} used + {requested} requested > limit {limit}")]
    QuotaExceeded {
        /// Which quota.
        what: Quota,
        /// What the tenant uses now.
        used: u64,
        /// What the command would add.
        requested: u64,
        /// The tenant's limit.
        limit: u64,
    },
    /// One declaration would store more than
    /// [`DECLARATION_BYTES_MAX`](crate::limits::DECLARATION_BYTES_MAX): its slots times
    /// its canonical intent.
    #[error("{slots} slots x {intent_bytes} intent bytes is more than {bytes_max} bytes")]
    DeclarationTooLarge {
        /// Slots asked for.
        slots: u32,
        /// Bytes of the canonical intent.
        intent_bytes: u64,
        /// The most one declaration may store.
        bytes_max: u64,
    },
    /// A decision named the escalation it settles, and the effect's open escalation is
    /// another one (the one named was settled, the effect was attempted again and
    /// escalated anew): what was found at the provider may be out of date.
    #[error(
        "the decision is for the escalation after attempt token {decided_token}, but the \
         effect was attempted again since (token {open_token}) and escalated anew: look at \
         the provider again"
    )]
    EscalationChanged {
        /// The escalation token the decision names.
        decided_token: u64,
        /// The open escalation's token
        /// ([`EffectRecord::escalation_token`](crate::EffectRecord::escalation_token)).
        open_token: u64,
    },
}

/// A per-tenant quota ([`TenantSettings`](crate::policy::TenantSettings)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Quota {
    /// Records not yet collected (`live_records_max`).
    LiveRecords,
    /// Approximate bytes of records and tombstones (`stored_bytes_max`).
    StoredBytes,
}

impl Quota {
    /// The name used in messages and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Quota::LiveRecords => "live_records",
            Quota::StoredBytes => "stored_bytes",
        }
    }
}

impl std::fmt::Display for Quota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What applying a command answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// A tenant or tool policy was stored.
    Configured,
    /// The records exist with this intent; `created` is false when all existed already.
    Declared {
        /// The keys declared (one, or one per slot).
        keys: Vec<EffectKey>,
        /// Whether this command created them.
        created: bool,
    },
    /// The answer to a claim.
    Claim(ClaimOutcome),
    /// The lease was extended.
    LeaseExtended {
        /// The new end of the lease (ledger time, ms).
        lease_until_ms: u64,
    },
    /// A report was taken; the effect is now in `state`.
    Reported {
        /// The effect's state after the report.
        state: EffectState,
        /// The stored receipt when committed (the first one, if a later report differs).
        receipt: Option<String>,
    },
    /// The answer to a request to reconcile.
    Reconcile(ReconcileOutcome),
    /// An observation was recorded.
    Observed {
        /// The effect's state after it.
        state: EffectState,
        /// Whether the effect is now escalated.
        escalated: bool,
    },
    /// A decision was recorded.
    Decided {
        /// The effect's state after it.
        state: EffectState,
    },
    /// A sweep ran.
    Swept {
        /// Attempts whose lease ran out.
        expired: u32,
        /// Records (each leaving a tombstone), expired tombstones and command ids
        /// removed.
        collected: u32,
        /// Whether more were due than the limit allowed.
        more: bool,
    },
    /// The command was refused; nothing changed.
    Refused(Refusal),
    // Appended after `Refused`: remembered outcomes in snapshots encode variants by
    // position.
    /// The effect's intent is the offered one now.
    Amended {
        /// The intent hash before the command (equal to `intent_hash` when unchanged).
        previous_hash: IntentHash,
        /// The intent hash the effect carries now.
        intent_hash: IntentHash,
        /// Whether this command changed the intent; false when it already had it.
        changed: bool,
    },
}

fn and_escalated(escalated: &bool) -> &'static str {
    if *escalated {
        " and escalated"
    } else {
        ""
    }
}

impl From<Refusal> for Outcome {
    fn from(r: Refusal) -> Self {
        Outcome::Refused(r)
    }
}

impl From<FieldError> for Outcome {
    fn from(e: FieldError) -> Self {
        Outcome::Refused(e.into())
    }
}
