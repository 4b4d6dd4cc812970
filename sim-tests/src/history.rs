//! What clients were told: every successful answer a client received, with the simulated
//! time it arrived.
//!
//! An answer a client received is an acknowledged transition: the ledger promised it, so
//! it must be visible on every replica afterwards, whatever crashed in between. The
//! checkers replay this history against each node's ledger. Only answers are recorded,
//! never requests whose fate the client does not know.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ledger_core::{
    ClaimOutcome, EffectKey, EffectState, Grant, ObservationResult, Refusal, Report,
};

use crate::linearize::oplog::OpLog;

/// One answer as a client received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A claim granted a dispatch attempt.
    Granted {
        /// The holder named in the claim.
        holder: String,
        /// The grant.
        grant: Grant,
    },
    /// A claim found the effect committed.
    Replayed {
        /// The stored receipt.
        receipt: String,
    },
    /// A claim found another live attempt.
    InFlight {
        /// Its holder.
        holder: String,
        /// Its attempt number.
        attempt_id: u32,
    },
    /// A claim found the outcome unknown (`reconcile`, or `horizon_passed`).
    MustReconcile {
        /// Dispatch attempts the ledger counted so far.
        dispatches: u32,
        /// The provider key every attempt sent.
        provider_key: String,
    },
    /// A claim found the effect escalated to a person.
    Escalated,
    /// A report was taken.
    Reported {
        /// The reporting attempt's token.
        fencing_token: u64,
        /// What was reported.
        report: Report,
        /// The effect's state after it.
        state: EffectState,
        /// The stored receipt when committed.
        receipt: Option<String>,
    },
    /// A reconciliation attempt was granted.
    ReconcileGranted {
        /// The holder named in the request.
        holder: String,
        /// The grant.
        grant: Grant,
    },
    /// An observation was recorded.
    Observed {
        /// The reconciliation attempt's token.
        fencing_token: u64,
        /// What was observed.
        result: ObservationResult,
        /// The effect's state after it.
        state: EffectState,
    },
    /// A report was refused; the refusal itself is an answer (nothing changed).
    ReportRefused {
        /// The reporting attempt's token.
        fencing_token: u64,
        /// What was reported.
        report: Report,
        /// Why it was refused.
        refusal: Refusal,
    },
}

impl Answer {
    /// What a claim by `holder` that answered `outcome` records; `None` for an outcome no
    /// run may see (a conflict over an identical intent, a tombstone), which the caller
    /// reports as an anomaly.
    pub fn of_claim(holder: &str, outcome: &ClaimOutcome) -> Option<Answer> {
        Some(match outcome {
            ClaimOutcome::Proceed(grant) => Answer::Granted {
                holder: holder.into(),
                grant: grant.clone(),
            },
            ClaimOutcome::Replay { receipt } => Answer::Replayed {
                receipt: receipt.clone(),
            },
            ClaimOutcome::InFlight {
                holder, attempt_id, ..
            } => Answer::InFlight {
                holder: holder.clone(),
                attempt_id: *attempt_id,
            },
            ClaimOutcome::Reconcile(unsettled) | ClaimOutcome::HorizonPassed(unsettled) => {
                Answer::MustReconcile {
                    dispatches: unsettled.dispatches,
                    provider_key: unsettled.provider_key.clone(),
                }
            }
            ClaimOutcome::Escalated { .. } => Answer::Escalated,
            ClaimOutcome::Conflict(_) | ClaimOutcome::Expired(_) => return None,
        })
    }

    /// A short name of the kind of answer, for summaries.
    pub fn kind(&self) -> &'static str {
        match self {
            Answer::Granted { .. } => "granted",
            Answer::Replayed { .. } => "replayed",
            Answer::InFlight { .. } => "in_flight",
            Answer::MustReconcile { .. } => "reconcile",
            Answer::Escalated => "escalated",
            Answer::Reported { .. } => "reported",
            Answer::ReconcileGranted { .. } => "observe_granted",
            Answer::Observed { .. } => "observed",
            Answer::ReportRefused { .. } => "report_refused",
        }
    }
}

/// An answer with who received it, about which effect, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// Simulated time since the run started.
    pub at: Duration,
    /// The client that received it.
    pub client: String,
    /// The effect it is about.
    pub key: EffectKey,
    /// The answer.
    pub answer: Answer,
}

/// The shared, append-only list of acknowledged answers of one run, and the log of
/// every ledger operation the workload clients made (for the linearizability checker).
#[derive(Debug, Clone, Default)]
pub struct History {
    acks: Arc<Mutex<Vec<Ack>>>,
    ops: OpLog,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Ack>> {
        self.acks.lock().expect("history lock")
    }

    /// Records an answer `client` received now.
    pub fn record(&self, client: &str, key: &EffectKey, answer: Answer) {
        let ack = Ack {
            at: crate::sim_elapsed(),
            client: client.to_owned(),
            key: key.clone(),
            answer,
        };
        tracing::debug!(?ack, "acknowledged");
        self.lock().push(ack);
    }

    /// The operation log.
    pub fn ops(&self) -> &OpLog {
        &self.ops
    }

    /// Every answer so far, in arrival order.
    pub fn acks(&self) -> Vec<Ack> {
        self.lock().clone()
    }

    /// How many answers arrived so far.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no answer arrived yet.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// How many answers of each kind arrived.
    pub fn tally(&self) -> BTreeMap<&'static str, usize> {
        let mut tally = BTreeMap::new();
        for ack in self.lock().iter() {
            *tally.entry(ack.answer.kind()).or_default() += 1;
        }
        tally
    }

    /// How many answers `client` received within `[from, to)`.
    pub fn count_for(&self, client: &str, from: Duration, to: Duration) -> usize {
        self.lock()
            .iter()
            .filter(|a| a.client == client && a.at >= from && a.at < to)
            .count()
    }

    /// How many answers arrived at or after `since`, to any client but `except`.
    pub fn count_since(&self, since: Duration, except: Option<&str>) -> usize {
        self.lock()
            .iter()
            .filter(|a| a.at >= since && Some(a.client.as_str()) != except)
            .count()
    }
}
