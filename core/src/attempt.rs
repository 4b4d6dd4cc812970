//! Heartbeats and reports from the holder of a dispatch attempt.
//!
//! Fencing: only the open attempt, before its lease runs out, may extend its lease or end
//! the effect as failed or unknown. A committed report is a fact and is taken from any
//! attempt of the effect, stale or expired: the provider holds the effect whoever says so.

use crate::command::Report;
use crate::key::{validate_detail, EffectKey, FieldError};
use crate::ledger::Ledger;
use crate::limits::RECEIPT_BYTES_MAX;
use crate::outcome::{Outcome, Refusal};
use crate::record::{AttemptKind, AttemptOutcome, EffectRecord, EffectState};
use crate::stamp::Stamp;
use crate::store::Store;
use crate::transition::touch;

impl<S: Store> Ledger<S> {
    pub(crate) fn heartbeat(
        &mut self,
        key: &EffectKey,
        token: u64,
        lease_ms: Option<u64>,
        at: Stamp,
    ) -> Outcome {
        let now = at.ledger_ms;
        let Some(stored) = self.get(key) else {
            return self.missing(key).into();
        };
        let rec = &stored;
        let kind = match rec.attempt_by_token(token) {
            Some(a) => a.kind,
            None => return stale(rec, token).into(),
        };
        if let Err(refusal) = check_live(rec, token, kind, now) {
            return refusal.into();
        }
        let lease_ms = lease_ms
            .unwrap_or(rec.policy.lease_ms)
            .clamp(1, rec.policy.lease_ms_max);
        // A keyed re-send may not be kept dispatching past the point where it could reach
        // the provider after its horizon, however late real time may be: the holder is
        // told its lease cannot run longer, and stops.
        if let Some(deadline_ms) = rec
            .resend_deadline_ms()
            .filter(|_| kind == AttemptKind::Dispatch && rec.ambiguous)
        {
            if at.real_ms_max.saturating_add(lease_ms) > deadline_ms {
                return Refusal::LeaseExpired {
                    lease_until_ms: at.ledger_ms_before(deadline_ms),
                }
                .into();
            }
        }
        self.update(stored, |rec, _| {
            let open = rec.open_attempt_mut().expect("checked live");
            open.lease_until_ms = open.lease_until_ms.max(now.saturating_add(lease_ms));
            let lease_until_ms = open.lease_until_ms;
            touch(rec, now);
            Outcome::LeaseExtended { lease_until_ms }
        })
    }

    pub(crate) fn report(
        &mut self,
        key: &EffectKey,
        token: u64,
        report: &Report,
        now: u64,
    ) -> Outcome {
        let Some(stored) = self.get(key) else {
            return self.missing(key).into();
        };
        let rec = &stored;
        if let Err(refusal) = check_report(rec, token, report, now) {
            return refusal.into();
        }
        if rec.state == EffectState::Committed {
            return Outcome::Reported {
                state: EffectState::Committed,
                receipt: rec.receipt.clone(),
            };
        }
        self.update(stored, |rec, _| {
            match report {
                Report::Committed { receipt } => commit(rec, token, receipt, now),
                Report::FailedBeforeEffect { proof } => {
                    close_open(
                        rec,
                        AttemptOutcome::FailedBeforeEffect {
                            proof: proof.clone(),
                        },
                        now,
                    );
                    // Proof covers this attempt only: an earlier unsettled dispatch keeps
                    // the outcome unknown.
                    rec.state = if rec.ambiguous {
                        EffectState::UnknownAfterDispatch
                    } else {
                        EffectState::FailedBeforeEffect
                    };
                }
                Report::Unknown { reason } => {
                    close_open(
                        rec,
                        AttemptOutcome::Unknown {
                            reason: reason.clone(),
                        },
                        now,
                    );
                    rec.ambiguous = true;
                    rec.state = EffectState::UnknownAfterDispatch;
                }
            }
            touch(rec, now);
            Outcome::Reported {
                state: rec.state,
                receipt: rec.receipt.clone(),
            }
        })
    }
}

fn check_report(rec: &EffectRecord, token: u64, report: &Report, now: u64) -> Result<(), Refusal> {
    let Some(attempt) = rec.attempt_by_token(token) else {
        return Err(stale(rec, token));
    };
    if attempt.kind != AttemptKind::Dispatch {
        return Err(Refusal::WrongAttemptKind(token));
    }
    match report {
        Report::Committed { receipt } => check_receipt(receipt),
        Report::FailedBeforeEffect { proof } => {
            validate_detail("proof", proof)?;
            if proof.trim().is_empty() {
                return Err(Refusal::ProofRequired);
            }
            check_live(rec, token, AttemptKind::Dispatch, now)
        }
        Report::Unknown { reason } => {
            validate_detail("reason", reason)?;
            check_live(rec, token, AttemptKind::Dispatch, now)
        }
    }
}

pub(crate) fn check_receipt(receipt: &str) -> Result<(), Refusal> {
    if receipt.len() > RECEIPT_BYTES_MAX {
        return Err(FieldError::TooLong {
            field: "receipt".into(),
            len: receipt.len(),
            max: RECEIPT_BYTES_MAX,
        }
        .into());
    }
    Ok(())
}

/// Checks that `token` is the record's open attempt of `kind` and that its lease has not
/// run out at `now`.
pub(crate) fn check_live(
    rec: &EffectRecord,
    token: u64,
    kind: AttemptKind,
    now: u64,
) -> Result<(), Refusal> {
    let Some(attempt) = rec.attempt_by_token(token) else {
        return Err(stale(rec, token));
    };
    if attempt.kind != kind {
        return Err(Refusal::WrongAttemptKind(token));
    }
    if rec.latest_token() != Some(token) {
        return Err(stale(rec, token));
    }
    match &attempt.outcome {
        None if attempt.is_live(now) => Ok(()),
        None | Some(AttemptOutcome::LeaseExpired) => Err(Refusal::LeaseExpired {
            lease_until_ms: attempt.lease_until_ms,
        }),
        Some(_) => Err(Refusal::AlreadyFinal { state: rec.state }),
    }
}

pub(crate) fn stale(rec: &EffectRecord, token: u64) -> Refusal {
    Refusal::StaleToken {
        offered: token,
        latest: rec.latest_token(),
    }
}

/// Closes the open attempt with `outcome`, reported by its holder at `now`.
///
/// The report also ends the holder's lease at `now`: a holder sends nothing after it has
/// reported (its dispatch has returned or was dropped), so no request of this attempt can
/// have left later, and the absence deadline of design §7 counts from here rather than
/// from a lease end the holder no longer needs.
fn close_open(rec: &mut EffectRecord, outcome: AttemptOutcome, now: u64) {
    let open = rec.open_attempt_mut().expect("checked live");
    open.outcome = Some(outcome);
    open.lease_until_ms = open.lease_until_ms.min(now.max(open.granted_at_ms));
}

/// Commits the effect on a fact reported by the attempt holding `token`. An open attempt
/// other than the reporter is superseded; a pending escalation is settled by the fact.
pub(crate) fn commit(rec: &mut EffectRecord, token: u64, receipt: &str, now: u64) {
    if let Some(open) = rec.open_attempt_mut() {
        open.outcome = Some(if open.fencing_token == token {
            AttemptOutcome::Committed
        } else {
            AttemptOutcome::Superseded
        });
    }
    rec.state = EffectState::Committed;
    rec.receipt = Some(receipt.to_owned());
    rec.ambiguous = false;
    rec.escalation = None;
    touch(rec, now);
}
