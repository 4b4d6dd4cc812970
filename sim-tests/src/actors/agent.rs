//! An agent: runs its workflow's intents one after the other, calling tool-server
//! instances with its strategy's retry policy, and keeps its progress in durable workflow
//! state so that after a crash it resumes the intent it was on, under the same key.
//!
//! Retrying strategies call again on an ambiguous answer (a timeout, a reset connection,
//! an unknown outcome), each call on the next instance, up to [`AGENT_CALLS_MAX`] calls.
//! `never-retry` (and `token-or-never` at a provider without keys) makes one call and,
//! after a crash, does not repeat a call it may have made. A conflict ends the intent
//! (a model repair is the same effect, and the conflict is its answer), except that an
//! agent on the ledger that means a second effect in the same step (`new_action`) makes
//! the explicit transition: a new key (explicit keys) or a new sequence number (derived
//! keys).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::faults::{CallPlan, EpisodeFaults};
use super::toolserver::Instance;
use super::{
    Final, Intent, Strategy, ToolReply, AGENT_BACKOFF_MS, AGENT_CALLS_MAX, AGENT_TIMEOUT_MS,
};
use crate::cluster::ClientNode;

/// What the agent knows about one intent, and how it got there.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// Calls made.
    pub calls: u32,
    /// Conflicts answered.
    pub conflicts: u32,
    /// Whether a call was made whose answer has not arrived (it survives a crash).
    pub in_flight: bool,
    /// When the first call was made.
    pub started: Option<Duration>,
    /// When the agent first did not know the outcome: its first ambiguous answer, or its
    /// restart with a call in doubt.
    pub first_ambiguous: Option<Duration>,
    /// The end: what the agent knows, and when it knew it.
    pub end: Option<(Final, Duration)>,
}

#[derive(Debug, Default)]
struct Durable {
    next: usize,
    progress: Vec<Progress>,
}

struct Inner {
    strategy: Strategy,
    intents: Vec<Intent>,
    instances: Vec<Instance>,
    faults: Arc<EpisodeFaults>,
    backoff_jitter_ms: Vec<u64>,
    durable: Mutex<Durable>,
}

/// An agent and its durable workflow state.
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

impl Agent {
    /// An agent that will run `intents` through `instances`; `backoff_jitter_ms[i]` is
    /// added to the pause before its retry number `i + 1`.
    pub fn new(
        strategy: Strategy,
        intents: Vec<Intent>,
        instances: Vec<Instance>,
        faults: Arc<EpisodeFaults>,
        backoff_jitter_ms: Vec<u64>,
    ) -> Agent {
        let durable = Durable {
            next: 0,
            progress: vec![Progress::default(); intents.len()],
        };
        Agent {
            inner: Arc::new(Inner {
                strategy,
                intents,
                instances,
                faults,
                backoff_jitter_ms,
                durable: Mutex::new(durable),
            }),
        }
    }

    /// Starts (or resumes) the agent on `machine`.
    pub fn start(&self, machine: ClientNode) {
        let agent = self.clone();
        machine.clone().spawn(agent.run(machine));
    }

    /// Whether every intent has ended.
    pub fn finished(&self) -> bool {
        let durable = self.inner.durable.lock().expect("agent lock");
        durable.next >= self.inner.intents.len()
    }

    /// Whether it has made its first call and not yet ended every intent.
    pub fn mid_episode(&self) -> bool {
        let durable = self.inner.durable.lock().expect("agent lock");
        durable.next < self.inner.intents.len()
            && durable.progress.iter().any(|p| p.started.is_some())
    }

    /// The intents and what became of each.
    pub fn report(&self) -> Vec<(Intent, Progress)> {
        let durable = self.inner.durable.lock().expect("agent lock");
        self.inner
            .intents
            .iter()
            .cloned()
            .zip(durable.progress.iter().cloned())
            .collect()
    }

    fn progress<T>(&self, index: usize, f: impl FnOnce(&mut Progress) -> T) -> T {
        f(&mut self.inner.durable.lock().expect("agent lock").progress[index])
    }

    async fn run(self, machine: ClientNode) {
        loop {
            let index = self.inner.durable.lock().expect("agent lock").next;
            if index >= self.inner.intents.len() {
                return;
            }
            let end = self.run_intent(index, &machine).await;
            let mut durable = self.inner.durable.lock().expect("agent lock");
            durable.progress[index].end = Some((end, crate::sim_elapsed()));
            durable.next += 1;
        }
    }

    async fn run_intent(&self, index: usize, machine: &ClientNode) -> Final {
        let strategy = self.inner.strategy;
        let retries = strategy.retries(self.inner.intents[index].kind);
        let calls_max = if retries { AGENT_CALLS_MAX } else { 1 };
        if self.progress(index, |p| p.in_flight) {
            self.progress(index, |p| {
                p.first_ambiguous.get_or_insert_with(crate::sim_elapsed);
            });
            if !retries {
                return unresolved("the agent restarted with a call in doubt and never retries");
            }
        }
        loop {
            let (calls, conflicts) = self.progress(index, |p| (p.calls, p.conflicts));
            if calls >= calls_max {
                return unresolved(if retries {
                    "calls exhausted with the outcome unknown"
                } else {
                    "the outcome is unknown and the agent never retries"
                });
            }
            if calls > 0 {
                let jitter_ms = self.inner.backoff_jitter_ms[calls as usize % 8];
                let pause_ms = AGENT_BACKOFF_MS + jitter_ms;
                tokio::time::sleep(Duration::from_millis(pause_ms)).await;
            }
            let mut intent = self.inner.intents[index].clone();
            if conflicts > 0 {
                intent.key = format!("{}/r{conflicts}", intent.key);
                intent.sequence = Some(format!("r{conflicts}"));
            }
            let (n, plan) = self.inner.faults.next_call();
            if let Some(delay_ms) = self.inner.faults.plan.delays.get(&n) {
                tokio::time::sleep(Duration::from_millis(*delay_ms)).await;
            }
            self.progress(index, |p| {
                p.calls += 1;
                p.in_flight = true;
                p.started.get_or_insert_with(crate::sim_elapsed);
            });
            let reply = self.call(n, plan, intent, machine).await;
            self.progress(index, |p| p.in_flight = false);
            match reply {
                ToolReply::Ok { receipts } => return Final::Success { receipts },
                ToolReply::Rejected { reason } => {
                    return Final::Failed {
                        reason,
                        key_taken: false,
                    }
                }
                ToolReply::Ambiguous { .. } => self.progress(index, |p| {
                    p.first_ambiguous.get_or_insert_with(crate::sim_elapsed);
                }),
                ToolReply::Conflict { fields } => {
                    let renews = matches!(strategy, Strategy::Ledger(_))
                        && self.inner.intents[index].new_action;
                    if !renews {
                        return Final::Failed {
                            reason: format!("the key was used with other arguments: {fields:?}"),
                            key_taken: true,
                        };
                    }
                    self.progress(index, |p| p.conflicts += 1);
                }
                ToolReply::Escalated { reason } => {
                    return Final::Unresolved {
                        reason: format!("escalated: {reason:?}"),
                        escalation: Some(reason),
                    }
                }
            }
        }
    }

    /// Makes call number `n` with its planned fault.
    async fn call(
        &self,
        n: u32,
        plan: Option<CallPlan>,
        intent: Intent,
        machine: &ClientNode,
    ) -> ToolReply {
        let instances = &self.inner.instances;
        let instance = &instances[(n as usize - 1) % instances.len()];
        let Some((server_machine, server)) = instance.current() else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            return ambiguous("connection refused: the instance is down");
        };
        let mut handle = server_machine.spawn(server.handle(intent, instance.clone()));
        let timeout = Duration::from_millis(AGENT_TIMEOUT_MS);
        let deadline = tokio::time::Instant::now() + timeout;
        match plan {
            None => match tokio::time::timeout(timeout, handle).await {
                Ok(Ok(reply)) => reply,
                Ok(Err(_)) => ambiguous("connection reset: the instance died"),
                Err(_) => ambiguous("timed out"),
            },
            Some(CallPlan::LostReply) => {
                let _ = tokio::time::timeout(timeout, handle).await;
                tokio::time::sleep_until(deadline).await;
                ambiguous("timed out: the answer was lost on its way back")
            }
            Some(CallPlan::Cancel(after_ms)) => {
                tokio::select! {
                    joined = &mut handle => match joined {
                        Ok(reply) => reply,
                        Err(_) => ambiguous("connection reset: the instance died"),
                    },
                    () = tokio::time::sleep(Duration::from_millis(after_ms)) => {
                        handle.abort();
                        ambiguous("cancelled by the agent")
                    }
                }
            }
            Some(CallPlan::AgentCrash { after_ms, down_ms }) => {
                tokio::time::sleep(Duration::from_millis(after_ms)).await;
                let agent = self.clone();
                let on_restart = Box::new(move |machine: ClientNode| {
                    Box::pin(async move { agent.start(machine) })
                        as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
                });
                self.inner
                    .faults
                    .supervisor
                    .crash(machine.clone(), down_ms, on_restart)
                    .await;
                unreachable!("the agent's machine was killed")
            }
        }
    }
}

/// Waits until every one of `agents` has ended all its intents; panics after `timeout`.
pub async fn wait_all_finished(agents: &[&Agent], timeout: Duration) {
    crate::wait::until("every agent finished", timeout, || {
        let left = agents.iter().filter(|a| !a.finished()).count();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} agents still running"))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

fn ambiguous(reason: &str) -> ToolReply {
    ToolReply::Ambiguous {
        reason: reason.into(),
    }
}

fn unresolved(reason: &str) -> Final {
    Final::Unresolved {
        reason: reason.into(),
        escalation: None,
    }
}
