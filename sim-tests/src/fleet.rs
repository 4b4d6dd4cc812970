//! Agents on the shipped `EffectRunner` beside a scenario's cluster: a few benchmark
//! episodes (each an agent meeting its boundary faults, with two tool-server instances)
//! run through the cluster while the scenario's own faults strike it, and the providers'
//! ground truth is judged at the end ([`check_world`]). The named scenarios and the
//! randomized one start them through [`crate::scenario::Run::start_agents`], so the
//! partitions, crashes, power failures and clock faults they inject meet the runner tool
//! servers ship with, not only the workload's clients, which drive the protocol call by
//! call. [`Launch`], which starts one episode's agent and instances, and
//! [`register_world_tools`] serve the benchmark's strategies as well.

use std::sync::Arc;
use std::time::Duration;

use madsim::rand::Rng;

use ledger_core::EffectRecord;

use crate::actors::agent::{wait_all_finished, Agent, Progress};
use crate::actors::faults::{EpisodeFaults, Supervisor};
use crate::actors::toolserver::{Instance, ServerConfig};
use crate::actors::{Final, Intent, KeyMode, Strategy};
use crate::bench::plan::{episode, EpisodePlan, FaultPoint};
use crate::check::Verdict;
use crate::cluster::{ClientNode, Cluster};
use crate::fixtures::TENANT;
use crate::seeds::RunOutcome;
use crate::world::{check_world, world_policy, ProviderKind, World};

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

/// What starting an episode needs.
pub struct Launch<'a> {
    /// The strategy.
    pub strategy: Strategy,
    /// The providers.
    pub world: &'a World,
    /// Crashes machines.
    pub supervisor: &'a Supervisor,
    /// The ledger's nodes (ledger strategies).
    pub endpoints: &'a [String],
    /// Makes a machine with a name.
    pub machines: &'a dyn Fn(&str) -> ClientNode,
}

impl Launch<'_> {
    /// Starts `plan`'s two tool-server instances and, at its start time, its agent.
    pub fn start(&self, plan: &EpisodePlan) -> (Agent, Arc<ServerConfig>) {
        let faults = EpisodeFaults::new(plan.faults.clone(), self.supervisor.clone());
        let config = Arc::new(ServerConfig {
            strategy: self.strategy,
            world: self.world.clone(),
            faults: faults.clone(),
            ledger_endpoints: self.endpoints.to_vec(),
            processing_ms: plan.processing_ms,
            keys_used: Arc::default(),
        });
        let instances = (0..2)
            .map(|i| {
                let name = format!("{}-s{i}", plan.id);
                Instance::start(&name, (self.machines)(&name), config.clone())
            })
            .collect();
        let agent = Agent::new(
            self.strategy,
            plan.intents.clone(),
            instances,
            faults,
            plan.backoff_jitter_ms.clone(),
        );
        let machine = (self.machines)(&format!("{}-agent", plan.id));
        let (starter, start_ms) = (agent.clone(), plan.start_ms);
        madsim::task::spawn(async move {
            tokio::time::sleep(Duration::from_millis(start_ms)).await;
            starter.start(machine);
        });
        (agent, config)
    }
}

/// Registers the providers' tools with the ledger (operator).
pub async fn register_world_tools(cluster: &Cluster) {
    cluster
        .as_operator(|client| async move {
            for kind in ProviderKind::ALL {
                let id = format!("setup-world-{}", kind.name());
                let tool = kind.tool_ref().tool_name();
                client
                    .put_tool_policy(&id, TENANT, tool, world_policy(kind))
                    .await
                    .unwrap_or_else(|e| panic!("configuring {kind:?} failed: {e}"));
            }
        })
        .await;
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
        self.agents.iter().filter(|a| a.mid_episode()).count()
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
