//! Scenario: the leader's wall clock is set eight days ahead (a wrong date, a broken NTP
//! server), while a holder keeps a 30 s lease alive with heartbeats and a committed record
//! waits out its 7-day retention. Only that node's clock is wrong: each node reads its own
//! clock over the simulator's (`SimClock`), and real time goes on as before.
//!
//! The leader stamps ledger time into every command, but its stamps may advance ledger
//! time by no more than its monotonic clock says has passed plus `clock_skew_ms_max`
//! (`ledger_node::stamp_bound`). So on every replica, all along:
//! - the heartbeated attempt stays live (no lease expires early) and every heartbeat is
//!   taken;
//! - the committed record is not collected (retention is judged by ledger time);
//! - ledger time stays within the skew of real time, per leadership.
//!
//! Then the two followers' clocks go eight days ahead as well and the leader crashes: the
//! node elected next, its own clock wrong, inherits the bound from the stamps it applied
//! as a follower, and the same holds. Once every clock is corrected, the holder commits
//! and the run is verified as usual.
//!
//! With the leader's raw wall clock as ledger time (the bound removed), the first command
//! after the jump moves ledger time eight days on: the sweeper expires the lease and
//! collects the record, and the next heartbeat is refused.
//!
//! Second scenario: a keyed refund's answer was lost (reported unknown), then the leader's
//! wall clock goes two days ahead, past the provider's one-day horizon. Its own clock
//! says the horizon has passed, so a retry is told to reconcile, never re-sent. Once that
//! node's clock is put right and another node leads, the retry is granted a keyed re-send
//! again, well inside the horizon in real time: the wrong clock held horizons passed only
//! while its node led. With followers carrying the raised upper bound on as a lag (as
//! they did before stamps marked it as the leader's own), every later leader judged it
//! passed too, until ledger time plus the skew covered the carried bound: at most the
//! skew per change of leader, so in practice never.

#![cfg(madsim)]

use std::time::Duration;

use ledger_client::LedgerClient;
use ledger_core::{ClaimOutcome, EffectKey, EffectState, Grant, Report};
use ledger_sim_tests::cluster::{ClientNode, Cluster};
use ledger_sim_tests::fixtures::{declaration, effect_key, ClusterSettings, ToolKind, TENANT_KEY};
use ledger_sim_tests::history::Answer;
use ledger_sim_tests::scenario::Run;
use ledger_sim_tests::seeds::{self, RunOutcome, Scenario};
use ledger_sim_tests::workload::wall_clock_ms;

const SCENARIO: Scenario = Scenario {
    test_binary: "leader_clock_ahead",
    test_name: "leader_clock_days_ahead_expires_no_lease_and_collects_no_record",
    default_seeds: &[1, 2, 3],
};

/// The effect whose holder heartbeats through the whole run.
const HELD: &str = "held";
/// The effect committed before the jump, kept for 7 days.
const DONE: &str = "done";
const HOLDER: &str = "heartbeating-holder";
const LEASE_MS: u64 = 30_000;
const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// Heartbeats while only the leader's clock is wrong, then while every clock is.
const HEARTBEATS_PER_PHASE: u32 = 8;
const EIGHT_DAYS_MS: i64 = 8 * 24 * 60 * 60 * 1000;
const LEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Slack for ledger time against the simulator's clock (stamps travel, ticks round).
const SLACK_MS: u64 = 500;

const WITNESS: Scenario = Scenario {
    test_binary: "leader_clock_ahead",
    test_name: "a_wrong_clock_holds_horizons_passed_only_while_its_node_leads",
    default_seeds: &[1, 2, 3],
};

/// The keyed effect whose answer was lost.
const RESENT: &str = "resent";
const RETRYING: &str = "retrying-agent";
/// Past the keyed tool's one-day provider horizon.
const TWO_DAYS_MS: i64 = 2 * 24 * 60 * 60 * 1000;

#[test]
fn leader_clock_days_ahead_expires_no_lease_and_collects_no_record() {
    seeds::run(&SCENARIO, scenario);
}

#[test]
fn a_wrong_clock_holds_horizons_passed_only_while_its_node_leads() {
    seeds::run(&WITNESS, witness);
}

async fn scenario() -> RunOutcome {
    let settings = ClusterSettings::new(3);
    let skew_ms = settings.clock_skew_ms_max;
    let run = Run::begin(settings).await;
    let cluster = run.cluster.clone();
    let holder = cluster.client_node(HOLDER);
    let client = cluster.client(cluster.endpoints(), TENANT_KEY);
    let (done, held) = (effect_key(DONE), effect_key(HELD));

    let (done_grant, receipt) = commit_done(&run, &holder, &client).await;
    let held_grant = claim_held(&run, &holder, &client).await;

    let leader = run.leader(LEADER_TIMEOUT).await;
    cluster.step_wall_clock(leader, EIGHT_DAYS_MS);
    for round in 0..HEARTBEATS_PER_PHASE {
        tokio::time::sleep(HEARTBEAT_EVERY).await;
        heartbeat(&holder, &client, &held_grant, round).await;
        // One leadership with a wrong clock so far: ledger time at most one skew ahead.
        assert_nothing_cut_short(&cluster, &held, &done, skew_ms);
    }
    run.trace
        .note("leader's clock 8 days ahead: lease kept, record kept");

    for id in cluster.ids() {
        if id != leader {
            cluster.step_wall_clock(id, EIGHT_DAYS_MS);
        }
    }
    cluster.crash(leader);
    let next = run.leader(LEADER_TIMEOUT).await;
    run.trace.note(format!(
        "every clock 8 days ahead; leader {leader} crashed, node {next} leads"
    ));
    cluster.restart(leader);
    for round in HEARTBEATS_PER_PHASE..2 * HEARTBEATS_PER_PHASE {
        tokio::time::sleep(HEARTBEAT_EVERY).await;
        heartbeat(&holder, &client, &held_grant, round).await;
        // The old leader, restarted with its clock still wrong, may lead again: up to
        // three leaderships with wrong clocks, each allowed one skew.
        assert_nothing_cut_short(&cluster, &held, &done, 3 * skew_ms);
    }
    run.trace
        .note("a new leader with a wrong clock kept the bound");

    for id in cluster.ids() {
        cluster.correct_clock(id);
    }
    finish_held(&run, &holder, &client, &held_grant).await;
    let outcome = run.verify(&[], &[done.clone(), held], true).await;
    let kept = &outcome.views[0].records[&done];
    assert_eq!(
        (kept.state, kept.receipt.as_deref()),
        (EffectState::Committed, Some(receipt.as_str())),
        "the record committed before the jump, at the end"
    );
    assert!(kept.attempt_by_token(done_grant.fencing_token).is_some());
    outcome.outcome
}

async fn witness() -> RunOutcome {
    let run = Run::begin(ClusterSettings::new(3)).await;
    let cluster = run.cluster.clone();
    let agent = cluster.client_node(RETRYING);
    let client = cluster.client(cluster.endpoints(), TENANT_KEY);
    let key = effect_key(RESENT);

    let first = retry(&run, &agent, &client, 1).await;
    let first = match first {
        ClaimOutcome::Proceed(grant) => grant,
        other => panic!("the first claim answered {other:?}, not proceed"),
    };
    send_and_report(&run, &agent, &client, &first, false).await;
    run.trace.note("the refund was sent and its answer lost");

    let wrong = run.leader(LEADER_TIMEOUT).await;
    cluster.step_wall_clock(wrong, TWO_DAYS_MS);
    let told = retry(&run, &agent, &client, 2).await;
    assert!(
        matches!(told, ClaimOutcome::HorizonPassed(_)),
        "under a leader whose clock says the horizon passed, the retry answered {told:?}"
    );
    run.trace.note(format!(
        "leader {wrong}'s clock two days ahead: horizon judged passed"
    ));

    // Down while the retry is made, so that the node answering is one that followed it.
    cluster.correct_clock(wrong);
    cluster.crash(wrong);
    let next = run.leader(LEADER_TIMEOUT).await;
    let resend = retry(&run, &agent, &client, 3).await;
    let resend = match resend {
        ClaimOutcome::Proceed(grant) => grant,
        other => panic!(
            "node {next} leads with a right clock, a few seconds into the one-day horizon, \
             and the retry answered {other:?}, not a keyed re-send"
        ),
    };
    assert_eq!(
        resend.provider_key, first.provider_key,
        "the same provider key"
    );
    send_and_report(&run, &agent, &client, &resend, true).await;
    run.trace.note(format!(
        "node {next} leads: the keyed re-send was granted and committed"
    ));
    cluster.restart(wrong);

    let outcome = run.verify(&[], std::slice::from_ref(&key), true).await;
    let record = &outcome.views[0].records[&key];
    assert_eq!(record.state, EffectState::Committed);
    outcome.outcome
}

/// Claims the keyed effect as the retrying agent (call `n`), and records the answer.
async fn retry(run: &Run, agent: &ClientNode, client: &LedgerClient, n: u32) -> ClaimOutcome {
    let client = client.clone();
    let outcome = agent
        .spawn(async move {
            let declaration = declaration(RESENT, ToolKind::Keyed);
            client
                .claim(
                    &format!("resent-claim-{n}"),
                    declaration,
                    RETRYING,
                    None,
                    None,
                )
                .await
        })
        .await
        .expect("the agent's machine runs")
        .unwrap_or_else(|e| panic!("claim {n} of {RESENT} failed: {e}"));
    let answer = Answer::of_claim(RETRYING, &outcome)
        .unwrap_or_else(|| panic!("claim {n} of {RESENT} answered {outcome:?}"));
    run.history.record(RETRYING, &effect_key(RESENT), answer);
    outcome
}

/// Sends `grant` to the keyed provider and reports the answer: lost (`unknown`), or
/// the receipt when `answered`.
async fn send_and_report(
    run: &Run,
    agent: &ClientNode,
    client: &LedgerClient,
    grant: &Grant,
    answered: bool,
) {
    let (client, provider, grant) = (client.clone(), run.provider.clone(), grant.clone());
    let token = grant.fencing_token;
    let (report, reported) = agent
        .spawn(async move {
            let receipt = provider.send(&grant.provider_key, true);
            let report = if answered {
                Report::Committed { receipt }
            } else {
                Report::Unknown {
                    reason: "the answer was lost".into(),
                }
            };
            let id = format!("resent-report-{token}");
            let reported = client
                .report(&id, effect_key(RESENT), token, report.clone())
                .await
                .unwrap_or_else(|e| panic!("reporting {RESENT}: {e}"));
            (report, reported)
        })
        .await
        .expect("the agent's machine runs");
    run.history.record(
        RETRYING,
        &effect_key(RESENT),
        Answer::Reported {
            fencing_token: token,
            report,
            state: reported.0,
            receipt: reported.1,
        },
    );
}

/// Claims, sends and commits the effect that must not be collected early.
async fn commit_done(run: &Run, holder: &ClientNode, client: &LedgerClient) -> (Grant, String) {
    let (client, provider) = (client.clone(), run.provider.clone());
    let (grant, receipt, reported) = holder
        .spawn(async move {
            let grant = proceed(
                client
                    .claim(
                        "done-1",
                        declaration(DONE, ToolKind::Keyed),
                        HOLDER,
                        None,
                        None,
                    )
                    .await,
            );
            let receipt = provider.send(&grant.provider_key, true);
            let report = Report::Committed {
                receipt: receipt.clone(),
            };
            let reported = client
                .report("done-2", effect_key(DONE), grant.fencing_token, report)
                .await
                .unwrap_or_else(|e| panic!("reporting {DONE} committed: {e}"));
            (grant, receipt, reported)
        })
        .await
        .expect("the holder machine runs");
    let key = effect_key(DONE);
    run.history.record(
        HOLDER,
        &key,
        Answer::Granted {
            holder: HOLDER.into(),
            grant: grant.clone(),
        },
    );
    run.history.record(
        HOLDER,
        &key,
        Answer::Reported {
            fencing_token: grant.fencing_token,
            report: Report::Committed {
                receipt: receipt.clone(),
            },
            state: reported.0,
            receipt: reported.1,
        },
    );
    (grant, receipt)
}

/// Claims the effect whose lease is kept alive.
async fn claim_held(run: &Run, holder: &ClientNode, client: &LedgerClient) -> Grant {
    let client = client.clone();
    let grant = holder
        .spawn(async move {
            let declaration = declaration(HELD, ToolKind::Unkeyed);
            proceed(
                client
                    .claim("held-1", declaration, HOLDER, Some(LEASE_MS), None)
                    .await,
            )
        })
        .await
        .expect("the holder machine runs");
    let answer = Answer::Granted {
        holder: HOLDER.into(),
        grant: grant.clone(),
    };
    run.history.record(HOLDER, &effect_key(HELD), answer);
    grant
}

fn proceed(outcome: Result<ClaimOutcome, ledger_client::ClientError>) -> Grant {
    match outcome {
        Ok(ClaimOutcome::Proceed(grant)) => grant,
        other => panic!("a first claim answered {other:?}, not proceed"),
    }
}

/// Renews the held lease; it must still be live.
async fn heartbeat(holder: &ClientNode, client: &LedgerClient, grant: &Grant, round: u32) {
    let (client, token) = (client.clone(), grant.fencing_token);
    let renewed = holder
        .spawn(async move {
            let id = format!("held-heartbeat-{round}");
            client
                .heartbeat(&id, effect_key(HELD), token, Some(LEASE_MS))
                .await
        })
        .await
        .expect("the holder machine runs");
    if let Err(e) = renewed {
        panic!("heartbeat {round} on a live {LEASE_MS} ms lease was refused: {e}");
    }
}

/// On every running replica: the held attempt is live, the committed record is kept, and
/// ledger time is at most `ahead_ms_max` ahead of real time.
fn assert_nothing_cut_short(
    cluster: &Cluster,
    held: &EffectKey,
    done: &EffectKey,
    ahead_ms_max: u64,
) {
    let now_ms = wall_clock_ms();
    for view in cluster.views() {
        let node = view.node;
        let record = view
            .records
            .get(held)
            .unwrap_or_else(|| panic!("node {node}: {held} is missing"));
        assert_eq!(
            record.state,
            EffectState::InProgress,
            "node {node}: the heartbeated lease of {held} ran out early (ledger time {}, real \
             time {now_ms})",
            view.clock_ms
        );
        assert!(
            view.records
                .get(done)
                .is_some_and(|r| r.state == EffectState::Committed),
            "node {node}: {done} was collected before its retention ran out (ledger time {}, \
             real time {now_ms})",
            view.clock_ms
        );
        assert!(
            view.clock_ms <= now_ms + ahead_ms_max + SLACK_MS,
            "node {node}: ledger time {} is {} ms ahead of real time",
            view.clock_ms,
            view.clock_ms.saturating_sub(now_ms)
        );
    }
}

/// Sends the held effect and reports it committed.
async fn finish_held(run: &Run, holder: &ClientNode, client: &LedgerClient, grant: &Grant) {
    let (client, provider, grant) = (client.clone(), run.provider.clone(), grant.clone());
    let token = grant.fencing_token;
    let (receipt, reported) = holder
        .spawn(async move {
            let receipt = provider.send(&grant.provider_key, false);
            let report = Report::Committed {
                receipt: receipt.clone(),
            };
            let reported = client
                .report("held-2", effect_key(HELD), token, report)
                .await
                .unwrap_or_else(|e| panic!("reporting {HELD} committed: {e}"));
            (receipt, reported)
        })
        .await
        .expect("the holder machine runs");
    run.history.record(
        HOLDER,
        &effect_key(HELD),
        Answer::Reported {
            fencing_token: token,
            report: Report::Committed { receipt },
            state: reported.0,
            receipt: reported.1,
        },
    );
    run.trace
        .note("clocks corrected; the held effect committed");
}
