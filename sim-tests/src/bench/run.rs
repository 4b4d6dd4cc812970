//! One benchmark run: every episode of a seed under one strategy, in one simulated world.
//!
//! The ledger strategies start a real three-node cluster (the real node code) and run
//! their tool servers on `EffectRunner`; the baselines use no cluster and send straight to
//! the providers. Every episode has its own agent and two tool-server instances, on
//! machines of their own, so a crash in one episode never touches another and each
//! strategy meets the same faults. Once every agent has finished and the providers have
//! been quiet for a while, the providers' state is read as the ground truth.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use madsim::runtime::Handle;

use ledger_core::EffectRecord;

use super::judge::Judge;
use super::metrics::EffectResult;
use super::opcount;
use super::plan::{episodes, EpisodePlan};
use crate::actors::agent::{wait_all_finished, Agent};
use crate::actors::faults::Supervisor;
use crate::actors::toolserver::ServerConfig;
use crate::actors::Strategy;
use crate::cluster::{create_client_node, ClientNode, Cluster};
use crate::fixtures::ClusterSettings;
use crate::fleet::{register_world_tools, Launch};
use crate::scenario::Run;
use crate::world::World;

/// How long every agent of a run may take.
const AGENTS_TIMEOUT: Duration = Duration::from_secs(600);
/// How long the providers must be quiet before their state is final.
const QUIET: Duration = Duration::from_secs(20);

/// Where a run's machines come from: the cluster's client subnet, or a standalone one.
enum Machines {
    Cluster(Arc<Cluster>),
    Standalone(Cell<u32>),
}

impl Machines {
    fn make(&self, name: &str) -> ClientNode {
        match self {
            Machines::Cluster(cluster) => cluster.client_node(name),
            Machines::Standalone(next) => {
                let index = next.get();
                next.set(index + 1);
                create_client_node(&Handle::current(), index, name)
            }
        }
    }
}

struct Episode {
    plan: EpisodePlan,
    agent: Agent,
    config: Arc<ServerConfig>,
}

/// Runs every episode of `seed` under `strategy` and returns one result per declared
/// effect.
pub async fn run(seed: u64, strategy: Strategy) -> Vec<EffectResult> {
    opcount::reset();
    let ledger = if strategy.uses_ledger() {
        let run = Run::begin(ClusterSettings::new(3)).await;
        register_world_tools(&run.cluster).await;
        Some(run)
    } else {
        None
    };
    let machines = match &ledger {
        Some(run) => Machines::Cluster(run.cluster.clone()),
        None => Machines::Standalone(Cell::new(1)),
    };
    let endpoints = ledger
        .as_ref()
        .map(|r| r.cluster.endpoints())
        .unwrap_or_default();
    let world = World::new(machines.make("providers"));
    let supervisor = Supervisor::start();
    let started = crate::sim_elapsed();
    let episodes: Vec<Episode> = episodes(seed)
        .into_iter()
        .map(|plan| {
            let launched = Launch {
                strategy,
                world: &world,
                supervisor: &supervisor,
                endpoints: &endpoints,
                machines: &|name: &str| machines.make(name),
            };
            let (agent, config) = launched.start(&plan);
            Episode {
                plan,
                agent,
                config,
            }
        })
        .collect();
    let agents: Vec<&Agent> = episodes.iter().map(|e| &e.agent).collect();
    wait_all_finished(&agents, AGENTS_TIMEOUT).await;
    world.quiesce(QUIET).await;
    let records: Vec<EffectRecord> = match ledger {
        Some(run) => {
            let verified = run.verify(&[], &[], false).await;
            verified.views[0].records.values().cloned().collect()
        }
        None => Vec::new(),
    };
    let judge = Judge {
        seed,
        strategy,
        world: &world,
        records: &records,
        counts: &opcount::take(),
        started,
    };
    episodes
        .iter()
        .flat_map(|e| judge.episode(&e.plan, &e.config, &e.agent.report()))
        .collect()
}
