//! Reconciliation and operator decisions (DESIGN.md section 7).
//!
//! An unknown outcome is settled by observing the provider, never by guessing. The
//! observer holds its own fenced attempt; every observation is recorded; ambiguity that
//! outlives the policy's budget, or a passed horizon on an irreversible tool, escalates
//! to a person, whose decision is recorded with the escalation it settles.
//!
//! "Not found" proves absence only once nothing can still land: the ledger, not the
//! adapter, judges a not-committed observation against the record's
//! [`absence_provable_at_ms`](EffectRecord::absence_provable_at_ms). An adapter only says
//! what it saw.

use crate::attempt::{check_live, check_receipt, commit, stale};
use crate::key::{validate_detail, validate_name, EffectKey};
use crate::ledger::Ledger;
use crate::limits::EARLY_NOT_FOUND_MAX;
use crate::outcome::{Outcome, ReconcileOutcome, Refusal};
use crate::record::{
    AttemptKind, AttemptOutcome, Decision, EffectRecord, EffectState, Observation,
    ObservationResult, OperatorDecision,
};
use crate::stamp::Stamp;
use crate::store::Store;
use crate::transition::{close_if_expired, count_ambiguous, effective_state, grant, touch};

impl<S: Store> Ledger<S> {
    pub(crate) fn begin_reconcile(
        &mut self,
        key: &EffectKey,
        holder: &str,
        lease_ms: Option<u64>,
        at: Stamp,
    ) -> Outcome {
        let now = at.ledger_ms;
        if let Err(e) = validate_name("holder", holder) {
            return e.into();
        }
        let Some(stored) = self.get(key) else {
            return match self.missing(key) {
                Refusal::Expired(expired) => ReconcileOutcome::Expired(*expired).into(),
                refusal => refusal.into(),
            };
        };
        let rec = &stored;
        if let Some(receipt) = &rec.receipt {
            return ReconcileOutcome::Replay {
                receipt: receipt.clone(),
            }
            .into();
        }
        if let Some(e) = &rec.escalation {
            return ReconcileOutcome::Escalated { reason: e.reason }.into();
        }
        if let Some(open) = rec.open_attempt().filter(|a| a.is_live(now)) {
            return ReconcileOutcome::InFlight {
                holder: open.holder.clone(),
                attempt_id: open.attempt_id,
                lease_until_ms: open.lease_until_ms,
            }
            .into();
        }
        let state = effective_state(rec, now);
        if state != EffectState::UnknownAfterDispatch {
            return ReconcileOutcome::NotNeeded { state }.into();
        }
        self.update(stored, |rec, next_token| {
            close_if_expired(rec, at);
            if let Some(e) = &rec.escalation {
                return ReconcileOutcome::Escalated { reason: e.reason };
            }
            ReconcileOutcome::Observe(grant(
                rec,
                next_token,
                AttemptKind::Reconcile,
                holder,
                lease_ms,
                at,
            ))
        })
        .into()
    }

    /// Records what a reconciliation attempt observed and settles what it proves.
    ///
    /// - `Committed` is a fact: the effect commits (from any reconciliation attempt).
    /// - `StillUnknown` counts against the observation budget.
    /// - `NotCommitted` proves absence only when nothing could still land when the look-up
    ///   was made (DESIGN.md section 7). The ledger cannot see when that was, only that it
    ///   followed the grant of the attempt holding `token`
    ///   ([`EffectRecord::looked_after_ms`], `g`), so it judges by `g`, not by when the
    ///   report arrives; with `t` = [`EffectRecord::absence_provable_at_ms`],
    ///   - `Some(t)` and `g >= t`: the effect moves to `failed_before_effect`;
    ///   - `Some(t)` and `g < t`: an earlier dispatch may have landed after the look-up, so
    ///     the look-up proves nothing. It is recorded (detail annotated with `t`), the attempt is
    ///     closed as observed, the effect stays `unknown_after_dispatch`, and the
    ///     observation is not counted against the budget: waiting until `t` and looking
    ///     again is the way on, not escalation (beyond
    ///     [`EARLY_NOT_FOUND_MAX`] such look-ups on one record, each counts, which keeps
    ///     the record's history bounded);
    ///   - `None` (no declared processing bound): no look-up can ever prove absence. It is
    ///     recorded (annotated) and counted as an ambiguous observation, so such a tool
    ///     ends in escalation when the budget is spent.
    ///
    ///   Before all of that, for a tool whose provider keeps keys for a horizon (keyed, or
    ///   irreversible with a declared horizon): a look-up that may have been made once the
    ///   provider's horizon had passed (the report is applied when real time may be past
    ///   the effect's horizon deadline, by its stamp's upper bound) proves nothing either.
    ///   The provider no longer remembers the key then, and a look-up that finds effects
    ///   by it (the usual one) misses an effect that happened; the ledger cannot tell
    ///   such a look-up from one by something the provider keeps. Recorded (annotated)
    ///   and counted as ambiguous, so an effect left unsettled past its horizon ends in
    ///   escalation, a person's decision, never in a second dispatch (DESIGN.md sections
    ///   5 and 7: `horizon_passed` is "reconcile or escalate").
    ///
    /// An operator's `Decision::NotCommitted` is a person's judgement and is not held to
    /// this rule.
    pub(crate) fn observe(
        &mut self,
        key: &EffectKey,
        token: u64,
        result: &ObservationResult,
        detail: &str,
        at: Stamp,
    ) -> Outcome {
        let now = at.ledger_ms;
        if let Err(e) = validate_detail("detail", detail) {
            return e.into();
        }
        let Some(stored) = self.get(key) else {
            return self.missing(key).into();
        };
        let rec = &stored;
        let checked = match result {
            // A committed observation is a fact, taken from any reconciliation attempt.
            ObservationResult::Committed { receipt } => match rec.attempt_by_token(token) {
                None => Err(stale(rec, token)),
                Some(a) if a.kind != AttemptKind::Reconcile => {
                    Err(Refusal::WrongAttemptKind(token))
                }
                Some(_) => check_receipt(receipt),
            },
            _ => check_live(rec, token, AttemptKind::Reconcile, now),
        };
        if let Err(refusal) = checked {
            return refusal.into();
        }
        if rec.state == EffectState::Committed {
            return Outcome::Observed {
                state: EffectState::Committed,
                escalated: false,
            };
        }
        self.update(stored, |rec, _| {
            let absence = match result {
                ObservationResult::NotCommitted if past_horizon(rec, at) => {
                    Some(Absence::PastHorizon)
                }
                ObservationResult::NotCommitted => {
                    let looked_after = rec.looked_after_ms(token).unwrap_or(now);
                    Some(absence(rec, looked_after))
                }
                _ => None,
            };
            let detail = match absence {
                Some(Absence::NotYet { provable_at_ms }) => format!(
                    "{detail} [proves nothing before {provable_at_ms} ms: looked up under an \
                     attempt granted before then, when an earlier dispatch could still land]"
                ),
                Some(Absence::NotYetAgain { provable_at_ms }) => format!(
                    "{detail} [proves nothing before {provable_at_ms} ms; counted: more than \
                     {EARLY_NOT_FOUND_MAX} look-ups came too early]"
                ),
                Some(Absence::Unprovable) => {
                    format!("{detail} [proves nothing: the provider declares no processing bound]")
                }
                Some(Absence::PastHorizon) => format!("{detail} [{PAST_HORIZON_NOTE}]"),
                Some(Absence::Proven) | None => detail.to_owned(),
            };
            rec.observations.push(Observation {
                at_ms: now,
                fencing_token: token,
                result: result.clone(),
                detail,
            });
            if let Some(open) = rec.open_attempt_mut().filter(|a| a.fencing_token == token) {
                open.outcome = Some(AttemptOutcome::Observed);
            }
            match (result, absence) {
                (ObservationResult::Committed { receipt }, _) => commit(rec, token, receipt, now),
                (ObservationResult::NotCommitted, Some(Absence::Proven)) => {
                    settle_not_committed(rec)
                }
                // Recorded above; counts nothing: the reconciler comes back after the bound.
                (ObservationResult::NotCommitted, Some(Absence::NotYet { .. })) => {}
                (ObservationResult::NotCommitted, _) | (ObservationResult::StillUnknown, _) => {
                    count_ambiguous(rec, at)
                }
            }
            touch(rec, now);
            Outcome::Observed {
                state: rec.state,
                escalated: rec.escalation.is_some(),
            }
        })
    }

    /// Records an operator's decision on the effect's open escalation; with
    /// `escalation_token`, only if that names the open escalation
    /// ([`EffectRecord::escalation_token`]; [`Refusal::EscalationChanged`] otherwise).
    pub(crate) fn decide(
        &mut self,
        key: &EffectKey,
        escalation_token: Option<u64>,
        decision: &Decision,
        operator: &str,
        note: &str,
        now: u64,
    ) -> Outcome {
        let valid =
            validate_name("operator", operator).and_then(|()| validate_detail("note", note));
        if let Err(e) = valid {
            return e.into();
        }
        if let Decision::Committed { receipt } = decision {
            if let Err(refusal) = check_receipt(receipt) {
                return refusal.into();
            }
        }
        let Some(stored) = self.get(key) else {
            return self.missing(key).into();
        };
        let rec = &stored;
        let Some(escalation) = rec.escalation.clone() else {
            return Refusal::NotEscalated.into();
        };
        let open_token = rec.escalation_token().unwrap_or(0);
        if let Some(decided_token) = escalation_token.filter(|t| *t != open_token) {
            return Refusal::EscalationChanged {
                decided_token,
                open_token,
            }
            .into();
        }
        self.update(stored, |rec, _| {
            match decision {
                Decision::Committed { receipt } => {
                    let latest = rec.latest_token().unwrap_or(0);
                    commit(rec, latest, receipt, now);
                }
                Decision::NotCommitted => {
                    settle_not_committed(rec);
                    rec.dispatches_in_budget = 0;
                    rec.observations_in_budget = 0;
                    rec.escalation = None;
                }
            }
            rec.decision = Some(OperatorDecision {
                at_ms: now,
                operator: operator.to_owned(),
                decision: decision.clone(),
                note: note.to_owned(),
                settled: escalation,
            });
            touch(rec, now);
            Outcome::Decided { state: rec.state }
        })
    }
}

impl From<ReconcileOutcome> for Outcome {
    fn from(r: ReconcileOutcome) -> Self {
        Outcome::Reconcile(r)
    }
}

/// What a look-up that found nothing proves at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Absence {
    /// Nothing can still land: the effect is absent.
    Proven,
    /// An earlier dispatch may still land until `provable_at_ms`.
    NotYet {
        /// When a look-up can first prove absence (ledger time, ms).
        provable_at_ms: u64,
    },
    /// As `NotYet`, but the record already took [`EARLY_NOT_FOUND_MAX`] such look-ups:
    /// this one counts against the budget, so early polling cannot grow the record
    /// without bound.
    NotYetAgain {
        /// When a look-up can first prove absence (ledger time, ms).
        provable_at_ms: u64,
    },
    /// The provider declares no processing bound: a look-up never proves absence.
    Unprovable,
    /// A keyed tool's look-up, made when the provider's horizon may have passed: it may
    /// have missed an effect whose key the provider no longer remembers.
    PastHorizon,
}

/// How a keyed tool's not-found observation reported past its horizon is annotated: it
/// proves nothing (see `Ledger::observe`).
pub const PAST_HORIZON_NOTE: &str = "proves nothing: looked up when the provider's horizon \
                                     may have passed, and with it its memory of the key";

/// Whether an observation of `rec` reported at `at` may have been looked up after the
/// provider's horizon: when its provider keeps keys for a horizon (a keyed tool's, or an
/// irreversible one's that declares a horizon) and real time may be past the effect's
/// horizon deadline. A provider that keeps no key (horizon zero) forgets nothing.
fn past_horizon(rec: &EffectRecord, at: Stamp) -> bool {
    rec.policy.provider_horizon_ms > 0
        && rec
            .horizon_deadline_ms
            .is_some_and(|deadline_ms| at.real_ms_max >= deadline_ms)
}

/// What a look-up made after ledger time `looked_after_ms` proves.
fn absence(rec: &EffectRecord, looked_after_ms: u64) -> Absence {
    match rec.absence_provable_at_ms() {
        Some(t) if looked_after_ms >= t => Absence::Proven,
        Some(provable_at_ms) if rec.early_not_found_observations() < EARLY_NOT_FOUND_MAX => {
            Absence::NotYet { provable_at_ms }
        }
        Some(provable_at_ms) => Absence::NotYetAgain { provable_at_ms },
        None => Absence::Unprovable,
    }
}

/// Proven (by observation or decision) that no dispatch took effect.
fn settle_not_committed(rec: &mut EffectRecord) {
    rec.ambiguous = false;
    rec.state = EffectState::FailedBeforeEffect;
}
