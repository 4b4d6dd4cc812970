//! The randomized simulation (in the spirit of TigerBeetle's VOPR): one seed decides the
//! cluster (3 or 5 nodes, a spare or not), the workload and the whole fault schedule;
//! the real node and client code runs under it; every checker runs at the end.
//!
//! Beside the cluster run two kinds of actors at once:
//! - ledger clients contending over shared effects, driving the ledger call by call
//!   (their operations are recorded for the linearizability checker);
//! - agents with retry policies calling stateless tool-server instances built on
//!   `EffectRunner`, against providers with strong and weak contracts, each agent meeting
//!   one of the benchmark's boundary faults (lost answers, crashed instances, agent
//!   crashes, cancellations, horizons passing, model repairs) or several.
//!
//! Then the fault schedule: partitions (symmetric, one-way, isolating or cutting off the
//! leader, a muted node), bursts of loss and delay over a background of them, crashes and
//! power failures (leader or not; the last unsynced write may be torn), a bit flipped in
//! one node's synced data (it recovers or refuses to start and stays down), clock jumps (which expire leases and horizons
//! mid-operation), one node's clock going wrong (its wall clock days ahead or hours back,
//! its oscillator drifting; the leader's, half the time), and a membership change under
//! load; every node's wall clock starts a little off the others'. After healing, every
//! client and agent finishes, and the run is verified: replicas identical, acknowledged
//! transitions present, one live attempt, committed never reverts, histories linearizable
//! per effect, and the providers' ground truth: no effect applied beyond its declared
//! multiplicity, every "done" an agent heard backed by a real mutation.
//!
//! - [`plan`]: what the seed decides; [`faults`]: carrying out the schedule.

pub mod faults;
pub mod plan;

use std::time::Duration;

use madsim::rand::{thread_rng, Rng};

use crate::actors::agent::{wait_all_finished, Agent};
use crate::actors::faults::Supervisor;
use crate::actors::{Final, Strategy};
use crate::bench::plan::episode;
use crate::bench::run::{register_world_tools, Launch};
use crate::check::Verdict;
use crate::fixtures::ClusterSettings;
use crate::scenario::{contending_clients, effects, keys, Run};
use crate::seeds::{RunOutcome, Scenario};
use crate::workload::Workload;
use crate::world::{check_world, World};
use plan::VoprPlan;

/// The scenario as the seed driver knows it: its fixed seeds and a random batch.
pub const SCENARIO: Scenario = Scenario {
    test_binary: "vopr",
    test_name: "random_faults_and_workloads_keep_every_invariant",
    default_seeds: &[1, 2, 3, 4, 5, 6, 7, 8],
};

/// How long the agents may take to finish once the faults are healed.
const AGENTS_TIMEOUT: Duration = Duration::from_secs(400);
/// How long the providers must be quiet before their state is final.
const QUIET: Duration = Duration::from_secs(20);

/// One randomized run.
pub async fn scenario() -> RunOutcome {
    let plan = VoprPlan::draw();
    let mut settings = ClusterSettings::new(plan.nodes);
    settings.spares = plan.spares;
    settings.raft.snapshot_after_logs = plan.snapshot_after_logs;
    settings.raft.logs_kept_after_snapshot = plan.snapshot_after_logs / 4;
    settings.clock_skew_ms_max = plan::CLOCK_SKEW_MS_MAX;
    settings.clock_offset_ms_max = plan.clock_offset_ms_max;
    settings.ledger_time_lead_ms_max = plan.ledger_time_lead_ms_max();
    settings.wall_clock_lead_ms_max = plan.wall_clock_lead_ms_max();
    let run = Run::begin(settings).await;
    run.trace.note(plan.describe());
    let cluster = run.cluster.clone();
    register_world_tools(&cluster).await;
    faults::set_network(plan.background);

    let shared = effects("v", plan.effects);
    let mut clients = contending_clients(&cluster.endpoints(), plan.clients, &shared);
    for client in &mut clients {
        client.vanish_percent = plan.vanish_percent;
    }
    let workload = Workload::start(&cluster, clients, &run.history, &run.provider);
    let world = World::new(cluster.client_node("providers"));
    let agents = start_agents(&plan, &cluster, &world);

    for (gap_ms, event) in &plan.events {
        tokio::time::sleep(Duration::from_millis(*gap_ms)).await;
        faults::inject(&cluster, event, plan.background).await;
    }
    faults::set_network(None);
    cluster.heal();
    run.trace.note("faults over; network clean");

    let stats = workload.finish().await;
    wait_all_finished(&agents.iter().collect::<Vec<_>>(), AGENTS_TIMEOUT).await;
    world.quiesce(QUIET).await;
    let reports: Vec<_> = agents.iter().flat_map(Agent::report).collect();
    let mut verified = run.verify(&stats, &keys(&shared), true).await;
    let mut verdict = Verdict::new();
    verdict.add(
        "providers' ground truth: multiplicity, real receipts",
        check_world(&world, &reports, verified.views[0].records.values(), true),
    );
    verdict.assert_holds();
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
    let refused: Vec<u64> = cluster
        .ids()
        .into_iter()
        .filter(|id| cluster.refused(*id).is_some())
        .collect();
    for id in &refused {
        let why = cluster.refused(*id).unwrap_or_default();
        cluster.trace().note(format!(
            "node {id} refused to start on its damaged disk: {why}"
        ));
    }
    let mutations = world.mutations().values().map(Vec::len).sum::<usize>();
    let outcome = &mut verified.outcome;
    outcome.summary.push_str(&format!(
        " nodes={} faults={} agents={} told={told:?} provider_mutations={mutations}",
        plan.nodes,
        plan.events.len(),
        plan.agents.len(),
    ));
    let mut count = |name: String, n: u64| *outcome.metrics.entry(name).or_default() += n;
    count(format!("cluster_{}_nodes", plan.nodes), 1);
    count(
        "background_loss_delay".into(),
        u64::from(plan.background.is_some()),
    );
    for (_, event) in &plan.events {
        count(format!("fault_{}", event.kind_name()), 1);
    }
    for t in told {
        count(format!("agent_intent_{t}"), 1);
    }
    count("provider_mutations".into(), mutations as u64);
    count("nodes_refused_damaged_disk".into(), refused.len() as u64);
    verified.outcome
}

/// Starts the plan's agents, each with two tool-server instances, on the ledger.
fn start_agents(plan: &VoprPlan, cluster: &crate::cluster::Cluster, world: &World) -> Vec<Agent> {
    let supervisor = Supervisor::start();
    let endpoints = cluster.endpoints();
    let machines = |name: &str| cluster.client_node(name);
    plan.agents
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let mut episode = episode(plan.agent_seed, spec.point, spec.kind, &format!("a{i}-"));
            for intent in &mut episode.intents {
                intent.slots = spec.slots;
            }
            episode.start_ms = thread_rng().gen_range(0..3_000);
            let launch = Launch {
                strategy: Strategy::Ledger(spec.key_mode),
                world,
                supervisor: &supervisor,
                endpoints: &endpoints,
                machines: &machines,
            };
            launch.start(&episode).0
        })
        .collect()
}
