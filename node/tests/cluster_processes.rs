//! End to end on real processes: three `ledger-node`s on RocksDB, concurrent clients
//! claiming and reporting effects, the leader SIGKILLed mid-load and restarted.
//!
//! Afterwards every acknowledged transition is present, every replica holds byte-identical
//! ledger state, no effect ever had two attempts, and service resumed after the election.

// The test times its own load on the machine's clock; the node's ban on reading clocks
// (node/clippy.toml) is about ledger time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use ledger_client::{ClientError, LedgerClient};
use ledger_core::{Authority, ClaimOutcome, Declaration, EffectKey, EffectState, Report, ToolRef};

/// What a client was told, per effect key.
#[derive(Debug, Default, Clone)]
struct Acks {
    /// The fencing token of the grant the client received.
    grant: Option<u64>,
    /// The state a report was acknowledged with, and its receipt.
    reported: Option<(EffectState, Option<String>)>,
    /// When the grant was acknowledged, relative to the start of the load.
    granted_at: Option<Duration>,
}

fn declaration(key: &str) -> Declaration {
    Declaration {
        key: EffectKey::new(TENANT, "load", key),
        workflow_id: "e2e".into(),
        tool: ToolRef {
            provider: "pay".into(),
            name: "refund".into(),
            contract_version: "v1".into(),
        },
        authority: Authority {
            principal: "user:e2e".into(),
            policy_generation: 1,
        },
        target: format!("refund:{key}"),
        intent_json: format!(r#"{{"refund":"{key}","amount":100}}"#),
    }
}

/// Retries a call with the same command id until it is answered (a ledger that is
/// electing a leader answers late, not never).
async fn until_answered<T, F, Fut>(mut call: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClientError>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match call().await {
            Err(ClientError::Unavailable { .. }) if Instant::now() < deadline => continue,
            other => return other,
        }
    }
}

/// One client: claims and reports its own effects until `stop`.
async fn worker(
    client: LedgerClient,
    worker: usize,
    start: Instant,
    stop: Arc<Mutex<bool>>,
    acks: Arc<Mutex<BTreeMap<String, Acks>>>,
) {
    for i in 0.. {
        if *stop.lock().unwrap() {
            return;
        }
        let key = format!("w{worker}-{i}");
        let d = declaration(&key);
        let claim_id = format!("{key}/claim");
        let outcome =
            until_answered(|| client.claim(&claim_id, d.clone(), "e2e-worker", None, None))
                .await
                .expect("claim answered");
        let ClaimOutcome::Proceed(grant) = outcome else {
            panic!("a new effect {key} was not granted: {outcome:?}");
        };
        acks.lock().unwrap().entry(key.clone()).or_default().grant = Some(grant.fencing_token);
        acks.lock().unwrap().get_mut(&key).unwrap().granted_at = Some(start.elapsed());
        // The same claim again (a lost answer): the same grant.
        let again = until_answered(|| client.claim(&claim_id, d.clone(), "e2e-worker", None, None))
            .await
            .expect("retried claim answered");
        assert_eq!(
            again,
            ClaimOutcome::Proceed(grant.clone()),
            "{key}: retry got another answer"
        );
        let receipt = format!("refund-{key}");
        let report = Report::Committed {
            receipt: receipt.clone(),
        };
        let report_id = format!("{key}/report");
        let reported = until_answered(|| {
            client.report(
                &report_id,
                d.key.clone(),
                grant.fencing_token,
                report.clone(),
            )
        })
        .await
        .expect("report answered");
        assert_eq!(reported, (EffectState::Committed, Some(receipt)));
        acks.lock().unwrap().get_mut(&key).unwrap().reported = Some(reported);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigkill_under_load_loses_no_acknowledged_transition() {
    let mut cluster = ProcessCluster::start(3);
    cluster.form().await;
    let start = Instant::now();
    let stop = Arc::new(Mutex::new(false));
    let acks = Arc::new(Mutex::new(BTreeMap::new()));
    let workers: Vec<_> = (0..6)
        .map(|w| {
            tokio::spawn(worker(
                cluster.client(TENANT_KEY),
                w,
                start,
                stop.clone(),
                acks.clone(),
            ))
        })
        .collect();

    tokio::time::sleep(Duration::from_secs(2)).await;
    let old_leader = cluster.leader().await;
    let killed_at = start.elapsed();
    cluster.kill(old_leader);
    tokio::time::sleep(Duration::from_secs(4)).await;
    cluster.spawn(old_leader);
    tokio::time::sleep(Duration::from_secs(2)).await;
    *stop.lock().unwrap() = true;
    for w in workers {
        w.await.expect("worker finished without panicking");
    }

    let acks = acks.lock().unwrap().clone();
    let after_kill = acks
        .values()
        .filter(|a| {
            a.granted_at
                .is_some_and(|t| t > killed_at + Duration::from_secs(1))
        })
        .count();
    assert!(
        after_kill > 0,
        "service did not resume after the leader was killed"
    );
    assert!(
        acks.len() >= 20,
        "too little load to mean anything: {}",
        acks.len()
    );

    cluster.converged().await;
    let client = cluster.client(TENANT_KEY);
    for (key, ack) in &acks {
        let record = client
            .get(EffectKey::new(TENANT, "load", key.as_str()))
            .await
            .expect("get")
            .unwrap_or_else(|| panic!("acknowledged effect {key} is missing"));
        assert_eq!(record.attempts.len(), 1, "{key} had more than one attempt");
        assert_eq!(
            Some(record.attempts[0].fencing_token),
            ack.grant,
            "{key}: grant lost"
        );
        if let Some((state, receipt)) = &ack.reported {
            assert_eq!(record.state, *state, "{key}: acknowledged report lost");
            assert_eq!(&record.receipt, receipt);
        }
    }
    // The restarted node holds what the others hold, byte for byte (checked by the
    // converged state digests above); ask it directly too.
    let restarted = cluster.client_of(old_leader, OPERATOR_KEY);
    let status = restarted
        .status_with_digest(0)
        .await
        .expect("restarted node answers");
    let committed = status
        .records_by_state
        .get("committed")
        .copied()
        .unwrap_or(0);
    let reported = acks.values().filter(|a| a.reported.is_some()).count() as u64;
    assert!(
        committed >= reported,
        "{committed} committed < {reported} acknowledged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_changes_while_serving() {
    let cluster = ProcessCluster::start(4);
    cluster.form_with(3).await;
    let tenant = cluster.client(TENANT_KEY);
    let operator = cluster.client(OPERATOR_KEY);
    let d = declaration("before-change");
    let grant = match tenant
        .claim("m-1", d.clone(), "m", None, None)
        .await
        .unwrap()
    {
        ClaimOutcome::Proceed(g) => g,
        other => panic!("{other:?}"),
    };

    // Node 4 joins as a learner, catches up, becomes a voter; node 1 leaves.
    let learner = operator
        .add_learner(4, &cluster.endpoints()[3])
        .await
        .expect("add learner");
    assert!(
        learner.learners.iter().any(|m| m.node_id == 4),
        "{learner:?}"
    );
    let changed = operator
        .change_membership(vec![2, 3, 4], false)
        .await
        .expect("change");
    let voters: Vec<u64> = changed.voters.iter().map(|m| m.node_id).collect();
    assert_eq!(voters, vec![2, 3, 4]);

    // The new configuration serves and node 4 holds everything.
    tenant
        .report(
            "m-2",
            d.key.clone(),
            grant.fencing_token,
            Report::Committed {
                receipt: "r".into(),
            },
        )
        .await
        .expect("report after the change");
    cluster.converged_among(&[1, 2, 3]).await;
    let on_new_node = cluster
        .client_of(3, OPERATOR_KEY)
        .status_of(0)
        .await
        .unwrap();
    assert_eq!(on_new_node.records_by_state.get("committed"), Some(&1));
    assert!(on_new_node.voters.iter().all(|m| m.node_id != 1));
}

/// The value of the sample `series` (a name, or a name and labels as printed) in a
/// Prometheus page.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok())?
        })
}

/// Every node serves its stage times for Prometheus: the leader's proposer queue, Raft
/// writes, batch sizes and replication round trips per follower; every node's log writes,
/// syncs and applies; the calls each node served, by command and result; outcomes and
/// refusals by kind; the sweeper's expiries; and gauges of its Raft view, of the
/// records it holds by state and of its storage engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_where_a_commands_time_goes() {
    let cluster = ProcessCluster::start(3);
    cluster.form().await;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    let tenant = cluster.client_of(leader, TENANT_KEY);
    const EFFECTS: usize = 20;
    for i in 0..EFFECTS {
        let d = declaration(&format!("metrics-{i}"));
        let ClaimOutcome::Proceed(grant) = tenant
            .claim(&format!("mc-{i}"), d.clone(), "h", None, None)
            .await
            .expect("claim")
        else {
            panic!("a fresh key proceeds");
        };
        tenant
            .report(
                &format!("mr-{i}"),
                d.key,
                grant.fencing_token,
                Report::Committed {
                    receipt: format!("r-{i}"),
                },
            )
            .await
            .expect("report");
    }
    // A report with a token no grant carries is refused, and counted as such.
    let stale = tenant
        .report(
            "mr-stale",
            declaration("metrics-0").key,
            u64::MAX,
            Report::Committed {
                receipt: "r".into(),
            },
        )
        .await;
    assert!(stale.is_err(), "a stale token is refused: {stale:?}");
    // An attempt whose holder never reports: its 1 ms lease runs out and the leader's
    // sweeper closes it.
    let abandoned = declaration("metrics-abandoned");
    let claimed = tenant
        .claim("mc-abandoned", abandoned, "h", Some(1), None)
        .await
        .expect("claim");
    assert!(matches!(claimed, ClaimOutcome::Proceed(_)), "{claimed:?}");
    cluster.converged().await;
    // Gauges are sampled once a second; the sweep comes within its interval.
    wait_until(
        "the gauges and the sweep show on the leader",
        10_000,
        || async {
            cluster.scrape(leader).is_ok_and(|page| {
                sample(&page, r#"ledger_records{state="committed"}"#) == Some(EFFECTS as f64)
                    && sample(&page, "ledger_sweeper_expired_total").is_some_and(|n| n >= 1.0)
                    && sample(&page, r#"ledger_records{state="unknown_after_dispatch"}"#)
                        == Some(1.0)
            })
        },
    )
    .await;

    let page = cluster.scrape(leader).expect("the leader's metrics page");
    let at = |series: &str| sample(&page, series);
    assert_eq!(
        at(r#"ledger_raft_role{role="leader"}"#),
        Some(1.0),
        "{page}"
    );
    assert_eq!(at(r#"ledger_raft_role{role="follower"}"#), Some(0.0));
    assert_eq!(at("ledger_raft_leader_id"), Some((leader + 1) as f64));
    assert!(at("ledger_raft_term").is_some_and(|t| t >= 1.0));
    assert!(at("ledger_raft_applied_index").is_some_and(|i| i > 0.0));
    assert!(at("ledger_raft_committed_index") >= at("ledger_raft_applied_index"));
    assert!(at("ledger_raft_apply_lag_entries").is_some());
    assert!(at("ledger_raft_snapshot_index").is_some());
    assert!(at("ledger_raft_purged_index").is_some());
    assert_eq!(at("ledger_ready"), Some(1.0));
    assert!(at("ledger_remembered_commands").is_some_and(|n| n >= (2 * EFFECTS) as f64));
    assert_eq!(at("ledger_tombstones"), Some(0.0));
    assert_eq!(at("ledger_escalations_open"), Some(0.0));
    assert_eq!(at("ledger_escalation_oldest_age_seconds"), Some(0.0));
    // The storage engine's own account, writes flowing. The other gauges are exported
    // for every keyspace; what their values follow is `raft-store`'s test of
    // `engine_stats` on RocksDB.
    assert_eq!(at("ledger_storage_writes_stopped"), Some(0.0), "{page}");
    assert_eq!(at("ledger_storage_delayed_write_rate_bytes"), Some(0.0));
    for keyspace in ["log", "meta", "state"] {
        for gauge in [
            "ledger_storage_memtable_bytes",
            "ledger_storage_pending_compaction_bytes",
            "ledger_storage_level0_files",
            "ledger_storage_table_file_bytes",
        ] {
            let series = format!(r#"{gauge}{{keyspace="{keyspace}"}}"#);
            assert!(at(&series).is_some(), "{series}:\n{page}");
        }
    }
    assert!(at("ledger_storage_block_cache_bytes").is_some());
    for job in ["flush", "compaction"] {
        let series = format!(r#"ledger_storage_running_jobs{{job="{job}"}}"#);
        assert!(at(&series).is_some(), "{series}:\n{page}");
    }
    assert!(
        at(r#"ledger_outcomes_total{command="claim",outcome="proceed"}"#)
            .is_some_and(|n| n >= (EFFECTS + 1) as f64),
        "claims by outcome:\n{page}"
    );
    assert!(
        at(r#"ledger_outcomes_total{command="report",outcome="committed"}"#)
            .is_some_and(|n| n >= EFFECTS as f64)
    );
    assert!(
        at(r#"ledger_refusals_total{command="report",kind="stale_token"}"#)
            .is_some_and(|n| n >= 1.0),
        "refusals by kind:\n{page}"
    );
    let count = |series: &str| sample(&page, series).unwrap_or(0.0);
    for series in [
        "ledger_proposer_queue_seconds_count",
        "ledger_raft_write_seconds_count",
        "ledger_batch_commands_count",
        "ledger_log_write_seconds_count",
        "ledger_log_sync_seconds_count",
        "ledger_apply_seconds_count",
    ] {
        assert!(count(series) > 0.0, "{series} on the leader:\n{page}");
    }
    assert!(count("ledger_proposer_queue_seconds_count") >= (2 * EFFECTS) as f64);
    assert!(
        count("ledger_batch_commands_sum") >= (2 * EFFECTS) as f64,
        "every command went through a batch"
    );
    // At least: a call the client timed out and sent again is served (and counted) twice.
    assert!(
        count(r#"ledger_call_seconds_count{command="claim",result="applied"}"#) >= EFFECTS as f64
    );
    assert!(
        count(r#"ledger_call_seconds_count{command="report",result="applied"}"#) >= EFFECTS as f64
    );
    assert!(count(r#"ledger_call_seconds_count{command="report",result="refused"}"#) >= 1.0);
    let replicated = format!(
        r#"ledger_replicate_seconds_count{{follower="{}"}}"#,
        follower + 1
    );
    assert!(count(&replicated) > 0.0, "{replicated}:\n{page}");
    assert!(
        page.contains("# HELP ledger_log_sync_seconds"),
        "metrics are described"
    );

    // A follower writes, syncs and applies the same entries, and (unless it was elected
    // meanwhile) proposes nothing.
    wait_until(
        "a follower's gauges show the same records",
        10_000,
        || async {
            cluster.scrape(follower).is_ok_and(|page| {
                sample(&page, r#"ledger_records{state="committed"}"#) == Some(EFFECTS as f64)
            })
        },
    )
    .await;
    let page = cluster.scrape(follower).expect("a follower's metrics page");
    for series in [
        "ledger_log_sync_seconds_count",
        "ledger_apply_seconds_count",
        "ledger_append_served_seconds_count",
    ] {
        assert!(
            sample(&page, series).unwrap_or(0.0) > 0.0,
            "{series}:\n{page}"
        );
    }
    if cluster.leader().await == leader {
        assert_eq!(sample(&page, "ledger_raft_write_seconds_count"), None);
    }
}

/// A follower forwards the commands that reach it together: many concurrent claims sent
/// to a follower travel to the leader in fewer calls than there are claims, and each is
/// applied once, with its own outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followers_concurrent_commands_reach_the_leader_in_groups() {
    const CLAIMS: usize = 200;
    const ROUNDS_MAX: usize = 3;
    let cluster = ProcessCluster::start(3);
    cluster.form().await;
    // A round whose leader changed meanwhile proves nothing about forwarding (the
    // follower, elected, proposed some claims itself): it is run again, on new keys.
    let mut rounds = 0;
    let follower = loop {
        assert!(
            rounds < ROUNDS_MAX,
            "the leader changed during each of {ROUNDS_MAX} rounds: inconclusive"
        );
        let leader = cluster.leader().await;
        let follower = (leader + 1) % 3;
        let tenant = Arc::new(cluster.client_of(follower, TENANT_KEY));
        let claims = (0..CLAIMS).map(|i| {
            let tenant = tenant.clone();
            async move {
                let d = declaration(&format!("grouped-{rounds}-{i}"));
                tenant
                    .claim(&format!("gc-{rounds}-{i}"), d, "h", None, None)
                    .await
            }
        });
        let mut tokens = std::collections::BTreeSet::new();
        for claimed in futures::future::join_all(claims).await {
            match claimed {
                Ok(ClaimOutcome::Proceed(grant)) => {
                    assert_eq!(grant.attempt_id, 1, "each effect's first attempt");
                    assert!(tokens.insert(grant.fencing_token), "one token per grant");
                }
                other => panic!("a fresh key proceeds: {other:?}"),
            }
        }
        assert_eq!(tokens.len(), CLAIMS);
        rounds += 1;
        if cluster.leader().await == leader {
            break follower;
        }
    };
    let page = cluster
        .scrape(follower)
        .expect("the follower's metrics page");
    let groups = sample(&page, "ledger_forward_commands_count").unwrap_or(0.0);
    let forwarded = sample(&page, "ledger_forward_commands_sum").unwrap_or(0.0);
    assert!(
        forwarded >= CLAIMS as f64,
        "every claim was forwarded:\n{page}"
    );
    assert!(
        groups < forwarded,
        "{forwarded} commands forwarded in {groups} calls: none were grouped"
    );
    let status = cluster
        .client(OPERATOR_KEY)
        .status_with_digest(0)
        .await
        .expect("status");
    assert_eq!(
        status.records_by_state.get("in_progress"),
        Some(&((rounds * CLAIMS) as u64))
    );
}

/// Every node answers the standard gRPC health check: not serving before the cluster has
/// a leader, serving once it has one and has applied its log; an unknown service name is
/// not found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_service_says_ready_once_a_leader_is_known() {
    use ledger_proto::health::health_check_response::ServingStatus;
    use ledger_proto::health::health_client::HealthClient;
    use ledger_proto::health::HealthCheckRequest;

    let cluster = ProcessCluster::start(3);
    let check = |i: usize, service: &str| {
        let endpoint = format!("http://{}", cluster.endpoints()[i]);
        let service = service.to_owned();
        async move {
            let mut client = HealthClient::connect(endpoint).await.ok()?;
            Some(client.check(HealthCheckRequest { service }).await)
        }
    };
    wait_until("node 1 answers health checks", 10_000, || async {
        check(0, "").await.is_some()
    })
    .await;
    let before = check(0, "").await.expect("connected").expect("answered");
    assert_eq!(before.get_ref().status(), ServingStatus::NotServing);
    cluster.form().await;
    for i in 0..3 {
        wait_until(&format!("node {} is ready", i + 1), 10_000, || async {
            check(i, "ledger.v1.Ledger").await.is_some_and(|answer| {
                answer.is_ok_and(|a| a.get_ref().status() == ServingStatus::Serving)
            })
        })
        .await;
    }
    let unknown = check(0, "no.such.Service").await.expect("connected");
    assert_eq!(
        unknown.expect_err("unknown service").code(),
        tonic::Code::NotFound
    );
}

/// A backup saved from a running cluster and restored into the nodes of a new one (before
/// it is formed) gives the new cluster the same state digest and the same records, and
/// the new cluster goes on from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restored_into_a_new_cluster_has_the_same_state() {
    let source = ProcessCluster::start(3);
    source.form().await;
    let tenant = source.client(TENANT_KEY);
    for i in 0..5 {
        let d = declaration(&format!("backup-{i}"));
        let ClaimOutcome::Proceed(grant) = tenant
            .claim(&format!("bc-{i}"), d.clone(), "h", None, None)
            .await
            .expect("claim")
        else {
            panic!("a fresh key proceeds");
        };
        let receipt = Report::Committed {
            receipt: format!("r-{i}"),
        };
        tenant
            .report(&format!("br-{i}"), d.key, grant.fencing_token, receipt)
            .await
            .expect("report");
    }
    source.converged().await;
    let operator = source.client(OPERATOR_KEY);
    let mut saved = Vec::new();
    let backup = operator.backup(&mut saved).await.expect("backup");
    assert_eq!(backup.bytes, saved.len() as u64);
    let leader = source.leader().await;
    let status = operator.status_with_digest(leader).await.expect("status");
    assert_eq!(
        status.state_digest,
        backup.state_digest.to_vec(),
        "the backup is the leader's state"
    );
    let kept = tempfile::tempdir().expect("temp dir");
    let file = kept.path().join("backup.bin");
    std::fs::write(&file, &saved).expect("write the backup");
    drop(source);

    // Nodes that never formed a cluster: stopped, restored, started, formed.
    let mut target = ProcessCluster::start(3);
    for i in 0..3 {
        target.kill(i);
        let restored = Command::new(env!("CARGO_BIN_EXE_ledger-node"))
            .arg("--config")
            .arg(target.dir().join(format!("node{}.toml", i + 1)))
            .args(["restore", "--from"])
            .arg(&file)
            .output()
            .expect("run ledger-node restore");
        assert!(
            restored.status.success(),
            "{}",
            String::from_utf8_lossy(&restored.stderr)
        );
        target.spawn(i);
    }
    target.form().await;
    target.converged().await;
    let operator = target.client(OPERATOR_KEY);
    for i in 0..3 {
        let status = operator.status_with_digest(i).await.expect("status");
        assert_eq!(
            status.state_digest,
            backup.state_digest.to_vec(),
            "node {} holds the backup's state",
            i + 1
        );
    }
    let tenant = target.client(TENANT_KEY);
    let record = tenant
        .get(declaration("backup-3").key)
        .await
        .expect("get")
        .expect("the record came with the backup");
    assert_eq!(record.receipt.as_deref(), Some("r-3"));
    let d = declaration("after-restore");
    assert!(matches!(
        tenant
            .claim("ac-1", d, "h", None, None)
            .await
            .expect("claim"),
        ClaimOutcome::Proceed(_)
    ));
    // A node of a cluster refuses a restore.
    target.kill(0);
    let again = Command::new(env!("CARGO_BIN_EXE_ledger-node"))
        .arg("--config")
        .arg(target.dir().join("node1.toml"))
        .args(["restore", "--from"])
        .arg(&file)
        .output()
        .expect("run ledger-node restore");
    assert!(
        !again.status.success(),
        "a member's data directory is never overwritten"
    );
}

/// SIGTERM stops a node within seconds though callers keep streams open on it: a watch,
/// which lasts as long as its caller keeps it, and, on a follower, the leader's
/// AppendEntries stream. The watcher is told `UNAVAILABLE` (watch through another node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_a_node_with_open_streams_within_seconds() {
    use ledger_client::WatchFilter;

    let mut cluster = ProcessCluster::start(3);
    cluster.form().await;
    let leader = cluster.leader().await;
    let follower = (0..3).find(|&i| i != leader).expect("a follower");
    let mut watch = cluster
        .client_of(follower, TENANT_KEY)
        .watch(WatchFilter::tenant(TENANT))
        .await
        .expect("a watch on the follower");
    let tenant = cluster.client(TENANT_KEY);
    let key = declaration("sigterm-watched").key;
    until_answered(|| {
        tenant.claim(
            "sigterm-claim",
            declaration("sigterm-watched"),
            "holder",
            None,
            None,
        )
    })
    .await
    .expect("claimed");
    let event = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("the claim reaches the watch")
        .expect("an event")
        .expect("a change");
    assert_eq!(event.key, key);

    let (status, took) = cluster
        .terminate(follower, Duration::from_secs(20))
        .expect("the follower stopped at SIGTERM");
    assert!(status.success(), "the follower exited with {status}");
    assert!(took < Duration::from_secs(10), "the follower took {took:?}");
    match tokio::time::timeout(Duration::from_secs(5), watch.next()).await {
        Ok(Some(Err(ClientError::Status { code, .. }))) => {
            assert_eq!(code, tonic::Code::Unavailable)
        }
        other => panic!("the watch ended with {other:?}"),
    }

    let (status, took) = cluster
        .terminate(leader, Duration::from_secs(20))
        .expect("the leader stopped at SIGTERM");
    assert!(status.success(), "the leader exited with {status}");
    assert!(took < Duration::from_secs(10), "the leader took {took:?}");
}
