//! Reconciliation: settling an unknown outcome by asking the provider, never by guessing.
//!
//! A [`ProviderAdapter`] looks the effect up at the provider (by idempotency key, by an
//! external reference the dispatch attached, by a message id) and says what it saw:
//! committed (with a receipt), not found, or unknown. The runner holds a fenced
//! reconciliation attempt for every observation and records each one in the ledger, which
//! escalates to a person when its observation budget (`observations_max` in the tool's
//! policy) is spent.
//!
//! An adapter only says what it saw; whether "not found" proves anything is decided here
//! and, as a backstop, by the ledger (design §7). It proves absence only once no earlier
//! dispatch can still land: after the latest dispatch's lease end plus the provider's
//! declared processing bound plus its search-visibility lag (`processing_ms_max` and
//! `visibility_lag_ms` in the tool's policy). Until then the runner waits, within the
//! call's budget (`absence_wait_ms_max`), and looks again; past the budget the outcome
//! stays unknown. A provider without a declared processing bound never proves absence by a
//! look-up: only finding the effect settles it, and otherwise the ledger escalates.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use ledger_core::{
    EffectKey, EffectRecord, EffectState, EscalationReason, ExpiredEffect, ObservationResult,
    ReconcileOutcome,
};

use crate::effect::{ids, EffectRunner};
use crate::error::ClientError;

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
    /// Most observations this call makes; the ledger's own budget escalates beyond it.
    pub rounds_max: u32,
    /// Pause between two ambiguous observations.
    pub round_interval_ms: u64,
    /// Lease asked for each reconciliation attempt, on top of `absence_wait_ms_max`.
    pub lease_ms: u64,
    /// Longest this call waits, holding its reconciliation attempt, for a "not found" to
    /// become proof (design §7); a longer wait leaves the outcome unknown for now.
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

impl EffectRunner {
    /// Reconciles the unknown effect `key` through `adapter`, in at most
    /// `options.rounds_max` observations.
    pub async fn reconcile(
        &self,
        key: &EffectKey,
        adapter: &dyn ProviderAdapter,
        options: &ReconcileOptions,
    ) -> Result<Reconciled, ClientError> {
        let mut answer = Reconciled::StillUnknown;
        for round in 0..options.rounds_max {
            if round > 0 {
                tokio::time::sleep(Duration::from_millis(options.round_interval_ms)).await;
            }
            answer = self.reconcile_once(key, adapter, options).await?;
            if !matches!(answer, Reconciled::StillUnknown | Reconciled::InFlight) {
                break;
            }
        }
        metrics::counter!(RECONCILIATIONS_TOTAL, "result" => answer.label()).increment(1);
        Ok(answer)
    }

    async fn reconcile_once(
        &self,
        key: &EffectKey,
        adapter: &dyn ProviderAdapter,
        options: &ReconcileOptions,
    ) -> Result<Reconciled, ClientError> {
        let id = ids::begin_reconcile(key, &self.next_invocation());
        let asked_at = tokio::time::Instant::now();
        let lease_ms = options.lease_ms.saturating_add(options.absence_wait_ms_max);
        let outcome = self
            .ledger()
            .begin_reconcile(&id, key.clone(), self.holder(), Some(lease_ms))
            .await?;
        let grant = match outcome {
            ReconcileOutcome::Observe(grant) => grant,
            ReconcileOutcome::Replay { receipt } => return Ok(Reconciled::Committed { receipt }),
            ReconcileOutcome::InFlight { .. } => return Ok(Reconciled::InFlight),
            ReconcileOutcome::Escalated { reason } => return Ok(Reconciled::Escalated { reason }),
            ReconcileOutcome::NotNeeded {
                state: EffectState::FailedBeforeEffect,
            } => return Ok(Reconciled::NotCommitted),
            ReconcileOutcome::NotNeeded { state } => return Ok(Reconciled::NotNeeded { state }),
            // Collected after retention: there is nothing left to reconcile here.
            ReconcileOutcome::Expired(expired) => return Ok(Reconciled::Expired(expired)),
        };
        let record =
            self.ledger().get(key.clone()).await?.ok_or_else(|| {
                ClientError::Malformed(format!("{key} vanished while reconciling"))
            })?;
        let mut seen = adapter.observe(&record).await;
        if matches!(seen, Observation::NotCommitted { .. }) {
            let wait = absence_wait(&record, &grant, options);
            if let Some(until) = wait.map(|w| asked_at + w) {
                // Too early for "not found" to prove anything: look again once it can.
                tokio::time::sleep_until(until).await;
                seen = adapter.observe(&record).await;
            }
        }
        let (result, detail) = match seen {
            Observation::Committed { receipt, detail } => {
                (ObservationResult::Committed { receipt }, detail)
            }
            Observation::NotCommitted { detail } => (ObservationResult::NotCommitted, detail),
            Observation::Unknown { detail } => (ObservationResult::StillUnknown, detail),
        };
        let id = ids::observe(key, grant.fencing_token);
        let (state, escalated) = self
            .ledger()
            .observe(&id, key.clone(), grant.fencing_token, result, &detail)
            .await?;
        Ok(match state {
            EffectState::Committed => {
                let receipt = self
                    .ledger()
                    .get(key.clone())
                    .await?
                    .and_then(|r| r.receipt)
                    .ok_or_else(|| {
                        ClientError::Malformed(format!(
                            "{key} is committed but the ledger returned no receipt"
                        ))
                    })?;
                Reconciled::Committed { receipt }
            }
            EffectState::FailedBeforeEffect => Reconciled::NotCommitted,
            _ if escalated => Reconciled::Escalated {
                reason: self.escalation_reason(key).await?,
            },
            _ => Reconciled::StillUnknown,
        })
    }

    async fn escalation_reason(&self, key: &EffectKey) -> Result<EscalationReason, ClientError> {
        Ok(self
            .ledger()
            .get(key.clone())
            .await?
            .and_then(|r| r.escalation.map(|e| e.reason))
            .unwrap_or(EscalationReason::ObservationBudgetSpent))
    }
}

/// How long after asking for `grant` to wait before a "not found" can prove absence:
/// `None` when it already can, when it never can (no declared processing bound), or when
/// the wait would not fit in this call's budget or in the attempt's certain lease.
fn absence_wait(
    record: &EffectRecord,
    grant: &ledger_core::Grant,
    options: &ReconcileOptions,
) -> Option<Duration> {
    let provable_at_ms = record.absence_provable_at_ms()?;
    let wait_ms = provable_at_ms.checked_sub(grant.granted_at_ms)?;
    if wait_ms == 0 {
        return None;
    }
    // Ledger time may run a little faster or slower than this client's clock.
    let wait_ms = wait_ms + wait_ms / 20 + ABSENCE_MARGIN_MS;
    let lease_ms = grant.lease_until_ms.saturating_sub(grant.granted_at_ms);
    let certain_ms = lease_ms.saturating_sub(lease_ms / 3);
    (wait_ms <= options.absence_wait_ms_max && wait_ms < certain_ms)
        .then(|| Duration::from_millis(wait_ms))
}

/// Added to every wait for absence to become provable, against rounding of ledger time.
const ABSENCE_MARGIN_MS: u64 = 50;
