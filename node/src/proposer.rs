//! Group commit: client commands that arrive together share one Raft entry, one log
//! append and one sync.
//!
//! The proposer keeps at most `max_in_flight_batches` entries between proposal and
//! commit. While they are in flight, arriving commands queue; when a slot frees, everything
//! queued (up to the batch limits) becomes the next entry. Under load batches grow by
//! themselves; when idle a command is proposed at once. The leader stamps each entry here
//! ([`LedgerTime::stamp`]: its wall clock bounded by the real time that has passed, and
//! what it knows of real time beyond that), the only place stamps come from.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Semaphore};

use ledger_core::{Command, CommandBody, Outcome};
use ledger_raft_store::{LedgerRequest, Raft};

use crate::config::ProposerSettings;
use crate::error::NodeError;
use crate::ledger_time::LedgerTime;
use crate::metrics::{Stopwatch, BATCH_COMMANDS, QUEUE_SECONDS, RAFT_WRITE_SECONDS};

struct Pending {
    command: Command,
    reply: oneshot::Sender<Result<Outcome, NodeError>>,
    queued: Stopwatch,
}

/// Hands commands to the batching task.
#[derive(Clone)]
pub struct Proposer {
    tx: mpsc::Sender<Pending>,
    timeout_ms: u64,
    retry_after_ms: u64,
}

impl Proposer {
    /// Starts the batching task for `raft`, stamping entries with `time`.
    pub fn start(raft: Raft, time: LedgerTime, settings: &ProposerSettings) -> Self {
        let (tx, rx) = mpsc::channel(settings.queue_capacity);
        tokio::spawn(run(raft, time, rx, settings.clone()));
        Proposer {
            tx,
            timeout_ms: settings.request_timeout_ms,
            retry_after_ms: settings.overloaded_retry_after_ms,
        }
    }

    /// Proposes one command and waits for its outcome. Fails with `NotLeader` when this
    /// node is not (or stops being) the leader: the command may or may not have been
    /// committed, which is why callers retry with the same command id.
    pub async fn propose(&self, command: Command) -> Result<Outcome, NodeError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .try_send(Pending {
                command,
                reply,
                queued: Stopwatch::start(),
            })
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => NodeError::Overloaded {
                    what: format!("{} commands waiting for a batch", self.tx.max_capacity()),
                    retry_after_ms: self.retry_after_ms,
                },
                mpsc::error::TrySendError::Closed(_) => {
                    NodeError::Internal("proposer stopped".into())
                }
            })?;
        match tokio::time::timeout(Duration::from_millis(self.timeout_ms), rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(NodeError::Internal("proposer dropped a command".into())),
            Err(_) => Err(NodeError::Timeout(self.timeout_ms)),
        }
    }
}

async fn run(
    raft: Raft,
    time: LedgerTime,
    mut rx: mpsc::Receiver<Pending>,
    settings: ProposerSettings,
) {
    let slots = Arc::new(Semaphore::new(settings.max_in_flight_batches));
    while let Some(first) = rx.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut batch = vec![first];
        let mut bytes = approx_bytes(&batch[0].command);
        while batch.len() < settings.max_batch_commands && bytes < settings.max_batch_bytes {
            match rx.try_recv() {
                Ok(next) => {
                    bytes += approx_bytes(&next.command);
                    batch.push(next);
                }
                Err(_) => break,
            }
        }
        let (raft, time) = (raft.clone(), time.clone());
        tokio::spawn(async move {
            commit(&raft, &time, batch).await;
            drop(slot);
        });
    }
}

async fn commit(raft: &Raft, time: &LedgerTime, batch: Vec<Pending>) {
    let proposed = Stopwatch::start();
    let queue = metrics::histogram!(QUEUE_SECONDS);
    let (commands, replies): (Vec<Command>, Vec<_>) = batch
        .into_iter()
        .map(|p| {
            queue.record(proposed.since(p.queued));
            (p.command, p.reply)
        })
        .unzip();
    let count = commands.len();
    metrics::histogram!(BATCH_COMMANDS).record(count as f64);
    let request = LedgerRequest {
        stamp: time.stamp(),
        commands: commands.into(),
    };
    let written = raft.client_write(request).await;
    if written.is_ok() {
        metrics::histogram!(RAFT_WRITE_SECONDS).record(proposed.elapsed());
    }
    let result = match written {
        Ok(response) if response.data.outcomes.len() == count => Ok(response.data.outcomes),
        Ok(response) => Err(NodeError::Internal(format!(
            "{count} commands gave {} outcomes",
            response.data.outcomes.len()
        ))),
        Err(e) => Err(match e.forward_to_leader() {
            Some(forward) => NodeError::NotLeader(forward.leader_id),
            None => NodeError::Internal(e.to_string()),
        }),
    };
    tracing::debug!(commands = count, ok = result.is_ok(), "batch committed");
    answer_all(replies, result);
}

/// Hands each waiting caller its outcome (`outcomes` in the callers' order), or every one
/// of them the failure.
pub(crate) fn answer_all(
    replies: Vec<oneshot::Sender<Result<Outcome, NodeError>>>,
    result: Result<Vec<Outcome>, NodeError>,
) {
    match result {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                let _ = reply.send(Ok(outcome));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

/// A cheap upper estimate of a command's encoded size, to bound an entry (and the bytes a
/// node admits) without encoding it twice.
pub(crate) fn approx_bytes(command: &Command) -> usize {
    const FIXED: usize = 512;
    FIXED
        + match &command.body {
            CommandBody::Claim { declaration, .. }
            | CommandBody::Declare { declaration, .. }
            | CommandBody::Amend { declaration } => declaration.intent_json.len(),
            CommandBody::Report { report, .. } => match report {
                ledger_core::Report::Committed { receipt } => receipt.len(),
                ledger_core::Report::FailedBeforeEffect { proof } => proof.len(),
                ledger_core::Report::Unknown { reason } => reason.len(),
            },
            CommandBody::Observe { result, detail, .. } => {
                detail.len()
                    + match result {
                        ledger_core::ObservationResult::Committed { receipt } => receipt.len(),
                        _ => 0,
                    }
            }
            CommandBody::Decide { note, .. } => note.len() + 64 * 1024,
            _ => 0,
        }
}
