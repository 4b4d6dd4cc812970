//! Bad input on real processes: every malformed call is a clear MCP error, and nothing
//! stored changes, neither in the ledger nor at any provider.

mod common;

use common::*;
use http::Method;
use ledger_mcp_example::agent;
use ledger_mcp_example::http::send_json;
use serde_json::json;

const KEY: &str = "dev.effect-ledger/effect-key";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_clear_mcp_error_and_changes_nothing() {
    let world = World::start(30_000).await;
    let session = world.agent("mcp-a").await;
    let meta = agent::turn_meta("wf-bad", "turn-1");
    let mut wrong_tenant = meta.clone();
    wrong_tenant["dev.effect-ledger/tenant"] = json!("ghost");
    let huge = json!({ "subject": "s", "body": "x".repeat(5_000) });
    let cases = [
        (
            call("rm_rf", "t", json!({})),
            -32602,
            "unknown tool \"rm_rf\"",
        ),
        (
            agent::call("refund", refund_args(1), json!({ KEY: 7 })),
            -32602,
            "must be a string",
        ),
        (
            agent::call(
                "refund",
                refund_args(1),
                json!({ "dev.effect-ledger/effect_key": "k" }),
            ),
            -32602,
            "unknown _meta field",
        ),
        (
            agent::call("refund", refund_args(1), json!({ KEY: "has space" })),
            -32602,
            "effect key",
        ),
        (
            agent::call("refund", refund_args(1), json!({})),
            -32602,
            "needs _meta",
        ),
        (
            agent::call("create_ticket", huge, meta.clone()),
            -32602,
            "more than the limit",
        ),
        (
            agent::call(
                "refund",
                json!({ "order_id": "o", "amount_cents": -5, "currency": "EUR" }),
                meta.clone(),
            ),
            -32602,
            "invalid arguments for refund",
        ),
        (
            agent::call("refund", refund_args(1), wrong_tenant),
            -32602,
            "wrong tenant",
        ),
    ];
    for (params, code, expected) in cases {
        let error = mcp_error(session.call_tool_once(params.clone()).await);
        assert_eq!(error.code.0, code, "{params:?}: {error:?}");
        assert!(
            error.message.contains(expected),
            "{params:?}: {}",
            error.message
        );
    }

    // A token the server does not know, and a tenant the ledger does not know.
    let stranger = world.agent_with("mcp-a", "not-a-known-agent-token").await;
    let error = mcp_error(
        stranger
            .call_tool_once(call("refund", "t", refund_args(1)))
            .await,
    );
    assert!(error.message.contains("bearer token"), "{}", error.message);
    let ghost = world.agent_with("mcp-a", GHOST_TOKEN).await;
    let error = mcp_error(
        ghost
            .call_tool_once(call("refund", "t", refund_args(1)))
            .await,
    );
    assert!(
        error.message.contains("unknown tenant \"ghost\""),
        "{}",
        error.message
    );

    // A bare JSON-RPC request, with no protocol version, handshake or token, straight at
    // a server: taken as the oldest revision's, and refused as an error, not served.
    let raw = send_json(
        &world.servers["mcp-b"].addr,
        Method::POST,
        "/mcp",
        &[("accept", "application/json, text/event-stream")],
        Some(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": { "name": "refund", "arguments": refund_args(1) } })),
        5_000,
    )
    .await
    .unwrap();
    let refused = (400..500).contains(&raw.status) || raw.body["error"]["code"].is_i64();
    assert!(refused, "{raw:?}");

    assert!(
        world.counts().await.values().all(|n| *n == 0),
        "{}",
        world.effects().await
    );
    assert!(world.records().await.is_empty());
}

/// Calls a refund of `first` then of `repaired` cents with the same `_meta`, through two
/// instances; returns the repaired call's tool error.
async fn refund_then_repair(world: &World, meta: serde_json::Value) -> serde_json::Value {
    let first = body(&complete(
        world
            .agent("mcp-a")
            .await
            .call_tool_once(agent::call("refund", refund_args(500), meta.clone()))
            .await,
    ));
    assert_eq!(first["effect"]["outcome"], "done");
    // A "repaired" retry changes the amount: a tool error the model can read, naming what
    // differs and the explicit ways on; nothing is refunded again.
    let repaired = complete(
        world
            .agent("mcp-b")
            .await
            .call_tool_once(agent::call("refund", refund_args(5_000), meta))
            .await,
    );
    assert_eq!(repaired.is_error, Some(true), "{repaired:?}");
    let answer = repaired
        .structured_content
        .clone()
        .expect("structured content");
    assert_eq!(answer["effect"]["outcome"], "conflict");
    assert_eq!(answer["differing_fields"], json!(["amount_cents"]));
    assert_ne!(answer["stored_intent_hash"], answer["offered_intent_hash"]);
    let advice = answer["advice"].as_str().unwrap();
    assert!(
        advice.contains("dev.effect-ledger/amend") && advice.contains("dev.effect-ledger/sequence"),
        "{advice}"
    );
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reused_with_other_arguments_names_the_differing_fields() {
    let world = World::start(30_000).await;
    refund_then_repair(&world, json!({ KEY: "wf-7/turn-2/refund" })).await;
    assert_eq!(world.counts().await["refunds"], 1);
    assert_eq!(world.records().await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_under_a_derived_key_is_a_conflict_not_a_second_refund() {
    // Workflow and turn ids from the runtime; the key is derived from them, the tool and
    // the order (the policy's target): the amount is bound to the effect, not part of it.
    let world = World::start(30_000).await;
    refund_then_repair(&world, agent::turn_meta("wf-repair", "turn-1")).await;
    assert_eq!(world.counts().await["refunds"], 1);
    assert_eq!(world.records().await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_or_carried_over_confirmation_sends_nothing() {
    let world = World::start(30_000).await;
    let session = world.agent("mcp-a").await;
    let send = call(
        "send_message",
        "turn-3",
        json!({ "recipients": ["ana@example.com"], "text": "hi" }),
    );
    let Ok(rmcp::model::CallToolResponse::InputRequired(asked)) =
        session.call_tool_once(send.clone()).await
    else {
        panic!("an irreversible send must ask first");
    };
    let mut declined = send;
    let no = serde_json::to_value(agent::confirmation(false)).unwrap();
    declined.input_responses = Some([("confirm".to_owned(), no)].into());
    declined.request_state = asked.request_state.clone();
    let result = complete(session.call_tool_once(declined).await);
    assert_eq!(result.is_error, Some(true));
    assert_eq!(
        result.structured_content.unwrap()["effect"]["outcome"],
        "declined"
    );
    // A confirmation given for one message does not open for another (another turn's
    // effect; in the same turn another message would be a conflict).
    let mut other = call(
        "send_message",
        "turn-4",
        json!({ "recipients": ["bo@example.com"], "text": "hi" }),
    );
    other.input_responses = Some(confirmed());
    other.request_state = asked.request_state;
    let error = mcp_error(session.call_tool_once(other).await);
    assert!(
        error.message.contains("requestState does not match"),
        "{}",
        error.message
    );
    assert_eq!(world.counts().await["messages"], 0);
}

/// A message to several recipients is declared as one effect per recipient (`key#0`,
/// `key#1`, ...), to one as one effect under the key. Before anything was sent, an amend
/// replaces the text of every one of them; another number of recipients is refused,
/// saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_to_one_or_several_recipients_can_be_amended_before_it_is_sent() {
    let world = World::start(30_000).await;
    let session = world.agent("mcp-a").await;
    let recipients = json!(["ana@example.com", "bo@example.com"]);
    let first = call(
        "send_message",
        "turn-amend",
        json!({ "recipients": recipients, "text": "hi" }),
    );
    let Ok(rmcp::model::CallToolResponse::InputRequired(_)) = session.call_tool_once(first).await
    else {
        panic!("an irreversible send must ask first");
    };
    let changed = call(
        "send_message",
        "turn-amend",
        json!({ "recipients": recipients, "text": "hello" }),
    );
    let conflict = complete(session.call_tool_once(changed.clone()).await);
    assert_eq!(
        conflict.structured_content.unwrap()["effect"]["outcome"],
        "conflict"
    );
    let mut fewer = call(
        "send_message",
        "turn-amend",
        json!({ "recipients": ["ana@example.com"], "text": "hello" }),
    );
    let mut amended = changed;
    for request in [&mut amended, &mut fewer] {
        request
            .meta
            .as_mut()
            .expect("_meta")
            .insert("dev.effect-ledger/amend".into(), json!(true));
    }
    let refused = complete(session.call_tool_once(fewer).await);
    let refused = refused.structured_content.unwrap();
    assert_eq!(refused["effect"]["outcome"], "amend_refused", "{refused}");
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .contains("2 recipient(s)"),
        "{refused}"
    );
    // Amended, the new text is what the user is asked to confirm.
    let answer = session.call_tool_once(amended).await;
    let Ok(rmcp::model::CallToolResponse::InputRequired(asked)) = answer else {
        panic!("the amended message must ask for confirmation: {answer:?}");
    };
    assert!(format!("{asked:?}").contains("hello"), "{asked:?}");

    // One recipient: one effect under the key itself, amended there.
    let alone = |text: &str| {
        call(
            "send_message",
            "turn-amend-one",
            json!({ "recipients": ["ana@example.com"], "text": text }),
        )
    };
    let Ok(rmcp::model::CallToolResponse::InputRequired(_)) =
        session.call_tool_once(alone("hi")).await
    else {
        panic!("an irreversible send must ask first");
    };
    let mut amended = alone("hello");
    amended
        .meta
        .as_mut()
        .expect("_meta")
        .insert("dev.effect-ledger/amend".into(), json!(true));
    let answer = session.call_tool_once(amended).await;
    let Ok(rmcp::model::CallToolResponse::InputRequired(asked)) = answer else {
        panic!("the amended message must ask for confirmation: {answer:?}");
    };
    assert!(format!("{asked:?}").contains("hello"), "{asked:?}");
    assert_eq!(world.counts().await["messages"], 0);
}

/// `tools/list` from a caller without a tenant's token names the tools but no tenant's
/// policies; with a token, that tenant's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_listed_with_policies_only_to_a_tenant() {
    let world = World::start(30_000).await;
    let stranger = world.agent_with("mcp-a", "not-a-tenant-token-0001").await;
    let listed = stranger.list_all_tools().await.expect("tools/list");
    let refund = listed.iter().find(|t| t.name == "refund").expect("refund");
    let text = refund.description.as_deref().unwrap_or_default();
    assert!(text.contains("shown to a tenant's token"), "{text}");
    let tenant = world.agent("mcp-a").await;
    let listed = tenant.list_all_tools().await.expect("tools/list");
    let refund = listed.iter().find(|t| t.name == "refund").expect("refund");
    let text = refund.description.as_deref().unwrap_or_default();
    assert!(!text.contains("shown to a tenant's token"), "{text}");
    assert!(text.contains('['), "a tenant sees its policy: {text}");
}
