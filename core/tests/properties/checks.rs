//! The per-step properties of a run: what must hold after every command (DESIGN.md
//! section 4), judged from the ledger before and after and the command's outcome.

use ledger_core::*;
use proptest::prelude::*;

use super::common::*;
use super::Run;

impl Run {
    pub(super) fn check_step(
        &mut self,
        before: &Ledger,
        command: &Command,
        out: &Outcome,
    ) -> Result<(), TestCaseError> {
        let after = &self.h.ledger;
        // Refusals change no record.
        if matches!(out, Outcome::Refused(_)) {
            for (key, rec) in records(before) {
                prop_assert_eq!(Some(rec), after.get(&key), "a refusal changed {}", key);
            }
            prop_assert_eq!(before.len(), after.len());
        }
        // Same key, different intent: always a conflict.
        if let CommandBody::Claim { declaration: d, .. }
        | CommandBody::Declare { declaration: d, .. } = &command.body
        {
            if let Some(stored) = before.get(&d.key) {
                let offered = canonicalize(&d.intent_json, &stored.policy.volatile_fields).unwrap();
                if offered.hash != stored.intent_hash {
                    let conflict = matches!(
                        out,
                        Outcome::Claim(ClaimOutcome::Conflict(_))
                            | Outcome::Refused(Refusal::Conflict(_))
                    );
                    prop_assert!(
                        conflict,
                        "different intent for {} answered {:?}",
                        d.key,
                        out
                    );
                }
            }
        }
        // A decision that names an escalation by the newest token it had settles nothing
        // once the effect was attempted since (a later escalation, or none).
        if let CommandBody::DecideEscalation {
            key,
            escalation_token,
            ..
        } = &command.body
        {
            let latest = before.get(key).and_then(|r| r.latest_token()).unwrap_or(0);
            if latest != *escalation_token {
                prop_assert!(
                    matches!(out, Outcome::Refused(_)),
                    "a decision for the escalation after token {} settled the one after {}: {:?}",
                    escalation_token,
                    latest,
                    out
                );
            }
        }
        // An amend changes an intent only where nothing can have happened, and keeps the
        // old hash.
        if let (
            CommandBody::Amend { declaration: d },
            Outcome::Amended {
                previous_hash,
                intent_hash,
                changed: true,
            },
        ) = (&command.body, out)
        {
            let old = before.get(&d.key).expect("an amend needs a record");
            let settled = matches!(
                old.state,
                EffectState::NotStarted | EffectState::FailedBeforeEffect
            ) && !old.ambiguous
                && !old.is_escalated()
                && old.open_attempt().is_none();
            prop_assert!(settled, "amended {:?}", old);
            prop_assert_eq!(&old.intent_hash, previous_hash);
            let new = after.get(&d.key).expect("amended record exists");
            prop_assert_eq!(&new.intent_hash, intent_hash);
            prop_assert_eq!(new.amendments.len(), old.amendments.len() + 1);
            prop_assert_eq!(&new.amendments.last().unwrap().previous_hash, previous_hash);
        }
        // A stale token never fails an effect or extends a lease.
        let token_of = |body: &CommandBody| match body {
            CommandBody::Report {
                key,
                fencing_token,
                report,
            } if !matches!(report, Report::Committed { .. }) => Some((key.clone(), *fencing_token)),
            CommandBody::Heartbeat {
                key, fencing_token, ..
            } => Some((key.clone(), *fencing_token)),
            CommandBody::Observe {
                key,
                fencing_token,
                result,
                ..
            } if !matches!(result, ObservationResult::Committed { .. }) => {
                Some((key.clone(), *fencing_token))
            }
            _ => None,
        };
        if let Some((key, token)) = token_of(&command.body) {
            let latest = before.get(&key).and_then(|r| r.latest_token());
            if latest != Some(token) {
                prop_assert!(
                    matches!(out, Outcome::Refused(_)),
                    "stale token {} for {} answered {:?}",
                    token,
                    key,
                    out
                );
            }
        }
        // Grants carry a token newer than any issued before.
        let granted = match out {
            Outcome::Claim(ClaimOutcome::Proceed(g))
            | Outcome::Reconcile(ReconcileOutcome::Observe(g)) => Some(g),
            _ => None,
        };
        if let Some(g) = granted {
            let newest = self.tokens.values().flatten().max().copied().unwrap_or(0);
            prop_assert!(
                g.fencing_token > newest,
                "token {} not newer than {}",
                g.fencing_token,
                newest
            );
            let key = command.body.effect_key().unwrap().clone();
            self.tokens.entry(key).or_default().push(g.fencing_token);
        }
        for (key, rec) in records(after) {
            prop_assert_eq!(rec.check_invariants(), Ok(()));
            // Committed never changes while the record exists.
            if let Some(old) = before
                .get(&key)
                .filter(|r| r.state == EffectState::Committed)
            {
                prop_assert_eq!(rec.state, EffectState::Committed, "{} left committed", key);
                prop_assert_eq!(&rec.receipt, &old.receipt, "{} changed its receipt", key);
            }
            if rec.state == EffectState::FailedBeforeEffect {
                prop_assert!(
                    every_ambiguous_dispatch_settled(&rec),
                    "{} failed with an unsettled dispatch: {:?}",
                    key,
                    rec
                );
            }
        }
        retention::check_step(before, after, command, out)
    }
}

fn records(ledger: &Ledger) -> Vec<(EffectKey, EffectRecord)> {
    let query = ListQuery {
        tenant: TENANT.into(),
        escalated: false,
        state: None,
        workflow_id: None,
        updated_at_or_before_ms: None,
        after: None,
        limit: usize::MAX,
    };
    ledger
        .list(&query)
        .into_iter()
        .map(|r| (r.key.clone(), r.clone()))
        .collect()
}

/// An oracle independent of the record's `ambiguous` flag: every dispatch that ended
/// unknown or expired is followed by a decision, or by a not-committed observation that
/// proves absence by the rule written out again here (DESIGN.md section 7):
/// - the look-up was made under a reconciliation attempt granted (the latest time the
///   ledger knows it was made after) once no earlier dispatch could still land: its lease
///   end plus the declared processing bound and visibility lag; never without a declared
///   bound;
/// - for a provider that keeps keys for a horizon, it was reported before the horizon of
///   the dispatch it settles had passed (the provider first saw the key no later than that
///   dispatch; this harness stamps real time as ledger time).
fn every_ambiguous_dispatch_settled(rec: &EffectRecord) -> bool {
    let proves_absence = |o: &Observation, dispatch: &Attempt| {
        let Some(processing_ms) = rec.policy.processing_ms_max else {
            return false;
        };
        let Some(looked_after_ms) = rec
            .attempts
            .iter()
            .find(|a| a.kind == AttemptKind::Reconcile && a.fencing_token == o.fencing_token)
            .map(|a| a.granted_at_ms)
        else {
            return false;
        };
        let lease_end_ms = rec
            .attempts
            .iter()
            .filter(|a| a.kind == AttemptKind::Dispatch && a.fencing_token < o.fencing_token)
            .map(|a| a.lease_until_ms)
            .max()
            .unwrap_or(0);
        let horizon_ms = rec.policy.provider_horizon_ms;
        let before_horizon = horizon_ms == 0 || o.at_ms < dispatch.granted_at_ms + horizon_ms;
        looked_after_ms >= lease_end_ms + processing_ms + rec.policy.visibility_lag_ms
            && before_horizon
    };
    rec.attempts
        .iter()
        .filter(|a| a.kind == AttemptKind::Dispatch)
        .filter(|a| {
            matches!(
                a.outcome,
                Some(AttemptOutcome::Unknown { .. } | AttemptOutcome::LeaseExpired)
            )
        })
        .all(|a| {
            let observed = rec.observations.iter().any(|o| {
                o.fencing_token > a.fencing_token
                    && o.result == ObservationResult::NotCommitted
                    && proves_absence(o, a)
            });
            let decided = rec.decision.as_ref().is_some_and(|d| {
                d.decision == Decision::NotCommitted && d.at_ms >= a.granted_at_ms
            });
            observed || decided
        })
}
