//! What every replica keeps once the records are collected, and the late retries that
//! must be told "expired" and dispatch nothing.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use ledger_client::{ClientError, DispatchResult, EffectCall, EffectOutcome, EffectRunner};
use ledger_core::{
    ClaimOutcome, Declaration, EffectKey, EffectState, ExpiredEffect, Grant, ReconcileOutcome,
    Refusal, Report,
};
use ledger_sim_tests::cluster::{ClientNode, Cluster};
use ledger_sim_tests::fixtures::{declaration, effect_key, ToolKind, TENANT_KEY};
use ledger_sim_tests::provider::Provider;
use ledger_sim_tests::replica::ReplicaView;
use ledger_sim_tests::scenario::{Run, CONVERGE_TIMEOUT};
use ledger_sim_tests::wait;

use crate::effects::Expected;
use crate::{GROUP_A, GROUP_B, HOLDER, TOMBSTONE_MS, UNKNOWN};

/// Asserts that `view` keeps a tombstone and no record of each finished effect, with
/// what its record held, the slots of a group from one collection after the group's last
/// deadline; and still the record of the unknown effect.
pub(crate) fn assert_collected(view: &ReplicaView, expected: &BTreeMap<EffectKey, Expected>) {
    let node = view.node;
    let mut groups: BTreeMap<&EffectKey, Vec<u64>> = BTreeMap::new();
    for (key, e) in expected {
        assert!(
            !view.records.contains_key(key),
            "node {node}: {key} still has a record"
        );
        let t = view
            .tombstones
            .get(key)
            .unwrap_or_else(|| panic!("node {node}: {key} left no tombstone"));
        assert_eq!(
            (t.final_state, t.receipt_digest, t.intent_hash),
            (e.state, e.receipt_digest, e.intent_hash),
            "node {node}: {key}'s tombstone"
        );
        assert!(
            t.collected_at_ms >= e.deadline_ms,
            "node {node}: {key} collected early"
        );
        assert_eq!(
            t.expires_at_ms,
            t.collected_at_ms + TOMBSTONE_MS,
            "node {node}: {key}"
        );
        if let Some(base) = &e.group {
            groups.entry(base).or_default().push(t.collected_at_ms);
        }
    }
    for (base, collected_at) in &groups {
        let group_deadline_ms = expected
            .values()
            .filter(|e| e.group.as_ref() == Some(*base))
            .map(|e| e.deadline_ms)
            .max();
        assert!(
            collected_at.windows(2).all(|w| w[0] == w[1])
                && Some(collected_at[0]) >= group_deadline_ms,
            "node {node}: the slots of {base} collected at {collected_at:?}, group due at \
             {group_deadline_ms:?}"
        );
    }
    let unknown = view.records.get(&effect_key(UNKNOWN)).map(|r| r.state);
    assert_eq!(
        unknown,
        Some(EffectState::UnknownAfterDispatch),
        "node {node}"
    );
}

/// Asserts that every node reports the same digest of its ledger at the same index.
pub(crate) async fn assert_same_state_digest(cluster: &Cluster) {
    let ids = cluster.ids();
    let endpoints = cluster.all_ids();
    wait::until_async("one state digest on every node", CONVERGE_TIMEOUT, || {
        let (ids, endpoints) = (ids.clone(), endpoints.clone());
        async move {
            let statuses = cluster
                .as_operator(move |client| async move {
                    let mut statuses = Vec::new();
                    for id in ids {
                        let i = endpoints.iter().position(|e| *e == id).expect("a member");
                        let status = client
                            .status_with_digest(i)
                            .await
                            .map_err(|e| e.to_string())?;
                        statuses.push((id, status.state_digest_index, status.state_digest));
                    }
                    Ok::<_, String>(statuses)
                })
                .await?;
            let same = statuses
                .windows(2)
                .all(|w| (w[0].1, &w[0].2) == (w[1].1, &w[1].2));
            if same && statuses.iter().all(|s| s.1.is_some() && !s.2.is_empty()) {
                Ok(())
            } else {
                let seen: Vec<_> = statuses.iter().map(|s| (s.0, s.1, s.2.len())).collect();
                Err(format!("(node, index, digest bytes): {seen:?}"))
            }
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Retries every kind of late command on collected effects: each is answered expired,
/// nothing is dispatched and nothing is created.
pub(crate) async fn late_retries(
    run: &Run,
    view: &ReplicaView,
    grants: &BTreeMap<&'static str, Grant>,
) {
    let cluster = &run.cluster;
    let expired = |key: &EffectKey| -> ExpiredEffect { view.tombstones[key].expired() };
    let machine = cluster.client_node("late-retrier");
    let sent_before = run.provider.effects();
    let runner = EffectRunner::new(cluster.client(cluster.endpoints(), TENANT_KEY), "tool-late");
    let dispatched = Arc::new(AtomicU32::new(0));
    let slot = |name: &str, tool, i| Declaration {
        key: effect_key(name).slot_key(i),
        ..declaration(name, tool)
    };
    for (decl, tool) in [
        (declaration("done-0", ToolKind::Keyed), ToolKind::Keyed),
        (declaration("run-1", ToolKind::Unkeyed), ToolKind::Unkeyed),
        (
            declaration("failed-0", ToolKind::Unkeyed),
            ToolKind::Unkeyed,
        ),
        (slot(GROUP_A, ToolKind::Unkeyed, 2), ToolKind::Unkeyed),
        (slot(GROUP_B, ToolKind::Keyed, 1), ToolKind::Keyed),
    ] {
        let want = expired(&decl.key);
        let outcome =
            retry_through_runner(&machine, &runner, &run.provider, &dispatched, decl, tool).await;
        assert_eq!(
            outcome,
            EffectOutcome::Expired(want),
            "a late EffectRunner retry"
        );
    }

    let client = cluster.client(cluster.endpoints(), TENANT_KEY);
    let done_0 = grants["done-0"].clone();
    let receipt = run
        .provider
        .observe(&done_0.provider_key)
        .expect("done-0 was sent");
    let (claims, declared, reconciled, reported) = machine
        .spawn(async move {
            let claim = |id: &'static str, decl: Declaration| {
                let client = client.clone();
                async move { client.claim(id, decl, HOLDER, None, None).await }
            };
            let claims = [
                claim("late-never-0", declaration("never-0", ToolKind::Keyed)).await,
                // The original claim's command id, as a holder whose answer was lost
                // retries it: its remembered answer went with the command id's window.
                claim("done-1-claim", declaration("done-1", ToolKind::Unkeyed)).await,
                claim("late-group-a", declaration(GROUP_A, ToolKind::Unkeyed)).await,
            ];
            let declared = client
                .declare("late-group-b", declaration(GROUP_B, ToolKind::Keyed), 2)
                .await;
            let reconciled = client
                .begin_reconcile("late-run-0", effect_key("run-0"), HOLDER, None)
                .await;
            let report = Report::Committed { receipt };
            let reported = client
                .report(
                    "late-done-0",
                    effect_key("done-0"),
                    done_0.fencing_token,
                    report,
                )
                .await;
            (claims, declared, reconciled, reported)
        })
        .await
        .expect("the late retrier's machine runs");
    let claimed_keys = [
        effect_key("never-0"),
        effect_key("done-1"),
        effect_key(GROUP_A).slot_key(0),
    ];
    for (claim, key) in claims.into_iter().zip(&claimed_keys) {
        assert_eq!(
            claim.ok(),
            Some(ClaimOutcome::Expired(expired(key))),
            "a late claim on {key}"
        );
    }
    let refused_expired = |r: Result<_, ClientError>, key: &EffectKey, what: &str| match r {
        Err(ClientError::Refused(Refusal::Expired(e))) => assert_eq!(*e, expired(key), "{what}"),
        other => panic!("{what} on collected {key} answered {other:?}"),
    };
    refused_expired(
        declared.map(|_| ()),
        &effect_key(GROUP_B).slot_key(0),
        "a re-declaration",
    );
    refused_expired(
        reported.map(|_| ()),
        &effect_key("done-0"),
        "a report with the old token",
    );
    assert_eq!(
        reconciled.ok(),
        Some(ReconcileOutcome::Expired(expired(&effect_key("run-0"))))
    );

    assert_eq!(
        dispatched.load(Ordering::SeqCst),
        0,
        "a late retry dispatched"
    );
    assert_eq!(
        run.provider.effects(),
        sent_before,
        "the provider received a late send"
    );
    let views = cluster
        .wait_converged(CONVERGE_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for v in &views {
        let recreated: Vec<&EffectKey> = v
            .records
            .keys()
            .filter(|k| v.tombstones.contains_key(*k))
            .collect();
        assert!(recreated.is_empty(), "node {}: {recreated:?}", v.node);
        assert_eq!(
            v.records.len(),
            1,
            "node {}: a late retry created a record",
            v.node
        );
    }
    run.trace
        .note("late retries answered expired; nothing dispatched or created");
}

/// Retries `decl` through `runner` with a dispatch that would send, and counts it.
async fn retry_through_runner(
    machine: &ClientNode,
    runner: &EffectRunner,
    provider: &Provider,
    dispatched: &Arc<AtomicU32>,
    decl: Declaration,
    tool: ToolKind,
) -> EffectOutcome {
    let (runner, provider, dispatched) = (runner.clone(), provider.clone(), dispatched.clone());
    let key = decl.key.clone();
    machine
        .spawn(async move {
            let adapter = provider.lookup();
            let call = EffectCall {
                declaration: decl,
                confirmation: None,
            };
            let dispatch = |attempt: ledger_client::AttemptInfo| {
                dispatched.fetch_add(1, Ordering::SeqCst);
                let receipt = provider.send(&attempt.provider_key, tool == ToolKind::Keyed);
                async move { DispatchResult::Committed { receipt } }
            };
            runner
                .effect(call)
                .reconcile_with(&adapter)
                .run(dispatch)
                .await
        })
        .await
        .expect("the late retrier's machine runs")
        .unwrap_or_else(|e| panic!("retrying {key}: {e}"))
}
