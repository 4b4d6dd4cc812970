//! One granted attempt: dispatch under heartbeats, report, and the guard that reports a
//! cancelled dispatch as unknown.

use std::future::Future;
use std::time::Duration;

use ledger_core::{EffectKey, EffectState, Grant, Refusal, Report};

use super::{ids, AttemptInfo, DispatchResult, EffectRunner, RunError};
use crate::error::ClientError;
use crate::ledger::LedgerClient;

/// How a granted attempt ended, as the ledger took it.
pub(super) struct AttemptEnd {
    /// What the dispatch proved.
    pub result: DispatchResult,
    /// The effect's state after the report; `None` when the ledger no longer took a
    /// report from this attempt (its lease ran out or a newer attempt exists).
    pub state: Option<EffectState>,
    /// The stored receipt, when committed.
    pub receipt: Option<String>,
}

/// Dispatches under `grant` and reports the result.
pub(super) async fn run_attempt<F, Fut>(
    runner: &EffectRunner,
    key: &EffectKey,
    grant: &Grant,
    dispatch: &mut F,
) -> Result<AttemptEnd, RunError>
where
    F: FnMut(AttemptInfo) -> Fut,
    Fut: Future<Output = DispatchResult>,
{
    let token = grant.fencing_token;
    let attempt = AttemptInfo {
        key: key.clone(),
        attempt_id: grant.attempt_id,
        fencing_token: token,
        provider_key: grant.provider_key.clone(),
    };
    let mut guard = ReportGuard {
        ledger: runner.ledger.clone(),
        key: key.clone(),
        token,
        pending: Some(Report::Unknown {
            reason: "the dispatch was cancelled before it ended".into(),
        }),
    };
    let result = with_heartbeats(runner, key, token, dispatch(attempt)).await;
    let report = as_report(&result);
    guard.pending = Some(report.clone());
    let id = ids::report(key, token, report_kind(&report));
    let reported = runner.ledger.report(&id, key.clone(), token, report).await;
    guard.pending = None;
    match reported {
        Ok((state, receipt)) => Ok(AttemptEnd {
            result,
            state: Some(state),
            receipt,
        }),
        // Another attempt's fact closed this one: read what it left.
        Err(ClientError::Refused(Refusal::AlreadyFinal { state })) => {
            let receipt = match runner.ledger.get(key.clone()).await {
                Ok(record) => record.and_then(|r| r.receipt),
                Err(source) => return Err(RunError::Unreported { result, source }),
            };
            Ok(AttemptEnd {
                result,
                state: Some(state),
                receipt,
            })
        }
        Err(ClientError::Refused(Refusal::LeaseExpired { .. } | Refusal::StaleToken { .. })) => {
            Ok(AttemptEnd {
                result,
                state: None,
                receipt: None,
            })
        }
        Err(source) => Err(RunError::Unreported { result, source }),
    }
}

fn as_report(result: &DispatchResult) -> Report {
    match result {
        DispatchResult::Committed { receipt } => Report::Committed {
            receipt: receipt.clone(),
        },
        DispatchResult::NotCommitted { proof } => Report::FailedBeforeEffect {
            proof: proof.clone(),
        },
        DispatchResult::Unknown { reason } => Report::Unknown {
            reason: reason.clone(),
        },
    }
}

fn report_kind(report: &Report) -> &'static str {
    match report {
        Report::Committed { .. } => "committed",
        Report::FailedBeforeEffect { .. } => "failed",
        Report::Unknown { .. } => "unknown",
    }
}

/// Whether a grant may still be acted on. The lease started after the claim was asked for,
/// so while less than two thirds of it have passed since then (on this client's monotonic
/// clock, immune to clock offsets) it is certainly live. An answer that took longer, held up
/// by a partition or a pause, is confirmed with a heartbeat first: sending on a lease that
/// ran out could duplicate an effect another attempt has since taken over. The heartbeat's
/// own answer obeys the same rule (a retried heartbeat can bring back the stored answer of
/// one applied long ago), so a slow confirmation is asked again, a few times at most.
pub(super) async fn grant_still_live(
    runner: &EffectRunner,
    key: &EffectKey,
    grant: &Grant,
    asked_at: tokio::time::Instant,
) -> bool {
    let lease_ms = grant.lease_until_ms.saturating_sub(grant.granted_at_ms);
    let safe = Duration::from_millis(lease_ms.saturating_sub(lease_ms / 3));
    if asked_at.elapsed() < safe {
        return true;
    }
    for round in 0..CONFIRMATIONS_MAX {
        let asked_at = tokio::time::Instant::now();
        let id = ids::confirm(key, grant.fencing_token, round);
        let lease_ms = Some(runner.options().lease_ms);
        match runner
            .ledger
            .heartbeat(&id, key.clone(), grant.fencing_token, lease_ms)
            .await
        {
            Ok(_) if asked_at.elapsed() < safe => return true,
            Ok(_) => {
                tracing::warn!(effect = %key, round, "late grant confirmed late; asking again")
            }
            Err(e) => {
                tracing::warn!(effect = %key, error = %e, "late grant not confirmed; not sending");
                return false;
            }
        }
    }
    false
}

/// How many heartbeats may try to confirm a late grant.
const CONFIRMATIONS_MAX: u32 = 3;

/// Runs `dispatch` (bounded by the dispatch timeout, if any) while extending the lease
/// every third of it.
async fn with_heartbeats(
    runner: &EffectRunner,
    key: &EffectKey,
    token: u64,
    dispatch: impl Future<Output = DispatchResult>,
) -> DispatchResult {
    let options = runner.options();
    let timed = async {
        match options.dispatch_timeout_ms {
            Some(ms) => tokio::time::timeout(Duration::from_millis(ms), dispatch)
                .await
                .unwrap_or_else(|_| DispatchResult::Unknown {
                    reason: format!("no answer from the provider within {ms} ms"),
                }),
            None => dispatch.await,
        }
    };
    let beats = heartbeats(runner.ledger(), key, token, options.lease_ms);
    tokio::select! {
        biased;
        result = timed => result,
        () = beats => DispatchResult::Unknown {
            reason: "heartbeats stopped".into(),
        },
    }
}

/// Extends the lease until dropped; stops extending (and waits to be dropped) once the
/// ledger says the lease is gone, since the dispatch cannot be called back.
async fn heartbeats(ledger: &LedgerClient, key: &EffectKey, token: u64, lease_ms: u64) {
    let every = Duration::from_millis((lease_ms / 3).max(1));
    for seq in 1.. {
        tokio::time::sleep(every).await;
        let id = ids::heartbeat(key, token, seq);
        match ledger
            .heartbeat(&id, key.clone(), token, Some(lease_ms))
            .await
        {
            Ok(_) => {}
            Err(ClientError::Refused(refusal)) => {
                tracing::warn!(effect = %key, %refusal, "lease lost while dispatching");
                std::future::pending::<()>().await;
            }
            Err(e) => tracing::warn!(effect = %key, error = %e, "heartbeat failed"),
        }
    }
}

/// Sends the pending report if the attempt's future is dropped before its report was
/// taken: unknown while dispatching (it may have reached the provider), the real result
/// once known. Best effort; if it is lost too, the lease runs out and the leader's
/// sweeper marks the effect unknown, never failed.
struct ReportGuard {
    ledger: LedgerClient,
    key: EffectKey,
    token: u64,
    pending: Option<Report>,
}

impl Drop for ReportGuard {
    fn drop(&mut self) {
        let Some(report) = self.pending.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (ledger, key, token) = (self.ledger.clone(), self.key.clone(), self.token);
        let id = ids::report(&key, token, report_kind(&report));
        runtime.spawn(async move {
            if let Err(e) = ledger.report(&id, key.clone(), token, report).await {
                tracing::debug!(effect = %key, error = %e, "report after cancellation failed");
            }
        });
    }
}
