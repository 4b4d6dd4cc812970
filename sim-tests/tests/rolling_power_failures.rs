//! Scenario: three nodes on a slow, lossy network (every message takes 1 to 60 ms and one
//! in twenty-five is lost: a lost connection attempt is refused, a lost message on a
//! connection is retransmitted later) lose power one after another, four times, each time
//! any node, the leader included. A node stays down while the
//! other two keep answering, restarts on what its disk kept, and catches up before the
//! next one fails. Finally all three lose power at once. Whatever failed after an answer
//! was given, that answer must hold on every replica at the end: an answer is only given
//! once the transition is synced on a majority. Agents on the shipped `EffectRunner` run
//! through the same failures (`Run::start_drawn_agents`), and no provider applies one of
//! their effects beyond its declared multiplicity.
//!
//! (madsim's buggify is not used for the delays: madsim 0.2.34 draws its 1 to 5 s delay in
//! `Endpoint::accept1`, which madsim-tonic's server calls in its one serial accept loop,
//! so every simulated gRPC server would stall for seconds at a time: an artefact of the
//! simulator, not a network condition.)

#![cfg(madsim)]

use std::time::Duration;

use madsim::net::NetSim;
use madsim::rand::{seq::SliceRandom, thread_rng, Rng};

use ledger_sim_tests::fixtures::ClusterSettings;
use ledger_sim_tests::scenario::{contending_clients, effects, keys, Run, AGENTS, AGENTS_WAIT};
use ledger_sim_tests::seeds::{self, RunOutcome, Scenario};
use ledger_sim_tests::{sim_elapsed, wait};

use ledger_sim_tests::workload::Workload;

const SCENARIO: Scenario = Scenario {
    test_binary: "rolling_power_failures",
    test_name: "answers_survive_power_failures_of_any_node_on_a_lossy_network",
    default_seeds: &[1, 2, 3],
};

const ROUNDS: usize = 4;

#[test]
fn answers_survive_power_failures_of_any_node_on_a_lossy_network() {
    seeds::run(&SCENARIO, scenario);
}

async fn scenario() -> RunOutcome {
    let mut settings = ClusterSettings::new(3);
    settings.raft.snapshot_after_logs = 16;
    settings.raft.logs_kept_after_snapshot = 4;
    let mut run = Run::begin(settings).await;
    NetSim::current().update_config(|net| {
        net.send_latency = Duration::from_millis(1)..Duration::from_millis(60);
        net.packet_loss_rate = 0.04;
    });
    run.trace.note("network made slow and lossy");
    let cluster = run.cluster.clone();
    run.start_drawn_agents(AGENTS).await;
    let effects = effects("roll", 30);
    let plans = contending_clients(&cluster.endpoints(), 3, &effects);
    let workload = Workload::start(&cluster, plans, &run.history, &run.provider);

    for _ in 0..ROUNDS {
        let answers = thread_rng().gen_range(5..25);
        run.answers_since(answers, sim_elapsed(), None, Duration::from_secs(120))
            .await;
        let jitter_ms = thread_rng().gen_range(0..200);
        tokio::time::sleep(Duration::from_millis(jitter_ms)).await;
        let victim = *cluster
            .ids()
            .choose(&mut thread_rng())
            .expect("three nodes");
        let was_leader = cluster.node(victim).is_some_and(|n| n.raft.is_leader());
        run.await_agents("at the power failure", AGENTS_WAIT).await;
        cluster.power_fail(victim);
        let down_at = sim_elapsed();
        let survivors: Vec<u64> = cluster
            .ids()
            .into_iter()
            .filter(|id| *id != victim)
            .collect();
        let leader = cluster
            .wait_for_leader(&survivors, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("the two survivors elected no leader: {e}"));
        run.trace.note(format!(
            "node {victim} (leader: {was_leader}) is down; node {leader} leads"
        ));
        let while_down = thread_rng().gen_range(3..15);
        run.answers_since(while_down, down_at, None, Duration::from_secs(120))
            .await;
        cluster.restart(victim);
        let target = cluster.applied_index(leader).unwrap_or(0);
        wait::until(
            &format!("node {victim} catching up to index {target}"),
            Duration::from_secs(60),
            || match cluster.applied_index(victim) {
                Some(i) if i >= target => Ok(i),
                other => Err(format!("node {victim} at {other:?}")),
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        run.trace
            .note(format!("node {victim} caught up to {target}"));
    }

    // Then every node loses power at once, as in a data-centre outage: only what was
    // synced survives anywhere, and every answer given must be among it.
    let answers = thread_rng().gen_range(5..25);
    run.answers_since(answers, sim_elapsed(), None, Duration::from_secs(120))
        .await;
    for id in cluster.ids() {
        cluster.power_fail(id);
    }
    let outage_ms = thread_rng().gen_range(100..3_000);
    tokio::time::sleep(Duration::from_millis(outage_ms)).await;
    for id in cluster.ids() {
        cluster.restart(id);
    }
    let leader = run.leader(Duration::from_secs(60)).await;
    run.trace
        .note(format!("after the outage node {leader} leads"));

    let stats = workload.finish().await;
    run.verify(&stats, &keys(&effects), true).await.outcome
}
