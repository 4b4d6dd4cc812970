//! The claim loop: claim, then act on the answer, at most `claims_max` times.
//!
//! A run claims again only after something changed what the ledger will answer: another
//! attempt ended (after a wait), or observation proved that nothing took effect. Every
//! other answer is returned as it is.

use std::future::Future;
use std::time::Duration;

use ledger_core::{
    AttemptKind, ClaimOutcome, Declaration, EffectKey, EffectState, Grant, Unsettled,
};

use super::dispatch::{
    give_back_unused, grant_still_live, run_attempt, AttemptEnd, NEVER_SENT_ABANDONED,
    NEVER_SENT_LATE, NEVER_SENT_WRONG_KEY,
};
use super::{ids, AttemptInfo, DispatchResult, EffectOutcome, EffectRun, RunError, Settled};
use crate::error::ClientError;
use crate::ledger::LedgerClient;
use crate::reconcile::Reconciled;

/// One claim as it is sent, every time under its own command id: sent again after its
/// answer was lost, it gets the first answer back (the same grant), never a second one.
#[derive(Clone)]
struct ClaimAsk {
    id: String,
    declaration: Declaration,
    holder: String,
    lease_ms: u64,
    confirmation: Option<String>,
}

impl ClaimAsk {
    async fn send(self, ledger: LedgerClient) -> Result<ClaimOutcome, ClientError> {
        let ClaimAsk {
            id,
            declaration,
            holder,
            lease_ms,
            confirmation,
        } = self;
        ledger
            .claim(&id, declaration, &holder, Some(lease_ms), confirmation)
            .await
    }
}

/// Whether a claim that failed with `error` may have been applied all the same: no answer
/// came within the retries (or overload waits), or none that could be read, so the ledger
/// may hold a grant for it that nobody knows of.
fn may_have_been_applied(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Unavailable { .. }
            | ClientError::Overloaded { .. }
            | ClientError::Malformed(_)
    )
}

/// How many times a claim that may have been applied is sent again to find its grant.
const RECOVERY_SENDS_MAX: u32 = 3;
/// The pause before the first of those sends; it doubles before each next one, with up to
/// half of it again.
const RECOVERY_BACKOFF_MS: u64 = 500;

/// Gives back the grant of a claim that failed but may have been applied (its answer lost,
/// later tries unanswered): otherwise it would hold its effect's lease with nobody to use
/// it, and run out into an unknown outcome to reconcile (or, for an irreversible tool
/// with no look-up, to escalate) although nothing was sent. The claim is sent again under
/// its own id, so the ledger answers what it answered first, up to
/// [`RECOVERY_SENDS_MAX`] times after a pause; a grant is given back as never sent. A
/// grant whose lease ran out meanwhile is refused back, and changes nothing.
///
/// It is sent again only while the record shows an open dispatch attempt held by this
/// claim's holder, the only way a grant of it can be waiting: a claim that never reached
/// the ledger, sent again, would be applied as a new one and spend one of the effect's
/// dispatch attempts (an irreversible tool has one) on a grant given back at once. The
/// read and the send are two steps: another run of the same holder whose attempt ends
/// between them still lets such a claim be applied. Asking the ledger for a command id's
/// remembered answer without applying it would close that; it serves no such read.
async fn recover_grant(ledger: LedgerClient, key: EffectKey, ask: ClaimAsk) {
    let mut backoff_ms = RECOVERY_BACKOFF_MS;
    for _ in 0..RECOVERY_SENDS_MAX {
        tokio::time::sleep(Duration::from_millis(
            ledger.transport().jittered_ms(backoff_ms),
        ))
        .await;
        backoff_ms *= 2;
        match ledger.get(key.clone()).await {
            Ok(record) => {
                let held = record
                    .as_ref()
                    .and_then(|r| r.open_attempt())
                    .is_some_and(|a| a.kind == AttemptKind::Dispatch && a.holder == ask.holder);
                if !held {
                    return;
                }
            }
            Err(e) => {
                tracing::debug!(effect = %key, error = %e, "failed claim's record not read");
                continue;
            }
        }
        match ask.clone().send(ledger.clone()).await {
            Ok(ClaimOutcome::Proceed(grant)) => {
                give_back_unused(&ledger, &key, &grant, NEVER_SENT_ABANDONED).await;
                return;
            }
            // Answered without a grant: nothing is held.
            Ok(_) | Err(ClientError::Refused(_)) => return,
            Err(e) => tracing::debug!(effect = %key, error = %e, "failed claim not found again"),
        }
    }
}

/// A claim on its way. Run in a task of its own, so that a run dropped while it waits
/// (its caller gave up, a request timed out) does not drop the claim's answer with it: a
/// grant that arrives for nobody is then given back as never sent, instead of holding its
/// effect's lease with nobody to use it until it runs out into an unknown outcome that
/// must be reconciled (or, without a look-up, escalated) although nothing was sent. A
/// claim that failed but may have been applied is looked for again ([`recover_grant`]),
/// whether or not anyone still waits for its answer.
struct Claiming {
    task: Option<tokio::task::JoinHandle<Result<ClaimOutcome, ClientError>>>,
    ledger: LedgerClient,
    key: EffectKey,
    ask: ClaimAsk,
}

impl Claiming {
    /// Starts `ask` on `ledger` for the effect `key`.
    fn start(ledger: LedgerClient, key: EffectKey, ask: ClaimAsk) -> Self {
        Claiming {
            task: Some(tokio::spawn(ask.clone().send(ledger.clone()))),
            ledger,
            key,
            ask,
        }
    }

    /// The claim's answer. The caller gets a failure at once; a grant the claim may have
    /// left all the same is looked for meanwhile.
    async fn answer(mut self) -> Result<ClaimOutcome, ClientError> {
        let task = self.task.as_mut().expect("awaited once");
        let answer = task.await;
        self.task = None;
        let answer = match answer {
            Ok(answer) => answer,
            // A bug in the claim path: the caller's task fails as the claim's did.
            Err(e) if e.is_panic() => panic!("the claim's task panicked: {e}"),
            Err(e) => Err(ClientError::Unavailable {
                attempts: 0,
                last: format!("the claim's task ended without an answer: {e}"),
            }),
        };
        if matches!(&answer, Err(e) if may_have_been_applied(e)) {
            let (ledger, key, ask) = (self.ledger.clone(), self.key.clone(), self.ask.clone());
            tokio::spawn(recover_grant(ledger, key, ask));
        }
        answer
    }
}

impl Drop for Claiming {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        let (ledger, key, ask) = (self.ledger.clone(), self.key.clone(), self.ask.clone());
        super::spawn_from_drop(async move {
            match task.await {
                Ok(Ok(ClaimOutcome::Proceed(grant))) => {
                    give_back_unused(&ledger, &key, &grant, NEVER_SENT_ABANDONED).await
                }
                Ok(Err(e)) if may_have_been_applied(&e) => recover_grant(ledger, key, ask).await,
                _ => {}
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
            let ask = ClaimAsk {
                id: ids::claim(key, &runner.next_invocation()),
                declaration: self.call.declaration.clone(),
                holder: runner.holder().to_owned(),
                lease_ms: runner.options().lease_ms,
                confirmation: self.call.confirmation.clone(),
            };
            let asked_at = tokio::time::Instant::now();
            let claim = Claiming::start(runner.ledger().clone(), key.clone(), ask)
                .answer()
                .await?;
            let step = match claim {
                ClaimOutcome::Proceed(grant) => {
                    let unused = Unused::hold(runner.ledger(), key, &grant);
                    // The provider key is what keeps re-sends of this effect from being
                    // a second effect: a grant naming another is a node's error, never sent.
                    let expected = key.provider_key();
                    if grant.provider_key != expected {
                        give_back_unused(runner.ledger(), key, &grant, NEVER_SENT_WRONG_KEY).await;
                        unused.release();
                        return Err(RunError::Ledger(ClientError::Malformed(format!(
                            "the grant for {key} names provider key {:?}, not the effect's \
                             {expected:?}; nothing was sent",
                            grant.provider_key
                        ))));
                    }
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
