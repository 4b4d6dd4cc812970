//! Running the scenario's effects to their end, call by call and through
//! `EffectRunner`, and reading what each finished record must leave when collected.

use std::collections::BTreeMap;

use ledger_client::{DispatchResult, EffectCall, EffectOutcome, EffectRunner, LedgerClient};
use ledger_core::{
    ClaimOutcome, Declaration, EffectKey, EffectState, Grant, IntentHash, ReceiptDigest, Report,
};
use ledger_sim_tests::cluster::ClientNode;
use ledger_sim_tests::fixtures::{declaration, effect_key, ToolKind, TENANT_KEY};
use ledger_sim_tests::history::Answer;
use ledger_sim_tests::provider::Provider;
use ledger_sim_tests::scenario::{Run, CONVERGE_TIMEOUT};

use crate::{GROUP_A, GROUP_B, HOLDER, LATE_SLOT_AFTER, RETENTION_MS, UNKNOWN};

/// How an effect a holder runs itself ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Committed,
    Failed,
    NeverStarted,
    Unknown,
}

/// The effects a holder runs call by call: name, tool, end.
const DIRECT: [(&str, ToolKind, End); 5] = [
    ("done-0", ToolKind::Keyed, End::Committed),
    ("done-1", ToolKind::Unkeyed, End::Committed),
    ("failed-0", ToolKind::Unkeyed, End::Failed),
    ("never-0", ToolKind::Keyed, End::NeverStarted),
    (UNKNOWN, ToolKind::Unkeyed, End::Unknown),
];

/// What a dispatch through `EffectRunner` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dispatch {
    /// Sends, and the provider's answer arrives.
    Commit,
    /// Fails validation before sending.
    Refused,
    /// Sends, and the answer is lost.
    AnswerLost,
}

/// What a collected record must leave, read from it before collection.
#[derive(Debug, Clone)]
pub(crate) struct Expected {
    pub(crate) state: EffectState,
    pub(crate) receipt_digest: Option<ReceiptDigest>,
    pub(crate) intent_hash: IntentHash,
    pub(crate) deadline_ms: u64,
    /// The base key of its slot group, if any.
    pub(crate) group: Option<EffectKey>,
}

/// Runs every effect to its end; returns the holder's grants by effect name.
pub(crate) async fn run_effects(run: &Run) -> BTreeMap<&'static str, Grant> {
    let cluster = &run.cluster;
    let holder = cluster.client_node(HOLDER);
    let client = cluster.client(cluster.endpoints(), TENANT_KEY);
    let mut grants = BTreeMap::new();
    for (name, tool, end) in DIRECT {
        if let Some(grant) = run_directly(run, &holder, &client, name, tool, end).await {
            grants.insert(name, grant);
        }
    }

    let machine = cluster.client_node("tool-server");
    let runner = EffectRunner::new(cluster.client(cluster.endpoints(), TENANT_KEY), "tool-1");
    let provider = &run.provider;
    for (name, tool) in [("run-0", ToolKind::Keyed), ("run-1", ToolKind::Unkeyed)] {
        let outcome = run_effect(
            &machine,
            &runner,
            provider,
            declaration(name, tool),
            tool,
            Dispatch::Commit,
        )
        .await;
        assert!(
            matches!(outcome, EffectOutcome::Done { .. }),
            "{name}: {outcome:?}"
        );
    }
    let a = declare_group(&machine, &runner, GROUP_A, ToolKind::Unkeyed, 3).await;
    let b = declare_group(&machine, &runner, GROUP_B, ToolKind::Keyed, 2).await;
    for (slot, tool, send) in [
        (&a[0], ToolKind::Unkeyed, Dispatch::Commit),
        (&a[1], ToolKind::Unkeyed, Dispatch::Refused),
        (&b[0], ToolKind::Keyed, Dispatch::Commit),
        (&b[1], ToolKind::Keyed, Dispatch::AnswerLost),
    ] {
        let outcome = run_effect(&machine, &runner, provider, slot.clone(), tool, send).await;
        let ended = match send {
            Dispatch::Refused => matches!(outcome, EffectOutcome::FailedBeforeEffect { .. }),
            // The lost answer is settled by observing the provider.
            Dispatch::Commit | Dispatch::AnswerLost => {
                matches!(outcome, EffectOutcome::Done { .. })
            }
        };
        assert!(ended, "{} ({send:?}): {outcome:?}", slot.key);
    }
    tokio::time::sleep(LATE_SLOT_AFTER).await;
    let outcome = run_effect(
        &machine,
        &runner,
        provider,
        a[2].clone(),
        ToolKind::Unkeyed,
        Dispatch::Commit,
    )
    .await;
    assert!(
        matches!(outcome, EffectOutcome::Done { .. }),
        "{}: {outcome:?}",
        a[2].key
    );
    run.trace.note("every effect ran to its end");
    grants
}

/// Runs one effect call by call, recording the answers; returns its grant, if claimed.
async fn run_directly(
    run: &Run,
    holder: &ClientNode,
    client: &LedgerClient,
    name: &'static str,
    tool: ToolKind,
    end: End,
) -> Option<Grant> {
    let (client, provider) = (client.clone(), run.provider.clone());
    let decl = declaration(name, tool);
    let key = decl.key.clone();
    let (grant, reported) = holder
        .spawn(async move {
            if end == End::NeverStarted {
                let declared = client.declare(&format!("{name}-declare"), decl, 1).await;
                assert!(matches!(declared, Ok((_, true))), "{name}: {declared:?}");
                return (None, None);
            }
            let claimed = client
                .claim(&format!("{name}-claim"), decl, HOLDER, None, None)
                .await;
            let Ok(ClaimOutcome::Proceed(grant)) = claimed else {
                panic!("a first claim on {name} answered {claimed:?}");
            };
            let report = match end {
                End::Committed => Report::Committed {
                    receipt: provider.send(&grant.provider_key, tool == ToolKind::Keyed),
                },
                End::Failed => Report::FailedBeforeEffect {
                    proof: "validation failed before sending".into(),
                },
                _ => Report::Unknown {
                    reason: "timed out before sending, which the holder cannot know".into(),
                },
            };
            let token = grant.fencing_token;
            let reported = client
                .report(
                    &format!("{name}-report"),
                    effect_key(name),
                    token,
                    report.clone(),
                )
                .await
                .unwrap_or_else(|e| panic!("reporting {name}: {e}"));
            (Some(grant), Some((report, reported)))
        })
        .await
        .expect("the holder machine runs");
    let grant = grant?;
    let answer = Answer::Granted {
        holder: HOLDER.into(),
        grant: grant.clone(),
    };
    run.history.record(HOLDER, &key, answer);
    let (report, (state, receipt)) = reported.expect("reported after a grant");
    let answer = Answer::Reported {
        fencing_token: grant.fencing_token,
        report,
        state,
        receipt,
    };
    run.history.record(HOLDER, &key, answer);
    Some(grant)
}

/// Declares `slots` slots of `name`; returns each slot's declaration.
async fn declare_group(
    machine: &ClientNode,
    runner: &EffectRunner,
    name: &str,
    tool: ToolKind,
    slots: u32,
) -> Vec<Declaration> {
    let (runner, base) = (runner.clone(), declaration(name, tool));
    let keys = machine
        .spawn(async move { runner.declare(&base, slots).await })
        .await
        .expect("the tool-server machine runs")
        .unwrap_or_else(|e| panic!("declaring {name}: {e}"));
    keys.into_iter()
        .map(|key| Declaration {
            key,
            ..declaration(name, tool)
        })
        .collect()
}

/// Runs `decl` through `runner` on `machine`, dispatching as `send` says (observing the
/// provider when the answer is lost).
async fn run_effect(
    machine: &ClientNode,
    runner: &EffectRunner,
    provider: &Provider,
    decl: Declaration,
    tool: ToolKind,
    send: Dispatch,
) -> EffectOutcome {
    let (runner, provider) = (runner.clone(), provider.clone());
    let key = decl.key.clone();
    machine
        .spawn(async move {
            let adapter = provider.lookup();
            let call = EffectCall {
                declaration: decl,
                confirmation: None,
            };
            let dispatch = |attempt: ledger_client::AttemptInfo| {
                let provider = provider.clone();
                async move {
                    let deduplicates = tool == ToolKind::Keyed;
                    match send {
                        Dispatch::Commit => DispatchResult::Committed {
                            receipt: provider.send(&attempt.provider_key, deduplicates),
                        },
                        Dispatch::Refused => DispatchResult::NotCommitted {
                            proof: "validation failed before sending".into(),
                        },
                        Dispatch::AnswerLost => {
                            provider.send(&attempt.provider_key, deduplicates);
                            DispatchResult::Unknown {
                                reason: "sent; the answer was lost".into(),
                            }
                        }
                    }
                }
            };
            runner
                .effect(call)
                .reconcile_with(&adapter)
                .run(dispatch)
                .await
        })
        .await
        .expect("the tool-server machine runs")
        .unwrap_or_else(|e| panic!("running {key}: {e}"))
}

/// Reads what every finished record must leave, once every replica has them all.
pub(crate) async fn expected_tombstones(run: &Run) -> BTreeMap<EffectKey, Expected> {
    let views = run
        .cluster
        .wait_converged(CONVERGE_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut expected = BTreeMap::new();
    for record in views[0].records.values() {
        if record.key == effect_key(UNKNOWN) {
            assert_eq!(record.state, EffectState::UnknownAfterDispatch);
            assert_eq!(
                record.retention_deadline_ms, None,
                "an unknown outcome is kept"
            );
            continue;
        }
        let deadline_ms = record.retention_deadline_ms.unwrap_or_else(|| {
            panic!(
                "{}: finished ({}) but no deadline",
                record.key, record.state
            )
        });
        assert_eq!(
            deadline_ms,
            record.updated_at_ms + RETENTION_MS,
            "{}",
            record.key
        );
        let receipt_digest = record.receipt.as_deref().map(ReceiptDigest::of);
        let truth = run.provider.observe(&record.provider_key);
        assert_eq!(
            receipt_digest,
            truth.as_deref().map(ReceiptDigest::of),
            "{}",
            record.key
        );
        let entry = Expected {
            state: record.state,
            receipt_digest,
            intent_hash: record.intent_hash,
            deadline_ms,
            group: record.key.slot().map(|(base, _)| base),
        };
        expected.insert(record.key.clone(), entry);
    }
    let states: Vec<EffectState> = expected.values().map(|e| e.state).collect();
    assert_eq!(expected.len(), 11, "{states:?}");
    for state in [
        EffectState::Committed,
        EffectState::FailedBeforeEffect,
        EffectState::NotStarted,
    ] {
        assert!(
            states.contains(&state),
            "no {state} record among {states:?}"
        );
    }
    expected
}
