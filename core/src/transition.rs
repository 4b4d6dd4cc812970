//! Changes to one record that several commands make: closing an attempt whose lease ran
//! out, granting a new one, escalating, counting an ambiguous observation, and marking a
//! record changed. Claims, reports, reconciliations, decisions and sweeps all build on
//! them, so they live apart from any one command (DESIGN.md sections 4, 5 and 7).

use crate::outcome::{Grant, Unsettled};
use crate::policy::ReplayClass;
use crate::record::{
    Attempt, AttemptKind, AttemptOutcome, EffectRecord, EffectState, Escalation, EscalationReason,
    Observation, ObservationResult,
};
use crate::stamp::Stamp;

/// The state a record is in at `now`, counting an open attempt past its lease as the
/// unknown outcome it is.
pub(crate) fn effective_state(rec: &EffectRecord, now: u64) -> EffectState {
    match rec.open_attempt() {
        Some(a) if !a.is_live(now) => EffectState::UnknownAfterDispatch,
        _ => rec.state,
    }
}

/// What is known about an unknown effect.
pub(crate) fn unsettled(rec: &EffectRecord) -> Unsettled {
    Unsettled {
        provider_key: rec.provider_key.clone(),
        dispatches: rec
            .attempts
            .iter()
            .filter(|a| a.kind == AttemptKind::Dispatch)
            .count() as u32,
        horizon_deadline_ms: rec.horizon_deadline_ms,
        last_observation: rec.observations.last().cloned(),
    }
}

/// Closes an open attempt whose lease has run out. A dispatch becomes an unknown outcome;
/// a reconciliation counts as an ambiguous observation.
pub(crate) fn close_if_expired(rec: &mut EffectRecord, at: Stamp) -> bool {
    let now = at.ledger_ms;
    let Some(open) = rec.open_attempt_mut().filter(|a| !a.is_live(now)) else {
        return false;
    };
    open.outcome = Some(AttemptOutcome::LeaseExpired);
    let (kind, token) = (open.kind, open.fencing_token);
    match kind {
        AttemptKind::Dispatch => {
            rec.ambiguous = true;
            rec.state = EffectState::UnknownAfterDispatch;
        }
        AttemptKind::Reconcile => record_ambiguous_observation(
            rec,
            token,
            "reconciliation lease ran out before an observation was recorded",
            at,
        ),
    }
    touch(rec, now);
    true
}

/// Grants a new attempt. The caller has closed any open attempt.
pub(crate) fn grant(
    rec: &mut EffectRecord,
    next_token: &mut u64,
    kind: AttemptKind,
    holder: &str,
    lease_ms: Option<u64>,
    at: Stamp,
) -> Grant {
    let now = at.ledger_ms;
    assert!(
        rec.open_attempt().is_none(),
        "{}: grant over an open attempt",
        rec.key
    );
    let lease_ms = lease_ms
        .unwrap_or(rec.policy.lease_ms)
        .clamp(1, rec.policy.lease_ms_max);
    let fencing_token = *next_token;
    *next_token += 1;
    let attempt_id = rec.attempts.len() as u32 + 1;
    if kind == AttemptKind::Dispatch {
        // A settled record means the provider has never seen the key take effect, so its
        // horizon starts with this dispatch (no earlier than the earliest real time it may
        // be); an unsettled one keeps the earliest.
        if !rec.ambiguous {
            let horizon_ms = at
                .real_ms_min
                .saturating_add(rec.policy.provider_horizon_ms);
            rec.horizon_deadline_ms = Some(horizon_ms);
        }
        rec.dispatches_in_budget += 1;
        rec.state = EffectState::InProgress;
    }
    let mut lease_until_ms = now.saturating_add(lease_ms);
    if kind == AttemptKind::Dispatch && rec.ambiguous {
        // The re-send's lease ends before real time may reach the re-send deadline.
        if let Some(deadline_ms) = rec.resend_deadline_ms() {
            let until_ms = at.ledger_ms_before(deadline_ms);
            lease_until_ms = lease_until_ms.min(until_ms.max(now.saturating_add(1)));
        }
    }
    rec.attempts.push(Attempt {
        attempt_id,
        kind,
        fencing_token,
        holder: holder.to_owned(),
        granted_at_ms: now,
        lease_until_ms,
        outcome: None,
    });
    touch(rec, now);
    Grant {
        attempt_id,
        fencing_token,
        granted_at_ms: now,
        lease_until_ms,
        provider_key: rec.provider_key.clone(),
        horizon_deadline_ms: rec.horizon_deadline_ms,
    }
}

/// Stops automatic handling until an operator decides.
pub(crate) fn escalate(rec: &mut EffectRecord, reason: EscalationReason, now: u64) {
    rec.escalation = Some(Escalation { at_ms: now, reason });
    touch(rec, now);
}

/// Marks a record changed at `now` and recomputes its retention deadline: finished or
/// never-started records may be collected `retention_ms` after their last change; records
/// with an open attempt, an unknown outcome or an escalation are kept.
pub(crate) fn touch(rec: &mut EffectRecord, now: u64) {
    rec.updated_at_ms = now;
    let collectable = matches!(
        rec.state,
        EffectState::NotStarted | EffectState::Committed | EffectState::FailedBeforeEffect
    ) && rec.escalation.is_none();
    rec.retention_deadline_ms = collectable.then(|| now.saturating_add(rec.policy.retention_ms));
}

/// Counts one ambiguous observation; escalates when the budget is spent or an
/// irreversible tool's horizon may have passed (judged at the latest real time it may be).
pub(crate) fn count_ambiguous(rec: &mut EffectRecord, at: Stamp) {
    let now = at.ledger_ms;
    rec.observations_in_budget += 1;
    if rec.observations_in_budget >= rec.policy.observations_max {
        escalate(rec, EscalationReason::ObservationBudgetSpent, now);
    } else if rec.policy.class == ReplayClass::Irreversible && !rec.within_horizon(at.real_ms_max) {
        escalate(rec, EscalationReason::HorizonPassedOnIrreversible, now);
    }
}

/// Records that a reconciliation attempt ended without an observation (its lease ran
/// out): an ambiguous observation like any other, so a crashing reconciler cannot keep an
/// effect unsettled forever.
pub(crate) fn record_ambiguous_observation(
    rec: &mut EffectRecord,
    token: u64,
    detail: &str,
    at: Stamp,
) {
    rec.observations.push(Observation {
        at_ms: at.ledger_ms,
        fencing_token: token,
        result: ObservationResult::StillUnknown,
        detail: detail.to_owned(),
    });
    count_ambiguous(rec, at);
}
