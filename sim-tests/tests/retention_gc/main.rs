//! Scenario: garbage collection through Raft on a three-node cluster (DESIGN.md section 4).
//!
//! Through the operator's admin API, as the fixtures configure the cluster, the tenant's
//! tools keep finished records for 60 s (a 50 s retry window, and a 40 s provider horizon
//! for the keyed tool, so validation accepts them; a policy whose retention is shorter
//! than its retry window is refused), tombstones for 45 s and command ids for 20 s; the
//! sweeper touches at most two records per command, fewer than a slot group holds.
//! Effects run to their end: committed by a holder calling the ledger itself and through
//! `EffectRunner`, one failed before effect, one declared and never started, one unknown
//! after dispatch (never collectable), and two slot groups: three slots that finish 20 s
//! apart (committed, failed, committed late), and two slots, one of them committed by
//! observing the provider after its answer was lost.
//!
//! As simulated time passes retention, the leader's sweeper proposes `CollectGarbage`.
//! Around the first deadline the leader crashes or loses power (the seed decides which and
//! when): a new leader collects, and the old one restarts and catches up. Then on every
//! replica the records are gone and each left a tombstone with its final state, intent
//! hash and receipt digest (that of the provider's receipt), the slots of a group went in
//! one collection, the unknown record is kept, and the replicas are byte-identical (ledger
//! bytes, and each node's state digest). Late retries are answered "expired" and dispatch
//! nothing: through `EffectRunner` (its dispatch closure is never called), a claim with a
//! new command id and one with the original claim's id, a claim on a group's base key, a
//! re-declaration, a request to reconcile, and a report with the old fencing token; the
//! provider receives no send. The run is verified as usual (answers clients received are
//! checked against tombstones). Last, a follower fails as the tombstone window ends; once
//! it has passed, every replica has forgotten the tombstones as well.
//!
//! All along, a [`RetentionWatch`] checks every log index: nothing collected before its
//! deadline or without a tombstone, no tombstone changed or gone before its window ended,
//! never one slot of a group without the others.

#![cfg(madsim)]

mod effects;
mod expired;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use madsim::rand::{seq::SliceRandom, thread_rng, Rng};

use ledger_client::ClientError;
use ledger_core::{EffectKey, Refusal, TenantSettings, ToolPolicy};
use ledger_sim_tests::cluster::Cluster;
use ledger_sim_tests::fixtures::{effect_key, ClusterSettings, ToolKind, TENANT};
use ledger_sim_tests::replica::ReplicaView;
use ledger_sim_tests::retention::RetentionWatch;
use ledger_sim_tests::scenario::{Run, CONVERGE_TIMEOUT};
use ledger_sim_tests::seeds::{self, RunOutcome, Scenario};
use ledger_sim_tests::trace::Trace;
use ledger_sim_tests::wait;
use ledger_sim_tests::workload::wall_clock_ms;

use effects::{expected_tombstones, run_effects, Expected};
use expired::{assert_collected, assert_same_state_digest, late_retries};

const SCENARIO: Scenario = Scenario {
    test_binary: "retention_gc",
    test_name: "collected_records_leave_tombstones_on_every_replica_and_late_retries_expire",
    default_seeds: &[1, 2, 3],
};

const RETENTION_MS: u64 = 60_000;
const RETRY_WINDOW_MS: u64 = 50_000;
const KEYED_HORIZON_MS: u64 = 40_000;
const TOMBSTONE_MS: u64 = 45_000;
const COMMAND_RETENTION_MS: u64 = 20_000;
/// Records per sweep command: fewer than group A's slots.
const SWEEP_LIMIT: u32 = 2;
/// Log entries between snapshots: fewer than the collections take.
const SNAPSHOT_AFTER_LOGS: u64 = 8;
/// How long after its other slots group A's last slot commits.
const LATE_SLOT_AFTER: Duration = Duration::from_secs(20);
/// How long after a deadline its collection may take to reach every replica (a failed
/// leader replaced, a restarted node caught up).
const COLLECT_TIMEOUT: Duration = Duration::from_secs(30);
const LEADER_TIMEOUT: Duration = Duration::from_secs(30);
const HOLDER: &str = "holder";

/// Three slots: committed, failed before effect, committed 20 s later.
const GROUP_A: &str = "group-a";
/// Two slots: committed, committed after a lost answer and an observation.
const GROUP_B: &str = "group-b";
/// Never collectable: its outcome is unknown.
const UNKNOWN: &str = "unknown-0";

#[test]
fn collected_records_leave_tombstones_on_every_replica_and_late_retries_expire() {
    seeds::run(&SCENARIO, scenario);
}

async fn scenario() -> RunOutcome {
    let mut settings = ClusterSettings::new(3);
    settings.sweeper.limit = SWEEP_LIMIT;
    // Compact often, so that a node restarted after the collections most likely catches
    // up from a snapshot that holds the tombstones rather than by replaying the sweeps.
    settings.raft.snapshot_after_logs = SNAPSHOT_AFTER_LOGS;
    settings.raft.logs_kept_after_snapshot = 2;
    let run = Run::begin(settings).await;
    let cluster = run.cluster.clone();
    let watch = RetentionWatch::start(cluster.clone());
    configure(&cluster).await;

    let grants = run_effects(&run).await;
    let expected = expected_tombstones(&run).await;
    collect_across_leader_failure(&run, &expected).await;
    let views = cluster
        .wait_converged(CONVERGE_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for view in &views {
        assert_collected(view, &expected);
    }
    assert_same_state_digest(&cluster).await;
    late_retries(&run, &views[0], &grants).await;

    let trace = run.trace.clone();
    let verified = run.verify(&[], &[], true).await;
    let views = tombstones_expire(&cluster, &trace, &views[0], &expected).await;
    let log = watch.stop(&cluster);
    let violations = log.violations();
    assert!(
        violations.is_empty(),
        "garbage collection broke its rules:\n{}",
        violations.join("\n")
    );
    let mut outcome = verified.outcome;
    outcome.trace = trace.lines();
    outcome.fingerprint ^= ledger_sim_tests::fnv64(&views[0].snapshot).rotate_left(3);
    outcome.summary.push_str(&format!(
        " collected={} watched_indexes={}",
        expected.len(),
        log.indexes()
    ));
    outcome
}

/// Registers the tenant's short windows and the tools' short retention, as the fixtures
/// register theirs; a policy whose retention does not cover its retry window is refused.
async fn configure(cluster: &Cluster) {
    cluster
        .as_operator(|client| async move {
            let settings = TenantSettings {
                command_retention_ms: COMMAND_RETENTION_MS,
                tombstone_retention_ms: TOMBSTONE_MS,
                ..TenantSettings::default()
            };
            client
                .put_tenant("retention-tenant", TENANT, settings)
                .await
                .unwrap_or_else(|e| panic!("setting the tenant's windows: {e}"));
            let too_short = ToolPolicy {
                retention_ms: RETRY_WINDOW_MS - 1,
                ..short_policy(ToolKind::Unkeyed)
            };
            let tool = ToolKind::Unkeyed.tool_name();
            match client
                .put_tool_policy("retention-too-short", TENANT, tool, too_short)
                .await
            {
                Err(ClientError::Refused(Refusal::InvalidPolicy(m)))
                    if m.contains("retry_window_ms") => {}
                other => panic!("a retention shorter than the retry window was answered {other:?}"),
            }
            for tool in ToolKind::ALL {
                let command_id = format!("retention-tool-{}", tool.tool_name().name);
                client
                    .put_tool_policy(&command_id, TENANT, tool.tool_name(), short_policy(tool))
                    .await
                    .unwrap_or_else(|e| panic!("shortening {tool:?}'s retention: {e}"));
            }
        })
        .await;
    cluster.trace().note(format!(
        "retention {RETENTION_MS} ms, tombstones {TOMBSTONE_MS} ms, command ids \
         {COMMAND_RETENTION_MS} ms, sweeps of {SWEEP_LIMIT} records"
    ));
}

/// The fixture policy of `tool` with retention covering a shorter retry window and
/// horizon.
fn short_policy(tool: ToolKind) -> ToolPolicy {
    let fixture = tool.policy();
    ToolPolicy {
        retention_ms: RETENTION_MS,
        retry_window_ms: RETRY_WINDOW_MS,
        provider_horizon_ms: fixture.provider_horizon_ms.min(KEYED_HORIZON_MS),
        ..fixture
    }
}

/// Lets simulated time pass every deadline while the leader fails around the first one
/// and comes back; waits until every replica has collected every finished record.
async fn collect_across_leader_failure(run: &Run, expected: &BTreeMap<EffectKey, Expected>) {
    let cluster = &run.cluster;
    let first_ms = expected
        .values()
        .map(|e| e.deadline_ms)
        .min()
        .expect("effects");
    let last_ms = expected
        .values()
        .map(|e| e.deadline_ms)
        .max()
        .expect("effects");
    let (before_ms, power, down_ms) = {
        let mut rng = thread_rng();
        (
            rng.gen_range(0..=3_000u64),
            rng.gen_bool(0.5),
            rng.gen_range(5_000..=25_000u64),
        )
    };
    sleep_until_ms(first_ms.saturating_sub(before_ms)).await;
    let leader = run.leader(LEADER_TIMEOUT).await;
    let applied = cluster.applied_index(leader).unwrap_or(0);
    if power {
        cluster.power_fail(leader);
    } else {
        cluster.crash(leader);
    }
    let next = run.leader(LEADER_TIMEOUT).await;
    run.trace.note(format!(
        "leader {leader} failed {before_ms} ms before the first deadline; node {next} leads"
    ));
    tokio::time::sleep(Duration::from_millis(down_ms)).await;
    // Informative only: a log purged past what the node applied means a snapshot.
    let purged = cluster.status(next).await.ok().and_then(|s| s.purged_index);
    cluster.restart(leader);
    run.trace.note(format!(
        "node {leader} had applied index {applied}; node {next}'s log is purged through \
         {purged:?}"
    ));

    let timeout = Duration::from_millis(last_ms.saturating_sub(wall_clock_ms())) + COLLECT_TIMEOUT;
    wait::until(
        "every finished record collected on every replica",
        timeout,
        || {
            let views = cluster.views();
            let pending: Vec<String> = views
                .iter()
                .flat_map(|v| {
                    expected
                        .keys()
                        .filter(|k| !v.tombstones.contains_key(*k))
                        .map(move |k| format!("node {}: {k}", v.node))
                })
                .collect();
            if views.len() == cluster.ids().len() && pending.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} nodes running, not yet: {pending:?}",
                    views.len()
                ))
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    run.trace
        .note("every finished record collected on every replica");
}

async fn sleep_until_ms(at_ms: u64) {
    tokio::time::sleep(Duration::from_millis(at_ms.saturating_sub(wall_clock_ms()))).await;
}

/// Lets the tombstone window pass while a follower fails as it ends; returns the final
/// converged views, in which every tombstone is gone and the unknown record is kept.
async fn tombstones_expire(
    cluster: &Arc<Cluster>,
    trace: &Trace,
    collected: &ReplicaView,
    expected: &BTreeMap<EffectKey, Expected>,
) -> Vec<ReplicaView> {
    let expiries: Vec<u64> = expected
        .keys()
        .map(|k| collected.tombstones[k].expires_at_ms)
        .collect();
    let first_ms = *expiries.iter().min().expect("tombstones");
    let last_ms = *expiries.iter().max().expect("tombstones");
    let (before_ms, power, down_ms) = {
        let mut rng = thread_rng();
        (
            rng.gen_range(0..=3_000u64),
            rng.gen_bool(0.5),
            rng.gen_range(2_000..=10_000u64),
        )
    };
    sleep_until_ms(first_ms.saturating_sub(before_ms)).await;
    let leader = cluster
        .wait_for_leader(&cluster.ids(), LEADER_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let followers: Vec<u64> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != leader)
        .collect();
    let follower = *followers.choose(&mut thread_rng()).expect("a follower");
    if power {
        cluster.power_fail(follower);
    } else {
        cluster.crash(follower);
    }
    trace.note(format!(
        "follower {follower} failed {before_ms} ms before the first tombstone expiry"
    ));
    tokio::time::sleep(Duration::from_millis(down_ms)).await;
    cluster.restart(follower);

    let timeout = Duration::from_millis(last_ms.saturating_sub(wall_clock_ms())) + COLLECT_TIMEOUT;
    wait::until(
        "every tombstone forgotten on every replica",
        timeout,
        || {
            let views = cluster.views();
            let kept: Vec<String> = views
                .iter()
                .filter(|v| !v.tombstones.is_empty())
                .map(|v| format!("node {}: {} tombstones", v.node, v.tombstones.len()))
                .collect();
            if views.len() == cluster.ids().len() && kept.is_empty() {
                Ok(())
            } else {
                Err(format!("{} nodes running; {kept:?}", views.len()))
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let views = cluster
        .wait_converged(CONVERGE_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for view in &views {
        let keys: Vec<&EffectKey> = view.records.keys().collect();
        assert_eq!(
            keys,
            [&effect_key(UNKNOWN)],
            "node {}: records after the window",
            view.node
        );
        let node = cluster.node(view.node).expect("running");
        let usage = node.reader.read(|l| l.usage(TENANT)).expect("readable");
        assert_eq!(
            (usage.live_records, usage.tombstones),
            (1, 0),
            "node {}",
            view.node
        );
    }
    trace.note("every tombstone forgotten on every replica");
    views
}
