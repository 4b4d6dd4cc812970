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

use crate::fixtures::ClusterSettings;
use crate::scenario::{contending_clients, effects, keys, Run};
use crate::seeds::{RunOutcome, Scenario};
use crate::workload::Workload;
use plan::VoprPlan;

/// The scenario as the seed driver knows it: its fixed seeds and a random batch.
pub const SCENARIO: Scenario = Scenario {
    test_binary: "vopr",
    test_name: "random_faults_and_workloads_keep_every_invariant",
    default_seeds: &[1, 2, 3, 4, 5, 6, 7, 8],
};

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
    let mut run = Run::begin(settings).await;
    run.trace.note(plan.describe());
    let cluster = run.cluster.clone();
    run.register_world_tools().await;
    faults::set_network(plan.background);

    let shared = effects("v", plan.effects);
    let mut clients = contending_clients(&cluster.endpoints(), plan.clients, &shared);
    for client in &mut clients {
        client.vanish_percent = plan.vanish_percent;
    }
    let workload = Workload::start(&cluster, clients, &run.history, &run.provider);
    run.start_agents(&plan.agents, plan.agent_seed).await;

    for (gap_ms, event) in &plan.events {
        tokio::time::sleep(Duration::from_millis(*gap_ms)).await;
        faults::inject(&cluster, event, plan.background).await;
    }
    faults::set_network(None);
    cluster.heal();
    run.trace.note("faults over; network clean");

    let stats = workload.finish().await;
    let mut verified = run.verify(&stats, &keys(&shared), true).await;
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
    let outcome = &mut verified.outcome;
    outcome.summary.push_str(&format!(
        " nodes={} faults={}",
        plan.nodes,
        plan.events.len(),
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
    count("nodes_refused_damaged_disk".into(), refused.len() as u64);
    verified.outcome
}
