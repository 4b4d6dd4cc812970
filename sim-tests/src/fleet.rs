//! Agents on the shipped `EffectRunner` beside a scenario's cluster: a few benchmark
//! episodes (each an agent meeting its boundary faults, with two tool-server instances)
//! run through the cluster while the scenario's own faults strike it, and the providers'
//! ground truth is judged at the end ([`check_world`]). The named scenarios and the
//! randomized one start them through [`crate::scenario::Run::start_agents`], so every
//! partition, crash, power failure and clock fault they inject is met by the runner tool
//! servers ship with, not only by the workload's clients, which drive the protocol call by
//! call.

use std::time::Duration;

use madsim::rand::Rng;

use ledger_core::EffectRecord;

use crate::actors::agent::{wait_all_finished, Agent, Progress};
use crate::actors::faults::Supervisor;
use crate::actors::{Final, Intent, KeyMode, Strategy};
use crate::bench::plan::{episode, FaultPoint};
use crate::bench::run::Launch;
use crate::check::Verdict;
use crate::cluster::Cluster;
use crate::seeds::RunOutcome;
use crate::world::{check_world, ProviderKind, World};

/// How long the agents may take to finish once a scenario's faults are healed.
const AGENTS_TIMEOUT: Duration = Duration::from_secs(400);
/// How long the providers must be quiet before their state is final.
const QUIET: Duration = Duration::from_secs(20);
/// Agents start at a random point within this long (ms) after the fleet.
const AGENT_START_MS_MAX: u64 = 3_000;

/// One agent: a benchmark episode (fault point and provider) run on the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentSpec {
    /// Its boundary faults.
    pub point: FaultPoint,
    /// Its provider.
    pub kind: ProviderKind,
    /// Where its keys come from.
    pub key_mode: KeyMode,
    /// Declared multiplicity of each intent.
    pub slots: u32,
}

impl AgentSpec {
    /// Draws `count` agents from `rng`: any fault point, provider and key mode, and up to
    /// three recipients for a message.
    pub fn draw(rng: &mut impl Rng, count: usize) -> Vec<AgentSpec> {
        (0..count)
            .map(|_| {
                let kind = ProviderKind::ALL[rng.gen_range(0..ProviderKind::ALL.len())];
                AgentSpec {
                    point: FaultPoint::ALL[rng.gen_range(0..FaultPoint::ALL.len())],
                    kind,
                    key_mode: if rng.gen_bool(0.5) {
                        KeyMode::Explicit
                    } else {
                        KeyMode::Derived
                    },
                    slots: if kind == ProviderKind::Message {
                        rng.gen_range(1..=3)
                    } else {
                        1
                    },
                }
            })
            .collect()
    }
}

/// Running agents and the providers they act on.
pub struct Fleet {
    world: World,
    agents: Vec<Agent>,
}

impl Fleet {
    /// Starts one agent per spec, each with two tool-server instances on `EffectRunner`,
    /// within the next [`AGENT_START_MS_MAX`], on `cluster` (where the providers' tools
    /// are registered). `seed` draws the episodes' faults and intents.
    pub fn start(cluster: &Cluster, specs: &[AgentSpec], seed: u64) -> Fleet {
        let world = World::new(cluster.client_node("providers"));
        let supervisor = Supervisor::start();
        let endpoints = cluster.endpoints();
        let machines = |name: &str| cluster.client_node(name);
        let agents = specs
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let mut episode = episode(seed, spec.point, spec.kind, &format!("a{i}-"));
                for intent in &mut episode.intents {
                    intent.slots = spec.slots;
                }
                episode.start_ms = madsim::rand::thread_rng().gen_range(0..AGENT_START_MS_MAX);
                let launch = Launch {
                    strategy: Strategy::Ledger(spec.key_mode),
                    world: &world,
                    supervisor: &supervisor,
                    endpoints: &endpoints,
                    machines: &machines,
                };
                launch.start(&episode).0
            })
            .collect();
        Fleet { world, agents }
    }

    /// How many agents have made their first call and not yet ended every intent.
    pub fn running(&self) -> usize {
        self.agents
            .iter()
            .filter(|a| !a.finished() && a.report().iter().any(|(_, p)| p.started.is_some()))
            .count()
    }

    /// Waits for every agent to finish and the providers to be quiet, so that their state
    /// is final.
    pub async fn settle(&self) {
        wait_all_finished(&self.agents.iter().collect::<Vec<_>>(), AGENTS_TIMEOUT).await;
        self.world.quiesce(QUIET).await;
    }

    /// Adds the providers' ground truth against what the agents were told and the ledger's
    /// `records` to `verdict`.
    pub fn check<'a>(
        &self,
        records: impl IntoIterator<Item = &'a EffectRecord>,
        verdict: &mut Verdict,
    ) {
        verdict.add(
            "providers' ground truth: multiplicity, real receipts",
            check_world(&self.world, &self.reports(), records, true),
        );
    }

    /// Adds what the agents were told, and how many mutations the providers applied, to
    /// `outcome`'s summary and metrics.
    pub fn tell(&self, outcome: &mut RunOutcome) {
        let reports = self.reports();
        let told: Vec<&str> = reports
            .iter()
            .map(|(_, p)| match &p.end {
                Some((Final::Success { .. }, _)) => "done",
                Some((Final::Failed { .. }, _)) => "failed",
                Some((
                    Final::Unresolved {
                        escalation: Some(_),
                        ..
                    },
                    _,
                )) => "escalated",
                _ => "unresolved",
            })
            .collect();
        let mutations = self.world.mutations().values().map(Vec::len).sum::<usize>();
        outcome.summary.push_str(&format!(
            " agents={} told={told:?} provider_mutations={mutations}",
            self.agents.len()
        ));
        let mut count = |name: String, n: u64| *outcome.metrics.entry(name).or_default() += n;
        for t in told {
            count(format!("agent_intent_{t}"), 1);
        }
        count("provider_mutations".into(), mutations as u64);
    }

    fn reports(&self) -> Vec<(Intent, Progress)> {
        self.agents.iter().flat_map(Agent::report).collect()
    }
}
