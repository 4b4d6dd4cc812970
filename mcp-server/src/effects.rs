//! Each tool's effect: what is dispatched, how it is looked up, what is answered.
//!
//! This is the part a tool author writes: a few lines per tool around
//! [`EffectRunner::effect`](ledger_client::EffectRunner::effect).

use rmcp::model::{CallToolResponse, ErrorData};
use serde_json::{json, Value};

use ledger_client::{ClientError, EffectCall, EffectOutcome, EffectRunner, RunError};
use ledger_core::{canonicalize, EffectKey, EffectState, Refusal};

use crate::confirm::Answer;
use ledger_providers::Search;

use crate::call::{Call, Inner};
use crate::providers::LookupKind;
use crate::reply::{
    amend, committed_body, conflict_body, expired_body, failure, finish, refusal, success, Finished,
};
use crate::tools::{DeployArgs, MessageArgs, ToolArgs};
use ledger_mcp::meta::SEQUENCE;

/// Runs the call's effect and answers.
pub(crate) async fn run(call: &Call<'_>, args: &ToolArgs) -> Result<CallToolResponse, ErrorData> {
    let providers = &call.server.providers;
    let key = &call.declaration.key;
    if call.amend {
        let refused = match args {
            ToolArgs::SendMessage(a) => amend_slots(call, a.recipients.len()).await?,
            _ => amend(runner(call), &call.declaration).await?,
        };
        if let Some(refused) = refused {
            return Ok(refused.into());
        }
    }
    let finished = match args {
        ToolArgs::Refund(a) => {
            let lookup = providers.lookup(LookupKind::Refund);
            let result = once(call, call.effect(None), &lookup, |pk| async move {
                providers.refund(&pk, a).await
            });
            finish(key, result.await)?
        }
        ToolArgs::CreateTicket(a) => {
            let lookup = providers.lookup(LookupKind::Ticket);
            let result = once(call, call.effect(None), &lookup, |pk| async move {
                providers.create_ticket(&pk, a).await
            });
            finish(key, result.await)?
        }
        ToolArgs::StartDeploy(a) => return deploy(call, a).await,
        ToolArgs::SendMessage(a) => return send_message(call, a).await,
        ToolArgs::GetOrder(_) => return read_only(call.server, args).await,
    };
    Ok(answer(key, finished).into())
}

/// Amends a message's effects: one per recipient, declared under the key itself for one
/// recipient and as the slots `key#0 ..` for several, where there is no record at the key
/// to amend. The number of messages is fixed once declared: another number of recipients
/// is answered as such. Every slot is checked before any is changed, so that one that may
/// have been sent does not leave the others amended and the message split between two
/// texts.
async fn amend_slots(
    call: &Call<'_>,
    recipients: usize,
) -> Result<Option<rmcp::model::CallToolResult>, ErrorData> {
    let base = &call.declaration.key;
    let unreachable = |e: ClientError| {
        ErrorData::internal_error(
            format!("the ledger could not be reached: {e}; nothing was sent"),
            None,
        )
    };
    let ledger = runner(call).ledger();
    let first = ledger.get(base.slot_key(0)).await.map_err(unreachable)?;
    let declared = match first.and_then(|record| record.slot) {
        Some(slot) => slot.count,
        None if ledger
            .get(base.clone())
            .await
            .map_err(unreachable)?
            .is_some() =>
        {
            1
        }
        // Never declared: the declaration that follows creates the effects.
        None => return Ok(None),
    };
    if declared as usize != recipients {
        return Ok(Some(failure(json!({
            "effect": { "key": base.to_string(), "outcome": "amend_refused" },
            "detail": format!(
                "the message was declared for {declared} recipient(s) and this call names \
                 {recipients}: amending changes a message's arguments, not how many \
                 messages there are"
            ),
            "advice": format!(
                "call again with {declared} recipient(s) and _meta amend = true, or use a \
                 new _meta {SEQUENCE} (a new effect key where the call names its key \
                 itself) for a separate message"
            ),
        }))));
    }
    if declared == 1 {
        return amend(runner(call), &call.declaration).await;
    }
    let keys: Vec<EffectKey> = (0..declared).map(|i| base.slot_key(i)).collect();
    for (index, key) in keys.iter().enumerate() {
        let state = ledger
            .get(key.clone())
            .await
            .map_err(unreachable)?
            .map(|record| record.state);
        if let Some(
            state @ (EffectState::InProgress
            | EffectState::Committed
            | EffectState::UnknownAfterDispatch),
        ) = state
        {
            return Ok(Some(failure(json!({
                "effect": { "key": key.to_string(), "outcome": "amend_refused" },
                "detail": format!(
                    "the message to recipient {} is {state}: it may already have been \
                     sent, so the message's arguments can no longer change; none of its \
                     messages was amended",
                    index + 1
                ),
                "advice": format!(
                    "call again without amend to learn its outcome; for a further, \
                     separate message use a new _meta {SEQUENCE} (a new effect key where \
                     the call names its key itself)"
                ),
            }))));
        }
    }
    for key in keys {
        let mut slot = call.declaration.clone();
        slot.key = key;
        if let Some(refused) = amend(runner(call), &slot).await? {
            return Ok(Some(refused));
        }
    }
    Ok(None)
}

fn runner<'a>(call: &'a Call<'_>) -> &'a EffectRunner {
    &call.tenant.runner
}

/// Runs one effect: dispatch through `send` (given the provider key), settle unknown
/// outcomes through `lookup`, wait a while for another attempt in flight.
async fn once<F, Fut>(
    call: &Call<'_>,
    effect: EffectCall,
    lookup: &Search,
    mut send: F,
) -> Result<EffectOutcome, RunError>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = ledger_client::DispatchResult>,
{
    runner(call)
        .effect(effect)
        .reconcile_with(lookup)
        .wait_in_flight(call.server.config.wait_in_flight_ms)
        .run(|attempt| send(attempt.provider_key))
        .await
}

fn answer(key: &EffectKey, finished: Finished) -> rmcp::model::CallToolResult {
    match finished {
        Finished::Committed { receipt, replayed } => {
            success(committed_body(key, &receipt, replayed))
        }
        Finished::NotCommitted(body) => failure(body),
    }
}

/// The effect is the job: a retry returns the job as it stands, never a second job.
async fn deploy(call: &Call<'_>, a: &DeployArgs) -> Result<CallToolResponse, ErrorData> {
    let providers = &call.server.providers;
    let key = &call.declaration.key;
    let lookup = providers.lookup(LookupKind::Deploy);
    let result = once(call, call.effect(None), &lookup, |pk| async move {
        providers.start_deploy(&pk, a).await
    });
    let finished = finish(key, result.await)?;
    let Finished::Committed { receipt, replayed } = finished else {
        return Ok(answer(key, finished).into());
    };
    let mut body = committed_body(key, &receipt, replayed);
    body["job"] = match receipt["job_id"].as_str() {
        Some(id) => providers
            .read(&format!("/deploy/jobs/{id}"))
            .await
            .unwrap_or_else(|e| json!({ "status": "unavailable", "detail": e })),
        None => Value::Null,
    };
    Ok(success(body).into())
}

/// One message per recipient: `n` slots of one declaration, each its own effect, sent
/// only after the user confirmed through an `input_required` round trip.
async fn send_message(call: &Call<'_>, a: &MessageArgs) -> Result<CallToolResponse, ErrorData> {
    let base = &call.declaration.key;
    let declared = runner(call)
        .declare(&call.declaration, a.recipients.len() as u32)
        .await;
    let keys = match declared {
        Ok(keys) => keys,
        Err(ClientError::Refused(Refusal::Conflict(c))) => {
            return Ok(failure(conflict_body(base, &c)).into())
        }
        Err(ClientError::Refused(Refusal::Expired(e))) => {
            return Ok(failure(expired_body(base, &e)).into())
        }
        Err(ClientError::Refused(r)) => return Err(refusal(base, &r)),
        Err(e) => {
            return Err(ErrorData::internal_error(
                format!("the ledger could not be reached: {e}; nothing was sent"),
                None,
            ))
        }
    };
    if let Some(done) = all_committed(call, &keys).await {
        return Ok(messages_answer(&keys, a, done).into());
    }
    let confirmation = match confirm(call, a).await? {
        Gate::Confirmed(text) => text,
        Gate::Answer(response) => return Ok(response),
    };
    let providers = &call.server.providers;
    let lookup = providers.lookup(LookupKind::Message);
    let mut finished = Vec::new();
    for (key, to) in keys.iter().zip(&a.recipients) {
        let mut effect = call.effect(Some(confirmation.clone()));
        effect.declaration.key = key.clone();
        let result = once(call, effect, &lookup, |pk| async move {
            providers.send_message(&pk, to, &a.text).await
        });
        finished.push(finish(key, result.await)?);
    }
    Ok(messages_answer(&keys, a, finished).into())
}

/// Where the confirmation step leaves a call.
enum Gate {
    /// Confirmed; the text recorded with each attempt.
    Confirmed(String),
    /// Answer with this: the question, or "declined".
    Answer(CallToolResponse),
}

/// Asks for the user's confirmation, or reads it from the re-sent call.
async fn confirm(call: &Call<'_>, a: &MessageArgs) -> Result<Gate, ErrorData> {
    let base = &call.declaration.key;
    let intent = canonicalize(&call.declaration.intent_json, &call.policy.volatile_fields)
        .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?
        .hash;
    let confirmations = &call.server.confirmations;
    let tenant = &call.tenant.name;
    let Some(state) = &call.request_state else {
        let what = format!(
            "Send this message to {}? It cannot be undone.\n\n{}\n\nRecipients: {}",
            plural(a.recipients.len()),
            a.text,
            a.recipients.join(", ")
        );
        let asked = confirmations.ask(tenant, base, &intent, what)?;
        crate::metrics::count_confirmation("asked");
        return Ok(Gate::Answer(asked.into()));
    };
    let responses = call.input_responses.as_ref();
    Ok(
        match confirmations.check(tenant, base, &intent, state, responses)? {
            Answer::Confirmed(text) => {
                crate::metrics::count_confirmation("confirmed");
                Gate::Confirmed(text)
            }
            Answer::Declined => {
                crate::metrics::count_confirmation("declined");
                Gate::Answer(
                    failure(json!({
                        "effect": { "key": base.to_string(), "outcome": "declined" },
                        "detail": "the user declined; nothing was sent",
                    }))
                    .into(),
                )
            }
        },
    )
}

fn plural(n: usize) -> String {
    if n == 1 {
        "1 recipient".into()
    } else {
        format!("{n} recipients")
    }
}

/// The stored receipts when every slot is committed already.
async fn all_committed(call: &Call<'_>, keys: &[EffectKey]) -> Option<Vec<Finished>> {
    let mut done = Vec::new();
    for key in keys {
        let record = runner(call).ledger().get(key.clone()).await.ok()??;
        if record.state != EffectState::Committed {
            return None;
        }
        let receipt = record.receipt.unwrap_or_default();
        done.push(Finished::Committed {
            receipt: serde_json::from_str(&receipt).unwrap_or(Value::String(receipt)),
            replayed: true,
        });
    }
    Some(done)
}

fn messages_answer(
    keys: &[EffectKey],
    a: &MessageArgs,
    finished: Vec<Finished>,
) -> rmcp::model::CallToolResult {
    let all_committed = finished
        .iter()
        .all(|f| matches!(f, Finished::Committed { .. }));
    let effects: Vec<Value> = keys
        .iter()
        .zip(&a.recipients)
        .zip(finished)
        .map(|((key, to), f)| {
            let mut body = match f {
                Finished::Committed { receipt, replayed } => {
                    committed_body(key, &receipt, replayed)
                }
                Finished::NotCommitted(body) => body,
            };
            body["recipient"] = json!(to);
            body
        })
        .collect();
    let body = json!({ "messages": effects });
    if all_committed {
        success(body)
    } else {
        failure(body)
    }
}

/// A read-only tool: straight to the provider, no ledger.
pub(crate) async fn read_only(
    server: &Inner,
    args: &ToolArgs,
) -> Result<CallToolResponse, ErrorData> {
    let ToolArgs::GetOrder(a) = args else {
        return Err(ErrorData::internal_error(
            "the operator's policy marks a mutating tool read-only; refusing to bypass the ledger",
            None,
        ));
    };
    match server
        .providers
        .read(&format!("/pay/orders/{}", a.order_id))
        .await
    {
        Ok(order) => Ok(success(json!({ "order": order })).into()),
        Err(e) => {
            Ok(failure(json!({ "detail": e, "advice": "a read can be retried freely" })).into())
        }
    }
}
