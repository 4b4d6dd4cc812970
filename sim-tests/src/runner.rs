//! Tool-server instances built on `ledger-client`'s [`EffectRunner`]: the library's own
//! claim loop, heartbeats, waiting and reconciliation, against the simulated provider.
//!
//! Where [`crate::workload`] drives the ledger call by call, this drives it the way a
//! tool server is meant to: one `run` per effect with a dispatch closure and a provider
//! adapter. Each instance walks a shared list of effects until each is committed (or
//! escalated), retrying whatever came back unsettled. Its holder name changes when its
//! machine restarts, as a real instance's would.

use std::collections::VecDeque;
use std::time::Duration;

use madsim::rand::{seq::SliceRandom, thread_rng, Rng};
use tokio::time::Instant;

use ledger_client::{
    AttemptInfo, ClientError, DispatchResult, EffectCall, EffectOutcome, EffectRunner, RunError,
    RunOptions,
};

use crate::cluster::{ClientNode, Cluster};
use crate::fixtures::{declaration, ToolKind, TENANT_KEY};
use crate::history::{Answer, History};
use crate::provider::Provider;
use crate::workload::ClientStats;

/// How long a run waits for another instance's attempt before answering in flight.
const WAIT_IN_FLIGHT_MS: u64 = 2_000;
/// The lease each instance asks for: short, so that an answer held up by a partition
/// can arrive after the lease it grants has run out.
const RUNNER_LEASE_MS: u64 = 1_500;

/// One dispatch by a granted attempt: most sends commit, some answers are lost, some
/// requests provably never leave.
async fn dispatch(provider: Provider, attempt: AttemptInfo, tool: ToolKind) -> DispatchResult {
    let latency_ms = thread_rng().gen_range(1..=30);
    tokio::time::sleep(Duration::from_millis(latency_ms)).await;
    if thread_rng().gen_range(0..100) < 80 {
        let receipt = provider.send(&attempt.provider_key, tool == ToolKind::Keyed);
        if thread_rng().gen_range(0..100) < 85 {
            DispatchResult::Committed { receipt }
        } else {
            DispatchResult::Unknown {
                reason: "sent; the answer was lost".into(),
            }
        }
    } else if thread_rng().gen_bool(0.5) {
        DispatchResult::NotCommitted {
            proof: "validation failed before sending".into(),
        }
    } else {
        DispatchResult::Unknown {
            reason: "timed out; nothing was sent, but the instance cannot know".into(),
        }
    }
}

/// Starts an instance called `holder` on `machine`, settling `effects`.
pub fn start_instance(
    machine: &ClientNode,
    cluster: &Cluster,
    holder: &str,
    effects: Vec<(String, ToolKind)>,
    give_up_after: Duration,
    history: &History,
    provider: &Provider,
) -> madsim::task::JoinHandle<ClientStats> {
    let client = cluster.client(cluster.endpoints(), TENANT_KEY);
    let options = RunOptions {
        lease_ms: RUNNER_LEASE_MS,
        ..RunOptions::default()
    };
    let runner = EffectRunner::new(client, holder).with_options(options);
    let instance = Instance {
        runner,
        provider: provider.clone(),
        history: history.clone(),
        deadline: Instant::now() + give_up_after,
        stats: ClientStats {
            name: holder.to_owned(),
            ..ClientStats::default()
        },
    };
    machine.spawn(instance.run(effects))
}

struct Instance {
    runner: EffectRunner,
    provider: Provider,
    history: History,
    deadline: Instant,
    stats: ClientStats,
}

impl Instance {
    async fn run(mut self, mut effects: Vec<(String, ToolKind)>) -> ClientStats {
        effects.shuffle(&mut thread_rng());
        let mut queue: VecDeque<(String, ToolKind)> = effects.into();
        while let Some((effect, tool)) = queue.pop_front() {
            if Instant::now() >= self.deadline {
                self.stats.unsettled.push(effect);
                continue;
            }
            if self.settle(&effect, tool).await {
                self.stats.settled += 1;
            } else {
                queue.push_back((effect, tool));
                let pause_ms = thread_rng().gen_range(50..500);
                tokio::time::sleep(Duration::from_millis(pause_ms)).await;
            }
        }
        self.stats
    }

    /// One run of `effect`; whether it is settled.
    async fn settle(&mut self, effect: &str, tool: ToolKind) -> bool {
        let call = EffectCall {
            declaration: declaration(effect, tool),
            confirmation: None,
        };
        let key = call.declaration.key.clone();
        let adapter = self.provider.lookup();
        let provider = self.provider.clone();
        let outcome = self
            .runner
            .effect(call)
            .reconcile_with(&adapter)
            .wait_in_flight(WAIT_IN_FLIGHT_MS)
            .run(move |attempt| dispatch(provider.clone(), attempt, tool))
            .await;
        let name = self.stats.name.clone();
        match outcome {
            Ok(EffectOutcome::Done { receipt } | EffectOutcome::Replayed { receipt }) => {
                self.history
                    .record(&name, &key, Answer::Replayed { receipt });
                true
            }
            Ok(EffectOutcome::Escalated { .. }) => {
                self.history.record(&name, &key, Answer::Escalated);
                true
            }
            Ok(EffectOutcome::Conflict(conflict)) => {
                let line = format!("{name}: {key}: conflict for an identical intent: {conflict:?}");
                self.stats.anomalies.push(line);
                true
            }
            Ok(_) => false,
            Err(
                RunError::Ledger(ClientError::Unavailable { .. }) | RunError::Unreported { .. },
            ) => {
                self.stats.resends += 1;
                false
            }
            Err(e) => {
                self.stats
                    .anomalies
                    .push(format!("{name}: {key}: run failed: {e}"));
                false
            }
        }
    }
}
