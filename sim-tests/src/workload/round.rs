//! One round of one effect for a workload client: claim, and act on the answer (dispatch
//! and report, wait for another holder, or reconcile through the provider).

use std::time::Duration;

use madsim::rand::{thread_rng, Rng};
use tokio::time::Instant;

use ledger_client::ClientError;
use ledger_core::{
    ClaimOutcome, CommandBody, Decision, EffectKey, EffectRecord, EffectState, Grant,
    ObservationResult, Outcome, ReconcileOutcome, Refusal, Report,
};

use super::{wall_clock_ms, Actor, Step, POLL_MS_MAX, SEND_MARGIN_MS};
use crate::fixtures::{declaration, ToolKind};
use crate::history::Answer;
use crate::linearize::oplog::{Answer as OpAnswer, Call};

/// Chance in percent that a round begins with a linearizable read of the record.
const READ_PERCENT: u32 = 15;
/// How observations say they were made.
const OBSERVED_BY: &str = "looked up by provider key";
/// Who decides escalated effects.
const OPERATOR: &str = "ops:simulated";

impl Actor {
    /// Claims `effect` once and acts on the answer.
    pub(super) async fn round(&mut self, effect: &str, tool: ToolKind) -> Step {
        let declaration = declaration(effect, tool);
        let key = declaration.key.clone();
        if thread_rng().gen_range(0..100) < READ_PERCENT {
            self.read(&key).await;
        }
        let command_id = self.command_id();
        let holder = self.holder();
        let call = Call::Command {
            command_id: command_id.clone(),
            body: Box::new(CommandBody::Claim {
                declaration: declaration.clone(),
                holder: holder.clone(),
                lease_ms: None,
                confirmation: None,
            }),
        };
        // A grant is stamped after its claim reaches the leader, so its lease runs for at
        // least its length from here (from the first send, when the claim is re-sent).
        let asked_at = Instant::now();
        let claimed = self
            .recorded(
                &key,
                call,
                |o: &ClaimOutcome| OpAnswer::Outcome(Outcome::Claim(o.clone())),
                |c| {
                    let (id, d, h) = (command_id.clone(), declaration.clone(), holder.clone());
                    async move { c.claim(&id, d, &h, None, None).await }
                },
            )
            .await;
        let outcome = match claimed {
            None => return Step::Later,
            Some(Err(e)) => {
                self.anomaly(&key, format!("claim failed: {e}"));
                return Step::Settled;
            }
            Some(Ok(outcome)) => outcome,
        };
        if let Some(answer) = Answer::of_claim(&holder, &outcome) {
            self.history.record(&self.name, &key, answer);
        }
        match outcome {
            ClaimOutcome::Proceed(grant) => self.dispatch(&key, tool, grant, asked_at).await,
            ClaimOutcome::Replay { .. } => Step::Settled,
            ClaimOutcome::Escalated { .. } => self.decide(&key).await,
            ClaimOutcome::InFlight { lease_until_ms, .. } => {
                self.pause_until(lease_until_ms).await;
                Step::Later
            }
            ClaimOutcome::Reconcile(_) | ClaimOutcome::HorizonPassed(_) => {
                self.reconcile(&key).await
            }
            ClaimOutcome::Conflict(conflict) => {
                self.anomaly(
                    &key,
                    format!("conflict for an identical intent: {conflict:?}"),
                );
                Step::Settled
            }
            // The simulation never collects records, so a tombstone is a bug.
            ClaimOutcome::Expired(expired) => {
                self.anomaly(&key, format!("claim answered expired: {expired:?}"));
                Step::Settled
            }
        }
    }

    /// Sleeps until about when `lease_until_ms` runs out, within bounds: the polite way to
    /// poll an effect someone else holds.
    async fn pause_until(&self, lease_until_ms: u64) {
        let left_ms = lease_until_ms.saturating_sub(wall_clock_ms());
        let jitter_ms = thread_rng().gen_range(0..100);
        let pause_ms = left_ms.clamp(50, POLL_MS_MAX) + jitter_ms;
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
    }

    /// Sends to the provider if the lease allows, without an `.await` between the lease
    /// check and the send, and returns the receipt if the provider executed it.
    ///
    /// The lease is timed as `EffectRunner` times it: its granted length, on this client's
    /// monotonic clock, from `asked_at` (when the claim was sent). Comparing
    /// `lease_until_ms` with the wall clock would take ledger time for the simulator's
    /// clock, and ledger time may lag it by more than a lease (a follower anchors on a
    /// stamp that reached it late, `ledger_node::stamp_bound`): every grant would look
    /// over on arrival.
    fn send_within_lease(
        &self,
        grant: &Grant,
        asked_at: Instant,
        tool: ToolKind,
    ) -> Option<String> {
        let lease_ms = grant.lease_until_ms.saturating_sub(grant.granted_at_ms);
        if asked_at.elapsed().as_millis() as u64 + SEND_MARGIN_MS >= lease_ms {
            return None;
        }
        Some(
            self.provider
                .send(&grant.provider_key, tool == ToolKind::Keyed),
        )
    }

    async fn dispatch(
        &mut self,
        key: &EffectKey,
        tool: ToolKind,
        grant: Grant,
        asked_at: Instant,
    ) -> Step {
        let latency_ms = thread_rng().gen_range(1..=30);
        tokio::time::sleep(Duration::from_millis(latency_ms)).await;
        let roll = thread_rng().gen_range(0..100);
        if roll < self.vanish_percent {
            // The tool server dies mid-dispatch, having sent or not; its successor has a
            // new holder name and comes back to the effect later.
            if thread_rng().gen_bool(0.5) {
                self.send_within_lease(&grant, asked_at, tool);
            }
            self.incarnation += 1;
            return Step::Later;
        }
        let Some(receipt) = (match thread_rng().gen_range(0..100) {
            0..80 => self.send_within_lease(&grant, asked_at, tool).map(Some),
            _ => Some(None),
        }) else {
            let proof = "lease nearly over: not sent".to_string();
            return self
                .report(
                    key,
                    grant.fencing_token,
                    Report::FailedBeforeEffect { proof },
                )
                .await;
        };
        let report = match (receipt, thread_rng().gen_range(0..100)) {
            (Some(receipt), 0..85) => Report::Committed { receipt },
            (Some(_), _) => Report::Unknown {
                reason: "sent; the answer was lost".into(),
            },
            (None, 0..50) => Report::FailedBeforeEffect {
                proof: "validation failed before sending".into(),
            },
            (None, _) => Report::Unknown {
                reason: "timed out; nothing was sent, but the holder cannot know".into(),
            },
        };
        self.report(key, grant.fencing_token, report).await
    }

    async fn report(&mut self, key: &EffectKey, token: u64, report: Report) -> Step {
        let command_id = self.command_id();
        let call = Call::Command {
            command_id: command_id.clone(),
            body: Box::new(CommandBody::Report {
                key: key.clone(),
                fencing_token: token,
                report: report.clone(),
            }),
        };
        let reported = self
            .recorded(
                key,
                call,
                |(state, receipt): &(EffectState, Option<String>)| {
                    OpAnswer::Outcome(Outcome::Reported {
                        state: *state,
                        receipt: receipt.clone(),
                    })
                },
                |c| {
                    let (id, k, r) = (command_id.clone(), key.clone(), report.clone());
                    async move { c.report(&id, k, token, r).await }
                },
            )
            .await;
        match reported {
            None => Step::Later,
            Some(Ok((state, receipt))) => {
                let answer = Answer::Reported {
                    fencing_token: token,
                    report,
                    state,
                    receipt,
                };
                self.history.record(&self.name, key, answer);
                if state == EffectState::Committed {
                    Step::Settled
                } else {
                    Step::Later
                }
            }
            Some(Err(ClientError::Refused(refusal))) => {
                let answer = Answer::ReportRefused {
                    fencing_token: token,
                    report,
                    refusal,
                };
                self.history.record(&self.name, key, answer);
                Step::Later
            }
            Some(Err(e)) => {
                self.anomaly(key, format!("report failed: {e}"));
                Step::Later
            }
        }
    }

    async fn reconcile(&mut self, key: &EffectKey) -> Step {
        let command_id = self.command_id();
        let holder = self.holder();
        let call = Call::Command {
            command_id: command_id.clone(),
            body: Box::new(CommandBody::BeginReconcile {
                key: key.clone(),
                holder: holder.clone(),
                lease_ms: None,
            }),
        };
        let begun = self
            .recorded(
                key,
                call,
                |o: &ReconcileOutcome| OpAnswer::Outcome(Outcome::Reconcile(o.clone())),
                |c| {
                    let (id, k, h) = (command_id.clone(), key.clone(), holder.clone());
                    async move { c.begin_reconcile(&id, k, &h, None).await }
                },
            )
            .await;
        match begun {
            None => Step::Later,
            Some(Ok(ReconcileOutcome::Observe(grant))) => {
                let answer = Answer::ReconcileGranted {
                    holder,
                    grant: grant.clone(),
                };
                self.history.record(&self.name, key, answer);
                self.observe(key, grant).await
            }
            Some(Ok(ReconcileOutcome::Replay { receipt })) => {
                self.history
                    .record(&self.name, key, Answer::Replayed { receipt });
                Step::Settled
            }
            Some(Ok(ReconcileOutcome::InFlight {
                holder,
                attempt_id,
                lease_until_ms,
            })) => {
                let answer = Answer::InFlight { holder, attempt_id };
                self.history.record(&self.name, key, answer);
                self.pause_until(lease_until_ms).await;
                Step::Later
            }
            Some(Ok(ReconcileOutcome::Escalated { .. })) => {
                self.history.record(&self.name, key, Answer::Escalated);
                self.decide(key).await
            }
            Some(Ok(ReconcileOutcome::NotNeeded { .. })) => Step::Later,
            Some(Ok(ReconcileOutcome::Expired(expired))) => {
                self.anomaly(key, format!("reconcile answered expired: {expired:?}"));
                Step::Settled
            }
            Some(Err(e)) => {
                self.anomaly(key, format!("begin_reconcile failed: {e}"));
                Step::Later
            }
        }
    }

    async fn observe(&mut self, key: &EffectKey, grant: Grant) -> Step {
        let latency_ms = thread_rng().gen_range(1..=30);
        tokio::time::sleep(Duration::from_millis(latency_ms)).await;
        let result = match self.provider.observe(&grant.provider_key) {
            Some(receipt) => ObservationResult::Committed { receipt },
            None => ObservationResult::NotCommitted,
        };
        let command_id = self.command_id();
        let token = grant.fencing_token;
        let call = Call::Command {
            command_id: command_id.clone(),
            body: Box::new(CommandBody::Observe {
                key: key.clone(),
                fencing_token: token,
                result: result.clone(),
                detail: OBSERVED_BY.into(),
            }),
        };
        let observed = self
            .recorded(
                key,
                call,
                |(state, escalated): &(EffectState, bool)| {
                    OpAnswer::Outcome(Outcome::Observed {
                        state: *state,
                        escalated: *escalated,
                    })
                },
                |c| {
                    let (id, k, r) = (command_id.clone(), key.clone(), result.clone());
                    async move { c.observe(&id, k, token, r, OBSERVED_BY).await }
                },
            )
            .await;
        match observed {
            None => Step::Later,
            Some(Ok((state, escalated))) => {
                let answer = Answer::Observed {
                    fencing_token: token,
                    result,
                    state,
                };
                self.history.record(&self.name, key, answer);
                match state {
                    EffectState::Committed => Step::Settled,
                    _ if escalated => self.decide(key).await,
                    _ => Step::Later,
                }
            }
            // The reconciliation lease ran out while the cluster was unavailable.
            Some(Err(ClientError::Refused(_))) => Step::Later,
            Some(Err(e)) => {
                self.anomaly(key, format!("observe failed: {e}"));
                Step::Later
            }
        }
    }

    /// Decides an escalated effect as the person it waits for would, from what the provider
    /// holds: committed with the provider's receipt, or not committed (to be claimed
    /// again). Only the escalation the contract expects of this workload is decided: a
    /// keyed effect's, after look-ups that found nothing when the provider's horizon may
    /// have passed (a leader's clock far ahead). Any other escalation is left standing,
    /// for the every-effect-committed check to report.
    ///
    /// The decision names the escalation it read (`DecideEscalation`, by its token), so
    /// one made on a stale reading (another client's operator decided first, and the
    /// effect was attempted and escalated anew) is refused, and the effect is looked at
    /// again.
    async fn decide(&mut self, key: &EffectKey) -> Step {
        let Some(record) = self.read(key).await else {
            return Step::Later;
        };
        let Some(escalation_token) = record.escalation_token() else {
            // Decided by another client's operator, or committed since.
            return Step::Later;
        };
        // Look-ups since the last decision: an earlier escalation's say nothing of this one.
        let since_ms = record.decision.as_ref().map_or(0, |d| d.at_ms);
        let past_horizon = record
            .observations
            .iter()
            .filter(|o| o.at_ms >= since_ms)
            .any(|o| o.detail.contains(ledger_core::PAST_HORIZON_NOTE));
        if !past_horizon {
            return Step::Settled;
        }
        let decision = match self.provider.observe(&record.provider_key) {
            Some(receipt) => Decision::Committed { receipt },
            None => Decision::NotCommitted,
        };
        let note = "decided from the provider's records";
        let command_id = self.command_id();
        let call = Call::Command {
            command_id: command_id.clone(),
            body: Box::new(CommandBody::DecideEscalation {
                key: key.clone(),
                escalation_token,
                decision: decision.clone(),
                operator: OPERATOR.into(),
                note: note.into(),
            }),
        };
        let operator = self.operator.clone();
        let decided = self
            .recorded(
                key,
                call,
                |state: &EffectState| OpAnswer::Outcome(Outcome::Decided { state: *state }),
                |_| {
                    let (c, id, k, d) = (
                        operator.clone(),
                        command_id.clone(),
                        key.clone(),
                        decision.clone(),
                    );
                    let token = Some(escalation_token);
                    async move { c.decide(&id, k, token, d, OPERATOR, note).await }
                },
            )
            .await;
        match decided {
            None => Step::Later,
            Some(Ok(state)) => {
                self.stats.decided += 1;
                if state == EffectState::Committed {
                    Step::Settled
                } else {
                    Step::Later
                }
            }
            Some(Err(ClientError::Refused(
                Refusal::NotEscalated | Refusal::EscalationChanged { .. },
            ))) => Step::Later,
            Some(Err(e)) => {
                self.anomaly(key, format!("decide failed: {e}"));
                Step::Later
            }
        }
    }

    /// Reads the record linearizably (as a tool server deciding whether to dispatch
    /// would) and records the read; what it shows is judged by the linearizability
    /// checker only. Returns the record, if the read answered and found one.
    async fn read(&mut self, key: &EffectKey) -> Option<EffectRecord> {
        let read = self
            .recorded(
                key,
                Call::Read,
                |r: &Option<EffectRecord>| OpAnswer::Record(r.clone().map(Box::new)),
                |c| {
                    let k = key.clone();
                    async move { c.get(k).await }
                },
            )
            .await;
        read.and_then(Result::ok).flatten()
    }
}
