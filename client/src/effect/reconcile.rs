//! Reconciliation rounds: [`EffectRunner::reconcile`] holds a fenced reconciliation
//! attempt for each observation an adapter makes, records it in the ledger, and judges a
//! "not found" against when absence becomes provable (see [`crate::reconcile`] for the
//! adapter's side and the rules).

use std::time::Duration;

use ledger_core::limits::{fit_detail, fit_receipt};
use ledger_core::{
    EffectKey, EffectRecord, EffectState, EscalationReason, ObservationResult, ReconcileOutcome,
    Refusal,
};

use super::{ids, EffectRunner};
use crate::error::ClientError;
use crate::reconcile::{
    Observation, ProviderAdapter, ReconcileOptions, Reconciled, RECONCILIATIONS_TOTAL,
};

impl EffectRunner {
    /// Reconciles the unknown effect `key` through `adapter`, in at most
    /// `options.rounds_max` rounds: each one observation, or two when the first "not
    /// found" came too early to prove absence and the wait for that fits
    /// `options.absence_wait_ms_max`.
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

    /// One round: an observation that can settle the effect. A "not found" under an
    /// attempt granted too early proves nothing (the ledger judges a look-up by its
    /// attempt's grant, see `EffectRecord::looked_after_ms`); it is recorded, and when
    /// absence becomes provable within `absence_wait_ms_max` the runner waits until then
    /// and looks again under a new attempt, once.
    async fn reconcile_once(
        &self,
        key: &EffectKey,
        adapter: &dyn ProviderAdapter,
        options: &ReconcileOptions,
    ) -> Result<Reconciled, ClientError> {
        let mut may_wait = true;
        loop {
            let id = ids::begin_reconcile(key, &self.next_invocation());
            let outcome = self
                .ledger()
                .begin_reconcile(&id, key.clone(), self.holder(), Some(options.lease_ms))
                .await?;
            // The grant was stamped before this instant: a wait counted from here ends no
            // sooner than the same wait counted from the grant.
            let granted = tokio::time::Instant::now();
            let grant = match outcome {
                ReconcileOutcome::Observe(grant) => grant,
                ReconcileOutcome::Replay { receipt } => {
                    return Ok(Reconciled::Committed { receipt })
                }
                ReconcileOutcome::InFlight { .. } => return Ok(Reconciled::InFlight),
                ReconcileOutcome::Escalated { reason } => {
                    return Ok(Reconciled::Escalated { reason })
                }
                ReconcileOutcome::NotNeeded {
                    state: EffectState::FailedBeforeEffect,
                } => return Ok(Reconciled::NotCommitted),
                ReconcileOutcome::NotNeeded { state } => {
                    return Ok(Reconciled::NotNeeded { state })
                }
                // Collected after retention: there is nothing left to reconcile here.
                ReconcileOutcome::Expired(expired) => return Ok(Reconciled::Expired(expired)),
            };
            let record = self.ledger().get(key.clone()).await?.ok_or_else(|| {
                ClientError::Malformed(format!("{key} vanished while reconciling"))
            })?;
            let seen = adapter.observe(&record).await;
            let wait = match &seen {
                Observation::NotCommitted { .. } if may_wait => {
                    absence_wait(&record, &grant, options)
                }
                _ => None,
            };
            // Fitted to the ledger's limits: an adapter's text comes from the provider.
            let (result, detail) = match seen {
                Observation::Committed { receipt, detail } => (
                    ObservationResult::Committed {
                        receipt: fit_receipt(&receipt),
                    },
                    fit_detail(&detail),
                ),
                Observation::NotCommitted { detail } => {
                    (ObservationResult::NotCommitted, fit_detail(&detail))
                }
                Observation::Unknown { detail } => {
                    (ObservationResult::StillUnknown, fit_detail(&detail))
                }
            };
            let id = ids::observe(key, grant.fencing_token);
            let observed = self
                .ledger()
                .observe(&id, key.clone(), grant.fencing_token, result, &detail)
                .await;
            let (state, escalated) = match observed {
                Ok(observed) => observed,
                // The look-up outlived this attempt's lease, or another reconciler took
                // over: the observation is not recorded, and the outcome is as unknown as
                // before. Not this run's refusal, which a caller would take as final.
                Err(ClientError::Refused(
                    refusal @ (Refusal::LeaseExpired { .. } | Refusal::StaleToken { .. }),
                )) => {
                    tracing::warn!(effect = %key, %refusal, "observation not recorded");
                    return Ok(Reconciled::StillUnknown);
                }
                Err(e) => return Err(e),
            };
            match state {
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
                    return Ok(Reconciled::Committed { receipt });
                }
                EffectState::FailedBeforeEffect => return Ok(Reconciled::NotCommitted),
                _ if escalated => {
                    let reason = self.escalation_reason(key).await?;
                    return Ok(Reconciled::Escalated { reason });
                }
                _ => {}
            }
            let Some(wait) = wait else {
                return Ok(Reconciled::StillUnknown);
            };
            // Too early for "not found" to prove anything: look again once it can.
            tokio::time::sleep_until(granted + wait).await;
            may_wait = false;
        }
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

/// How long after `grant` to wait before a look-up under a new attempt can prove absence:
/// `None` when a look-up under `grant` already can, when none ever can (no declared
/// processing bound), or when the wait would not fit in this call's budget.
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
    (wait_ms <= options.absence_wait_ms_max).then(|| Duration::from_millis(wait_ms))
}

/// Added to every wait for absence to become provable, against rounding of ledger time.
const ABSENCE_MARGIN_MS: u64 = 50;
