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

use ledger_core::{Command, Outcome};
use ledger_raft_store::{LedgerRequest, Raft};

use crate::config::ProposerSettings;
use crate::error::NodeError;
use crate::ledger_time::LedgerTime;
use crate::metrics::{Stopwatch, BATCH_COMMANDS, QUEUE_SECONDS, RAFT_WRITE_SECONDS};

struct Pending {
    command: Command,
    /// [`encoded_bytes`] of the command.
    bytes: usize,
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

    /// Proposes one command, of `bytes` ([`encoded_bytes`]), and waits for its outcome.
    /// Fails with `NotLeader` when this node is not (or stops being) the leader: the
    /// command may or may not have been committed, which is why callers retry with the
    /// same command id. A command over [`COMMAND_BYTES_MAX`] is refused, unproposed.
    pub async fn propose(&self, command: Command, bytes: usize) -> Result<Outcome, NodeError> {
        check_size(bytes)?;
        let (reply, rx) = oneshot::channel();
        self.tx
            .try_send(Pending {
                command,
                bytes,
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
        let mut bytes = batch[0].bytes;
        while batch.len() < settings.max_batch_commands && bytes < settings.max_batch_bytes {
            match rx.try_recv() {
                Ok(next) => {
                    bytes += next.bytes;
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

/// Largest command a node proposes, encoded. The ledger limits every field of the
/// commands effects are made of (`ledger_core::limits`); the largest those limits allow,
/// an operator's decision or an observation with a whole receipt and a detail, is under
/// 80 KiB. An operator's tool policy is limited in how many JSON pointers it names, not in
/// their length; one with the most pointers, each as long as a name may be, is under
/// 24 KiB. So this refuses only what the ledger would refuse anyway or no real policy
/// approaches, and before it is replicated: a few commands of megabytes each would make
/// one entry larger than a message between peers may be, and no follower could ever
/// receive it.
pub const COMMAND_BYTES_MAX: usize = 256 << 10;

/// A command's size encoded as the Raft log and the peers' messages carry it: what bounds
/// an entry and what a node admits.
pub fn encoded_bytes(command: &Command) -> usize {
    let mut size = bincode::enc::write::SizeWriter::default();
    match bincode::serde::encode_into_writer(command, &mut size, bincode::config::standard()) {
        Ok(()) => size.bytes_written,
        // A command holds nothing serde cannot encode; were it to, it is not proposed.
        Err(_) => usize::MAX,
    }
}

/// Refuses a command of `bytes` over [`COMMAND_BYTES_MAX`].
pub(crate) fn check_size(bytes: usize) -> Result<(), NodeError> {
    if bytes > COMMAND_BYTES_MAX {
        return Err(NodeError::BadRequest(format!(
            "command of {bytes} bytes encoded, more than the {COMMAND_BYTES_MAX} any command \
             within the ledger's limits takes: a field is too long"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use ledger_core::limits::{
        COMMAND_ID_BYTES_MAX, DETAIL_BYTES_MAX, INTENT_BYTES_MAX, KEY_BYTES_MAX,
        NAMESPACE_BYTES_MAX, NAME_BYTES_MAX, RECEIPT_BYTES_MAX, TENANT_BYTES_MAX,
    };
    use ledger_core::limits::{TARGET_FIELDS_MAX, VOLATILE_FIELDS_MAX};
    use ledger_core::{
        Authority, Caller, CommandBody, Decision, Declaration, EffectKey, ObservationResult,
        ReplayClass, ToolName, ToolPolicy, ToolRef,
    };

    use super::*;

    fn longest(bytes: usize) -> String {
        "x".repeat(bytes)
    }

    /// The largest commands the ledger's field limits allow stay well under
    /// [`COMMAND_BYTES_MAX`], so the node never refuses one the ledger would accept.
    #[test]
    fn the_largest_commands_within_the_ledgers_limits_are_proposed() {
        let key = EffectKey::new(
            longest(TENANT_BYTES_MAX),
            longest(NAMESPACE_BYTES_MAX),
            longest(KEY_BYTES_MAX),
        );
        let name = longest(NAME_BYTES_MAX);
        let declaration = Declaration {
            key: key.clone(),
            workflow_id: name.clone(),
            tool: ToolRef {
                provider: name.clone(),
                name: name.clone(),
                contract_version: name.clone(),
            },
            authority: Authority {
                principal: name.clone(),
                policy_generation: u64::MAX,
            },
            target: name.clone(),
            intent_json: longest(INTENT_BYTES_MAX),
        };
        let bodies = [
            CommandBody::Claim {
                declaration,
                holder: name.clone(),
                lease_ms: Some(u64::MAX),
                confirmation: Some(longest(DETAIL_BYTES_MAX)),
            },
            CommandBody::Observe {
                key: key.clone(),
                fencing_token: u64::MAX,
                result: ObservationResult::Committed {
                    receipt: longest(RECEIPT_BYTES_MAX),
                },
                detail: longest(DETAIL_BYTES_MAX),
            },
            CommandBody::PutToolPolicy {
                tenant: longest(TENANT_BYTES_MAX),
                tool: ToolName {
                    provider: name.clone(),
                    name: name.clone(),
                },
                policy: ToolPolicy {
                    volatile_fields: vec![
                        format!("/{}", longest(NAME_BYTES_MAX - 1));
                        VOLATILE_FIELDS_MAX
                    ],
                    target_fields: vec![
                        format!("/{}", longest(NAME_BYTES_MAX - 1));
                        TARGET_FIELDS_MAX
                    ],
                    ..ToolPolicy::for_class(ReplayClass::Irreversible)
                },
            },
            CommandBody::Decide {
                key: key.clone(),
                decision: Decision::Committed {
                    receipt: longest(RECEIPT_BYTES_MAX),
                },
                operator: name.clone(),
                note: longest(DETAIL_BYTES_MAX),
            },
            CommandBody::DecideEscalation {
                key,
                escalation_token: u64::MAX,
                decision: Decision::Committed {
                    receipt: longest(RECEIPT_BYTES_MAX),
                },
                operator: name.clone(),
                note: longest(DETAIL_BYTES_MAX),
            },
        ];
        for body in bodies {
            let command = Command {
                command_id: longest(COMMAND_ID_BYTES_MAX),
                caller: Caller::Tenant(longest(TENANT_BYTES_MAX)),
                body,
            };
            let bytes = encoded_bytes(&command);
            assert!(bytes < 80 << 10, "{}: {bytes} bytes", command.body.name());
            assert!(check_size(bytes).is_ok());
        }
        assert!(matches!(
            check_size(COMMAND_BYTES_MAX + 1),
            Err(NodeError::BadRequest(_))
        ));
    }
}
