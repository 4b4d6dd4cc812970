//! Outcomes: grants, claim and reconcile outcomes, and each core [`Outcome`] as the
//! response of the RPC that asked for it.
//!
//! The node turns an outcome into a response with `TryFrom<Outcome>` on the response
//! type: a refusal comes back as [`OutcomeError::Refused`] (sent as a status), an outcome
//! of the wrong kind as [`OutcomeError::Mismatch`]. The client reads every response back
//! with `Outcome: TryFrom<Response, Error = WireError>`.
//!
//! | outcome         | response                 |
//! |-----------------|--------------------------|
//! | `Configured`    | `Empty`                  |
//! | `Declared`      | `DeclareResponse`        |
//! | `Claim`         | `ClaimResponse`          |
//! | `LeaseExtended` | `HeartbeatResponse`      |
//! | `Reported`      | `ReportResponse`         |
//! | `Reconcile`     | `BeginReconcileResponse` |
//! | `Observed`      | `ObserveResponse`        |
//! | `Decided`       | `DecideResponse`         |
//! | `Amended`       | `AmendResponse`          |
//!
//! `Swept` answers the leader's own sweeps and has no response.

use ledger_core::{
    ClaimOutcome, EscalationReason, Grant, IntentConflict, Outcome, ReconcileOutcome, Unsettled,
};

use super::values::{
    effect_state_from_i32, effect_state_to_i32, escalation_reason_from_i32,
    escalation_reason_to_i32,
};
use super::{intent_hash_from_bytes, intent_hash_to_bytes, optional, OutcomeError, WireError};
use crate::pb;

impl From<Grant> for pb::Grant {
    fn from(g: Grant) -> Self {
        pb::Grant {
            attempt_id: g.attempt_id,
            fencing_token: g.fencing_token,
            granted_at_ms: g.granted_at_ms,
            lease_until_ms: g.lease_until_ms,
            provider_key: g.provider_key,
            horizon_deadline_ms: g.horizon_deadline_ms,
        }
    }
}

/// A grant is acted on as it reads, with no core to judge it: the holder sends its
/// provider key and fences its dispatch by its lease. So the provider key and the grant
/// time are required (empty or zero is how a sender that left them out reads), and the
/// lease must end after it was granted; a lease end without a grant time would read as a
/// lease of decades.
impl TryFrom<pb::Grant> for Grant {
    type Error = WireError;

    fn try_from(g: pb::Grant) -> Result<Self, WireError> {
        if g.provider_key.is_empty() {
            return Err(WireError::Missing("provider_key".into()));
        }
        if g.granted_at_ms == 0 {
            return Err(WireError::Missing("granted_at_ms".into()));
        }
        if g.lease_until_ms <= g.granted_at_ms {
            return Err(WireError::Invalid {
                field: "lease_until_ms".into(),
                reason: format!(
                    "{} is not after granted_at_ms {}",
                    g.lease_until_ms, g.granted_at_ms
                ),
            });
        }
        Ok(Grant {
            attempt_id: g.attempt_id,
            fencing_token: g.fencing_token,
            granted_at_ms: g.granted_at_ms,
            lease_until_ms: g.lease_until_ms,
            provider_key: g.provider_key,
            horizon_deadline_ms: g.horizon_deadline_ms,
        })
    }
}

impl From<Unsettled> for pb::Unsettled {
    fn from(u: Unsettled) -> Self {
        pb::Unsettled {
            provider_key: u.provider_key,
            dispatches: u.dispatches,
            horizon_deadline_ms: u.horizon_deadline_ms,
            last_observation: u.last_observation.map(Into::into),
        }
    }
}

/// `last_observation` is optional, but must be well formed when present.
impl TryFrom<pb::Unsettled> for Unsettled {
    type Error = WireError;

    fn try_from(u: pb::Unsettled) -> Result<Self, WireError> {
        Ok(Unsettled {
            provider_key: u.provider_key,
            dispatches: u.dispatches,
            horizon_deadline_ms: u.horizon_deadline_ms,
            last_observation: optional(u.last_observation, "last_observation")?,
        })
    }
}

impl From<IntentConflict> for pb::IntentConflict {
    fn from(c: IntentConflict) -> Self {
        pb::IntentConflict {
            stored_hash: intent_hash_to_bytes(&c.stored_hash),
            offered_hash: intent_hash_to_bytes(&c.offered_hash),
            differing_fields: c.differing_fields,
        }
    }
}

/// Both hashes must be 32 bytes.
impl TryFrom<pb::IntentConflict> for IntentConflict {
    type Error = WireError;

    fn try_from(c: pb::IntentConflict) -> Result<Self, WireError> {
        Ok(IntentConflict {
            stored_hash: intent_hash_from_bytes(&c.stored_hash, "stored_hash")?,
            offered_hash: intent_hash_from_bytes(&c.offered_hash, "offered_hash")?,
            differing_fields: c.differing_fields,
        })
    }
}

fn escalated(reason: EscalationReason) -> pb::Escalated {
    pb::Escalated {
        reason: escalation_reason_to_i32(reason),
    }
}

fn in_flight(holder: String, attempt_id: u32, lease_until_ms: u64) -> pb::InFlight {
    pb::InFlight {
        holder,
        attempt_id,
        lease_until_ms,
    }
}

/// Prefixes a variant's errors with the variant's field name.
fn within<T, U>(value: T, field: &str) -> Result<U, WireError>
where
    U: TryFrom<T, Error = WireError>,
{
    U::try_from(value).map_err(|e| e.within(field))
}

impl From<ClaimOutcome> for pb::ClaimResponse {
    fn from(o: ClaimOutcome) -> Self {
        use pb::claim_response::Outcome as W;
        let outcome = match o {
            ClaimOutcome::Proceed(grant) => W::Proceed(grant.into()),
            ClaimOutcome::Replay { receipt } => W::Replay(pb::Replay { receipt }),
            ClaimOutcome::InFlight {
                holder,
                attempt_id,
                lease_until_ms,
            } => W::InFlight(in_flight(holder, attempt_id, lease_until_ms)),
            ClaimOutcome::Reconcile(u) => W::Reconcile(u.into()),
            ClaimOutcome::Conflict(c) => W::Conflict(c.into()),
            ClaimOutcome::Escalated { reason } => W::Escalated(escalated(reason)),
            ClaimOutcome::HorizonPassed(u) => W::HorizonPassed(u.into()),
            ClaimOutcome::Expired(e) => W::Expired(e.into()),
        };
        pb::ClaimResponse {
            outcome: Some(outcome),
        }
    }
}

/// The `outcome` oneof is required, and a grant must be whole (see `Grant`'s conversion).
impl TryFrom<pb::ClaimResponse> for ClaimOutcome {
    type Error = WireError;

    fn try_from(r: pb::ClaimResponse) -> Result<Self, WireError> {
        use pb::claim_response::Outcome as W;
        Ok(match r.outcome {
            None => return Err(WireError::Missing("outcome".into())),
            Some(W::Proceed(grant)) => ClaimOutcome::Proceed(within(grant, "proceed")?),
            Some(W::Replay(r)) => ClaimOutcome::Replay { receipt: r.receipt },
            Some(W::InFlight(f)) => ClaimOutcome::InFlight {
                holder: f.holder,
                attempt_id: f.attempt_id,
                lease_until_ms: f.lease_until_ms,
            },
            Some(W::Reconcile(u)) => ClaimOutcome::Reconcile(within(u, "reconcile")?),
            Some(W::Conflict(c)) => ClaimOutcome::Conflict(within(c, "conflict")?),
            Some(W::Escalated(e)) => ClaimOutcome::Escalated {
                reason: escalation_reason_from_i32(e.reason, "escalated.reason")?,
            },
            Some(W::HorizonPassed(u)) => ClaimOutcome::HorizonPassed(within(u, "horizon_passed")?),
            Some(W::Expired(e)) => ClaimOutcome::Expired(within(e, "expired")?),
        })
    }
}

impl From<ReconcileOutcome> for pb::BeginReconcileResponse {
    fn from(o: ReconcileOutcome) -> Self {
        use pb::begin_reconcile_response::Outcome as W;
        let outcome = match o {
            ReconcileOutcome::Observe(grant) => W::Observe(grant.into()),
            ReconcileOutcome::Replay { receipt } => W::Replay(pb::Replay { receipt }),
            ReconcileOutcome::InFlight {
                holder,
                attempt_id,
                lease_until_ms,
            } => W::InFlight(in_flight(holder, attempt_id, lease_until_ms)),
            ReconcileOutcome::Escalated { reason } => W::Escalated(escalated(reason)),
            ReconcileOutcome::NotNeeded { state } => W::NotNeeded(effect_state_to_i32(state)),
            ReconcileOutcome::Expired(e) => W::Expired(e.into()),
        };
        pb::BeginReconcileResponse {
            outcome: Some(outcome),
        }
    }
}

/// The `outcome` oneof is required, and a grant must be whole (see `Grant`'s conversion).
impl TryFrom<pb::BeginReconcileResponse> for ReconcileOutcome {
    type Error = WireError;

    fn try_from(r: pb::BeginReconcileResponse) -> Result<Self, WireError> {
        use pb::begin_reconcile_response::Outcome as W;
        Ok(match r.outcome {
            None => return Err(WireError::Missing("outcome".into())),
            Some(W::Observe(grant)) => ReconcileOutcome::Observe(within(grant, "observe")?),
            Some(W::Replay(r)) => ReconcileOutcome::Replay { receipt: r.receipt },
            Some(W::InFlight(f)) => ReconcileOutcome::InFlight {
                holder: f.holder,
                attempt_id: f.attempt_id,
                lease_until_ms: f.lease_until_ms,
            },
            Some(W::Escalated(e)) => ReconcileOutcome::Escalated {
                reason: escalation_reason_from_i32(e.reason, "escalated.reason")?,
            },
            Some(W::NotNeeded(state)) => ReconcileOutcome::NotNeeded {
                state: effect_state_from_i32(state, "not_needed")?,
            },
            Some(W::Expired(e)) => ReconcileOutcome::Expired(within(e, "expired")?),
        })
    }
}

impl TryFrom<Outcome> for pb::Empty {
    type Error = OutcomeError;

    fn try_from(o: Outcome) -> Result<Self, OutcomeError> {
        match o {
            Outcome::Configured => Ok(pb::Empty {}),
            other => Err(OutcomeError::unexpected("configure", other)),
        }
    }
}

impl TryFrom<pb::Empty> for Outcome {
    type Error = WireError;

    fn try_from(_: pb::Empty) -> Result<Self, WireError> {
        Ok(Outcome::Configured)
    }
}

impl TryFrom<Outcome> for pb::DeclareResponse {
    type Error = OutcomeError;

    fn try_from(o: Outcome) -> Result<Self, OutcomeError> {
        match o {
            Outcome::Declared { keys, created } => Ok(pb::DeclareResponse {
                keys: keys.into_iter().map(Into::into).collect(),
                created,
            }),
            other => Err(OutcomeError::unexpected("declare", other)),
        }
    }
}

impl TryFrom<pb::DeclareResponse> for Outcome {
    type Error = WireError;

    fn try_from(r: pb::DeclareResponse) -> Result<Self, WireError> {
        Ok(Outcome::Declared {
            keys: r.keys.into_iter().map(Into::into).collect(),
            created: r.created,
        })
    }
}

impl TryFrom<Outcome> for pb::ClaimResponse {
    type Error = OutcomeError;

    fn try_from(o: Outcome) -> Result<Self, OutcomeError> {
        match o {
            Outcome::Claim(claim) => Ok(claim.into()),
            other => Err(OutcomeError::unexpected("claim", other)),
        }
    }
}

impl TryFrom<pb::ClaimResponse> for Outcome {
    type Error = WireError;

    fn try_from(r: pb::ClaimResponse) -> Result<Self, WireError> {
        ClaimOutcome::try_from(r).map(Outcome::Claim)
    }
}

impl TryFrom<Outcome> for pb::HeartbeatResponse {
    type Error = OutcomeError;

    fn try_from(o: Outcome) -> Result<Self, OutcomeError> {
        match o {
            Outcome::LeaseExtended { lease_until_ms } => {
                Ok(pb::HeartbeatResponse { lease_until_ms })
            }
            other => Err(OutcomeError::unexpected("heartbeat", other)),
        }
    }
}

impl TryFrom<pb::HeartbeatResponse> for Outcome {
    type Error = WireError;

    fn try_from(r: pb::HeartbeatResponse) -> Result<Self, WireError> {
        Ok(Outcome::LeaseExtended {
            lease_until_ms: r.lease_until_ms,
        })
    }
}

impl TryFrom<Outcome> for pb::ReportResponse {
    type Error = OutcomeError;

    fn try_from(o: Outcome) -> Result<Self, OutcomeError> {
        match o {
            Outcome::Reported { state, receipt } => Ok(pb::ReportResponse {
                state: effect_state_to_i32(state),
                receipt,
            }),
            other => Err(OutcomeError::unexpected("report", other)),
        }
    }
}

impl TryFrom<pb::ReportResponse> for Outcome {
    type Error = WireError;

    fn try_from(r: pb::ReportResponse) -> Result<Self, WireError> {
        Ok(Outcome::Reported {
            state: effect_state_from_i32(r.state, "state")?,
            receipt: r.receipt,
        })
    }
}

impl TryFrom<Outcome> for pb::BeginReconcileResponse {
    type Error = OutcomeError;

    fn try_from(o: Outcome) -> Result<Self, OutcomeError> {
        match o {
            Outcome::Reconcile(reconcile) => Ok(reconcile.into()),
            other => Err(OutcomeError::unexpected("begin_reconcile", other)),
        }
    }
}

impl TryFrom<pb::BeginReconcileResponse> for Outcome {
    type Error = WireError;

    fn try_from(r: pb::BeginReconcileResponse) -> Result<Self, WireError> {
        ReconcileOutcome::try_from(r).map(Outcome::Reconcile)
    }
}

impl TryFrom<Outcome> for pb::ObserveResponse {
    type Error = OutcomeError;

    fn try_from(o: Outcome) -> Result<Self, OutcomeError> {
        match o {
            Outcome::Observed { state, escalated } => Ok(pb::ObserveResponse {
                state: effect_state_to_i32(state),
                escalated,
            }),
            other => Err(OutcomeError::unexpected("observe", other)),
        }
    }
}

impl TryFrom<pb::ObserveResponse> for Outcome {
    type Error = WireError;

    fn try_from(r: pb::ObserveResponse) -> Result<Self, WireError> {
        Ok(Outcome::Observed {
            state: effect_state_from_i32(r.state, "state")?,
            escalated: r.escalated,
        })
    }
}

impl TryFrom<Outcome> for pb::DecideResponse {
    type Error = OutcomeError;

    fn try_from(o: Outcome) -> Result<Self, OutcomeError> {
        match o {
            Outcome::Decided { state } => Ok(pb::DecideResponse {
                state: effect_state_to_i32(state),
            }),
            other => Err(OutcomeError::unexpected("decide", other)),
        }
    }
}

impl TryFrom<pb::DecideResponse> for Outcome {
    type Error = WireError;

    fn try_from(r: pb::DecideResponse) -> Result<Self, WireError> {
        Ok(Outcome::Decided {
            state: effect_state_from_i32(r.state, "state")?,
        })
    }
}

impl TryFrom<Outcome> for pb::AmendResponse {
    type Error = OutcomeError;

    fn try_from(o: Outcome) -> Result<Self, OutcomeError> {
        match o {
            Outcome::Amended {
                previous_hash,
                intent_hash,
                changed,
            } => Ok(pb::AmendResponse {
                previous_hash: intent_hash_to_bytes(&previous_hash),
                intent_hash: intent_hash_to_bytes(&intent_hash),
                changed,
            }),
            other => Err(OutcomeError::unexpected("amend", other)),
        }
    }
}

/// Both hashes must be 32 bytes.
impl TryFrom<pb::AmendResponse> for Outcome {
    type Error = WireError;

    fn try_from(r: pb::AmendResponse) -> Result<Self, WireError> {
        Ok(Outcome::Amended {
            previous_hash: intent_hash_from_bytes(&r.previous_hash, "previous_hash")?,
            intent_hash: intent_hash_from_bytes(&r.intent_hash, "intent_hash")?,
            changed: r.changed,
        })
    }
}
