//! End to end on real processes: every tool's answer is lost after the server answered,
//! the agent retries on the other instance, and the providers' own state shows one
//! effect per intended effect, with the retry returning the original receipt.

mod common;

use common::*;
use ledger_core::EffectState;
use rmcp::model::CallToolResponse;
use serde_json::{json, Value};

/// Calls through `mcp-a` with the answer lost, then retries through `mcp-b`; returns the
/// retry's structured answer.
async fn lose_then_retry(
    world: &World,
    tool: &str,
    call: rmcp::model::CallToolRequestParams,
) -> Value {
    let lost_before = world.proxy.lost();
    world.proxy.lose_next_answer(tool);
    let first = world
        .agent("mcp-a")
        .await
        .call_tool_once(call.clone())
        .await;
    assert!(
        first.is_err(),
        "{tool}: the answer should have been lost: {first:?}"
    );
    assert_eq!(world.proxy.lost(), lost_before + 1);
    body(&complete(
        world.agent("mcp-b").await.call_tool_once(call).await,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_survives_a_lost_answer_and_a_retry_on_the_other_instance() {
    let world = World::start(30_000).await;

    let refund =
        lose_then_retry(&world, "refund", call("refund", "turn-1", refund_args(500))).await;
    assert_eq!(refund["effect"]["outcome"], "replayed");

    let ticket_args = json!({ "subject": "Parcel lost", "body": "Order o-981 never arrived." });
    let ticket = lose_then_retry(
        &world,
        "create_ticket",
        call("create_ticket", "turn-2", ticket_args),
    )
    .await;
    assert_eq!(ticket["effect"]["outcome"], "replayed");

    let deploy_args = json!({ "service": "checkout", "version": "2.4.1" });
    let deploy = lose_then_retry(
        &world,
        "start_deploy",
        call("start_deploy", "turn-3", deploy_args),
    )
    .await;
    assert_eq!(deploy["effect"]["outcome"], "replayed");
    assert_eq!(deploy["job"]["job_id"], deploy["receipt"]["job_id"]);
    assert!(deploy["job"]["status"].is_string(), "{deploy}");

    let messages = send_messages(&world).await;

    let order = body(&complete(
        world
            .agent("mcp-a")
            .await
            .call_tool_once(call("get_order", "turn-5", json!({ "order_id": "o-981" })))
            .await,
    ));
    assert_eq!(order["order"]["refunded_cents"], 500);

    // Ground truth is the providers' state, not the tools' answers.
    let effects = world.effects().await;
    assert_eq!(effects["refunds"].as_array().unwrap().len(), 1, "{effects}");
    assert_eq!(effects["tickets"].as_array().unwrap().len(), 1, "{effects}");
    assert_eq!(effects["jobs"].as_array().unwrap().len(), 1, "{effects}");
    let sent = effects["messages"].as_array().unwrap();
    let mut recipients: Vec<&str> = sent.iter().map(|m| m["to"].as_str().unwrap()).collect();
    recipients.sort();
    assert_eq!(
        recipients,
        ["ana@example.com", "bo@example.com", "cy@example.com"]
    );
    // The retries returned the original receipts.
    assert_eq!(refund["receipt"], effects["refunds"][0]);
    assert_eq!(ticket["receipt"], effects["tickets"][0]);
    assert_eq!(deploy["receipt"]["job_id"], effects["jobs"][0]["job_id"]);
    for m in messages["messages"].as_array().unwrap() {
        let original = sent.iter().find(|s| s["to"] == m["recipient"]).unwrap();
        assert_eq!(&m["receipt"], original);
    }
    // The ledger holds one committed record per effect, each dispatched once; the read
    // left no trace.
    let records = world.records().await;
    assert_eq!(records.len(), 6, "{records:#?}");
    for r in &records {
        assert_eq!(r.state, EffectState::Committed, "{r:#?}");
        assert_eq!(r.attempts.len(), 1, "{r:#?}");
        assert_ne!(r.tool.name, "get_order");
    }
}

/// `send_message` to three recipients: an `input_required` confirmation on `mcp-a`, the
/// confirmed re-send on `mcp-b` with its answer lost, the same re-send again on `mcp-a`.
async fn send_messages(world: &World) -> Value {
    let args = json!({
        "recipients": ["cy@example.com", "ana@example.com", "bo@example.com"],
        "text": "Your refund of 5.00 EUR is on its way.",
    });
    let first = call("send_message", "turn-4", args);
    let asked = world
        .agent("mcp-a")
        .await
        .call_tool_once(first.clone())
        .await;
    let Ok(CallToolResponse::InputRequired(asked)) = asked else {
        panic!("an irreversible send must ask first, got {asked:?}");
    };
    assert!(asked.input_requests.unwrap().contains_key("confirm"));
    assert_eq!(
        world.counts().await["messages"],
        0,
        "nothing is sent before confirmation"
    );
    let mut resend = first.clone();
    resend.input_responses = Some(confirmed());
    resend.request_state = asked.request_state;

    world.proxy.lose_next_answer("send_message");
    let lost = world
        .agent("mcp-b")
        .await
        .call_tool_once(resend.clone())
        .await;
    assert!(lost.is_err(), "the answer should have been lost: {lost:?}");
    let again = body(&complete(
        world.agent("mcp-a").await.call_tool_once(resend).await,
    ));
    for m in again["messages"].as_array().unwrap() {
        assert_eq!(m["effect"]["outcome"], "replayed", "{again}");
    }
    // Without the confirmation state, the same call replays too: nothing is asked twice.
    let plain = body(&complete(
        world.agent("mcp-b").await.call_tool_once(first).await,
    ));
    assert_eq!(plain["messages"], again["messages"]);
    again
}
