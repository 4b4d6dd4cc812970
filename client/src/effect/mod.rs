//! Running one effect: claim, dispatch, classify, report, and a typed answer.
//!
//! ```no_run
//! # use ledger_client::effect::{DispatchResult, EffectCall, EffectOutcome, EffectRunner};
//! # async fn refund(runner: &EffectRunner, call: EffectCall) -> Result<(), Box<dyn std::error::Error>> {
//! let outcome = runner
//!     .effect(call)
//!     .run(|attempt| async move {
//!         // Send `attempt.provider_key` as the provider's idempotency key.
//!         DispatchResult::Committed { receipt: format!("refund for {}", attempt.provider_key) }
//!     })
//!     .await?;
//! if let EffectOutcome::Done { receipt } | EffectOutcome::Replayed { receipt } = outcome {
//!     println!("{receipt}");
//! }
//! # Ok(()) }
//! ```
//!
//! The dispatch closure runs only when the ledger grants an attempt, and says what the
//! provider answered: committed with a receipt, failed *with proof* that nothing took
//! effect, or unknown. Everything ambiguous is unknown: a timeout, a dropped connection
//! after the request was written, a 5xx, a cancellation. While it runs, heartbeats keep
//! the attempt's lease alive. If the future running the effect is dropped mid-dispatch,
//! a guard reports the attempt unknown (and the lease runs out in any case), never failed.
//!
//! Map: `ids` names every ledger command; `dispatch` runs one granted attempt;
//! `run` is the claim loop; `wait` waits for another attempt to end.

mod dispatch;
pub(crate) mod ids;
mod reconcile;
mod run;
mod wait;

use std::future::Future;
use std::sync::Arc;

use ledger_core::{
    canonicalize, Declaration, EffectKey, EscalationReason, ExpiredEffect, IntentConflict,
    IntentHash, Refusal, Unsettled,
};

use crate::error::ClientError;
use crate::ledger::{AmendOutcome, LedgerClient};
use crate::reconcile::{ProviderAdapter, ReconcileOptions};

pub use wait::Settled;

/// One effect to run: its declaration (key, workflow, tool, authority, target, intent)
/// and, for tools whose policy requires it, the user's confirmation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectCall {
    /// The effect; for one slot of a declared multiplicity, the slot's key (`base#i`).
    pub declaration: Declaration,
    /// What the user confirmed (shown to operators), when the policy asks for it.
    pub confirmation: Option<String>,
}

/// The attempt a dispatch runs under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptInfo {
    /// The effect.
    pub key: EffectKey,
    /// 1-based attempt number within the effect.
    pub attempt_id: u32,
    /// The attempt's fencing token.
    pub fencing_token: u64,
    /// The idempotency token to send to the provider: the same on every attempt.
    pub provider_key: String,
}

/// What the provider's answer proves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DispatchResult {
    /// The provider holds the effect; `receipt` is its result.
    Committed {
        /// The provider's result or resource id.
        receipt: String,
    },
    /// Proven that nothing took effect: refused before sending, a validation error, the
    /// provider said it did not create it. Without proof, use [`DispatchResult::Unknown`].
    NotCommitted {
        /// The proof, for the record.
        proof: String,
    },
    /// Anything else: timeout, lost answer, 5xx after sending, cancellation.
    Unknown {
        /// What happened.
        reason: String,
    },
}

/// What running an effect came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EffectOutcome {
    /// This call's dispatch committed the effect.
    Done {
        /// The provider's receipt.
        receipt: String,
    },
    /// The effect had been committed before: the original receipt, nothing was sent.
    Replayed {
        /// The stored receipt.
        receipt: String,
    },
    /// This call's dispatch proved that nothing took effect.
    FailedBeforeEffect {
        /// The proof.
        proof: String,
    },
    /// This call dispatched and cannot tell whether it took effect; the ledger knows the
    /// outcome is unknown and a retry reconciles before anything is re-sent.
    Unknown {
        /// What happened.
        reason: String,
    },
    /// Another attempt is live, and did not end within the wait this call allowed.
    InFlight {
        /// Its holder.
        holder: String,
        /// Its attempt number.
        attempt_id: u32,
        /// When its lease runs out (ledger time, ms).
        lease_until_ms: u64,
    },
    /// The outcome of an earlier dispatch is unknown and observation could not settle it
    /// yet (or no provider adapter was given).
    NeedsReconcile(Unsettled),
    /// The provider no longer deduplicates the key; a re-send is not protected.
    HorizonPassed(Unsettled),
    /// The key was used before with a different intent.
    Conflict(IntentConflict),
    /// Automatic handling has stopped; a person must decide.
    Escalated {
        /// Why.
        reason: EscalationReason,
    },
    /// The effect's record was collected after its retention: nothing was sent, and what
    /// the ledger kept (final state, intent hash, receipt digest) is all that is known.
    Expired(ExpiredEffect),
}

/// Why running an effect failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RunError {
    /// A ledger call failed before this call dispatched anything. A claim that failed in
    /// a way that may have been applied (unavailable, overloaded, an answer not
    /// understood) is sent again in the background a few times, with its command id, and
    /// a grant it finds is given back as never sent.
    #[error(transparent)]
    Ledger(#[from] ClientError),
    /// The dispatch ended but the ledger did not take the report. It is sent again in
    /// the background with the same command id: a committed report, which the ledger
    /// takes at any time, with a growing pause until the ledger answers it (for up to the
    /// day the ledger remembers command ids by default); any other report once, and if
    /// that is lost too, the record stays in progress until its lease runs out and is
    /// then reconciled. `result` is what the provider said.
    #[error("the dispatch ended ({result:?}) but the ledger did not take the report: {source}")]
    Unreported {
        /// What the dispatch proved.
        result: DispatchResult,
        /// Why the report failed.
        source: ClientError,
    },
}

impl RunError {
    /// The ledger's refusal, if that is what stopped the run.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            RunError::Ledger(ClientError::Refused(r)) => Some(r),
            _ => None,
        }
    }
}

/// Timing of effect runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOptions {
    /// Lease asked for each attempt (capped by the tool's policy); heartbeats extend it
    /// every third of it while a dispatch runs.
    pub lease_ms: u64,
    /// Longest dispatch; past it the dispatch is abandoned and reported unknown. `None`
    /// lets a dispatch run as long as heartbeats keep its lease.
    pub dispatch_timeout_ms: Option<u64>,
    /// How often to look again while waiting for another attempt to end.
    pub poll_interval_ms: u64,
    /// Most claims one run makes (a wait or a reconciliation leads to another claim).
    pub claims_max: u32,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            lease_ms: 30_000,
            dispatch_timeout_ms: None,
            poll_interval_ms: 100,
            claims_max: 4,
        }
    }
}

/// Runs effects for one tool-server instance: a ledger client and the instance's name.
#[derive(Clone)]
pub struct EffectRunner {
    ledger: LedgerClient,
    holder: String,
    options: RunOptions,
    invocations: Arc<ids::Invocations>,
}

impl EffectRunner {
    /// A runner for the instance `holder` (shown in the record of every attempt).
    pub fn new(ledger: LedgerClient, holder: impl Into<String>) -> Self {
        let holder = holder.into();
        EffectRunner {
            invocations: Arc::new(ids::Invocations::new(&holder)),
            ledger,
            holder,
            options: RunOptions::default(),
        }
    }

    /// The same runner with other timing.
    pub fn with_options(mut self, options: RunOptions) -> Self {
        self.options = options;
        self
    }

    /// The ledger client.
    pub fn ledger(&self) -> &LedgerClient {
        &self.ledger
    }

    /// The instance name.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The timing in use.
    pub fn options(&self) -> &RunOptions {
        &self.options
    }

    /// A tag for one invocation (claim or request to reconcile), unique across calls,
    /// instances and restarts.
    pub(crate) fn next_invocation(&self) -> String {
        self.invocations.next()
    }

    /// Persists the write-ahead record(s) of `declaration` before anything is sent; with
    /// `slots > 1`, one effect per slot (`key#0 .. key#slots-1`), each then run with its
    /// own [`EffectCall`]. Declaring again with the same intent returns the same keys.
    pub async fn declare(
        &self,
        declaration: &Declaration,
        slots: u32,
    ) -> Result<Vec<EffectKey>, ClientError> {
        let id = ids::declare(&declaration.key, slots, &self.next_invocation());
        let (keys, _) = self.ledger.declare(&id, declaration.clone(), slots).await?;
        Ok(keys)
    }

    /// Replaces the intent of `declaration`'s effect with its intent, while nothing can
    /// have happened to it (`not_started`, or `failed_before_effect` with proof); the
    /// ledger keeps the previous intent hash in the record. Otherwise the ledger refuses
    /// with [`Refusal::AmendNotAllowed`], and the stored intent stands.
    pub async fn amend(&self, declaration: &Declaration) -> Result<AmendOutcome, ClientError> {
        let hash = intent_hash(declaration);
        let id = ids::amend(&declaration.key, &hash, &self.next_invocation());
        self.ledger.amend(&id, declaration.clone()).await
    }

    /// An effect run, to configure and then [`EffectRun::run`].
    pub fn effect(&self, call: EffectCall) -> EffectRun<'_> {
        EffectRun {
            runner: self,
            call,
            adapter: None,
            reconcile: ReconcileOptions::default(),
            wait_in_flight_ms: 0,
        }
    }
}

/// One effect about to run.
pub struct EffectRun<'a> {
    runner: &'a EffectRunner,
    call: EffectCall,
    adapter: Option<&'a dyn ProviderAdapter>,
    reconcile: ReconcileOptions,
    wait_in_flight_ms: u64,
}

impl<'a> EffectRun<'a> {
    /// Settle unknown outcomes by observing the provider through `adapter` before
    /// answering (and before any re-send).
    pub fn reconcile_with(mut self, adapter: &'a dyn ProviderAdapter) -> Self {
        self.adapter = Some(adapter);
        self
    }

    /// How observation rounds are paced and bounded.
    pub fn reconcile_options(mut self, options: ReconcileOptions) -> Self {
        self.reconcile = options;
        self
    }

    /// When another attempt is in flight, wait up to `wait_ms` for it to end and then
    /// claim again, instead of answering [`EffectOutcome::InFlight`] at once.
    pub fn wait_in_flight(mut self, wait_ms: u64) -> Self {
        self.wait_in_flight_ms = wait_ms;
        self
    }
}

/// Runs `work` in the background from a guard's `drop`, if there is still a runtime to
/// run it on: during a shutdown there is none, nothing can be sent, and the lease ends
/// what the guard would have settled.
fn spawn_from_drop(work: impl Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(work);
    }
}

/// The hash of `declaration`'s intent, for command ids; an intent that cannot be
/// canonicalised gets the default hash, and the ledger refuses it with the reason.
fn intent_hash(declaration: &Declaration) -> IntentHash {
    canonicalize(&declaration.intent_json, &[])
        .map(|c| c.hash)
        .unwrap_or_default()
}
