//! Clients that use the ledger the way a stateless tool server should, against the
//! simulated provider.
//!
//! Each client walks a list of effects (shared with the other clients, so they contend)
//! until every one is settled, and an open-ended client then starts the next generation
//! of the same effects, until the scenario finishes the workload. To settle an effect:
//! claim; on `proceed`, check the lease, send to the provider
//! and report what happened; on `in_flight`, poll later; on `reconcile`, take a fenced
//! reconciliation attempt and observe the provider. Outcomes are drawn from the run's RNG:
//! most sends commit, some answers are lost (unknown), some requests fail provably before
//! they leave, and a holder may vanish without reporting (its tool server restarts under
//! a new holder name and comes back to the effect later).
//!
//! A keyed effect escalated after look-ups past the provider's horizon (the one escalation
//! this workload expects: a leader's clock far ahead) is decided as a person would decide
//! it: from what the provider holds (committed with its receipt, or not committed),
//! through the operator's key, naming the escalation it read; a not-committed effect is
//! then claimed again. The simulated provider applies a send at once, and a holder sends
//! only within its lease less a margin, so by the time look-ups escalate an effect what
//! the provider holds is the truth a person would find in its console, as far as the
//! ledger's own absence proof relies on it. Any other escalation is left standing and
//! fails the run.
//!
//! A command whose answer did not arrive (the cluster was unavailable) is re-sent with the
//! same command id until it answers, exactly as the client library documents. Every
//! answer received goes into the [`History`].

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use madsim::rand::{seq::SliceRandom, thread_rng, Rng};
use tokio::time::Instant;

use ledger_client::{ClientError, LedgerClient};
use ledger_core::{EffectKey, Outcome};

use crate::cluster::{ClientNode, Cluster};
use crate::fixtures::{ToolKind, OPERATOR_KEY, TENANT_KEY};
use crate::history::History;
use crate::linearize::oplog::{Answer, Call};
use crate::provider::Provider;

mod round;

/// A holder does not send when less than this is left of its lease.
const SEND_MARGIN_MS: u64 = 500;
/// Longest pause before polling an effect another holder has in flight.
const POLL_MS_MAX: u64 = 2_000;

/// What one client does.
#[derive(Debug, Clone)]
pub struct ClientPlan {
    /// Its name: machine name, holder name prefix and command id prefix.
    pub name: String,
    /// The nodes it may call.
    pub endpoints: Vec<String>,
    /// The effects it must settle, by name and tool.
    pub effects: Vec<(String, ToolKind)>,
    /// Chance in percent that a granted holder vanishes without reporting.
    pub vanish_percent: u32,
    /// Simulated time after which it stops, leaving what is not settled.
    pub give_up_after: Duration,
    /// Longest pause between two effects (drawn uniformly), so a workload spans the
    /// faults of a scenario instead of finishing before them.
    pub think_ms_max: u64,
    /// Whether, once its effects are settled, it goes on with the next generation of
    /// them (the same names with a `.gN` suffix, so contending clients meet again) until
    /// the workload is finished.
    pub open_ended: bool,
}

/// What one client achieved.
#[derive(Debug, Clone, Default)]
pub struct ClientStats {
    /// The client.
    pub name: String,
    /// Every effect it worked on, all generations.
    pub effects: Vec<String>,
    /// Effects it saw committed (or gave up on after an answer the contract does not
    /// allow, which is an anomaly).
    pub settled: usize,
    /// Escalations it decided as the operator.
    pub decided: usize,
    /// Effects it gave up on at its deadline.
    pub unsettled: Vec<String>,
    /// Commands re-sent after the cluster was unavailable.
    pub resends: usize,
    /// Answers that contradict the contract (a conflict for an identical intent, an
    /// unexpected refusal); each is a bug.
    pub anomalies: Vec<String>,
}

/// Running clients.
pub struct Workload {
    running: Vec<(String, madsim::task::JoinHandle<ClientStats>)>,
    finishing: Arc<AtomicBool>,
}

impl Workload {
    /// Starts one client machine per plan.
    pub fn start(
        cluster: &Cluster,
        plans: Vec<ClientPlan>,
        history: &History,
        provider: &Provider,
    ) -> Workload {
        let finishing = Arc::new(AtomicBool::new(false));
        let running = plans
            .into_iter()
            .map(|plan| {
                let machine = cluster.client_node(&plan.name);
                let name = plan.name.clone();
                let actor = Actor::new(cluster, &plan, history, provider, &finishing);
                (name, machine.spawn(actor.run(plan.effects)))
            })
            .collect();
        Workload { running, finishing }
    }

    /// Runs `plan`'s effects (one generation) on an existing client machine.
    pub fn spawn_on(
        machine: &ClientNode,
        cluster: &Cluster,
        plan: ClientPlan,
        history: &History,
        provider: &Provider,
    ) -> madsim::task::JoinHandle<ClientStats> {
        let finished = Arc::new(AtomicBool::new(true));
        let actor = Actor::new(cluster, &plan, history, provider, &finished);
        machine.spawn(actor.run(plan.effects))
    }

    /// Tells open-ended clients to stop after their current generation, and waits for
    /// every client to finish (each stops at its own deadline at the latest).
    pub async fn finish(self) -> Vec<ClientStats> {
        self.finishing.store(true, Ordering::Relaxed);
        let mut stats = Vec::new();
        for (name, handle) in self.running {
            stats.push(
                handle
                    .await
                    .unwrap_or_else(|e| panic!("client {name} did not finish: {e}")),
            );
        }
        stats
    }
}

/// Where an effect stands for one client after one round.
enum Step {
    /// Committed (or, for an answer that contradicts the contract, given up on): nothing
    /// more to do.
    Settled,
    /// Come back to it later.
    Later,
}

struct Actor {
    name: String,
    client: LedgerClient,
    /// The same nodes with the operator's key, for deciding escalations.
    operator: LedgerClient,
    history: History,
    provider: Provider,
    deadline: Instant,
    vanish_percent: u32,
    think_ms_max: u64,
    open_ended: bool,
    finishing: Arc<AtomicBool>,
    incarnation: u32,
    sequence: u64,
    stats: ClientStats,
}

/// The simulator's wall clock in milliseconds. A leader whose clock is right stamps about
/// this, but ledger time may run a bounded skew ahead of it and lag it by more than a lease
/// (`ledger_node::stamp_bound`).
pub fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Actor {
    fn new(
        cluster: &Cluster,
        plan: &ClientPlan,
        history: &History,
        provider: &Provider,
        finishing: &Arc<AtomicBool>,
    ) -> Actor {
        Actor {
            name: plan.name.clone(),
            client: cluster.client(plan.endpoints.clone(), TENANT_KEY),
            operator: cluster.client(plan.endpoints.clone(), OPERATOR_KEY),
            history: history.clone(),
            provider: provider.clone(),
            deadline: Instant::now() + plan.give_up_after,
            vanish_percent: plan.vanish_percent,
            think_ms_max: plan.think_ms_max,
            open_ended: plan.open_ended,
            finishing: finishing.clone(),
            incarnation: 0,
            sequence: 0,
            stats: ClientStats {
                name: plan.name.clone(),
                ..ClientStats::default()
            },
        }
    }

    async fn run(mut self, effects: Vec<(String, ToolKind)>) -> ClientStats {
        for generation in 1.. {
            let named = effects.iter().map(|(name, tool)| match generation {
                1 => (name.clone(), *tool),
                n => (format!("{name}.g{n}"), *tool),
            });
            self.settle_all(named.collect()).await;
            let more = self.open_ended
                && !self.finishing.load(Ordering::Relaxed)
                && Instant::now() < self.deadline;
            if !more {
                break;
            }
        }
        self.stats
    }

    /// Settles every effect of one generation, or gives up on what is left at the deadline.
    async fn settle_all(&mut self, mut effects: Vec<(String, ToolKind)>) {
        effects.shuffle(&mut thread_rng());
        self.stats
            .effects
            .extend(effects.iter().map(|(name, _)| name.clone()));
        let mut queue: VecDeque<(String, ToolKind)> = effects.into();
        while let Some((effect, tool)) = queue.pop_front() {
            if Instant::now() >= self.deadline {
                self.stats.unsettled.push(effect);
                continue;
            }
            match self.round(&effect, tool).await {
                Step::Settled => self.stats.settled += 1,
                Step::Later => queue.push_back((effect, tool)),
            }
            let think_ms = thread_rng().gen_range(0..=self.think_ms_max);
            tokio::time::sleep(Duration::from_millis(think_ms)).await;
        }
    }

    fn command_id(&mut self) -> String {
        self.sequence += 1;
        format!("{}-{}", self.name, self.sequence)
    }

    fn holder(&self) -> String {
        format!("{}-i{}", self.name, self.incarnation)
    }

    /// Calls `call` until it answers (re-sending the same command while the cluster is
    /// unavailable); `None` when the deadline passed first.
    async fn persist<T, F, Fut>(&mut self, mut call: F) -> Option<Result<T, ClientError>>
    where
        F: FnMut(LedgerClient) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        loop {
            match call(self.client.clone()).await {
                Err(ClientError::Unavailable { .. }) if Instant::now() < self.deadline => {
                    self.stats.resends += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(ClientError::Unavailable { .. }) => return None,
                answered => return Some(answered),
            }
        }
    }

    /// Like [`Actor::persist`], and records the operation (`call`) and, once it is
    /// known, its result (`answer` turns a result into it; `None` leaves it pending) in
    /// the op log.
    async fn recorded<T, F, Fut>(
        &mut self,
        key: &EffectKey,
        call: Call,
        answer: impl Fn(&T) -> Answer,
        perform: F,
    ) -> Option<Result<T, ClientError>>
    where
        F: FnMut(LedgerClient) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let ops = self.history.ops().clone();
        let handle = ops.invoke(&self.name, key, call);
        let result = self.persist(perform).await;
        match &result {
            Some(Ok(value)) => ops.answer(handle, answer(value)),
            Some(Err(ClientError::Refused(refusal))) => {
                ops.answer(handle, Answer::Outcome(Outcome::Refused(refusal.clone())));
            }
            _ => {}
        }
        result
    }

    fn anomaly(&mut self, key: &EffectKey, what: impl std::fmt::Display) {
        let line = format!("{}: {key}: {what}", self.name);
        tracing::error!("{line}");
        self.stats.anomalies.push(line);
    }
}
