//! The leader's sweeper: proposes lease expiry and garbage collection as replicated
//! commands, so every replica expires and forgets the same records at the same ledger
//! time. Followers never sweep; a new leader picks up where the old one stopped, because
//! what is due is read from the replicated state, not remembered here.
//!
//! What is due is judged by ledger time ([`LedgerTime::now_ms`]), the same bounded time
//! the proposer stamps, never by the raw wall clock: a leader whose wall clock runs days
//! ahead proposes nothing early. On every node, leader or not, the sweeper also tells the
//! bound the largest ledger time applied so far whenever Raft applies entries, so that a
//! follower elected leader inherits it (see `stamp_bound`).

use std::time::Duration;

use openraft::async_runtime::WatchReceiver;

use ledger_core::{Caller, Command, CommandBody, Outcome};

use crate::metrics::{SWEEPER_COLLECTED_TOTAL, SWEEPER_EXPIRED_TOTAL};

use crate::config::SweeperSettings;
use crate::node::LedgerNode;

/// Runs until the node shuts down.
pub async fn run(node: LedgerNode, settings: SweeperSettings) {
    let mut tick = tokio::time::interval(Duration::from_millis(settings.interval_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut metrics = node.raft.metrics();
    loop {
        tokio::select! {
            biased;
            _ = tick.tick() => {}
            changed = metrics.changed() => {
                if changed.is_err() {
                    return; // Raft has stopped.
                }
                // Entries may have been applied: learn their time now, not at the next
                // tick, since the later a stamp is learned the more ledger time lags.
                node.time.observe_applied();
                continue;
            }
        }
        node.time.observe_applied();
        if !node.raft.is_leader() {
            continue;
        }
        let now_ms = node.time.now_ms();
        let due = node.reader.read(|l| {
            (
                l.next_lease_expiry_ms().is_some_and(|t| t <= now_ms),
                l.next_collection_ms().is_some_and(|t| t <= now_ms),
            )
        });
        let (lease_due, collection_due) = match due {
            Ok(due) => due,
            Err(e) => {
                tracing::error!("sweeper cannot read the ledger: {e}");
                continue;
            }
        };
        if lease_due {
            sweep(
                &node,
                CommandBody::ExpireLeases {
                    limit: settings.limit,
                },
            )
            .await;
        }
        if collection_due {
            sweep(
                &node,
                CommandBody::CollectGarbage {
                    limit: settings.limit,
                },
            )
            .await;
        }
    }
}

/// Proposes one kind of sweep until nothing more is due (bounded, so one tick cannot
/// monopolise the log).
async fn sweep(node: &LedgerNode, body: CommandBody) {
    const ROUNDS_MAX: usize = 16;
    for _ in 0..ROUNDS_MAX {
        let command = Command {
            // Sweeps are not remembered by command id; any valid id will do.
            command_id: "sweep".into(),
            caller: Caller::Operator,
            body: body.clone(),
        };
        match node.propose_local(command).await {
            Ok(Outcome::Swept {
                expired,
                collected,
                more,
            }) => {
                if expired + collected > 0 {
                    tracing::info!(kind = body.name(), expired, collected, "swept");
                    metrics::counter!(SWEEPER_EXPIRED_TOTAL).increment(u64::from(expired));
                    metrics::counter!(SWEEPER_COLLECTED_TOTAL).increment(u64::from(collected));
                }
                if !more {
                    return;
                }
            }
            Ok(other) => {
                tracing::warn!(?other, "sweep refused");
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, "sweep not applied");
                return;
            }
        }
    }
}
