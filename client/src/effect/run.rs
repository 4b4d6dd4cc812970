//! The claim loop: claim, then act on the answer, at most `claims_max` times.
//!
//! A run claims again only after something changed what the ledger will answer: another
//! attempt ended (after a wait), or observation proved that nothing took effect. Every
//! other answer is returned as it is.

use std::future::Future;

use ledger_core::{ClaimOutcome, EffectKey, EffectState, Grant, Unsettled};

use super::dispatch::{
    give_back_unused, grant_still_live, run_attempt, AttemptEnd, NEVER_SENT_ABANDONED,
    NEVER_SENT_LATE,
};
use super::{ids, AttemptInfo, DispatchResult, EffectOutcome, EffectRun, RunError, Settled};
use crate::error::ClientError;
use crate::ledger::LedgerClient;
use crate::reconcile::Reconciled;

/// A claim on its way. Run in a task of its own, so that a run dropped while it waits
/// (its caller gave up, a request timed out) does not drop the claim's answer with it: a
/// grant that arrives for nobody is then given back as never sent, instead of holding its
/// effect's lease with nobody to use it until it runs out into an unknown outcome that
/// must be reconciled (or, without a look-up, escalated) although nothing was sent.
struct Claiming {
    task: Option<tokio::task::JoinHandle<Result<ClaimOutcome, ClientError>>>,
    ledger: LedgerClient,
    key: EffectKey,
}

impl Claiming {
    /// Starts `claim` on `ledger` for the effect `key`.
    fn start<Fut>(
        ledger: LedgerClient,
        key: EffectKey,
        claim: impl FnOnce(LedgerClient) -> Fut,
    ) -> Self
    where
        Fut: Future<Output = Result<ClaimOutcome, ClientError>> + Send + 'static,
    {
        Claiming {
            task: Some(tokio::spawn(claim(ledger.clone()))),
            ledger,
            key,
        }
    }

    async fn answer(mut self) -> Result<ClaimOutcome, ClientError> {
        let task = self.task.as_mut().expect("awaited once");
        let answer = task.await;
        self.task = None;
        match answer {
            Ok(answer) => answer,
            // A bug in the claim path: the caller's task fails as the claim's did.
            Err(e) if e.is_panic() => panic!("the claim's task panicked: {e}"),
            Err(e) => Err(ClientError::Unavailable {
                attempts: 0,
                last: format!("the claim's task ended without an answer: {e}"),
            }),
        }
    }
}

impl Drop for Claiming {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        let (ledger, key) = (self.ledger.clone(), self.key.clone());
        super::spawn_from_drop(async move {
            if let Ok(Ok(ClaimOutcome::Proceed(grant))) = task.await {
                give_back_unused(&ledger, &key, &grant, NEVER_SENT_ABANDONED).await;
            }
        });
    }
}

/// A grant not yet dispatched on, given back as never sent if the run is dropped before it
/// decides (its caller gave up while a heartbeat confirmed a late grant): otherwise the
/// grant would hold its effect's lease with nobody to use it, as [`Claiming`] says.
struct Unused {
    grant: Option<(LedgerClient, EffectKey, Grant)>,
}

impl Unused {
    fn hold(ledger: &LedgerClient, key: &EffectKey, grant: &Grant) -> Self {
        Unused {
            grant: Some((ledger.clone(), key.clone(), grant.clone())),
        }
    }

    /// The grant is about to be dispatched on, or was given back.
    fn release(mut self) {
        self.grant = None;
    }
}

impl Drop for Unused {
    fn drop(&mut self) {
        if let Some((ledger, key, grant)) = self.grant.take() {
            super::spawn_from_drop(async move {
                give_back_unused(&ledger, &key, &grant, NEVER_SENT_ABANDONED).await;
            });
        }
    }
}

/// What to do after one claim.
enum Step {
    /// Answer with this.
    Answer(EffectOutcome),
    /// Claim again; answer with this if no claim is left.
    Again(EffectOutcome),
}

impl EffectRun<'_> {
    /// Claims the effect and, when granted, dispatches it once through `dispatch`, which
    /// receives the attempt (and its provider key) and says what the provider answered.
    /// `dispatch` is called at most once per granted attempt, and is called again only
    /// after observation proved that the previous dispatch took no effect.
    ///
    /// Once this call has dispatched, a failure to reach the ledger is no longer "nothing
    /// happened": it is answered [`EffectOutcome::Unknown`], and a retry reconciles.
    pub async fn run<F, Fut>(self, mut dispatch: F) -> Result<EffectOutcome, RunError>
    where
        F: FnMut(AttemptInfo) -> Fut,
        Fut: Future<Output = DispatchResult>,
    {
        let mut dispatched = false;
        match self.claim_loop(&mut dispatch, &mut dispatched).await {
            Err(RunError::Ledger(e)) if dispatched => Ok(EffectOutcome::Unknown {
                reason: format!(
                    "this call dispatched, and then the ledger could not be reached ({e}); \
                     the effect may have happened"
                ),
            }),
            other => other,
        }
    }

    async fn claim_loop<F, Fut>(
        &self,
        dispatch: &mut F,
        dispatched: &mut bool,
    ) -> Result<EffectOutcome, RunError>
    where
        F: FnMut(AttemptInfo) -> Fut,
        Fut: Future<Output = DispatchResult>,
    {
        let runner = self.runner;
        let deadline =
            tokio::time::Instant::now() + std::time::Duration::from_millis(self.wait_in_flight_ms);
        let claims_max = runner.options().claims_max.max(1);
        let mut claims = 0;
        loop {
            claims += 1;
            let key = &self.call.declaration.key;
            let id = ids::claim(key, &runner.next_invocation());
            let asked_at = tokio::time::Instant::now();
            let (declaration, holder) = (self.call.declaration.clone(), runner.holder().to_owned());
            let (lease_ms, confirmation) =
                (runner.options().lease_ms, self.call.confirmation.clone());
            let claim =
                Claiming::start(runner.ledger().clone(), key.clone(), |ledger| async move {
                    ledger
                        .claim(&id, declaration, &holder, Some(lease_ms), confirmation)
                        .await
                })
                .answer()
                .await?;
            let step = match claim {
                ClaimOutcome::Proceed(grant) => {
                    let unused = Unused::hold(runner.ledger(), key, &grant);
                    match grant_still_live(runner, key, &grant, asked_at).await {
                        // Nothing was sent; the ledger's next answer says who holds it now.
                        // Held until given back: dropped meanwhile, the guard gives it back.
                        None => {
                            give_back_unused(runner.ledger(), key, &grant, NEVER_SENT_LATE).await;
                            unused.release();
                            Step::Again(EffectOutcome::Unknown {
                                reason: "the grant arrived after its lease could have run \
                                         out; nothing was sent by this call"
                                    .into(),
                            })
                        }
                        Some(live_since) => {
                            // No await until `run_attempt`'s own guard is armed.
                            unused.release();
                            *dispatched = true;
                            let end =
                                run_attempt(runner, key, &grant, live_since, dispatch).await?;
                            self.after_dispatch(end).await?
                        }
                    }
                }
                ClaimOutcome::Replay { receipt } => {
                    Step::Answer(EffectOutcome::Replayed { receipt })
                }
                ClaimOutcome::InFlight {
                    holder,
                    attempt_id,
                    lease_until_ms,
                } => {
                    let in_flight = EffectOutcome::InFlight {
                        holder,
                        attempt_id,
                        lease_until_ms,
                    };
                    self.wait_for_other(in_flight, deadline).await?
                }
                ClaimOutcome::Reconcile(u) => self.settle(u, false).await?,
                ClaimOutcome::HorizonPassed(u) => self.settle(u, true).await?,
                ClaimOutcome::Conflict(c) => Step::Answer(EffectOutcome::Conflict(c)),
                ClaimOutcome::Escalated { reason } => {
                    Step::Answer(EffectOutcome::Escalated { reason })
                }
                // Collected after retention: nothing may be sent; say what is known.
                ClaimOutcome::Expired(expired) => Step::Answer(EffectOutcome::Expired(expired)),
            };
            match step {
                Step::Answer(outcome) => return Ok(outcome),
                Step::Again(outcome) if claims >= claims_max => return Ok(outcome),
                Step::Again(_) => {}
            }
        }
    }

    /// What a reported attempt comes to; an unknown outcome is reconciled right away
    /// when an adapter is at hand.
    async fn after_dispatch(&self, end: AttemptEnd) -> Result<Step, RunError> {
        let ours = match &end.result {
            DispatchResult::Committed { receipt } => Some(receipt.clone()),
            _ => None,
        };
        let committed = |receipt: Option<String>| match (ours.clone(), receipt) {
            (Some(ours), stored) => Ok(EffectOutcome::Done {
                receipt: stored.unwrap_or(ours),
            }),
            (None, Some(stored)) => Ok(EffectOutcome::Replayed { receipt: stored }),
            (None, None) => Err(RunError::Ledger(ClientError::Malformed(
                "the effect is committed but the ledger returned no receipt".into(),
            ))),
        };
        match (end.state, end.result) {
            (Some(EffectState::Committed), _) => Ok(Step::Answer(committed(end.receipt)?)),
            (Some(EffectState::FailedBeforeEffect), DispatchResult::NotCommitted { proof }) => {
                Ok(Step::Answer(EffectOutcome::FailedBeforeEffect { proof }))
            }
            (_, result) => {
                let reason = match result {
                    DispatchResult::Unknown { reason } => reason,
                    DispatchResult::NotCommitted { proof } => format!(
                        "this attempt failed before effect ({proof}) but an earlier dispatch \
                         is unsettled"
                    ),
                    DispatchResult::Committed { .. } => {
                        "the ledger no longer took this attempt's report".into()
                    }
                };
                let unknown = EffectOutcome::Unknown { reason };
                match self.observe().await? {
                    // Observed after this call's own dispatch: that dispatch did it.
                    Some(Reconciled::Committed { receipt }) => {
                        Ok(Step::Answer(EffectOutcome::Done { receipt }))
                    }
                    Some(Reconciled::NotCommitted) => Ok(Step::Again(unknown)),
                    Some(Reconciled::Escalated { reason }) => {
                        Ok(Step::Answer(EffectOutcome::Escalated { reason }))
                    }
                    Some(Reconciled::Expired(e)) => Ok(Step::Answer(EffectOutcome::Expired(e))),
                    _ => Ok(Step::Answer(unknown)),
                }
            }
        }
    }

    /// Settles an unknown outcome the claim reported, by observation when possible.
    async fn settle(&self, unsettled: Unsettled, horizon_passed: bool) -> Result<Step, RunError> {
        let as_is = if horizon_passed {
            EffectOutcome::HorizonPassed(unsettled)
        } else {
            EffectOutcome::NeedsReconcile(unsettled)
        };
        Ok(match self.observe().await? {
            Some(Reconciled::Committed { receipt }) => {
                Step::Answer(EffectOutcome::Replayed { receipt })
            }
            Some(Reconciled::NotCommitted) => Step::Again(as_is),
            Some(Reconciled::Escalated { reason }) => {
                Step::Answer(EffectOutcome::Escalated { reason })
            }
            Some(Reconciled::Expired(e)) => Step::Answer(EffectOutcome::Expired(e)),
            _ => Step::Answer(as_is),
        })
    }

    /// Reconciles through the adapter, if there is one.
    async fn observe(&self) -> Result<Option<Reconciled>, RunError> {
        let Some(adapter) = self.adapter else {
            return Ok(None);
        };
        let key = &self.call.declaration.key;
        Ok(Some(
            self.runner.reconcile(key, adapter, &self.reconcile).await?,
        ))
    }

    /// Waits for another attempt to end, within the run's wait.
    async fn wait_for_other(
        &self,
        in_flight: EffectOutcome,
        deadline: tokio::time::Instant,
    ) -> Result<Step, RunError> {
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Ok(Step::Answer(in_flight));
        }
        let wait_ms = (deadline - now).as_millis() as u64;
        let key = &self.call.declaration.key;
        Ok(match self.runner.wait_until_settled(key, wait_ms).await? {
            Settled::Ended(_) => Step::Again(in_flight),
            Settled::TimedOut(_) | Settled::Missing => Step::Answer(in_flight),
        })
    }
}
