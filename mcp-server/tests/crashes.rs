//! End to end on real processes, with crashes where they hurt most: a ledger leader
//! SIGKILLed between claim and report, and a tool server SIGKILLed mid-dispatch. Every
//! effect ends committed (reported or reconciled), never twice at the provider.

mod common;

use common::*;
use ledger_core::{AttemptKind, AttemptOutcome, EffectState, ObservationResult};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_between_claim_and_report_never_duplicates_an_effect() {
    let mut world = World::start(30_000).await;
    for path in ["/pay/refunds", "/desk/tickets"] {
        world
            .fault(json!({ "path": path, "action": "hold", "hold_ms": 4_000 }))
            .await;
    }
    let refund = call("refund", "turn-1", refund_args(700));
    let ticket = call(
        "create_ticket",
        "turn-2",
        json!({ "subject": "s", "body": "b" }),
    );
    world.proxy.lose_next_answer("refund");
    let (a, b) = (world.agent("mcp-a").await, world.agent("mcp-b").await);
    let first_refund = tokio::spawn({
        let refund = refund.clone();
        async move { a.call_tool_once(refund).await }
    });
    let first_ticket = tokio::spawn({
        let ticket = ticket.clone();
        async move { b.call_tool_once(ticket).await }
    });
    // Both providers committed, neither dispatch is reported: kill the leader now.
    world.until_held(2).await;
    let leader = world.cluster.leader().await;
    world.cluster.kill(leader);

    assert!(
        first_refund.await.unwrap().is_err(),
        "the refund's answer was lost"
    );
    let ticket_first = body(&complete(first_ticket.await.unwrap()));
    assert_eq!(ticket_first["effect"]["outcome"], "done");
    let refund_retry = body(&complete(
        world.agent("mcp-b").await.call_tool_once(refund).await,
    ));
    let ticket_retry = body(&complete(
        world.agent("mcp-a").await.call_tool_once(ticket).await,
    ));
    assert_eq!(refund_retry["effect"]["outcome"], "replayed");
    assert_eq!(ticket_retry["receipt"], ticket_first["receipt"]);

    let effects = world.effects().await;
    assert_eq!(world.counts().await["refunds"], 1, "{effects}");
    assert_eq!(world.counts().await["tickets"], 1, "{effects}");
    assert_eq!(refund_retry["receipt"], effects["refunds"][0]);
    let records = world.records().await;
    assert_eq!(
        records.len(),
        2,
        "the refund's and the ticket's: {records:#?}"
    );
    for record in records {
        assert_eq!(record.state, EffectState::Committed, "{record:#?}");
        assert_eq!(record.attempts.len(), 1, "{record:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_server_killed_mid_dispatch_is_reconciled_never_repeated() {
    let mut world = World::start(1_500).await;
    // The help desk creates the ticket and then hangs on to its answer.
    world
        .fault(json!({ "path": "/desk/tickets", "action": "hold", "hold_ms": 60_000 }))
        .await;
    let ticket = call(
        "create_ticket",
        "turn-7",
        json!({ "subject": "s", "body": "b" }),
    );
    let a = world.agent("mcp-a").await;
    let first = tokio::spawn({
        let ticket = ticket.clone();
        async move { a.call_tool_once(ticket).await }
    });
    world.until_held(1).await;
    world.servers.get_mut("mcp-a").unwrap().kill();
    assert!(first.await.unwrap().is_err(), "its server died");

    // The retry waits out the dead holder's lease, then observes the provider instead
    // of creating a second ticket.
    let retry = body(&complete(
        world.agent("mcp-b").await.call_tool_once(ticket).await,
    ));
    assert_eq!(retry["effect"]["outcome"], "replayed", "{retry}");
    let effects = world.effects().await;
    assert_eq!(world.counts().await["tickets"], 1, "{effects}");
    assert_eq!(retry["receipt"], effects["tickets"][0]);
    let records = world.records().await;
    assert_eq!(records.len(), 1);
    let attempts = &records[0].attempts;
    assert_eq!(attempts[0].kind, AttemptKind::Dispatch);
    assert_eq!(attempts[0].outcome, Some(AttemptOutcome::LeaseExpired));
    assert!(
        attempts[1..]
            .iter()
            .all(|a| a.kind == AttemptKind::Reconcile),
        "{attempts:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_lost_between_provider_and_server_is_settled_by_a_patient_lookup() {
    let world = World::start(30_000).await;
    // Messaging sends, then drops the connection; its search shows a message only 200 ms
    // after sending, and the server waits 250 ms before it believes "not found".
    world
        .fault(json!({ "path": "/msg/messages", "action": "drop" }))
        .await;
    let send = call(
        "send_message",
        "turn-8",
        json!({ "recipients": ["dee@example.com"], "text": "Your parcel is on its way." }),
    );
    let session = world.agent("mcp-a").await;
    let Ok(rmcp::model::CallToolResponse::InputRequired(asked)) =
        session.call_tool_once(send.clone()).await
    else {
        panic!("an irreversible send must ask first");
    };
    let mut confirmed_send = send;
    confirmed_send.input_responses = Some(confirmed());
    confirmed_send.request_state = asked.request_state;
    let sent = body(&complete(session.call_tool_once(confirmed_send).await));
    assert_eq!(sent["messages"][0]["effect"]["outcome"], "done", "{sent}");

    let effects = world.effects().await;
    assert_eq!(world.counts().await["messages"], 1, "{effects}");
    assert_eq!(sent["messages"][0]["receipt"], effects["messages"][0]);
    let records = world.records().await;
    // The first look-up came before the message could show: its "not found" is recorded
    // and proves nothing. The server waits until it can, and looks again under a new
    // attempt (the ledger judges a look-up by the grant of the attempt it is made under).
    let kinds: Vec<AttemptKind> = records[0].attempts.iter().map(|a| a.kind).collect();
    assert_eq!(
        kinds,
        [
            AttemptKind::Dispatch,
            AttemptKind::Reconcile,
            AttemptKind::Reconcile
        ]
    );
    assert!(matches!(
        records[0].attempts[0].outcome,
        Some(AttemptOutcome::Unknown { .. })
    ));
    let seen: Vec<&ObservationResult> = records[0].observations.iter().map(|o| &o.result).collect();
    assert!(
        matches!(
            seen[..],
            [
                ObservationResult::NotCommitted,
                ObservationResult::Committed { .. }
            ]
        ),
        "{:#?}",
        records[0].observations
    );
    assert!(records[0].observations[0].detail.contains("proves nothing"));
}
