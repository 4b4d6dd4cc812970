//! Scenario: five nodes; the leader is cut off from the other four ledger nodes (clients
//! can still reach it) and, at the same moment, a follower crashes. Three of five remain
//! connected and running: a majority, which elects a leader and keeps answering the
//! workload's clients. A client that can only reach the old leader keeps asking it to
//! claim effects: the old leader, a minority of one, must never answer it with an
//! outcome and must apply nothing while cut off, though it may append what it cannot
//! commit. Then the links are restored and the follower restarts; the minority client's
//! commands (re-sent with the same command ids) are applied once, and everything
//! converges and checks out, including the providers of the agents that run on the
//! shipped `EffectRunner` through the same faults (`Run::start_drawn_agents`).

#![cfg(madsim)]

use std::time::Duration;

use madsim::rand::{seq::SliceRandom, thread_rng, Rng};

use ledger_sim_tests::fixtures::{node_addr, ClusterSettings};
use ledger_sim_tests::scenario::{
    contending_clients, effects, keys, Run, AGENTS, AGENTS_WAIT, GIVE_UP_AFTER,
};
use ledger_sim_tests::seeds::{self, RunOutcome, Scenario};
use ledger_sim_tests::sim_elapsed;
use ledger_sim_tests::workload::{ClientPlan, Workload};

const SCENARIO: Scenario = Scenario {
    test_binary: "five_node_partition",
    test_name: "minority_leader_cannot_commit_while_the_majority_does",
    default_seeds: &[1, 2, 3],
};

/// After the cut, messages already on the wire may still arrive (at most 10 ms latency).
const IN_FLIGHT_GRACE: Duration = Duration::from_millis(100);
/// The minority client's name.
const MINORITY: &str = "minority-client";

#[test]
fn minority_leader_cannot_commit_while_the_majority_does() {
    seeds::run(&SCENARIO, scenario);
}

async fn scenario() -> RunOutcome {
    let mut run = Run::begin(ClusterSettings::new(5)).await;
    let cluster = run.cluster.clone();
    run.start_drawn_agents(AGENTS).await;
    let shared = effects("p5", 24);
    let plans = contending_clients(&cluster.endpoints(), 3, &shared);
    let workload = Workload::start(&cluster, plans, &run.history, &run.provider);

    let warmup = thread_rng().gen_range(3..20);
    run.answers_since(warmup, Duration::ZERO, None, Duration::from_secs(30))
        .await;
    run.await_agents("when the leader is cut off", AGENTS_WAIT)
        .await;
    let old = run.leader(Duration::from_secs(10)).await;
    let followers: Vec<u64> = cluster.ids().into_iter().filter(|id| *id != old).collect();
    let crashed = *followers.choose(&mut thread_rng()).expect("four followers");
    let cut_at = sim_elapsed();
    cluster.cut_from_peers(old);
    cluster.crash(crashed);

    let majority: Vec<u64> = followers
        .iter()
        .copied()
        .filter(|id| *id != crashed)
        .collect();
    let new = cluster
        .wait_for_leader(&majority, Duration::from_secs(15))
        .await
        .unwrap_or_else(|e| panic!("the connected majority {majority:?} elected no leader: {e}"));
    run.trace
        .note(format!("node {new} leads the majority {majority:?}"));

    tokio::time::sleep(IN_FLIGHT_GRACE).await;
    let status_after_cut = cluster.status(old).await.unwrap_or_else(|e| panic!("{e}"));
    let minority_from = sim_elapsed();
    let minority_effects = effects("minority", 3);
    let minority_plan = ClientPlan {
        name: MINORITY.into(),
        endpoints: vec![node_addr(old).to_string()],
        effects: minority_effects.clone(),
        vanish_percent: 0,
        give_up_after: GIVE_UP_AFTER,
        think_ms_max: 100,
        open_ended: false,
    };
    let minority = Workload::start(&cluster, vec![minority_plan], &run.history, &run.provider);

    run.answers_since(5, sim_elapsed(), Some(MINORITY), Duration::from_secs(30))
        .await;
    run.trace.note("the majority answers clients");
    let hold_ms = thread_rng().gen_range(3_000..8_000);
    tokio::time::sleep(Duration::from_millis(hold_ms)).await;
    let status_before_heal = cluster.status(old).await.unwrap_or_else(|e| panic!("{e}"));
    let healed_at = sim_elapsed();
    cluster.mend_links(old);
    cluster.restart(crashed);

    let minority_answers = run.history.count_for(MINORITY, minority_from, healed_at);
    assert_eq!(
        minority_answers, 0,
        "the cut-off old leader {old} answered the minority client {minority_answers} times"
    );
    run.trace.note(format!(
        "old leader {old} while cut off: role {} -> {}, last log index {:?} -> {:?}, \
         committed {:?} -> {:?}",
        status_after_cut.role,
        status_before_heal.role,
        status_after_cut.last_log_index,
        status_before_heal.last_log_index,
        status_after_cut.committed_index,
        status_before_heal.committed_index,
    ));
    assert_eq!(
        status_after_cut.committed_index, status_before_heal.committed_index,
        "the cut-off old leader {old} advanced its commit index"
    );

    let mut stats = workload.finish().await;
    stats.extend(minority.finish().await);
    let all_effects: Vec<_> = shared.iter().chain(&minority_effects).cloned().collect();
    let verified = run.verify(&stats, &keys(&all_effects), true).await;
    let moves = verified
        .log
        .moves_between(old, cut_at + IN_FLIGHT_GRACE, healed_at);
    assert!(
        moves.is_empty(),
        "the cut-off old leader {old} applied entries while in the minority: {moves:?}"
    );
    verified.outcome
}
