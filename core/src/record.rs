//! The effect record: the write-ahead state of one external mutation.
//!
//! A record is created before anything is sent and moves only through the transitions of
//! DESIGN.md section 4. [`EffectRecord::check_invariants`] states what must hold of every
//! record; the ledger asserts it wherever a record is written, in release builds too.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::intent::IntentHash;
use crate::key::EffectKey;
use crate::limits::AMENDMENTS_MAX;
use crate::policy::{ToolPolicy, ToolRef};

/// Where an effect stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EffectState {
    /// Declared; nothing has been sent.
    NotStarted,
    /// An attempt holds a lease and may be dispatching now.
    InProgress,
    /// The provider committed the effect; final.
    Committed,
    /// Proven that no dispatch took effect; a new attempt may be granted.
    FailedBeforeEffect,
    /// A dispatch may or may not have taken effect; observe before anything else.
    UnknownAfterDispatch,
}

impl EffectState {
    /// Every state, in order.
    pub const ALL: [EffectState; 5] = [
        EffectState::NotStarted,
        EffectState::InProgress,
        EffectState::Committed,
        EffectState::FailedBeforeEffect,
        EffectState::UnknownAfterDispatch,
    ];

    /// The name used on the wire and in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            EffectState::NotStarted => "not_started",
            EffectState::InProgress => "in_progress",
            EffectState::Committed => "committed",
            EffectState::FailedBeforeEffect => "failed_before_effect",
            EffectState::UnknownAfterDispatch => "unknown_after_dispatch",
        }
    }
}

impl fmt::Display for EffectState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who acts on the effect's behalf and under which approval.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Authority {
    /// The principal the mutation is done for (user, service account).
    pub principal: String,
    /// The generation of the approval or policy that allowed it.
    pub policy_generation: u64,
}

/// Slot `index` of a declared multiplicity of `count` effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    /// This slot's index, `0..count`.
    pub index: u32,
    /// How many slots the declaration created.
    pub count: u32,
}

/// What an attempt is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AttemptKind {
    /// Send the mutation to the provider.
    Dispatch,
    /// Observe the provider to settle an unknown outcome.
    Reconcile,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AttemptOutcome {
    /// It (or a fact it reported late) committed the effect.
    Committed,
    /// Its holder proved nothing took effect.
    FailedBeforeEffect {
        /// The proof given.
        proof: String,
    },
    /// Its holder does not know whether the dispatch took effect.
    Unknown {
        /// Why not.
        reason: String,
    },
    /// Its lease ran out before it reported.
    LeaseExpired,
    /// Another attempt reported the effect committed while this one was open.
    Superseded,
    /// A reconciliation attempt recorded its observation.
    Observed,
}

/// One grant of the right to act on an effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1-based number of this attempt within its effect.
    pub attempt_id: u32,
    /// Dispatch or reconciliation.
    pub kind: AttemptKind,
    /// Ledger-wide increasing token; a report carrying an older one is stale.
    pub fencing_token: u64,
    /// The instance that holds it (tool server, reconciler).
    pub holder: String,
    /// When it was granted (ledger time, ms).
    pub granted_at_ms: u64,
    /// When its lease runs out (ledger time, ms).
    pub lease_until_ms: u64,
    /// How it ended; `None` while open.
    pub outcome: Option<AttemptOutcome>,
}

impl Attempt {
    /// Open and not yet past its lease at `now_ms`.
    pub fn is_live(&self, now_ms: u64) -> bool {
        self.outcome.is_none() && now_ms < self.lease_until_ms
    }
}

/// What a reconciliation observed at the provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ObservationResult {
    /// The provider holds the effect; the receipt is its result.
    Committed {
        /// The provider's result or resource id.
        receipt: String,
    },
    /// The provider proves the effect does not exist.
    NotCommitted,
    /// The provider cannot tell yet.
    StillUnknown,
}

/// One entry of a record's reconciliation history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// When it was recorded (ledger time, ms).
    pub at_ms: u64,
    /// The fencing token of the reconciliation attempt.
    pub fencing_token: u64,
    /// What was observed.
    pub result: ObservationResult,
    /// Free text from the observer (which lookup, what it saw).
    pub detail: String,
}

/// Why automatic handling stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EscalationReason {
    /// Observations stayed ambiguous past the policy's budget.
    ObservationBudgetSpent,
    /// Dispatch attempts reached the policy's budget without a result.
    DispatchBudgetSpent,
    /// An irreversible tool's provider horizon passed while the outcome was unknown.
    HorizonPassedOnIrreversible,
}

/// The escalation flag: set when automatic handling stopped, cleared by a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Escalation {
    /// When it happened (ledger time, ms).
    pub at_ms: u64,
    /// Why.
    pub reason: EscalationReason,
}

/// What an operator decided about an escalated effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// The operator established that the provider holds the effect.
    Committed {
        /// The provider's result or resource id.
        receipt: String,
    },
    /// The operator established that the effect does not exist; a new attempt (with the
    /// same provider key and fresh budgets) may be granted.
    NotCommitted,
}

/// An operator decision as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorDecision {
    /// When it was recorded (ledger time, ms).
    pub at_ms: u64,
    /// Who decided.
    pub operator: String,
    /// What.
    pub decision: Decision,
    /// Why, in the operator's words.
    pub note: String,
    /// The escalation it settled.
    pub settled: Escalation,
}

/// One repair of an effect's intent, made while nothing could have happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Amendment {
    /// When it was made (ledger time, ms).
    pub at_ms: u64,
    /// The intent hash the effect carried before.
    pub previous_hash: IntentHash,
    /// The intent hash it carries since.
    pub intent_hash: IntentHash,
}

/// The write-ahead record of one effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectRecord {
    /// Scoped effect key.
    pub key: EffectKey,
    /// The workflow the effect belongs to.
    pub workflow_id: String,
    /// The tool and contract version.
    pub tool: ToolRef,
    /// Who the effect is done for.
    pub authority: Authority,
    /// The normalised logical resource it mutates.
    pub target: String,
    /// Canonical JSON of the intent, kept to name differing fields on a conflict.
    pub intent: String,
    /// SHA-256 of `intent`.
    pub intent_hash: IntentHash,
    /// The slot, when declared as one of several.
    pub slot: Option<Slot>,
    /// The tool policy in force when the effect was declared.
    pub policy: ToolPolicy,
    /// Where it stands.
    pub state: EffectState,
    /// When it was declared (ledger time, ms).
    pub declared_at_ms: u64,
    /// When it last changed (ledger time, ms).
    pub updated_at_ms: u64,
    /// Every dispatch and reconciliation attempt, oldest first.
    pub attempts: Vec<Attempt>,
    /// The token sent to the provider on every dispatch.
    pub provider_key: String,
    /// The provider's result once committed.
    pub receipt: Option<String>,
    /// Until when the provider deduplicates `provider_key` (set at the first dispatch
    /// that may have reached it): real time, ms, counted from the earliest real time the
    /// dispatch's stamp allowed (ledger time unless ledger time was known to lag).
    pub horizon_deadline_ms: Option<u64>,
    /// When garbage collection may remove the record; `None` while it must be kept.
    pub retention_deadline_ms: Option<u64>,
    /// Some dispatch may have taken effect and no observation or decision has settled it.
    pub ambiguous: bool,
    /// Dispatch attempts counted against the budget since declaration or decision.
    pub dispatches_in_budget: u32,
    /// Ambiguous observations counted against the budget since declaration or decision.
    pub observations_in_budget: u32,
    /// Reconciliation history.
    pub observations: Vec<Observation>,
    /// Set while a person must decide.
    pub escalation: Option<Escalation>,
    /// The latest operator decision.
    pub decision: Option<OperatorDecision>,
    /// Every amendment of the intent, oldest first (at most
    /// [`AMENDMENTS_MAX`](crate::limits::AMENDMENTS_MAX)).
    pub amendments: Vec<Amendment>,
}

impl EffectRecord {
    /// The open attempt, if any (at most one exists).
    pub fn open_attempt(&self) -> Option<&Attempt> {
        self.attempts.iter().rev().find(|a| a.outcome.is_none())
    }

    /// The open attempt, mutably.
    pub fn open_attempt_mut(&mut self) -> Option<&mut Attempt> {
        self.attempts.iter_mut().rev().find(|a| a.outcome.is_none())
    }

    /// The attempt with this fencing token.
    pub fn attempt_by_token(&self, token: u64) -> Option<&Attempt> {
        self.attempts.iter().find(|a| a.fencing_token == token)
    }

    /// The newest fencing token granted for this effect.
    pub fn latest_token(&self) -> Option<u64> {
        self.attempts.last().map(|a| a.fencing_token)
    }

    /// Whether a person must decide before anything else happens.
    pub fn is_escalated(&self) -> bool {
        self.escalation.is_some()
    }

    /// What names the open escalation, if any: the newest fencing token granted before it
    /// (zero if none was). An escalated effect is granted no attempt, so the token stays
    /// until the escalation is settled, and any later escalation follows a new attempt, so
    /// it names one escalation of the record's life. The escalation's time would not:
    /// ledger time may stand still for a while (after a change of leader), and one
    /// effect can be decided, attempted and escalated again within it.
    pub fn escalation_token(&self) -> Option<u64> {
        self.escalation
            .as_ref()
            .map(|_| self.latest_token().unwrap_or(0))
    }

    /// Whether the provider still deduplicates the provider key at real time `real_ms`
    /// (judge with the latest real time it may be, [`crate::Stamp::real_ms_max`]).
    pub fn within_horizon(&self, real_ms: u64) -> bool {
        self.horizon_deadline_ms.is_some_and(|d| real_ms < d)
    }

    /// Until when (real time, ms, like the horizon) a re-send of a keyed effect whose
    /// earlier dispatch is unsettled may still be dispatching: the provider deduplicates
    /// the key only until the horizon, and a request may take up to the declared
    /// processing bound to reach it, so the re-send's lease must end that much before the
    /// horizon. `None` for a tool that is not keyed, before any dispatch, and when the
    /// policy declares no processing bound: then nothing says when a re-send would reach
    /// the provider, so no re-send is covered by the horizon and an unsettled outcome is
    /// reconciled instead (as a look-up without the bound proves no absence, DESIGN.md
    /// section 7). It applies to re-sends only: a first dispatch starts the horizon.
    pub fn resend_deadline_ms(&self) -> Option<u64> {
        if self.policy.class != crate::policy::ReplayClass::KeyedIdempotent {
            return None;
        }
        let horizon_ms = self.horizon_deadline_ms?;
        let processing_ms = self.policy.processing_ms_max?;
        Some(horizon_ms.saturating_sub(processing_ms))
    }

    /// The ledger time (ms) from which a look-up that finds nothing proves that no
    /// dispatch of this effect took effect (DESIGN.md section 7), or `None` when the
    /// policy declares no processing bound, so that no look-up can ever prove it.
    ///
    /// A dispatch may reach the provider until its lease ends (heartbeats move that end;
    /// its holder's report brings it forward to the report's time, since a holder sends
    /// nothing after reporting),
    /// be processed up to `processing_ms_max` later, and show in look-ups up to
    /// `visibility_lag_ms` after that: the time is the latest dispatch lease end plus both
    /// (saturating). With no dispatch at all nothing can land, and it is 0.
    pub fn absence_provable_at_ms(&self) -> Option<u64> {
        self.absence_provable_before(u64::MAX)
    }

    /// How many not-found observations came from look-ups that may have been made before
    /// the absence deadline of their time, so that they proved nothing: each is judged by
    /// when its reconciliation attempt was granted ([`Self::looked_after_ms`]).
    pub fn early_not_found_observations(&self) -> usize {
        self.observations
            .iter()
            .filter(|o| o.result == ObservationResult::NotCommitted)
            .filter(|o| {
                let looked_after = self.looked_after_ms(o.fencing_token).unwrap_or(o.at_ms);
                self.absence_provable_before(o.fencing_token)
                    .is_some_and(|t| looked_after < t)
            })
            .count()
    }

    /// The latest ledger time (ms) a look-up made under the reconciliation attempt holding
    /// `token` is known to have followed: the attempt's grant, since a reconciler looks
    /// only once it holds the attempt. Not the time the observation reaches the ledger: a
    /// report can arrive long after its look-up (a partition, a pause, a clock jump), and
    /// a look-up that found nothing before an earlier dispatch could land proves nothing,
    /// however late it is reported.
    pub fn looked_after_ms(&self, token: u64) -> Option<u64> {
        self.attempt_by_token(token)
            .filter(|a| a.kind == AttemptKind::Reconcile)
            .map(|a| a.granted_at_ms)
    }

    /// [`Self::absence_provable_at_ms`] counting only dispatches granted before the
    /// attempt holding `token`.
    fn absence_provable_before(&self, token: u64) -> Option<u64> {
        let processing_ms = self.policy.processing_ms_max?;
        let lease_end_ms = self
            .attempts
            .iter()
            .filter(|a| a.kind == AttemptKind::Dispatch && a.fencing_token < token)
            .map(|a| a.lease_until_ms)
            .max();
        Some(lease_end_ms.map_or(0, |end_ms| {
            end_ms
                .saturating_add(processing_ms)
                .saturating_add(self.policy.visibility_lag_ms)
        }))
    }

    /// What must hold of every record at every moment. Returns the first violation.
    pub fn check_invariants(&self) -> Result<(), String> {
        let open: Vec<&Attempt> = self
            .attempts
            .iter()
            .filter(|a| a.outcome.is_none())
            .collect();
        if open.len() > 1 {
            return Err(format!("{}: {} open attempts", self.key, open.len()));
        }
        if let Some(a) = open.first() {
            let expected = match a.kind {
                AttemptKind::Dispatch => EffectState::InProgress,
                AttemptKind::Reconcile => EffectState::UnknownAfterDispatch,
            };
            if self.state != expected {
                return Err(format!(
                    "{}: open {:?} attempt in state {}",
                    self.key, a.kind, self.state
                ));
            }
        } else if self.state == EffectState::InProgress {
            return Err(format!("{}: in_progress without an open attempt", self.key));
        }
        if self
            .attempts
            .windows(2)
            .any(|w| w[0].fencing_token >= w[1].fencing_token)
        {
            return Err(format!("{}: fencing tokens not increasing", self.key));
        }
        if self
            .attempts
            .iter()
            .enumerate()
            .any(|(i, a)| a.attempt_id as usize != i + 1)
        {
            return Err(format!("{}: attempt ids not consecutive", self.key));
        }
        if (self.state == EffectState::Committed) != self.receipt.is_some() {
            return Err(format!("{}: receipt present iff committed", self.key));
        }
        if self.state == EffectState::FailedBeforeEffect && self.ambiguous {
            return Err(format!(
                "{}: failed_before_effect while a dispatch is unsettled",
                self.key
            ));
        }
        if self.is_escalated()
            && !matches!(
                self.state,
                EffectState::UnknownAfterDispatch | EffectState::FailedBeforeEffect
            )
        {
            return Err(format!("{}: escalated in state {}", self.key, self.state));
        }
        let collectable = matches!(
            self.state,
            EffectState::NotStarted | EffectState::Committed | EffectState::FailedBeforeEffect
        ) && !self.is_escalated();
        if self.retention_deadline_ms.is_some() != collectable {
            return Err(format!(
                "{}: retention deadline set iff collectable",
                self.key
            ));
        }
        if self.amendments.len() > AMENDMENTS_MAX {
            return Err(format!(
                "{}: {} amendments, at most {AMENDMENTS_MAX}",
                self.key,
                self.amendments.len()
            ));
        }
        if self
            .amendments
            .last()
            .is_some_and(|a| a.intent_hash != self.intent_hash)
        {
            return Err(format!(
                "{}: the last amendment is not the record's intent",
                self.key
            ));
        }
        Ok(())
    }
}
