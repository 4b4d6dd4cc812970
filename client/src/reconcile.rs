//! Reconciliation: settling an unknown outcome by asking the provider, never by guessing.
//!
//! A [`ProviderAdapter`] looks the effect up at the provider (by idempotency key, by an
//! external reference the dispatch attached, by a message id) and says committed (with a
//! receipt), not committed, or unknown. The runner holds a fenced reconciliation attempt
//! for every observation and records each one in the ledger, which escalates to a person
//! when its observation budget (`observations_max` in the tool's policy) is spent.
//! Providers that are only eventually consistent give a settle delay: "not found" right
//! after a send proves nothing, so the runner waits that long before each look.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use ledger_core::{
    EffectKey, EffectRecord, EffectState, EscalationReason, ObservationResult, ReconcileOutcome,
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
    /// the record).
    fn observe<'a>(&'a self, effect: &'a EffectRecord) -> BoxFuture<'a, Observation>;

    /// How long after a dispatch the provider's answer to a look-up can be trusted.
    fn settle_delay_ms(&self) -> u64 {
        0
    }
}

/// How reconciliation rounds are paced and bounded within one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileOptions {
    /// Most observations this call makes; the ledger's own budget escalates beyond it.
    pub rounds_max: u32,
    /// Pause between two ambiguous observations.
    pub round_interval_ms: u64,
    /// Lease asked for each reconciliation attempt.
    pub lease_ms: u64,
}

impl Default for ReconcileOptions {
    fn default() -> Self {
        ReconcileOptions {
            rounds_max: 3,
            round_interval_ms: 200,
            lease_ms: 10_000,
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
    /// Nothing was unknown: the effect is in this state.
    NotNeeded {
        /// Its state.
        state: EffectState,
    },
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
        Ok(answer)
    }

    async fn reconcile_once(
        &self,
        key: &EffectKey,
        adapter: &dyn ProviderAdapter,
        options: &ReconcileOptions,
    ) -> Result<Reconciled, ClientError> {
        let id = ids::begin_reconcile(key, &self.next_invocation());
        let outcome = self
            .ledger()
            .begin_reconcile(&id, key.clone(), self.holder(), Some(options.lease_ms))
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
        };
        let record =
            self.ledger().get(key.clone()).await?.ok_or_else(|| {
                ClientError::Malformed(format!("{key} vanished while reconciling"))
            })?;
        tokio::time::sleep(Duration::from_millis(adapter.settle_delay_ms())).await;
        let (result, detail) = match adapter.observe(&record).await {
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
