//! Regression: a grant that reaches its holder after its lease ran out must never be
//! dispatched.
//!
//! Tool server A runs an unkeyed effect with `EffectRunner`, but every answer from the
//! cluster to A is held on the way back (a one-way partition): its claim is applied, and
//! its retries with the same command id are answered with the same grant, none of which
//! reaches it. The lease runs out and the leader's sweeper makes the effect unknown on
//! every replica. Tool server B then runs the same effect: it reconciles (the provider has
//! nothing), dispatches and commits. When A's answers are released, A holds a grant whose
//! lease ended seconds ago; dispatching it executes the effect a second time at a provider
//! that cannot deduplicate. The simulator found this in `effect_runner_failover` (an
//! answer held on an isolated leader's links); this test reproduces it on every seed.

#![cfg(madsim)]

use std::time::Duration;

use ledger_client::{
    DispatchResult, EffectCall, EffectOutcome, EffectRunner, RunError, RunOptions,
};
use ledger_core::AttemptOutcome;
use ledger_sim_tests::cluster::Cluster;
use ledger_sim_tests::fixtures::{declaration, effect_key, ClusterSettings, ToolKind, TENANT_KEY};
use ledger_sim_tests::history::Answer;
use ledger_sim_tests::provider::Provider;
use ledger_sim_tests::scenario::Run;
use ledger_sim_tests::seeds::{self, RunOutcome, Scenario};
use ledger_sim_tests::wait;

const SCENARIO: Scenario = Scenario {
    test_binary: "stale_grant",
    test_name: "effect_runner_does_not_dispatch_a_grant_whose_lease_ran_out",
    default_seeds: &[1, 2, 3],
};

const EFFECT: &str = "stale-grant";
const LEASE_MS: u64 = 1_500;

#[test]
fn effect_runner_does_not_dispatch_a_grant_whose_lease_ran_out() {
    seeds::run(&SCENARIO, scenario);
}

fn runner(cluster: &Cluster, holder: &str) -> EffectRunner {
    let options = RunOptions {
        lease_ms: LEASE_MS,
        ..RunOptions::default()
    };
    EffectRunner::new(cluster.client(cluster.endpoints(), TENANT_KEY), holder).with_options(options)
}

/// Runs the effect once; every dispatch reaches the provider and commits.
async fn run_effect(runner: EffectRunner, provider: Provider) -> Result<EffectOutcome, RunError> {
    let call = EffectCall {
        declaration: declaration(EFFECT, ToolKind::Unkeyed),
        confirmation: None,
    };
    let adapter = provider.lookup();
    runner
        .effect(call)
        .reconcile_with(&adapter)
        .run(move |attempt| {
            let receipt = provider.send(&attempt.provider_key, false);
            async move { DispatchResult::Committed { receipt } }
        })
        .await
}

async fn scenario() -> RunOutcome {
    let run = Run::begin(ClusterSettings::new(3)).await;
    let cluster = run.cluster.clone();
    let key = effect_key(EFFECT);
    let (a, b) = (
        cluster.client_node("server-a"),
        cluster.client_node("server-b"),
    );

    cluster.hold_answers_to(&a);
    let late = a.spawn(run_effect(
        runner(&cluster, "server-a"),
        run.provider.clone(),
    ));
    wait::until(
        "A's unanswered attempt expired on every replica",
        Duration::from_secs(20),
        || {
            let views = cluster.views();
            let expired = views
                .iter()
                .filter(|v| {
                    let first = v.records.get(&key).and_then(|r| r.attempts.first());
                    first.is_some_and(|a| a.outcome == Some(AttemptOutcome::LeaseExpired))
                })
                .count();
            if expired == cluster.ids().len() {
                Ok(())
            } else {
                Err(format!(
                    "expired on {expired} of {} running replicas",
                    views.len()
                ))
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    run.trace
        .note("A's attempt expired without A hearing of it");

    let settled = b
        .spawn(run_effect(
            runner(&cluster, "server-b"),
            run.provider.clone(),
        ))
        .await
        .expect("B's machine runs");
    let Ok(EffectOutcome::Done { receipt }) = settled else {
        panic!("B's run on the expired effect ended {settled:?}, not done");
    };
    run.history.record(
        "server-b",
        &key,
        Answer::Replayed {
            receipt: receipt.clone(),
        },
    );
    run.trace.note("B reconciled, dispatched and committed");

    cluster.release_answers_to(&a);
    let outcome = tokio::time::timeout(Duration::from_secs(60), late)
        .await
        .expect("A's run ends once its answers arrive")
        .expect("A's machine runs");
    run.trace.note(format!("A's run ended {outcome:?}"));
    // A's claim (one command id, so every retry is answered with the same grant) came
    // back with the late grant; A did not use it and was answered with B's result. An A
    // that gave up before its answers were released would end in an error, never having
    // held the grant, and the run would prove nothing about it.
    match &outcome {
        Ok(EffectOutcome::Replayed { receipt: replayed }) => assert_eq!(replayed, &receipt),
        other => panic!("A's run ended {other:?}, not with B's result replayed"),
    }
    let executions = run
        .provider
        .effects()
        .get(&key.provider_key())
        .map_or(0, |e| e.executions);
    assert_eq!(
        executions, 1,
        "the provider executed {key} {executions} times: A dispatched a grant whose lease \
         had run out, after B had reconciled and dispatched"
    );
    run.verify(&[], &[key], true).await.outcome
}
