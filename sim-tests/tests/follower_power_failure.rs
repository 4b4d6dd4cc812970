//! Scenario: three nodes under a contending workload; twice, a follower loses power
//! (killed, its unsynced writes dropped by `SimDisk::power_fail`), stays down while the
//! other two keep answering, then restarts on what its disk kept and catches up, by log
//! or, when the leader has compacted past it, by snapshot installation. Afterwards every
//! answer any client received is present on every node, the restarted followers included,
//! and the agents that ran on the shipped `EffectRunner` through the same failures
//! (`Run::start_drawn_agents`) had no effect applied beyond its declared multiplicity.

#![cfg(madsim)]

use std::time::Duration;

use madsim::rand::{seq::SliceRandom, thread_rng, Rng};

use ledger_sim_tests::fixtures::ClusterSettings;
use ledger_sim_tests::scenario::{contending_clients, effects, keys, Run, AGENTS, AGENTS_WAIT};
use ledger_sim_tests::seeds::{self, RunOutcome, Scenario};
use ledger_sim_tests::workload::Workload;
use ledger_sim_tests::{sim_elapsed, wait};

const SCENARIO: Scenario = Scenario {
    test_binary: "follower_power_failure",
    test_name: "follower_losing_power_catches_up_and_no_acknowledged_transition_is_lost",
    default_seeds: &[1, 2, 3],
};

#[test]
fn follower_losing_power_catches_up_and_no_acknowledged_transition_is_lost() {
    seeds::run(&SCENARIO, scenario);
}

async fn scenario() -> RunOutcome {
    let mut settings = ClusterSettings::new(3);
    // Compact often, so a follower that was down must usually be sent a snapshot.
    settings.raft.snapshot_after_logs = 20;
    settings.raft.logs_kept_after_snapshot = 4;
    let mut run = Run::begin(settings).await;
    let cluster = run.cluster.clone();
    run.start_drawn_agents(AGENTS).await;
    let effects = effects("pf", 30);
    let plans = contending_clients(&cluster.endpoints(), 3, &effects);
    let workload = Workload::start(&cluster, plans, &run.history, &run.provider);

    for _ in 0..2 {
        let warmup = thread_rng().gen_range(5..20);
        run.answers_since(warmup, sim_elapsed(), None, Duration::from_secs(30))
            .await;
        let leader = run.leader(Duration::from_secs(15)).await;
        let followers: Vec<u64> = cluster
            .ids()
            .into_iter()
            .filter(|id| *id != leader)
            .collect();
        let victim = *followers.choose(&mut thread_rng()).expect("two followers");
        // Cut at a random point between two answers, not right after one.
        let jitter_ms = thread_rng().gen_range(0..150);
        tokio::time::sleep(Duration::from_millis(jitter_ms)).await;
        let applied_before = cluster.applied_index(victim).unwrap_or(0);
        run.await_agents("at the power failure", AGENTS_WAIT).await;
        cluster.power_fail(victim);
        let down_at = sim_elapsed();
        let while_down = thread_rng().gen_range(10..40);
        run.answers_since(while_down, down_at, None, Duration::from_secs(60))
            .await;
        let target = cluster
            .applied_index(leader)
            .expect("the leader keeps running");
        cluster.restart(victim);
        let caught_up = wait::until(
            &format!("node {victim} catching up to index {target}"),
            Duration::from_secs(30),
            || match cluster.applied_index(victim) {
                Some(i) if i >= target => Ok(i),
                other => Err(format!("node {victim} at {other:?}")),
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        run.trace.note(format!(
            "node {victim} caught up: index {applied_before} before the failure, \
             {target} reached by the others meanwhile, {caught_up} now"
        ));
    }

    let stats = workload.finish().await;
    run.verify(&stats, &keys(&effects), true).await.outcome
}
