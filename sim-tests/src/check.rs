//! The oracle: properties every run must satisfy, as reusable functions that return the
//! violations they find (empty when the property holds).
//!
//! - [`check_records`]: every record on a replica satisfies the core invariants, at most
//!   one attempt is open and it is the newest, fencing tokens increase within a record
//!   and are unique across the ledger, and no attempt was granted while an earlier one
//!   could still have been live (an expired lease ended before the next grant).
//! - [`check_acks`]: every answer a client received is reflected in a replica's ledger
//!   (the acknowledged transition was not lost), or, once garbage collection removed the
//!   record, in its tombstone (a "committed" answer in its final state and receipt digest).
//! - [`check_grants`]: no fencing token was handed to two different attempts.
//! - [`check_identical`]: replicas hold byte-identical ledger snapshots at one index (what
//!   `Cluster::wait_converged` waits for).
//! - [`check_provider`]: the provider's ground truth agrees with the ledger: no effect
//!   executed twice, every committed record (or committed tombstone) carries the
//!   provider's receipt (or its digest), and (once the workload settled) everything the
//!   provider executed is committed in the ledger.
//!
//! Properties over time (same state at the same log index on every replica, committed
//! never reverts, a minority cannot commit) are checked from samples; see
//! [`crate::sampler`].

use std::collections::BTreeMap;

use ledger_core::{
    AttemptKind, AttemptOutcome, EffectKey, EffectRecord, EffectState, ObservationResult,
    ReceiptDigest, Report, Tombstone,
};

use crate::history::{Ack, Answer};
use crate::provider::ProviderEffect;
use crate::replica::ReplicaView;

/// What a checker found wrong; empty when the property holds.
pub type Violations = Vec<String>;

/// Checks one record's attempt history beyond the core's own invariants.
pub fn check_record(record: &EffectRecord) -> Result<(), String> {
    record.check_invariants()?;
    let key = &record.key;
    let attempts = &record.attempts;
    if let Some(open) = attempts.iter().position(|a| a.outcome.is_none()) {
        if open + 1 != attempts.len() {
            return Err(format!(
                "{key}: attempt {} is open but not the newest",
                open + 1
            ));
        }
    }
    for pair in attempts.windows(2) {
        let (earlier, later) = (&pair[0], &pair[1]);
        if later.fencing_token <= earlier.fencing_token {
            return Err(format!("{key}: fencing tokens do not increase"));
        }
        if later.granted_at_ms < earlier.granted_at_ms {
            return Err(format!(
                "{key}: attempt {} granted before attempt {}",
                later.attempt_id, earlier.attempt_id
            ));
        }
        if earlier.outcome == Some(AttemptOutcome::LeaseExpired)
            && later.granted_at_ms < earlier.lease_until_ms
        {
            return Err(format!(
                "{key}: attempt {} granted at {} while attempt {}'s lease ran to {}: two live attempts",
                later.attempt_id, later.granted_at_ms, earlier.attempt_id, earlier.lease_until_ms
            ));
        }
    }
    if record.state == EffectState::Committed && record.receipt.is_none() {
        return Err(format!("{key}: committed without a receipt"));
    }
    Ok(())
}

/// Checks every record of a replica, and that no fencing token was handed out twice.
pub fn check_records(view: &ReplicaView) -> Violations {
    let mut violations = Violations::new();
    let mut owner_of_token: BTreeMap<u64, &EffectKey> = BTreeMap::new();
    for record in view.records.values() {
        if let Err(v) = check_record(record) {
            violations.push(format!(
                "node {} index {}: {v}",
                view.node, view.applied_index
            ));
        }
        for attempt in &record.attempts {
            if let Some(other) = owner_of_token.insert(attempt.fencing_token, &record.key) {
                violations.push(format!(
                    "node {}: fencing token {} granted to {other} and to {}",
                    view.node, attempt.fencing_token, record.key
                ));
            }
        }
    }
    violations
}

/// Checks that every acknowledged answer is reflected in `view`: in the record of its
/// effect or, once the record was collected, in its tombstone.
pub fn check_acks(acks: &[Ack], view: &ReplicaView) -> Violations {
    acks.iter()
        .filter_map(|ack| {
            let record = view.records.get(&ack.key);
            let checked = match (record, view.tombstones.get(&ack.key)) {
                (None, Some(tombstone)) => check_ack_collected(ack, tombstone),
                _ => check_ack(ack, record),
            };
            checked.err().map(|v| {
                format!(
                    "node {} lost what {} was told at {:?} about {}: {v}",
                    view.node, ack.client, ack.at, ack.key
                )
            })
        })
        .collect()
}

/// Checks that one answer is reflected in the record of its effect.
pub fn check_ack(ack: &Ack, record: Option<&EffectRecord>) -> Result<(), String> {
    let record = record.ok_or("the record does not exist")?;
    let attempt = |token: u64| {
        record
            .attempt_by_token(token)
            .ok_or_else(|| format!("no attempt with fencing token {token}"))
    };
    let committed_with = |receipt: &str| {
        if record.state == EffectState::Committed && record.receipt.as_deref() == Some(receipt) {
            Ok(())
        } else {
            Err(format!(
                "told committed with {receipt:?}, record is {} with {:?}",
                record.state, record.receipt
            ))
        }
    };
    match &ack.answer {
        Answer::Granted { holder, grant } | Answer::ReconcileGranted { holder, grant } => {
            let a = attempt(grant.fencing_token)?;
            let kind = match ack.answer {
                Answer::Granted { .. } => AttemptKind::Dispatch,
                _ => AttemptKind::Reconcile,
            };
            // A holder's report of a failure or an unknown outcome ends its lease there
            // and then (`close_open` in `core/src/attempt.rs`), never before the grant.
            let closed_by_report = matches!(
                a.outcome,
                Some(AttemptOutcome::FailedBeforeEffect { .. } | AttemptOutcome::Unknown { .. })
            ) && a.lease_until_ms >= a.granted_at_ms;
            let same = a.attempt_id == grant.attempt_id
                && a.holder == *holder
                && a.kind == kind
                && (a.lease_until_ms >= grant.lease_until_ms || closed_by_report)
                && record.provider_key == grant.provider_key;
            if same {
                Ok(())
            } else {
                Err(format!("granted {grant:?} to {holder}, record has {a:?}"))
            }
        }
        Answer::Replayed { receipt } => committed_with(receipt),
        Answer::InFlight { holder, attempt_id } => {
            let index = (*attempt_id as usize).checked_sub(1);
            match index.and_then(|i| record.attempts.get(i)) {
                Some(a) if a.holder == *holder => Ok(()),
                other => Err(format!(
                    "told {holder} holds attempt {attempt_id}, record has {other:?}"
                )),
            }
        }
        Answer::MustReconcile {
            dispatches,
            provider_key,
        } => {
            let recorded = record
                .attempts
                .iter()
                .filter(|a| a.kind == AttemptKind::Dispatch)
                .count() as u32;
            if recorded >= *dispatches && record.provider_key == *provider_key {
                Ok(())
            } else {
                Err(format!(
                    "told {dispatches} dispatches, record has {recorded}"
                ))
            }
        }
        // An escalation ends only by a commit (a late report or observation, which the
        // provider's state makes true) or by an operator's decision, never by itself.
        Answer::Escalated => {
            if record.is_escalated()
                || record.state == EffectState::Committed
                || record.decision.is_some()
            {
                Ok(())
            } else {
                Err(format!(
                    "told escalated, record is {} with no escalation, commit or decision",
                    record.state
                ))
            }
        }
        Answer::Reported {
            fencing_token,
            report,
            state,
            receipt,
        } => {
            if *state == EffectState::Committed {
                return committed_with(receipt.as_deref().unwrap_or_default());
            }
            let a = attempt(*fencing_token)?;
            let expected = match report {
                Report::Committed { .. } => return Err(format!("a committed report left {state}")),
                Report::FailedBeforeEffect { proof } => AttemptOutcome::FailedBeforeEffect {
                    proof: proof.clone(),
                },
                Report::Unknown { reason } => AttemptOutcome::Unknown {
                    reason: reason.clone(),
                },
            };
            if a.outcome.as_ref() == Some(&expected) {
                Ok(())
            } else {
                Err(format!(
                    "report {report:?} taken, attempt ended {:?}",
                    a.outcome
                ))
            }
        }
        Answer::Observed {
            fencing_token,
            result,
            state: _,
        } => {
            // A committed fact arriving when the effect is already committed changes
            // nothing and is not recorded (`core/src/reconcile.rs`); the record must
            // then be committed, which is what the fact says.
            if let ObservationResult::Committed { receipt } = result {
                return committed_with(receipt);
            }
            if !record
                .observations
                .iter()
                .any(|o| o.fencing_token == *fencing_token && o.result == *result)
            {
                return Err(format!(
                    "observation {result:?} with token {fencing_token} missing"
                ));
            }
            Ok(())
        }
        Answer::ReportRefused {
            fencing_token,
            report,
            ..
        } => {
            // A refused report changes nothing: its attempt must not carry it.
            let a = attempt(*fencing_token)?;
            let carried = match (report, &a.outcome) {
                (
                    Report::FailedBeforeEffect { proof },
                    Some(AttemptOutcome::FailedBeforeEffect { proof: p }),
                ) => proof == p,
                (Report::Unknown { reason }, Some(AttemptOutcome::Unknown { reason: r })) => {
                    reason == r
                }
                _ => false,
            };
            if carried {
                Err(format!("refused report {report:?} was applied anyway"))
            } else {
                Ok(())
            }
        }
    }
}

/// Checks that one answer is reflected in the tombstone its effect's record left: an
/// answer that the effect committed with a receipt needs a tombstone of a committed
/// effect with that receipt's digest. Everything else an answer said is about the
/// record's history, which went with it; the final state is all a tombstone keeps.
pub fn check_ack_collected(ack: &Ack, tombstone: &Tombstone) -> Result<(), String> {
    let receipt = match &ack.answer {
        Answer::Replayed { receipt }
        | Answer::Observed {
            result: ObservationResult::Committed { receipt },
            ..
        } => receipt.as_str(),
        Answer::Reported {
            state: EffectState::Committed,
            receipt,
            ..
        } => receipt.as_deref().unwrap_or_default(),
        _ => return Ok(()),
    };
    let digest = ReceiptDigest::of(receipt);
    if tombstone.final_state == EffectState::Committed && tombstone.receipt_digest == Some(digest) {
        Ok(())
    } else {
        Err(format!(
            "told committed with {receipt:?} ({digest}), the record was collected {} with \
             receipt digest {:?}",
            tombstone.final_state, tombstone.receipt_digest
        ))
    }
}

/// Checks the grants clients received across the whole history: a fencing token names
/// one attempt of one effect, whoever was told it (a retried claim may be told the same
/// grant twice, never a different one). Together with [`check_acks`] (each grant is in
/// the record) and [`check_record`] (no grant while an earlier attempt could be live),
/// this means no two clients ever held live attempts of one effect at once.
pub fn check_grants(acks: &[Ack]) -> Violations {
    let mut violations = Violations::new();
    let mut by_token: BTreeMap<u64, (&EffectKey, &str, u32)> = BTreeMap::new();
    for ack in acks {
        let (Answer::Granted { holder, grant } | Answer::ReconcileGranted { holder, grant }) =
            &ack.answer
        else {
            continue;
        };
        let this = (&ack.key, holder.as_str(), grant.attempt_id);
        match by_token.insert(grant.fencing_token, this) {
            Some(seen) if seen != this => violations.push(format!(
                "fencing token {} granted as {seen:?} and as {this:?}",
                grant.fencing_token
            )),
            _ => {}
        }
    }
    violations
}

/// Checks that converged replicas are identical, byte for byte.
pub fn check_identical(views: &[ReplicaView]) -> Violations {
    let Some(first) = views.first() else {
        return vec!["no replica to compare".into()];
    };
    views
        .iter()
        .filter(|v| v.applied_index != first.applied_index || v.snapshot != first.snapshot)
        .map(|v| {
            format!(
                "node {} (index {}, {} bytes) differs from node {} (index {}, {} bytes)",
                v.node,
                v.applied_index,
                v.snapshot.len(),
                first.node,
                first.applied_index,
                first.snapshot.len()
            )
        })
        .collect()
}

/// Checks the ledger against the provider's ground truth. With `settled`, every effect
/// the provider executed must be committed in the ledger (the workload reconciled it),
/// or collected as committed (its tombstone).
pub fn check_provider(
    provider: &BTreeMap<String, ProviderEffect>,
    view: &ReplicaView,
    settled: bool,
) -> Violations {
    let mut violations = Violations::new();
    for (provider_key, effect) in provider {
        if effect.executions > 1 {
            violations.push(format!(
                "provider executed {provider_key} {} times: a duplicate effect",
                effect.executions
            ));
        }
    }
    let by_provider_key: BTreeMap<&str, &EffectRecord> = view
        .records
        .values()
        .map(|r| (r.provider_key.as_str(), r))
        .collect();
    // Effects of other namespaces go to other providers (see `crate::world`).
    let ours = |r: &&EffectRecord| r.key.namespace == crate::fixtures::NAMESPACE;
    for record in view.records.values().filter(ours) {
        if record.state != EffectState::Committed {
            continue;
        }
        let truth = provider.get(&record.provider_key).map(|e| &e.receipt);
        if truth != record.receipt.as_ref() {
            violations.push(format!(
                "{} is committed with {:?} but the provider holds {truth:?}",
                record.key, record.receipt
            ));
        }
    }
    let collected = check_collected(provider, view, &mut violations);
    if settled {
        for provider_key in provider.keys() {
            match by_provider_key.get(provider_key.as_str()) {
                Some(r) if r.state == EffectState::Committed => {}
                Some(r) => violations.push(format!(
                    "the provider executed {} but the ledger says {}",
                    r.key, r.state
                )),
                None => match collected.get(provider_key) {
                    Some(t) if t.final_state == EffectState::Committed => {}
                    Some(t) => violations.push(format!(
                        "the provider executed {} but it was collected {}",
                        t.key, t.final_state
                    )),
                    None => {
                        violations.push(format!("the provider executed unknown key {provider_key}"))
                    }
                },
            }
        }
    }
    violations
}

/// Checks every committed tombstone of the workload's namespace against the provider's
/// receipt; returns the tombstones by provider key (derived from the effect key, as the
/// record's was).
fn check_collected<'a>(
    provider: &BTreeMap<String, ProviderEffect>,
    view: &'a ReplicaView,
    violations: &mut Violations,
) -> BTreeMap<String, &'a Tombstone> {
    let collected: BTreeMap<String, &Tombstone> = view
        .tombstones
        .values()
        .map(|t| (t.key.provider_key(), t))
        .collect();
    for (provider_key, tombstone) in &collected {
        let ours = tombstone.key.namespace == crate::fixtures::NAMESPACE;
        if !ours || tombstone.final_state != EffectState::Committed {
            continue;
        }
        let truth = provider
            .get(provider_key)
            .map(|e| ReceiptDigest::of(&e.receipt));
        if truth != tombstone.receipt_digest {
            violations.push(format!(
                "{} was collected committed with receipt digest {:?} but the provider's \
                 receipt has {truth:?}",
                tombstone.key, tombstone.receipt_digest
            ));
        }
    }
    collected
}

/// Checks that every effect in `effects` is committed in `view` (the workload settled).
pub fn check_all_committed<'a>(
    effects: impl IntoIterator<Item = &'a EffectKey>,
    view: &ReplicaView,
) -> Violations {
    effects
        .into_iter()
        .filter_map(|key| match view.records.get(key) {
            Some(r) if r.state == EffectState::Committed => None,
            Some(r) => Some(format!(
                "{key} ended {} (escalated: {})",
                r.state,
                r.is_escalated()
            )),
            None => Some(format!("{key} was never declared")),
        })
        .collect()
}

/// Collects violations by property and fails with all of them at once.
#[derive(Debug, Default)]
pub struct Verdict {
    failures: Vec<(String, Violations)>,
    properties: usize,
}

impl Verdict {
    /// An empty verdict.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds what `property`'s checker found.
    pub fn add(&mut self, property: &str, violations: Violations) {
        self.properties += 1;
        if !violations.is_empty() {
            self.failures.push((property.to_owned(), violations));
        }
    }

    /// Panics with every violation found, if any; returns how many properties held.
    pub fn assert_holds(self) -> usize {
        if self.failures.is_empty() {
            return self.properties;
        }
        let mut message = String::from("properties violated:\n");
        for (property, violations) in &self.failures {
            message.push_str(&format!("- {property} ({}):\n", violations.len()));
            for v in violations.iter().take(20) {
                message.push_str(&format!("    {v}\n"));
            }
        }
        panic!("{message}");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ledger_core::{
        Caller, Command, CommandBody, EffectState, Ledger, ObservationResult, Outcome,
        ReceiptDigest, Report, Tombstone,
    };

    use super::{check_ack, check_ack_collected};
    use crate::fixtures::{declaration, effect_key, ToolKind, TENANT};
    use crate::history::{Ack, Answer};
    use crate::linearize::model::configured_ledger;

    fn observed(result: ObservationResult) -> Ack {
        Ack {
            at: Duration::ZERO,
            client: "late-reconciler".into(),
            key: effect_key("ack"),
            answer: Answer::Observed {
                fencing_token: 99,
                result,
                state: ledger_core::EffectState::Committed,
            },
        }
    }

    /// A ledger where effect `ack` was claimed by holder `h` at 1,000 ms and reported
    /// with `report` at 1,100 ms; the grant `h` was told.
    fn claimed_and_reported(report: Report) -> (Ledger, ledger_core::Grant) {
        let mut ledger = configured_ledger();
        let tenant = |id: &str, body| Command {
            command_id: id.into(),
            caller: Caller::Tenant(TENANT.into()),
            body,
        };
        let claim = CommandBody::Claim {
            declaration: declaration("ack", ToolKind::Unkeyed),
            holder: "h".into(),
            lease_ms: None,
            confirmation: None,
        };
        let Outcome::Claim(ledger_core::ClaimOutcome::Proceed(grant)) =
            ledger.apply(&tenant("c", claim), 1_000)
        else {
            panic!("a first claim is granted");
        };
        let report = CommandBody::Report {
            key: effect_key("ack"),
            fencing_token: grant.fencing_token,
            report,
        };
        ledger.apply(&tenant("r", report), 1_100);
        (ledger, grant)
    }

    /// Found by `vopr` seed 282: a reconciler's committed fact that arrives once the
    /// effect is already committed is answered "committed" and, by design, not recorded
    /// (`core/src/reconcile.rs`); the checker once required it to be recorded.
    #[test]
    fn committed_fact_observed_after_commit_needs_no_recorded_observation() {
        let (ledger, _) = claimed_and_reported(Report::Committed {
            receipt: "r".into(),
        });
        let record = ledger.get(&effect_key("ack"));
        let fact = observed(ObservationResult::Committed {
            receipt: "r".into(),
        });
        assert_eq!(check_ack(&fact, record.as_ref()), Ok(()));
        let wrong_receipt = observed(ObservationResult::Committed {
            receipt: "other".into(),
        });
        assert!(check_ack(&wrong_receipt, record.as_ref()).is_err());
        let unrecorded_proof = observed(ObservationResult::NotCommitted);
        assert!(check_ack(&unrecorded_proof, record.as_ref()).is_err());
    }

    /// A holder's report of an unknown outcome ends its lease when it reports
    /// (`core/src/attempt.rs`): the grant it was told is still the attempt on record.
    #[test]
    fn a_grant_whose_lease_its_holder_ended_by_reporting_is_on_record() {
        let (ledger, grant) = claimed_and_reported(Report::Unknown {
            reason: "timed out".into(),
        });
        let granted = Ack {
            at: Duration::ZERO,
            client: "h".into(),
            key: effect_key("ack"),
            answer: Answer::Granted {
                holder: "h".into(),
                grant,
            },
        };
        assert_eq!(
            check_ack(&granted, ledger.get(&effect_key("ack")).as_ref()),
            Ok(())
        );
    }

    /// An escalation a client was told of stays on record until a commit or an
    /// operator's decision ends it.
    #[test]
    fn an_escalated_answer_needs_an_escalation_a_commit_or_a_decision_on_record() {
        let (ledger, _) = claimed_and_reported(Report::Unknown {
            reason: "timed out".into(),
        });
        let mut record = ledger.get(&effect_key("ack")).expect("claimed");
        let escalated = Ack {
            at: Duration::ZERO,
            client: "retrying".into(),
            key: effect_key("ack"),
            answer: Answer::Escalated,
        };
        assert!(
            check_ack(&escalated, Some(&record)).is_err(),
            "unknown, never escalated"
        );
        record.escalation = Some(ledger_core::Escalation {
            at_ms: 1_200,
            reason: ledger_core::EscalationReason::DispatchBudgetSpent,
        });
        assert_eq!(check_ack(&escalated, Some(&record)), Ok(()));
        record.escalation = None;
        record.state = EffectState::Committed;
        assert_eq!(check_ack(&escalated, Some(&record)), Ok(()));
    }

    #[test]
    fn a_committed_answer_about_a_collected_record_needs_its_receipt_digest() {
        let tombstone = Tombstone {
            key: effect_key("gone"),
            intent_hash: ledger_core::canonicalize("{}", &[]).expect("valid").hash,
            final_state: EffectState::Committed,
            receipt_digest: Some(ReceiptDigest::of("r")),
            collected_at_ms: 1,
            expires_at_ms: 2,
        };
        let replayed = |receipt: &str| Ack {
            at: Duration::ZERO,
            client: "late".into(),
            key: effect_key("gone"),
            answer: Answer::Replayed {
                receipt: receipt.into(),
            },
        };
        assert_eq!(check_ack_collected(&replayed("r"), &tombstone), Ok(()));
        assert!(check_ack_collected(&replayed("other"), &tombstone).is_err());
        let failed = Tombstone {
            final_state: EffectState::FailedBeforeEffect,
            receipt_digest: None,
            ..tombstone
        };
        assert!(check_ack_collected(&replayed("r"), &failed).is_err());
    }
}
