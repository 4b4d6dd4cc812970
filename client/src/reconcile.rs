//! Reconciliation: settling an unknown outcome by asking the provider, never by guessing.
//!
//! A [`ProviderAdapter`] looks the effect up at the provider (by idempotency key, by an
//! external reference the dispatch attached, by a message id) and says what it saw:
//! committed (with a receipt), not found, or unknown. The runner holds a fenced
//! reconciliation attempt for every observation and records each one in the ledger, which
//! escalates to a person when its observation budget (`observations_max` in the tool's
//! policy) is spent.
//!
//! An adapter only says what it saw; whether "not found" proves anything is decided by the
//! ledger, and the runner (`EffectRunner::reconcile`, in `effect`) looks again when a look-up
//! came too early (design §7). It proves absence only once no earlier
//! dispatch can still land: after the latest dispatch's lease end plus the provider's
//! declared processing bound plus its search-visibility lag (`processing_ms_max` and
//! `visibility_lag_ms` in the tool's policy). The ledger cannot see when a look-up was
//! made, only that it followed the grant of the reconciliation attempt it is reported
//! under, so it judges a "not found" by that grant, however late the report arrives. A
//! look-up too early is recorded and proves nothing; the runner waits, within the call's
//! budget (`absence_wait_ms_max`), and looks again under a new attempt; past the budget
//! the outcome stays unknown. A provider without a declared processing bound never proves absence by a
//! look-up: only finding the effect settles it, and otherwise the ledger escalates.

use std::future::Future;
use std::pin::Pin;

use ledger_core::{EffectRecord, EffectState, EscalationReason, ExpiredEffect};

/// A boxed future, so adapters can be used as trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the provider says about an effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    /// It holds the effect.
    Committed {
        /// Its result or resource id.
        receipt: String,
        /// How this was established.
        detail: String,
    },
    /// It proves the effect does not exist.
    NotCommitted {
        /// How this was established.
        detail: String,
    },
    /// It cannot tell (yet).
    Unknown {
        /// Why not.
        detail: String,
    },
}

/// Looks effects up at one provider.
pub trait ProviderAdapter: Send + Sync {
    /// What the provider says about `effect` (its provider key, intent and target are in
    /// the record), as seen now: whether a "not found" proves anything is not for the
    /// adapter to judge.
    fn observe<'a>(&'a self, effect: &'a EffectRecord) -> BoxFuture<'a, Observation>;
}

/// How reconciliation rounds are paced and bounded within one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileOptions {
    /// Most rounds this call makes, each one observation, or two when the first came too
    /// early to prove absence and this call waited for that; the ledger's own budget
    /// escalates beyond it.
    pub rounds_max: u32,
    /// Pause between two ambiguous observations.
    pub round_interval_ms: u64,
    /// Lease asked for each reconciliation attempt: one look-up and its report.
    pub lease_ms: u64,
    /// Longest one round waits for a "not found" to become proof (design §7) before it
    /// looks again under a new attempt; a longer wait leaves the outcome unknown for now.
    pub absence_wait_ms_max: u64,
}

impl Default for ReconcileOptions {
    fn default() -> Self {
        ReconcileOptions {
            rounds_max: 3,
            round_interval_ms: 200,
            lease_ms: 10_000,
            absence_wait_ms_max: 20_000,
        }
    }
}

/// Where reconciliation left the effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    /// Committed (observed now or before); the receipt.
    Committed {
        /// The stored receipt.
        receipt: String,
    },
    /// Proven not committed: the effect is `failed_before_effect` and may be claimed again
    /// (with the same provider key).
    NotCommitted,
    /// Observation could not tell within this call's rounds.
    StillUnknown,
    /// Another attempt holds the effect.
    InFlight,
    /// A person must decide.
    Escalated {
        /// Why.
        reason: EscalationReason,
    },
    /// The record was collected after its retention; what the ledger kept of it.
    Expired(ExpiredEffect),
    /// Nothing was unknown: the effect is in this state.
    NotNeeded {
        /// Its state.
        state: EffectState,
    },
}

/// Reconciliations this process ran, by how they ended (`committed`, `not_committed`,
/// `still_unknown`, ...). Recorded through the `metrics` facade: a binary that installs a
/// recorder (`ledger-mcp-server`) exports it.
pub const RECONCILIATIONS_TOTAL: &str = "ledger_client_reconciliations_total";

impl Reconciled {
    /// A short name of how a reconciliation ended.
    pub fn label(&self) -> &'static str {
        match self {
            Reconciled::Committed { .. } => "committed",
            Reconciled::NotCommitted => "not_committed",
            Reconciled::StillUnknown => "still_unknown",
            Reconciled::InFlight => "in_flight",
            Reconciled::Escalated { .. } => "escalated",
            Reconciled::NotNeeded { .. } => "not_needed",
            Reconciled::Expired(_) => "expired",
        }
    }
}
