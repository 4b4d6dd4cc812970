//! Scenario: a holder claims two effects of the unkeyed tool and vanishes (its machine is
//! killed) without reporting: effect A after sending it to the provider, effect B before.
//! A's short lease runs out as simulated time passes; B's long lease is overtaken by a
//! clock jump: `madsim::time::advance` moves the one simulated clock, which every node
//! reads through `SystemTime`/`Instant`, five minutes forward at once (madsim 0.2.34 has a
//! single clock per runtime, so a jump of the leader's clock alone cannot be simulated;
//! the ledger only ever sees the leader's stamps, which jump with it).
//!
//! Just before A's lease runs out, a competing claim must still answer `in_flight`.
//! Both times the leader's sweeper must turn the `in_progress` record into
//! `unknown_after_dispatch` on every replica, and only once the lease has run out; a new
//! claim then answers `reconcile`, never `proceed`. Reconciliation settles A as committed
//! (the provider has it) and B as not committed, after which B is dispatched again. When
//! the old holder comes back, its report that A committed is taken (a fact is a fact),
//! its attempt to fail B with its stale token is refused, and its claim on B replays the
//! receipt instead of winning a grant.
//!
//! Agents on the shipped `EffectRunner` start beside the holder
//! (`Run::start_drawn_agents`), and the jump waits up to 3 s for one to be mid-episode
//! (the trace counts them): for those, their runners' leases, the agents' timeouts and
//! the providers' horizons pass at once. No provider applies one of their effects beyond
//! its declared multiplicity.

#![cfg(madsim)]

use std::time::Duration;

use ledger_client::{ClientError, LedgerClient};
use ledger_core::{AttemptOutcome, ClaimOutcome, EffectKey, EffectState, Grant, Refusal, Report};
use ledger_sim_tests::cluster::Cluster;
use ledger_sim_tests::fixtures::{declaration, effect_key, ClusterSettings, ToolKind, TENANT_KEY};
use ledger_sim_tests::history::Answer;
use ledger_sim_tests::replica::ReplicaView;
use ledger_sim_tests::scenario::{Run, AGENTS, AGENTS_WAIT};
use ledger_sim_tests::seeds::{self, RunOutcome, Scenario};
use ledger_sim_tests::wait;
use ledger_sim_tests::workload::{wall_clock_ms, ClientPlan, Workload};

const SCENARIO: Scenario = Scenario {
    test_binary: "lease_expiry",
    test_name: "expired_lease_becomes_unknown_on_every_replica_and_claims_must_reconcile",
    default_seeds: &[1, 2, 3],
};

const EFFECT_A: &str = "lease-a";
const EFFECT_B: &str = "lease-b";
const LEASE_A_MS: u64 = 2_000;
const LEASE_B_MS: u64 = 60_000;
const CLOCK_JUMP: Duration = Duration::from_secs(300);
/// How long before A's lease runs out a competing claim probes it.
const LIVE_PROBE_BEFORE_MS: u64 = 500;
/// How long after its lease (or the jump) an expiry may take to reach every replica.
const EXPIRY_TIMEOUT: Duration = Duration::from_secs(10);
const HOLDER: &str = "vanishing-holder";

#[test]
fn expired_lease_becomes_unknown_on_every_replica_and_claims_must_reconcile() {
    seeds::run(&SCENARIO, scenario);
}

async fn claim(
    client: &LedgerClient,
    command_id: &str,
    effect: &str,
    lease_ms: u64,
) -> ClaimOutcome {
    let declaration = declaration(effect, ToolKind::Unkeyed);
    client
        .claim(command_id, declaration, HOLDER, Some(lease_ms), None)
        .await
        .unwrap_or_else(|e| panic!("claim {command_id} on {effect}: {e}"))
}

fn proceed(outcome: ClaimOutcome) -> Grant {
    match outcome {
        ClaimOutcome::Proceed(grant) => grant,
        other => panic!("a first claim answered {other:?}, not proceed"),
    }
}

/// Waits until every replica shows the attempt with `token` closed by lease expiry and
/// the record unknown; returns the views.
async fn wait_expired_everywhere(
    cluster: &Cluster,
    key: &EffectKey,
    token: u64,
    timeout: Duration,
) -> Vec<ReplicaView> {
    let what = format!("{key} expired on every replica");
    wait::until(&what, timeout, || {
        let views = cluster.views();
        let pending: Vec<String> = views
            .iter()
            .filter_map(|v| {
                let record = v.records.get(key)?;
                let expired = record.state == EffectState::UnknownAfterDispatch
                    && record
                        .attempt_by_token(token)
                        .and_then(|a| a.outcome.clone())
                        == Some(AttemptOutcome::LeaseExpired);
                (!expired).then(|| format!("node {}: {}", v.node, record.state))
            })
            .collect();
        if views.len() == cluster.ids().len() && pending.is_empty() {
            Ok(views)
        } else {
            Err(format!(
                "{} nodes running, not yet: {pending:?}",
                views.len()
            ))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Asserts that no replica turned the record unknown before its lease ran out.
fn assert_expired_after_lease(views: &[ReplicaView], key: &EffectKey, grant: &Grant) {
    for view in views {
        let record = &view.records[key];
        assert!(
            record.updated_at_ms >= grant.lease_until_ms,
            "node {} expired {key} at ledger time {}, before its lease ran to {}",
            view.node,
            record.updated_at_ms,
            grant.lease_until_ms
        );
    }
}

async fn scenario() -> RunOutcome {
    let mut run = Run::begin(ClusterSettings::new(3)).await;
    let cluster = run.cluster.clone();
    run.start_drawn_agents(AGENTS).await;
    let (key_a, key_b) = (effect_key(EFFECT_A), effect_key(EFFECT_B));

    let holder = cluster.client_node(HOLDER);
    let client = cluster.client(cluster.endpoints(), TENANT_KEY);
    let provider = run.provider.clone();
    let (grant_a, grant_b) = holder
        .spawn(async move {
            let grant_a = proceed(claim(&client, "holder-1", EFFECT_A, LEASE_A_MS).await);
            provider.send(&grant_a.provider_key, false);
            let grant_b = proceed(claim(&client, "holder-2", EFFECT_B, LEASE_B_MS).await);
            (grant_a, grant_b)
        })
        .await
        .expect("the holder machine runs");
    for (key, grant) in [(&key_a, &grant_a), (&key_b, &grant_b)] {
        let answer = Answer::Granted {
            holder: HOLDER.into(),
            grant: grant.clone(),
        };
        run.history.record(HOLDER, key, answer);
    }
    cluster.kill_client(&holder);

    // Just before A's lease runs out the attempt is still live: a competing claim must
    // wait (in_flight), not reconcile and not proceed.
    let reconciler = cluster.client_node("reconciler");
    let probe_at_ms = grant_a.lease_until_ms - LIVE_PROBE_BEFORE_MS;
    let until_probe_ms = probe_at_ms.saturating_sub(wall_clock_ms());
    tokio::time::sleep(Duration::from_millis(until_probe_ms)).await;
    let client = cluster.client(cluster.endpoints(), TENANT_KEY);
    let probe = reconciler
        .spawn(async move { claim(&client, "probe-0", EFFECT_A, LEASE_A_MS).await })
        .await
        .expect("the reconciler machine runs");
    let ClaimOutcome::InFlight {
        holder: in_flight_holder,
        attempt_id,
        ..
    } = probe
    else {
        panic!(
            "a claim on A {LIVE_PROBE_BEFORE_MS} ms before its lease ran out answered {probe:?}"
        );
    };
    let answer = Answer::InFlight {
        holder: in_flight_holder,
        attempt_id,
    };
    run.history.record("reconciler", &key_a, answer);

    let lease_a_left =
        Duration::from_millis(grant_a.lease_until_ms.saturating_sub(wall_clock_ms()));
    let views = wait_expired_everywhere(
        &cluster,
        &key_a,
        grant_a.fencing_token,
        lease_a_left + EXPIRY_TIMEOUT,
    )
    .await;
    assert_expired_after_lease(&views, &key_a, &grant_a);
    run.trace.note("A expired on every replica as time passed");

    let lease_b_left_ms = grant_b.lease_until_ms.saturating_sub(wall_clock_ms());
    assert!(
        Duration::from_millis(lease_b_left_ms) > EXPIRY_TIMEOUT,
        "B's lease must outlast the expiry wait, so that only the jump can expire it"
    );
    for view in cluster.views() {
        let state = view.records[&key_b].state;
        assert_eq!(
            state,
            EffectState::InProgress,
            "node {}: B before the jump",
            view.node
        );
    }
    run.await_agents("at the clock jump", AGENTS_WAIT).await;
    madsim::time::advance(CLOCK_JUMP);
    run.trace
        .note(format!("every clock jumped {CLOCK_JUMP:?} forward"));
    let views =
        wait_expired_everywhere(&cluster, &key_b, grant_b.fencing_token, EXPIRY_TIMEOUT).await;
    assert_expired_after_lease(&views, &key_b, &grant_b);
    run.trace.note("B expired on every replica after the jump");
    let leader = run.leader(EXPIRY_TIMEOUT).await;
    run.trace
        .note(format!("leader after the jump: node {leader}"));

    let client = cluster.client(cluster.endpoints(), TENANT_KEY);
    let outcomes = reconciler
        .spawn(async move {
            let a = claim(&client, "probe-1", EFFECT_A, LEASE_A_MS).await;
            let b = claim(&client, "probe-2", EFFECT_B, LEASE_A_MS).await;
            [a, b]
        })
        .await
        .expect("the reconciler machine runs");
    for (key, outcome) in [&key_a, &key_b].into_iter().zip(outcomes) {
        let (ClaimOutcome::Reconcile(_), Some(answer)) =
            (&outcome, Answer::of_claim("reconciler", &outcome))
        else {
            panic!("a claim on expired {key} answered {outcome:?}, not reconcile");
        };
        run.history.record("reconciler", key, answer);
    }
    run.trace.note("new claims on A and B answered reconcile");

    let plan = ClientPlan {
        name: "reconciler".into(),
        endpoints: cluster.endpoints(),
        effects: vec![
            (EFFECT_A.to_string(), ToolKind::Unkeyed),
            (EFFECT_B.to_string(), ToolKind::Unkeyed),
        ],
        vanish_percent: 0,
        give_up_after: Duration::from_secs(120),
        think_ms_max: 0,
        open_ended: false,
    };
    let settle = Workload::spawn_on(&reconciler, &cluster, plan, &run.history, &run.provider);
    let stats = vec![settle.await.expect("the reconciler machine runs")];
    run.trace.note("A and B reconciled and settled");

    let holder = cluster.restart_client(&holder);
    stale_holder_returns(&run, &holder, &grant_a, &grant_b).await;

    let keys = [key_a, key_b];
    run.verify(&stats, &keys, true).await.outcome
}

/// The vanished holder comes back with its old grants.
async fn stale_holder_returns(
    run: &Run,
    holder: &ledger_sim_tests::cluster::ClientNode,
    grant_a: &Grant,
    grant_b: &Grant,
) {
    let client = run.cluster.client(run.cluster.endpoints(), TENANT_KEY);
    let receipt_a = run
        .provider
        .observe(&grant_a.provider_key)
        .expect("A was sent to the provider");
    let (token_a, token_b) = (grant_a.fencing_token, grant_b.fencing_token);
    let committed = Report::Committed {
        receipt: receipt_a.clone(),
    };
    let failed = Report::FailedBeforeEffect {
        proof: "the holder claims it never sent B".into(),
    };
    let (report_a, report_b) = (committed.clone(), failed.clone());
    let (fact, stale, replay) = holder
        .spawn(async move {
            let fact = client
                .report("holder-3", effect_key(EFFECT_A), token_a, report_a)
                .await;
            let stale = client
                .report("holder-4", effect_key(EFFECT_B), token_b, report_b)
                .await;
            let replay = claim(&client, "holder-5", EFFECT_B, LEASE_A_MS).await;
            (fact, stale, replay)
        })
        .await
        .expect("the restarted holder machine runs");

    let (state, receipt) =
        fact.unwrap_or_else(|e| panic!("the stale holder's fact was refused: {e}"));
    assert_eq!(
        (state, receipt.as_deref()),
        (EffectState::Committed, Some(receipt_a.as_str())),
        "A after the stale holder reported its commit"
    );
    let answer = Answer::Reported {
        fencing_token: token_a,
        report: committed,
        state,
        receipt,
    };
    run.history.record(HOLDER, &effect_key(EFFECT_A), answer);

    let refusal = match stale {
        Err(ClientError::Refused(
            r @ (Refusal::StaleToken { .. } | Refusal::LeaseExpired { .. }),
        )) => r,
        other => panic!("a stale holder failing B was answered {other:?}"),
    };
    let answer = Answer::ReportRefused {
        fencing_token: token_b,
        report: failed,
        refusal,
    };
    run.history.record(HOLDER, &effect_key(EFFECT_B), answer);

    let ClaimOutcome::Replay { receipt } = replay else {
        panic!("the stale holder's new claim on settled B answered {replay:?}, not replay");
    };
    run.history
        .record(HOLDER, &effect_key(EFFECT_B), Answer::Replayed { receipt });
    run.trace
        .note("stale holder: commit of A taken, failing B refused, claim on B replayed");
}
