//! Scenario: three tool-server instances built on `ledger-client`'s `EffectRunner` (its
//! claim loop, heartbeats, waits and provider reconciliation) settle shared effects while
//! the leader is isolated and replaced, one instance's machine crashes mid-run and comes
//! back under a new holder name, and a follower loses power. Leases are short (1.5 s), so
//! an answer held up while the old leader is cut off can arrive after the lease it grants
//! has run out. The provider's ground truth must show no effect executed twice and every
//! effect committed, with the receipts the instances were given.

#![cfg(madsim)]

use std::time::Duration;

use madsim::rand::{seq::SliceRandom, thread_rng, Rng};

use ledger_sim_tests::cluster::ClientNode;
use ledger_sim_tests::fixtures::ClusterSettings;
use ledger_sim_tests::runner::start_instance;
use ledger_sim_tests::scenario::{effects, keys, Run, GIVE_UP_AFTER};
use ledger_sim_tests::seeds::{self, RunOutcome, Scenario};
use ledger_sim_tests::sim_elapsed;

const SCENARIO: Scenario = Scenario {
    test_binary: "effect_runner_failover",
    test_name: "effect_runner_never_dispatches_an_effect_twice_across_failovers",
    default_seeds: &[1, 2, 3],
};

#[test]
fn effect_runner_never_dispatches_an_effect_twice_across_failovers() {
    seeds::run(&SCENARIO, scenario);
}

async fn scenario() -> RunOutcome {
    let run = Run::begin(ClusterSettings::new(3)).await;
    let cluster = run.cluster.clone();
    let effects = effects("runner", 18);
    let machines: Vec<ClientNode> = (0..3)
        .map(|i| cluster.client_node(&format!("server-{i}")))
        .collect();
    let start = |machine: &ClientNode, holder: &str| {
        start_instance(
            machine,
            &cluster,
            holder,
            effects.clone(),
            GIVE_UP_AFTER,
            &run.history,
            &run.provider,
        )
    };
    let mut instances: Vec<_> = machines.iter().map(|m| start(m, &m.name)).collect();

    let warmup = thread_rng().gen_range(1..6);
    run.answers_since(warmup, Duration::ZERO, None, Duration::from_secs(60))
        .await;
    let old = run.leader(Duration::from_secs(10)).await;
    cluster.isolate(old);
    let majority: Vec<u64> = cluster.ids().into_iter().filter(|id| *id != old).collect();
    let new = cluster
        .wait_for_leader(&majority, Duration::from_secs(15))
        .await
        .unwrap_or_else(|e| panic!("the majority elected no leader: {e}"));
    run.trace.note(format!("node {new} leads the majority"));
    run.answers_since(1, sim_elapsed(), None, Duration::from_secs(60))
        .await;
    // Long enough that answers held up on the old leader's links outlive their leases.
    let hold_ms = thread_rng().gen_range(1_000..6_000);
    tokio::time::sleep(Duration::from_millis(hold_ms)).await;
    cluster.reconnect(old);

    let victim = thread_rng().gen_range(0..machines.len());
    let crash_after_ms = thread_rng().gen_range(0..2_000);
    tokio::time::sleep(Duration::from_millis(crash_after_ms)).await;
    cluster.kill_client(&machines[victim]);
    let down_ms = thread_rng().gen_range(500..3_000);
    tokio::time::sleep(Duration::from_millis(down_ms)).await;
    let restarted = cluster.restart_client(&machines[victim]);
    instances[victim] = start(&restarted, &format!("{}-restarted", restarted.name));

    let leader = run.leader(Duration::from_secs(15)).await;
    let followers: Vec<u64> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != leader)
        .collect();
    let follower = *followers.choose(&mut thread_rng()).expect("two followers");
    cluster.power_fail(follower);
    run.answers_since(1, sim_elapsed(), None, Duration::from_secs(60))
        .await;
    cluster.restart(follower);

    let mut stats = Vec::new();
    for instance in instances {
        stats.push(instance.await.expect("a running instance finishes"));
    }
    run.verify(&stats, &keys(&effects), true).await.outcome
}
