//! The sequential model and what "the same result" means.
//!
//! The model is the core [`Ledger`] itself, configured like the simulated cluster, one
//! per effect. Three things differ between a model run and the real one without being
//! a difference of behaviour, and are compared modulo them:
//! - fencing tokens are global in the real ledger (other effects take tokens too) and
//!   per-effect in the model: tokens are compared through the attempt they name, and a
//!   client's token is translated to the model's token of the same attempt;
//! - lease expiry is a replicated sweep the leader proposes whenever it likes: the model
//!   sweeps before every command, which changes no command's outcome (the core answers
//!   from the effective state, a lapsed lease counting as unknown before it is swept),
//!   but changes what a read shows: an attempt closed by the sweep, the sweep's own
//!   ambiguous observation of a lapsed reconciliation, the moment the state turned
//!   unknown. Reads are compared on a normal form that leaves those out;
//! - time: a grant carries the exact time it was stamped, and the model applies it at
//!   that time; other commands are tried at the earliest time the real one could have
//!   been stamped and at every lease or horizon boundary up to its response, the only
//!   times at which an outcome can change.
//!
//! Refusals are compared by kind (their fields name global tokens and times).

use std::collections::BTreeMap;

use ledger_core::{
    AttemptKind, AttemptOutcome, Caller, ClaimOutcome, Command, CommandBody, EffectKey,
    EffectRecord, EffectState, Grant, Ledger, ObservationResult, Outcome, ReconcileOutcome,
    TenantSettings,
};

use crate::fixtures::{ToolKind, TENANT};

/// The detail the core records when a reconciliation's lease lapses.
const LAPSED_RECONCILIATION: &str =
    "reconciliation lease ran out before an observation was recorded";

/// An empty ledger with the simulated cluster's tenant and tool policies.
pub fn configured_ledger() -> Ledger {
    let mut ledger = Ledger::new();
    let mut setup = vec![CommandBody::PutTenant {
        tenant: TENANT.into(),
        settings: TenantSettings::default(),
    }];
    setup.extend(ToolKind::ALL.iter().map(|tool| CommandBody::PutToolPolicy {
        tenant: TENANT.into(),
        tool: tool.tool_name(),
        policy: tool.policy(),
    }));
    for (i, body) in setup.into_iter().enumerate() {
        let command = Command {
            command_id: format!("model-setup-{i}"),
            caller: Caller::Operator,
            body,
        };
        ledger.apply(&command, 0);
    }
    ledger
}

/// Applies the leader's lease sweep at `now_ms`.
pub fn sweep(ledger: &mut Ledger, now_ms: u64) {
    let command = Command {
        command_id: "model-sweep".into(),
        caller: Caller::Operator,
        body: CommandBody::ExpireLeases { limit: 1_000 },
    };
    ledger.apply(&command, now_ms);
}

/// The command for `body` (the operator's for a decision, the tenant's otherwise) with its
/// fencing token or escalation token (a real one) replaced by the model's token of the
/// same attempt; `None` when the model has no such attempt yet.
pub fn translate(
    ledger: &Ledger,
    command_id: &str,
    body: &CommandBody,
    attempt_of: &BTreeMap<u64, u32>,
) -> Option<Command> {
    let model_token = |key: &EffectKey, real: u64| {
        let attempt = *attempt_of.get(&real)?;
        let record = ledger.get(key)?;
        record
            .attempts
            .get(attempt as usize - 1)
            .map(|a| a.fencing_token)
    };
    let mut body = body.clone();
    match &mut body {
        CommandBody::Report {
            key, fencing_token, ..
        }
        | CommandBody::Observe {
            key, fencing_token, ..
        }
        | CommandBody::Heartbeat {
            key, fencing_token, ..
        } => *fencing_token = model_token(key, *fencing_token)?,
        // An escalation is named by the newest attempt's token before it.
        CommandBody::DecideEscalation {
            key,
            escalation_token,
            ..
        } => *escalation_token = model_token(key, *escalation_token)?,
        _ => {}
    }
    // A decision is the operator's; everything else a tenant's tool server sends.
    let caller = match body {
        CommandBody::Decide { .. } | CommandBody::DecideEscalation { .. } => Caller::Operator,
        _ => Caller::Tenant(TENANT.into()),
    };
    Some(Command {
        command_id: command_id.to_owned(),
        caller,
        body,
    })
}

fn same_grant(model: &Grant, real: &Grant) -> bool {
    model.attempt_id == real.attempt_id
        && model.granted_at_ms == real.granted_at_ms
        && model.lease_until_ms == real.lease_until_ms
        && model.provider_key == real.provider_key
        && model.horizon_deadline_ms == real.horizon_deadline_ms
}

fn same_claim(model: &ClaimOutcome, real: &ClaimOutcome) -> bool {
    use ClaimOutcome::*;
    match (model, real) {
        (Proceed(m), Proceed(r)) => same_grant(m, r),
        (Reconcile(m), Reconcile(r)) | (HorizonPassed(m), HorizonPassed(r)) => {
            m.provider_key == r.provider_key
                && m.dispatches == r.dispatches
                && m.horizon_deadline_ms == r.horizon_deadline_ms
        }
        (Conflict(m), Conflict(r)) => {
            m.stored_hash == r.stored_hash && m.offered_hash == r.offered_hash
        }
        (m, r) => m == r,
    }
}

fn same_reconcile(model: &ReconcileOutcome, real: &ReconcileOutcome) -> bool {
    match (model, real) {
        (ReconcileOutcome::Observe(m), ReconcileOutcome::Observe(r)) => same_grant(m, r),
        (m, r) => m == r,
    }
}

/// Whether a command's outcome in the model is the one the client received.
pub fn same_outcome(model: &Outcome, real: &Outcome) -> bool {
    match (model, real) {
        (Outcome::Claim(m), Outcome::Claim(r)) => same_claim(m, r),
        (Outcome::Reconcile(m), Outcome::Reconcile(r)) => same_reconcile(m, r),
        (Outcome::Refused(m), Outcome::Refused(r)) => {
            std::mem::discriminant(m) == std::mem::discriminant(r)
        }
        (m, r) => m == r,
    }
}

/// A record as a read is compared: what no sweep timing can change.
#[derive(Debug, PartialEq, Eq)]
pub struct ReadForm {
    state: &'static str,
    receipt: Option<String>,
    intent_hash: String,
    provider_key: String,
    horizon_deadline_ms: Option<u64>,
    escalated: bool,
    attempts: Vec<(u32, AttemptKind, String, u64, String)>,
    observations: Vec<(ObservationResult, String)>,
}

/// The read form of `record`.
pub fn read_form(record: &EffectRecord) -> ReadForm {
    let state = match record.state {
        EffectState::Committed => "committed",
        EffectState::NotStarted => "not_started",
        EffectState::FailedBeforeEffect => "failed_before_effect",
        EffectState::InProgress | EffectState::UnknownAfterDispatch => "open_or_unknown",
    };
    let outcome = |o: &Option<AttemptOutcome>| match o {
        Some(AttemptOutcome::FailedBeforeEffect { proof }) => format!("failed: {proof}"),
        Some(AttemptOutcome::Unknown { reason }) => format!("unknown: {reason}"),
        _ => "not reported".into(),
    };
    ReadForm {
        state,
        receipt: record.receipt.clone(),
        intent_hash: format!("{}", record.intent_hash),
        provider_key: record.provider_key.clone(),
        horizon_deadline_ms: record.horizon_deadline_ms,
        escalated: record.escalation.is_some(),
        attempts: record
            .attempts
            .iter()
            .map(|a| {
                let o = outcome(&a.outcome);
                (a.attempt_id, a.kind, a.holder.clone(), a.granted_at_ms, o)
            })
            .collect(),
        observations: record
            .observations
            .iter()
            .filter(|o| o.detail != LAPSED_RECONCILIATION)
            .map(|o| (o.result.clone(), o.detail.clone()))
            .collect(),
    }
}
