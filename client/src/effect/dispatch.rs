//! One granted attempt: dispatch under heartbeats, report, and the guard that reports a
//! cancelled dispatch as unknown and sends again a report the ledger did not answer.

use std::future::Future;
use std::time::Duration;

use ledger_core::limits::{fit_detail, fit_receipt};
use ledger_core::{EffectKey, EffectState, Grant, Refusal, Report, TenantSettings};

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

/// Dispatches under `grant`, whose lease is certain from `live_since` (see
/// [`grant_still_live`]), and reports the result.
pub(super) async fn run_attempt<F, Fut>(
    runner: &EffectRunner,
    key: &EffectKey,
    grant: &Grant,
    live_since: tokio::time::Instant,
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
    let result = with_heartbeats(runner, key, grant, live_since, dispatch(attempt)).await;
    let report = as_report(&result);
    guard.pending = Some(report.clone());
    let id = ids::report(key, token, report_kind(&report));
    let reported = runner.ledger.report(&id, key.clone(), token, report).await;
    // The ledger's answer, a refusal included, settles the report. Without one (no
    // leader, the node lost, overload) it stays pending: the guard sends it again as the
    // attempt ends, with the same id, so the ledger takes it at most once, and a
    // committed effect is not left to run out into an unknown one.
    if matches!(reported, Ok(_) | Err(ClientError::Refused(_))) {
        guard.pending = None;
    }
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

/// The report of `result`, its text fitted to the ledger's limits (what a dispatch
/// returns comes from an upstream or provider, whose answers have no such limit).
fn as_report(result: &DispatchResult) -> Report {
    match result {
        DispatchResult::Committed { receipt } => Report::Committed {
            receipt: fit_receipt(receipt),
        },
        DispatchResult::NotCommitted { proof } => Report::FailedBeforeEffect {
            proof: fit_detail(proof),
        },
        DispatchResult::Unknown { reason } => Report::Unknown {
            reason: fit_detail(reason),
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
///
/// Returns the instant the lease's certain part counts from (when the claim, or the
/// heartbeat that confirmed it, was asked), or `None` when the grant must not be used.
pub(super) async fn grant_still_live(
    runner: &EffectRunner,
    key: &EffectKey,
    grant: &Grant,
    asked_at: tokio::time::Instant,
) -> Option<tokio::time::Instant> {
    let lease_ms = granted_lease_ms(grant, runner.options().lease_ms);
    let safe = certain_part(lease_ms);
    if asked_at.elapsed() < safe {
        return Some(asked_at);
    }
    for round in 0..CONFIRMATIONS_MAX {
        let asked_at = tokio::time::Instant::now();
        let id = ids::confirm(key, grant.fencing_token, round);
        match runner
            .ledger
            .heartbeat(&id, key.clone(), grant.fencing_token, Some(lease_ms))
            .await
        {
            Ok(_) if asked_at.elapsed() < safe => return Some(asked_at),
            Ok(_) => {
                tracing::warn!(effect = %key, round, "late grant confirmed late; asking again")
            }
            Err(e) => {
                tracing::warn!(effect = %key, error = %e, "late grant not confirmed; not sending");
                return None;
            }
        }
    }
    None
}

/// How many heartbeats may try to confirm a late grant.
const CONFIRMATIONS_MAX: u32 = 3;

/// The proof a grant given back unused carries, by why it was not used.
pub(super) const NEVER_SENT_LATE: &str = "never sent: the grant arrived after its lease could \
                                          have run out, so this call gave it back without \
                                          dispatching";
/// ... when the caller stopped waiting before the grant arrived.
pub(super) const NEVER_SENT_ABANDONED: &str = "never sent: the call that claimed it had \
                                               stopped waiting before it could be used";
/// ... when it named another provider key than the effect's.
pub(super) const NEVER_SENT_WRONG_KEY: &str = "never sent: the grant named another provider \
                                               key than the effect's";

/// Gives back a grant this call never used: reports it failed before effect, which it is,
/// since nothing was sent, so that the next claim is granted at once instead of waiting
/// for the lease to run out and the effect to be taken for unknown (to reconcile, or for
/// an irreversible tool with no look-up, to escalate). The grant was minted for this
/// call's own claim id, so no one else holds it. The ledger takes the report only while
/// the attempt is the effect's live one; otherwise it refuses and nothing changes.
pub(super) async fn give_back_unused(
    ledger: &LedgerClient,
    key: &EffectKey,
    grant: &Grant,
    proof: &str,
) {
    let report = Report::FailedBeforeEffect {
        proof: proof.into(),
    };
    let id = ids::report(key, grant.fencing_token, report_kind(&report));
    let given_back = ledger
        .report(&id, key.clone(), grant.fencing_token, report)
        .await;
    if let Err(e) = given_back {
        tracing::debug!(effect = %key, error = %e, "unused grant not given back; its lease ends it");
    }
}

/// Runs `dispatch` (bounded by the dispatch timeout, if any) under the granted lease.
///
/// The lease is the one the ledger *granted* (after the policy clamped what was asked),
/// and it fences the dispatch: heartbeats extend it every third of it, and once it can no
/// longer be known to be live (the ledger refused a heartbeat, or no heartbeat was
/// answered in time) the dispatch future is dropped, so nothing further is sent for this
/// attempt, and the outcome is unknown: what was sent before may still land.
async fn with_heartbeats(
    runner: &EffectRunner,
    key: &EffectKey,
    grant: &Grant,
    asked_at: tokio::time::Instant,
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
    let lease = LeaseKeeper::new(granted_lease_ms(grant, options.lease_ms), asked_at);
    let lost = lease.keep(runner.ledger(), key, grant.fencing_token);
    tokio::select! {
        biased;
        result = timed => result,
        reason = lost => DispatchResult::Unknown {
            reason: format!(
                "{reason}; the dispatch was stopped and nothing further was sent, but what \
                 was sent may still take effect"
            ),
        },
    }
}

/// The lease the ledger granted, in ms: what heartbeats ask for again. Never more than
/// the `asked_ms` the claim asked for: the ledger grants at most that, so a longer lease
/// is a node's error, and trusting it would let a dispatch run on after its lease ended.
pub(super) fn granted_lease_ms(grant: &Grant, asked_ms: u64) -> u64 {
    grant
        .lease_until_ms
        .saturating_sub(grant.granted_at_ms)
        .min(asked_ms)
        .max(1)
}

/// Keeps a granted lease alive and knows, on this client's monotonic clock, until when it
/// is certainly live.
///
/// A lease extended by a heartbeat asked at `t` runs at least until `t + lease` in ledger
/// time, since the ledger stamps the heartbeat after it was asked. Ledger time may run
/// somewhat faster than this clock (a leader's bounded clock skew), so only the first two
/// thirds of that are counted as certain. Duties, in order: heartbeat every third of the
/// lease; after a failed heartbeat, try again sooner; once the certain part has passed
/// without an answered heartbeat, or the ledger refuses one, give up the lease.
struct LeaseKeeper {
    lease_ms: u64,
    /// When the lease was asked for (the claim, or the heartbeat that confirmed it).
    asked_at: tokio::time::Instant,
    live_until: tokio::time::Instant,
}

impl LeaseKeeper {
    fn new(lease_ms: u64, asked_at: tokio::time::Instant) -> Self {
        LeaseKeeper {
            lease_ms,
            asked_at,
            live_until: asked_at + certain_part(lease_ms),
        }
    }

    /// Extends the lease until dropped; returns why the lease can no longer be relied on.
    async fn keep(mut self, ledger: &LedgerClient, key: &EffectKey, token: u64) -> String {
        let every = Duration::from_millis((self.lease_ms / 3).max(1));
        let retry = Duration::from_millis((self.lease_ms / 12).max(1));
        // Counted from when the lease was asked for, not from now: a claim answered late
        // (more than a third of the lease) is heartbeaten at once, before its certain part
        // runs out, instead of a third of a lease after the answer.
        let mut next = self.asked_at + every;
        for seq in 1.. {
            // Biased, deadline first: a lease past its certain part is given up even when
            // a heartbeat is due at the same moment (and the simulator stays deterministic).
            tokio::select! {
                biased;
                () = tokio::time::sleep_until(self.live_until) => {
                    return format!(
                        "the lease of {} ms could not be kept: no heartbeat was answered in time",
                        self.lease_ms
                    );
                }
                () = tokio::time::sleep_until(next) => {}
            }
            let asked_at = tokio::time::Instant::now();
            let id = ids::heartbeat(key, token, seq);
            let beat = ledger.heartbeat(&id, key.clone(), token, Some(self.lease_ms));
            let answer = tokio::select! {
                biased;
                () = tokio::time::sleep_until(self.live_until) => continue,
                answer = beat => answer,
            };
            match answer {
                Ok(_) => {
                    self.live_until = self.live_until.max(asked_at + certain_part(self.lease_ms));
                    next = asked_at + every;
                }
                Err(ClientError::Refused(refusal)) => {
                    tracing::warn!(effect = %key, %refusal, "lease lost while dispatching");
                    return format!("the ledger took the lease back ({refusal})");
                }
                Err(e) => {
                    tracing::warn!(effect = %key, error = %e, "heartbeat failed");
                    next = tokio::time::Instant::now() + retry;
                }
            }
        }
        unreachable!("heartbeat sequence numbers do not run out")
    }
}

/// The part of a lease of `lease_ms`, counted from when it was asked for, during which it
/// is certainly live.
fn certain_part(lease_ms: u64) -> Duration {
    Duration::from_millis(lease_ms.saturating_sub(lease_ms / 3))
}

/// Sends the pending report if the attempt ends (or its future is dropped) before the
/// ledger answered it: unknown while dispatching (it may have reached the provider), the
/// real result once known (see [`resend_report`]). If it is lost for good, the lease runs
/// out and the leader's sweeper marks the effect unknown, never failed.
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
        let (ledger, key, token) = (self.ledger.clone(), self.key.clone(), self.token);
        super::spawn_from_drop(resend_report(ledger, key, token, report));
    }
}

/// First pause between two sends of a committed report the ledger did not answer; it
/// doubles up to [`REPORT_RESEND_BACKOFF_MS_MAX`], each with up to half of it again.
const REPORT_RESEND_BACKOFF_MS: u64 = 200;
/// Longest pause between two sends of a committed report.
const REPORT_RESEND_BACKOFF_MS_MAX: u64 = 30_000;

/// Sends `report` of the attempt holding `token` again, under the id it was sent with, so
/// that the ledger takes it at most once.
///
/// A committed report is a fact the ledger takes from any attempt at any time, its lease
/// run out or not: it is sent until the ledger answers it (taken, or refused, which is
/// final), with a growing pause between sends, for as long as the ledger remembers command
/// ids by default (`TenantSettings::COMMAND_RETENTION_MS_DEFAULT`, a day). Unsent, the
/// known commit would become an unknown outcome to reconcile, or for an irreversible tool
/// with no look-up, a person's to decide. (Sent after the ledger forgot the id, it is
/// applied again, which changes nothing: the effect is committed, or its record collected
/// and the report refused.) Any other report is taken only while the lease lasts, and is
/// sent once.
async fn resend_report(ledger: LedgerClient, key: EffectKey, token: u64, report: Report) {
    let id = ids::report(&key, token, report_kind(&report));
    let committed = matches!(report, Report::Committed { .. });
    let give_up_at = tokio::time::Instant::now()
        + Duration::from_millis(TenantSettings::COMMAND_RETENTION_MS_DEFAULT);
    let mut backoff_ms = REPORT_RESEND_BACKOFF_MS;
    loop {
        let error = match ledger.report(&id, key.clone(), token, report.clone()).await {
            Ok(_) => return,
            Err(ClientError::Refused(refusal)) => {
                tracing::debug!(effect = %key, %refusal, "report sent again and refused");
                return;
            }
            Err(error) => error,
        };
        // Sending again helps only where the ledger may answer next time; a key it does
        // not know or a request it cannot take will not change.
        let passing = matches!(
            error,
            ClientError::Unavailable { .. }
                | ClientError::Overloaded { .. }
                | ClientError::Malformed(_)
        );
        if !committed || !passing {
            tracing::debug!(effect = %key, %error, "report sent again failed; the lease ends it");
            return;
        }
        let wait = Duration::from_millis(ledger.transport().jittered_ms(backoff_ms));
        if tokio::time::Instant::now() + wait > give_up_at {
            tracing::warn!(effect = %key, %error, "committed report not taken; giving up");
            return;
        }
        tracing::debug!(effect = %key, %error, "committed report not taken; sending again");
        tokio::time::sleep(wait).await;
        backoff_ms = (backoff_ms * 2).min(REPORT_RESEND_BACKOFF_MS_MAX);
    }
}
