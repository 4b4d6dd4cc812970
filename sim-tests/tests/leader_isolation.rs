//! Scenario: three nodes; while clients claim, dispatch and report shared effects, the
//! leader is cut off from everyone (madsim `clog_node`). The other two elect a new leader
//! and clients' answers resume through it; the old leader, alone, applies nothing. Then
//! the old leader is reconnected and every replica converges to the same ledger, with
//! every answer clients received present on every node and the provider's ground truth
//! matching the ledger (no effect executed twice). Agents on the shipped `EffectRunner`
//! run through the same cut (`Run::start_drawn_agents`), and no provider applies one of
//! their effects beyond its declared multiplicity.

#![cfg(madsim)]

use std::time::Duration;

use madsim::rand::{thread_rng, Rng};

use ledger_sim_tests::fixtures::ClusterSettings;
use ledger_sim_tests::scenario::{contending_clients, effects, keys, Run, AGENTS, AGENTS_WAIT};
use ledger_sim_tests::seeds::{self, RunOutcome, Scenario};
use ledger_sim_tests::sim_elapsed;
use ledger_sim_tests::workload::Workload;

const SCENARIO: Scenario = Scenario {
    test_binary: "leader_isolation",
    test_name: "isolated_leader_is_replaced_and_no_acknowledged_transition_is_lost",
    default_seeds: &[1, 2, 3],
};

/// After the cut, messages already on the wire may still arrive (at most 10 ms latency).
const IN_FLIGHT_GRACE: Duration = Duration::from_millis(100);

#[test]
fn isolated_leader_is_replaced_and_no_acknowledged_transition_is_lost() {
    seeds::run(&SCENARIO, scenario);
}

async fn scenario() -> RunOutcome {
    let mut run = Run::begin(ClusterSettings::new(3)).await;
    let cluster = run.cluster.clone();
    run.start_drawn_agents(AGENTS).await;
    let effects = effects("iso", 24);
    let plans = contending_clients(&cluster.endpoints(), 3, &effects);
    let workload = Workload::start(&cluster, plans, &run.history, &run.provider);

    let warmup = thread_rng().gen_range(3..20);
    run.answers_since(warmup, Duration::ZERO, None, Duration::from_secs(30))
        .await;
    run.await_agents("when the leader is cut off", AGENTS_WAIT)
        .await;
    let old = run.leader(Duration::from_secs(10)).await;
    let isolated_at = sim_elapsed();
    cluster.isolate(old);
    let majority: Vec<u64> = cluster.ids().into_iter().filter(|id| *id != old).collect();
    let new = cluster
        .wait_for_leader(&majority, Duration::from_secs(15))
        .await
        .unwrap_or_else(|e| panic!("the majority elected no leader: {e}"));
    run.trace.note(format!("node {new} leads the majority"));
    run.answers_since(5, sim_elapsed(), None, Duration::from_secs(30))
        .await;
    run.trace.note("answers resumed through the new leader");
    let hold_ms = thread_rng().gen_range(0..3_000);
    tokio::time::sleep(Duration::from_millis(hold_ms)).await;
    let healed_at = sim_elapsed();
    cluster.reconnect(old);

    let stats = workload.finish().await;
    let verified = run.verify(&stats, &keys(&effects), true).await;
    let moves = verified
        .log
        .moves_between(old, isolated_at + IN_FLIGHT_GRACE, healed_at);
    assert!(
        moves.is_empty(),
        "the isolated old leader {old} applied entries while cut off: {moves:?}"
    );
    verified.outcome
}
