//! The actors beside the cluster: agents with retry policies, stateless tool-server
//! instances, and the faults that strike the boundaries between them and the providers.
//!
//! An agent runs the steps of a workflow. Each step intends one effect (or one per slot)
//! at one provider; the agent calls a tool-server instance, waits for the answer up to
//! its timeout, and, depending on its strategy, retries on another instance. A tool
//! server turns the call into provider requests, through the ledger ([`Strategy::Ledger`],
//! the real `EffectRunner`) or directly (the baselines). Everything the agent knows at the
//! end is its [`Final`] answer per intent; what really happened is in the providers.
//!
//! - [`faults`]: boundary faults planned per episode, and the supervisor that crashes and
//!   restarts machines;
//! - [`toolserver`]: tool-server instances, one per machine and incarnation;
//! - [`agent`]: the agent and its durable workflow state.

use std::collections::BTreeMap;

use ledger_core::EscalationReason;

use crate::world::ProviderKind;

pub mod agent;
pub mod faults;
pub mod toolserver;

/// How long an agent waits for a tool server's answer.
pub const AGENT_TIMEOUT_MS: u64 = 10_000;
/// Most calls an agent makes for one intent (first call included) when it retries.
pub const AGENT_CALLS_MAX: u32 = 5;
/// Pause before an agent's retry, before jitter.
pub const AGENT_BACKOFF_MS: u64 = 1_000;
/// How long a crashed tool-server instance stays down.
pub const INSTANCE_DOWN_MS: u64 = 1_000;
/// The namespace of the effects agents run through the ledger.
pub const AGENT_NAMESPACE: &str = "agents";

/// How a tool call is made safe to retry, or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Strategy {
    /// Retry on any ambiguous answer; no idempotency key.
    BlindRetry,
    /// Retry; each request carries a freshly minted idempotency key.
    FreshKey,
    /// Retry; every request carries a key derived from the step, honoured only by keyed
    /// providers within their horizon.
    ProviderToken,
    /// Never retry a mutation: an ambiguous answer stays ambiguous.
    NeverRetry,
    /// The falsification baseline: where the provider honours an idempotency key, retry
    /// with the step's token (as `ProviderToken`); where it does not, never retry (as
    /// `NeverRetry`).
    TokenOrNever,
    /// The effect ledger (the real `EffectRunner` on the real cluster), retrying.
    Ledger(KeyMode),
}

/// Where a ledger effect's key comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyMode {
    /// The agent runtime's step key, as is.
    Explicit,
    /// Derived from workflow, step, tool and canonical intent.
    Derived,
}

impl Strategy {
    /// Every strategy, baselines first.
    pub const ALL: [Strategy; 7] = [
        Strategy::BlindRetry,
        Strategy::FreshKey,
        Strategy::ProviderToken,
        Strategy::NeverRetry,
        Strategy::TokenOrNever,
        Strategy::Ledger(KeyMode::Explicit),
        Strategy::Ledger(KeyMode::Derived),
    ];

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::BlindRetry => "blind-retry",
            Strategy::FreshKey => "fresh-key",
            Strategy::ProviderToken => "provider-token",
            Strategy::NeverRetry => "never-retry",
            Strategy::TokenOrNever => "token-or-never",
            Strategy::Ledger(KeyMode::Explicit) => "ledger-explicit-key",
            Strategy::Ledger(KeyMode::Derived) => "ledger-derived-key",
        }
    }

    /// The strategy named `name`.
    pub fn parse(name: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Whether the agent retries an ambiguous answer from a call to `kind`.
    pub fn retries(self, kind: ProviderKind) -> bool {
        match self {
            Strategy::NeverRetry => false,
            Strategy::TokenOrNever => kind.honours_key(),
            _ => true,
        }
    }

    /// Whether a direct request to `kind` carries the step's token (`tok-{key}#{slot}`).
    pub fn sends_step_token(self, kind: ProviderKind) -> bool {
        match self {
            Strategy::ProviderToken => true,
            Strategy::TokenOrNever => kind.honours_key(),
            _ => false,
        }
    }

    /// Whether it runs on the ledger.
    pub fn uses_ledger(self) -> bool {
        matches!(self, Strategy::Ledger(_))
    }
}

/// One effect an agent intends (or, with `slots > 1`, one per slot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    /// The provider.
    pub kind: ProviderKind,
    /// Ground-truth identity: the effect the user wants. A model repair of an earlier
    /// intent of the same step carries that intent's id (the user still wants one
    /// effect); an intended new effect has its own. Slot `i` of a multi-slot intent is
    /// `{intent_id}#{i}`.
    pub intent_id: String,
    /// The parameters.
    pub params: BTreeMap<String, String>,
    /// The workflow.
    pub workflow_id: String,
    /// The step within the workflow.
    pub step_id: String,
    /// The runtime's explicit key for the step.
    pub key: String,
    /// Declared multiplicity (recipients of one message, say).
    pub slots: u32,
    /// Whether the agent means it as a second effect after an earlier intent of the same
    /// step and target with one parameter changed, and says so: on a conflict it makes
    /// the explicit transition, a new key (explicit keys) or a new sequence number
    /// (derived keys). A model repair is not one: it is the same effect, and its conflict
    /// ends it.
    pub new_action: bool,
    /// The runtime's sequence number for a further effect in the same step (derived keys).
    pub sequence: Option<String>,
}

impl Intent {
    /// The parameters as canonical JSON (sorted members, strings only).
    pub fn params_json(&self) -> String {
        serde_json::to_string(&self.params).expect("string map to JSON")
    }

    /// The ground-truth id of slot `slot` (the intent's own id when it has one slot).
    pub fn slot_intent_id(&self, slot: u32) -> String {
        if self.slots > 1 {
            format!("{}#{slot}", self.intent_id)
        } else {
            self.intent_id.clone()
        }
    }
}

/// A tool server's answer to one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolReply {
    /// Done (or done before): the receipt of each slot.
    Ok {
        /// Receipts, one per slot.
        receipts: Vec<String>,
    },
    /// Refused, with proof that nothing happened.
    Rejected {
        /// Why.
        reason: String,
    },
    /// Unknown: timeout, lost answer, in flight elsewhere, not reconciled yet.
    Ambiguous {
        /// Why.
        reason: String,
    },
    /// The key was used before with other arguments: the ledger's conflict, or a keyed
    /// provider refusing a reused idempotency key (409).
    Conflict {
        /// The differing fields.
        fields: Vec<String>,
    },
    /// A person must decide.
    Escalated {
        /// Why.
        reason: EscalationReason,
    },
}

/// What an agent knows about an intent at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Final {
    /// Told it is done.
    Success {
        /// The receipts it was given.
        receipts: Vec<String>,
    },
    /// Told it failed, with proof or a refusal.
    Failed {
        /// Why.
        reason: String,
        /// Refused because its key already names another intent (a ledger conflict, or a
        /// provider refusing a reused idempotency key): treated as a duplicate.
        key_taken: bool,
    },
    /// Does not know.
    Unresolved {
        /// Why.
        reason: String,
        /// The escalation, when the ledger stopped at a person.
        escalation: Option<EscalationReason>,
    },
}
