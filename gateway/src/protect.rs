//! A protected `tools/call`: identity, claim, the upstream call, what its answer proves,
//! and the answer to the client.
//!
//! Checks run in an order that stores nothing until all of them passed: `_meta`, tenant,
//! arguments, target, identity. Then the effect runs through
//! [`ledger_client::EffectRunner`]: claimed before the upstream hears of it, the upstream
//! called with the effect's provider key, the answer sorted (committed, proven not to have
//! acted, or unknown) and reported; an unknown outcome is settled by the tool's look-up
//! before anything is sent again.

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, JsonObject, MetaObject,
    RequestMetaObject,
};
use serde_json::{json, Map, Value};

use ledger_client::reconcile::ProviderAdapter;
use ledger_client::{target_of, ClientError, DispatchResult, EffectCall, EffectOutcome};
use ledger_core::{Authority, Declaration, EffectKey, ToolName, ToolPolicy, ToolRef};
use ledger_mcp::meta::LedgerMeta;
use ledger_mcp::reply::{failure, finish, Finished};
use ledger_mcp::tenants::Tenant;

use crate::config::{BeforeEffect, ToolConfig};
use crate::handler::Inner;
use crate::identity::{resolve, Identity, IdentityError, Offered};
use crate::receipt::{answer_from, receipt_of, receipt_of_task, text_of};
use crate::upstream::{Upstream, UpstreamError};

/// The `_meta` field of every answer to a protected call: the effect, how the call ended
/// and what a retry does.
pub const EFFECT_META: &str = "dev.effect-ledger/effect";

/// `_meta` prefixes never passed to an upstream: the ledger's own fields, and the
/// protocol fields the gateway's own connection sets.
const NOT_FORWARDED: [&str; 2] = [ledger_mcp::meta::PREFIX, "io.modelcontextprotocol/"];

/// The request `_meta` an upstream gets: the caller's, less what is not forwarded.
pub fn forwarded_meta(meta: &Map<String, Value>) -> Map<String, Value> {
    meta.iter()
        .filter(|(k, _)| !NOT_FORWARDED.iter().any(|p| k.starts_with(p)) && *k != "progressToken")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Whether `result`'s structured content holds one of `values` at `pointer`: how the
/// operator declares which answers did nothing.
fn declared(pointer: Option<&String>, values: &[Value], result: &CallToolResult) -> bool {
    pointer.is_some_and(|pointer| {
        result
            .structured_content
            .as_ref()
            .and_then(|body| body.pointer(pointer))
            .is_some_and(|value| values.contains(value))
    })
}

/// Whether an `isError` result is one the upstream declares it gives only before acting.
fn tool_error_before_effect(rule: &BeforeEffect, result: &CallToolResult) -> bool {
    rule.all_tool_errors
        || declared(
            rule.tool_error_pointer.as_ref(),
            &rule.tool_error_values,
            result,
        )
}

/// Whether a result that is not an error is one the operator declares does nothing.
fn result_without_effect(rule: &BeforeEffect, result: &CallToolResult) -> bool {
    declared(rule.result_pointer.as_ref(), &rule.result_values, result)
}

/// What an upstream's answer to a dispatched call proves.
pub fn classify(
    rule: &BeforeEffect,
    answer: &Result<CallToolResponse, UpstreamError>,
) -> DispatchResult {
    match answer {
        Ok(CallToolResponse::Complete(result))
            if result.is_error != Some(true) && result_without_effect(rule, result) =>
        {
            DispatchResult::NotCommitted {
                proof: format!(
                    "the upstream answered a result it declares does nothing: {}",
                    text_of(result)
                ),
            }
        }
        Ok(CallToolResponse::Complete(result)) if result.is_error != Some(true) => {
            DispatchResult::Committed {
                receipt: receipt_of(result),
            }
        }
        Ok(CallToolResponse::Complete(result)) if tool_error_before_effect(rule, result) => {
            DispatchResult::NotCommitted {
                proof: format!(
                    "the upstream answered a tool error it declares before effect: {}",
                    text_of(result)
                ),
            }
        }
        Ok(CallToolResponse::Complete(result)) => DispatchResult::Unknown {
            reason: format!(
                "the upstream answered a tool error not declared before effect: {}",
                text_of(result)
            ),
        },
        // A 2026-07-28 tool is run again from the start on the re-sent call, so it asks
        // before it acts (docs/design.md, "The gateway's call path").
        Ok(CallToolResponse::InputRequired(_)) => DispatchResult::NotCommitted {
            proof: "the upstream asked for input (input_required) before acting".into(),
        },
        Ok(CallToolResponse::Task(task)) => DispatchResult::Committed {
            receipt: receipt_of_task(task),
        },
        Ok(_) => DispatchResult::Unknown {
            reason: "the upstream answered a kind of result this gateway does not know".into(),
        },
        Err(e @ UpstreamError::NotSent { .. }) => DispatchResult::NotCommitted {
            proof: e.to_string(),
        },
        Err(e @ UpstreamError::Rpc { error, .. }) if rule.jsonrpc_codes.contains(&error.code.0) => {
            DispatchResult::NotCommitted {
                proof: format!("{e} (a code the upstream answers before acting)"),
            }
        }
        Err(e) => DispatchResult::Unknown {
            reason: e.to_string(),
        },
    }
}

/// What a protected call runs against.
pub(crate) struct Protected<'a> {
    pub inner: &'a Inner,
    pub tenant: &'a Tenant,
    pub tool: &'a ToolConfig,
    pub upstream: &'a Arc<Upstream>,
    pub lookup: Option<&'a dyn ProviderAdapter>,
    pub policy: &'a ToolPolicy,
    pub headers: Option<&'a http::HeaderMap>,
    /// The request's `_meta` (see [`request_meta`]).
    pub meta: Map<String, Value>,
}

/// A request's `_meta`: rmcp hands it over in the request context and, depending on the
/// protocol era, in the parameters as well; both are read.
pub fn request_meta(
    context: &rmcp::service::RequestContext<rmcp::RoleServer>,
    params: Option<&RequestMetaObject>,
) -> Map<String, Value> {
    let mut meta = context.meta.0 .0.clone();
    if let Some(params) = params {
        meta.extend(params.0 .0.clone());
    }
    meta
}

fn invalid(message: impl Into<String>) -> ErrorData {
    ErrorData::invalid_params(message.into(), None)
}

/// A tool error that stored and sent nothing.
fn refused(tool: &str, outcome: &str, detail: String, advice: &str) -> CallToolResponse {
    failure(json!({
        "effect": { "tool": tool, "outcome": outcome },
        "detail": detail,
        "advice": advice,
    }))
    .into()
}

impl Protected<'_> {
    /// The configured header `name` and its value in the request; a value that is not
    /// visible ASCII is refused, never taken as absent.
    fn header<'s>(
        &'s self,
        name: &'s Option<String>,
    ) -> Result<Option<(&'s str, Option<&'s str>)>, IdentityError> {
        let Some(name) = name.as_deref() else {
            return Ok(None);
        };
        let value = self.headers.and_then(|h| h.get(name));
        match value.map(|v| v.to_str()) {
            None => Ok(Some((name, None))),
            Some(Ok(text)) => Ok(Some((name, Some(text)))),
            Some(Err(_)) => Err(IdentityError::BadHeader {
                name: name.to_owned(),
                problem: "is not visible ASCII",
            }),
        }
    }

    /// Runs the call.
    pub async fn call(
        &self,
        request: CallToolRequestParams,
    ) -> Result<CallToolResponse, ErrorData> {
        let config = &self.inner.config;
        let request_meta = &self.meta;
        let meta = LedgerMeta::from_meta(request_meta).map_err(|e| invalid(e.to_string()))?;
        if let Some(claimed) = meta.tenant.as_deref().filter(|t| *t != self.tenant.name) {
            return Err(invalid(format!(
                "wrong tenant: _meta names {claimed:?}, the token belongs to {:?}",
                self.tenant.name
            )));
        }
        let mut arguments = request.arguments.clone().unwrap_or_default();
        let key_value = self
            .tool
            .key_argument
            .as_ref()
            .and_then(|name| arguments.remove(name));
        if let Some(name) = &self.tool.provider_key_argument {
            // The gateway alone sets it.
            arguments.remove(name);
        }
        let arguments_json = Value::Object(arguments.clone()).to_string();
        let ledger_tool = self.tool.ledger_name();
        let target = target_of(&arguments_json, &self.policy.target_fields)
            .map_err(|e| invalid(format!("effect target: {e}")))?;
        let headers = self
            .header(&config.conversation_header)
            .and_then(|c| Ok((c, self.header(&config.turn_header)?)));
        let (conversation, turn) = match headers {
            Ok(headers) => headers,
            Err(e) => {
                return Ok(refused(
                    &self.tool.name,
                    "no_identity",
                    e.to_string(),
                    "send the header as visible ASCII text",
                ))
            }
        };
        let offered = Offered {
            tenant: &self.tenant.name,
            namespace: &config.namespace,
            tool: &ledger_tool,
            meta: &meta,
            key_argument: self
                .tool
                .key_argument
                .as_deref()
                .map(|name| (name, key_value.as_ref())),
            key_argument_min_chars: self.tool.key_argument_min_chars,
            derive: self.tool.derive_key,
            conversation,
            turn,
            target: target.as_deref(),
        };
        let identity = match resolve(&offered) {
            Ok(identity) => identity,
            Err(e) => {
                return Ok(refused(
                    &self.tool.name,
                    "no_identity",
                    e.to_string(),
                    "call again with one of the fields named; a retry of the same effect \
                     must carry the same one",
                ))
            }
        };
        if let Some(short) = &identity.short_key {
            // Only an effect that already exists goes on under a short key: a retry of one
            // made before the minimum, refused here, would come back under a new value and
            // be sent again.
            match self.tenant.runner.ledger().get(identity.key.clone()).await {
                Ok(Some(_)) => {}
                Ok(None) => {
                    return Ok(refused(
                        &self.tool.name,
                        "no_identity",
                        short.to_string(),
                        "call again with a fresh random value (a UUID, say) for this effect, \
                         and send that value again on every retry",
                    ))
                }
                Err(ClientError::Refused(r)) => {
                    return Err(ledger_mcp::reply::refusal(&identity.key, &r))
                }
                Err(e) => {
                    return Ok(refused(
                        &self.tool.name,
                        "not_started",
                        format!("the ledger could not be reached: {e}"),
                        "nothing was sent; call again",
                    ))
                }
            }
        }
        let key_argument = self.tool.key_argument.as_ref().zip(key_value.as_ref());
        let declaration = declaration(
            &identity,
            &ledger_tool,
            &self.tenant.name,
            target,
            intent_of(&arguments, key_argument, &identity),
        );
        if meta.amend {
            if let Some(refused) =
                ledger_mcp::reply::amend(&self.tenant.runner, &declaration).await?
            {
                return Ok(refused.into());
            }
        }
        let mut forwarded = arguments;
        if self.tool.forward_key_argument {
            if let (Some(name), Some(value)) = (&self.tool.key_argument, key_value) {
                forwarded.insert(name.clone(), value);
            }
        }
        let template = Dispatch {
            name: request.name.to_string(),
            arguments: forwarded,
            meta: forwarded_meta(request_meta),
            request_state: request.request_state.clone(),
            input_responses: request.input_responses.clone(),
        };
        self.run(&identity, declaration, template).await
    }

    async fn run(
        &self,
        identity: &Identity,
        declaration: Declaration,
        template: Dispatch,
    ) -> Result<CallToolResponse, ErrorData> {
        let key = declaration.key.clone();
        let last: Mutex<Option<LastAnswer>> = Mutex::new(None);
        let mut effect = self
            .tenant
            .runner
            .effect(EffectCall {
                declaration,
                confirmation: None,
            })
            .wait_in_flight(self.inner.config.wait_in_flight_ms);
        if let Some(lookup) = self.lookup {
            effect = effect.reconcile_with(lookup);
        }
        let result = effect
            .run(|attempt| {
                let params = template.params(self.tool, &attempt.provider_key);
                let last = &last;
                async move {
                    let answer = self.upstream.call_tool(params).await;
                    let proven = classify(&self.tool.before_effect, &answer);
                    let committed = matches!(proven, DispatchResult::Committed { .. });
                    // What the latest dispatch answered, and nothing older.
                    *last.lock().unwrap_or_else(|p| p.into_inner()) =
                        answer.ok().map(|response| LastAnswer {
                            response,
                            committed,
                        });
                    proven
                }
            })
            .await;
        let last = last.into_inner().unwrap_or_else(|p| p.into_inner());
        answer(&key, identity.source.as_str(), result, last)
    }
}

/// The latest dispatch's answer, and whether it is what committed the effect.
struct LastAnswer {
    response: CallToolResponse,
    committed: bool,
}

/// The answer to the client, from what running the effect came to and what the latest
/// dispatch (if any) answered.
fn answer(
    key: &EffectKey,
    source: &str,
    result: Result<EffectOutcome, ledger_client::RunError>,
    last: Option<LastAnswer>,
) -> Result<CallToolResponse, ErrorData> {
    // Every answer but those `finish` makes (which counts them) is counted here.
    let count = || ledger_mcp::metrics::count_effect(&result);
    let last = last.map(|l| (l.response, l.committed));
    let response = match (&result, last) {
        // The upstream's own answer when it is what committed the effect; the receipt
        // otherwise: what a look-up found after this dispatch was declared to have done
        // nothing (a user's "no") would else be marked done with the "no" as its body.
        (Ok(EffectOutcome::Done { .. }), Some((response, true))) => {
            count();
            return Ok(marked(response, key, "done", source, DONE_ADVICE));
        }
        (Ok(EffectOutcome::Done { receipt }), _) => {
            count();
            return Ok(marked(
                answer_from(receipt),
                key,
                "done",
                source,
                DONE_ADVICE,
            ));
        }
        (Ok(EffectOutcome::Replayed { receipt }), _) => {
            count();
            return Ok(marked(
                answer_from(receipt),
                key,
                "replayed",
                source,
                DONE_ADVICE,
            ));
        }
        (
            Ok(EffectOutcome::FailedBeforeEffect { .. }),
            Some((response @ CallToolResponse::InputRequired(_), _)),
        ) => {
            count();
            return Ok(response);
        }
        (
            Ok(EffectOutcome::FailedBeforeEffect { .. }),
            Some((CallToolResponse::Complete(r), _)),
        ) => {
            count();
            let advice = if r.is_error == Some(true) {
                "nothing took effect; correct the request before calling again"
            } else {
                "the upstream did nothing (it declares so for this answer); calling \
                 again with the same identity may do it"
            };
            return Ok(marked(
                r.into(),
                key,
                "failed_before_effect",
                source,
                advice,
            ));
        }
        (Ok(EffectOutcome::FailedBeforeEffect { proof }), None) => {
            count();
            return Ok(failure(json!({
                "effect": {
                    "key": key.to_string(),
                    "outcome": "failed_before_effect",
                    "source": source,
                },
                "detail": proof,
                "advice": "nothing was sent to the upstream or it refused the request as \
                           such; call again later with the same identity",
            }))
            .into());
        }
        _ => finish(key, result)?,
    };
    Ok(match response {
        Finished::Committed { receipt, replayed } => {
            let outcome = if replayed { "replayed" } else { "done" };
            marked(
                answer_from(&receipt.to_string()),
                key,
                outcome,
                source,
                DONE_ADVICE,
            )
        }
        Finished::NotCommitted(mut body) => {
            body["effect"]["source"] = json!(source);
            failure(body).into()
        }
    })
}

const DONE_ADVICE: &str = "the effect is committed; a retry with the same identity answers \
                           this result again and sends nothing";

/// `response` with the effect's key, outcome, identity source and advice in its `_meta`.
fn marked(
    response: CallToolResponse,
    key: &EffectKey,
    outcome: &str,
    source: &str,
    advice: &str,
) -> CallToolResponse {
    let note = json!({
        "key": key.to_string(),
        "outcome": outcome,
        "identity": source,
        "advice": advice,
    });
    match response {
        CallToolResponse::Complete(mut result) => {
            let mut meta = result.meta.take().map(|m| m.0).unwrap_or_default();
            // The upstream's protocol fields describe the upstream, not the gateway.
            meta.retain(|k, _| !k.starts_with("io.modelcontextprotocol/"));
            meta.insert(EFFECT_META.into(), note);
            result.meta = Some(MetaObject(meta));
            CallToolResponse::Complete(result)
        }
        other => other,
    }
}

/// The intent bound to the effect: the arguments the upstream acts on (without the key
/// and provider-key arguments), and the key argument too when it is not what names the
/// effect ([`Identity::intent_keeps_key_argument`]): a call in the same turn with another
/// value is then a conflict naming it, never a replay of the first effect's receipt.
fn intent_of(
    arguments: &JsonObject,
    key_argument: Option<(&String, &Value)>,
    identity: &Identity,
) -> String {
    let mut intent = arguments.clone();
    if let Some((name, value)) = key_argument.filter(|_| identity.intent_keeps_key_argument()) {
        intent.insert(name.clone(), value.clone());
    }
    Value::Object(intent).to_string()
}

fn declaration(
    identity: &Identity,
    tool: &ToolName,
    tenant: &str,
    target: Option<String>,
    intent_json: String,
) -> Declaration {
    Declaration {
        key: identity.key.clone(),
        workflow_id: identity.workflow_id.clone(),
        tool: ToolRef {
            provider: tool.provider.clone(),
            name: tool.name.clone(),
            contract_version: "v1".into(),
        },
        authority: Authority {
            principal: format!("agent:{tenant}"),
            policy_generation: 1,
        },
        // A tool whose policy names no target acts on nothing narrower than itself.
        target: target.unwrap_or_else(|| tool.to_string()),
        intent_json,
    }
}

/// What every dispatch of one call sends, but the provider key.
struct Dispatch {
    name: String,
    arguments: JsonObject,
    meta: Map<String, Value>,
    request_state: Option<String>,
    input_responses: Option<rmcp::model::InputResponses>,
}

impl Dispatch {
    /// The upstream request of an attempt whose provider key is `provider_key`.
    fn params(&self, tool: &ToolConfig, provider_key: &str) -> CallToolRequestParams {
        let mut arguments = self.arguments.clone();
        if let Some(name) = &tool.provider_key_argument {
            arguments.insert(name.clone(), json!(provider_key));
        }
        let mut meta = self.meta.clone();
        if let Some(name) = &tool.provider_key_meta {
            meta.insert(name.clone(), json!(provider_key));
        }
        let mut params = CallToolRequestParams::new(self.name.clone()).with_arguments(arguments);
        if !meta.is_empty() {
            params.meta = Some(RequestMetaObject(MetaObject(meta)));
        }
        params.request_state = self.request_state.clone();
        params.input_responses = self.input_responses.clone();
        params
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ContentBlock, ErrorCode};

    fn rule() -> BeforeEffect {
        BeforeEffect {
            tool_error_pointer: Some("/error".into()),
            tool_error_values: vec![json!("invalid_amount")],
            ..BeforeEffect::default()
        }
    }

    fn error_result(body: Value) -> CallToolResponse {
        let mut r = CallToolResult::structured_error(body);
        r.content = vec![ContentBlock::text("it failed")];
        r.into()
    }

    #[test]
    fn only_declared_failures_prove_that_nothing_happened() {
        let committed = Ok(CallToolResult::structured(json!({ "id": 1 })).into());
        assert!(matches!(
            classify(&rule(), &committed),
            DispatchResult::Committed { .. }
        ));
        let declared = Ok(error_result(json!({ "error": "invalid_amount" })));
        assert!(matches!(
            classify(&rule(), &declared),
            DispatchResult::NotCommitted { .. }
        ));
        let undeclared = Ok(error_result(json!({ "error": "database timeout" })));
        assert!(matches!(
            classify(&rule(), &undeclared),
            DispatchResult::Unknown { .. }
        ));
        let declined = Ok(CallToolResult::structured(json!({ "declined": true })).into());
        assert!(matches!(
            classify(&rule(), &declined),
            DispatchResult::Committed { .. }
        ));
        let nothing_done = BeforeEffect {
            result_pointer: Some("/declined".into()),
            result_values: vec![json!(true)],
            ..rule()
        };
        assert!(matches!(
            classify(&nothing_done, &declined),
            DispatchResult::NotCommitted { .. }
        ));
        let all = BeforeEffect {
            all_tool_errors: true,
            ..BeforeEffect::default()
        };
        assert!(matches!(
            classify(&all, &undeclared),
            DispatchResult::NotCommitted { .. }
        ));
    }

    #[test]
    fn transport_failures_are_unknown_unless_nothing_was_sent() {
        let upstream = || "shop".to_string();
        let not_sent = Err(UpstreamError::NotSent {
            upstream: upstream(),
            detail: "connection refused".into(),
        });
        assert!(matches!(
            classify(&rule(), &not_sent),
            DispatchResult::NotCommitted { .. }
        ));
        let lost = Err(UpstreamError::Lost {
            upstream: upstream(),
            detail: "no answer within 2s".into(),
        });
        assert!(matches!(
            classify(&rule(), &lost),
            DispatchResult::Unknown { .. }
        ));
        let no_such_method = Err(UpstreamError::Rpc {
            upstream: upstream(),
            error: ErrorData::method_not_found::<rmcp::model::CallToolRequestMethod>(),
        });
        assert!(matches!(
            classify(&rule(), &no_such_method),
            DispatchResult::NotCommitted { .. }
        ));
        let refused_inside = |code| {
            Err(UpstreamError::Rpc {
                upstream: upstream(),
                error: ErrorData::new(ErrorCode(code), "refused", None),
            })
        };
        // -32602 too: the Python SDK passes an MCPError its tool raises (INVALID_PARAMS
        // after a write, say) back unchanged.
        for code in [-32602, -32600, -32021] {
            assert!(
                matches!(
                    classify(&rule(), &refused_inside(code)),
                    DispatchResult::Unknown { .. }
                ),
                "{code} is answered from inside a running tool too"
            );
            let declared = BeforeEffect {
                jsonrpc_codes: vec![code],
                ..rule()
            };
            assert!(matches!(
                classify(&declared, &refused_inside(code)),
                DispatchResult::NotCommitted { .. }
            ));
        }
        let internal = Err(UpstreamError::Rpc {
            upstream: upstream(),
            error: ErrorData::internal_error("boom", None),
        });
        assert!(matches!(
            classify(&rule(), &internal),
            DispatchResult::Unknown { .. }
        ));
    }

    #[test]
    fn the_ledgers_and_the_protocols_meta_stay_at_the_gateway() {
        let meta = json!({
            "dev.effect-ledger/effect-key": "k",
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "progressToken": 3,
            "shop.example/trace": "t-1",
        });
        let kept = forwarded_meta(meta.as_object().unwrap());
        assert_eq!(Value::Object(kept), json!({ "shop.example/trace": "t-1" }));
    }

    #[test]
    fn each_attempt_carries_the_provider_key_where_the_upstream_wants_it() {
        let tool: ToolConfig = toml::from_str(
            r#"
            name = "create_ticket"
            upstream = "shop"
            provider_key_meta = "shop.example/external-ref"
            provider_key_argument = "external_ref"
            "#,
        )
        .unwrap();
        let dispatch = Dispatch {
            name: "create_ticket".into(),
            arguments: json!({ "subject": "s" }).as_object().cloned().unwrap(),
            meta: Map::new(),
            request_state: None,
            input_responses: None,
        };
        let params = dispatch.params(&tool, "pk-9");
        let args = params.arguments.unwrap();
        assert_eq!(args["external_ref"], "pk-9");
        assert_eq!(args["subject"], "s");
        assert_eq!(
            params.meta.unwrap().0 .0["shop.example/external-ref"],
            "pk-9"
        );
    }

    fn effect_key() -> EffectKey {
        ledger_client::effect_key(
            "acme",
            "gateway",
            ledger_client::KeySource::Explicit("wf-1/t-1"),
        )
        .unwrap()
    }

    fn meta_of(response: &CallToolResponse) -> Value {
        match response {
            CallToolResponse::Complete(r) => r.meta.as_ref().unwrap().0[EFFECT_META].clone(),
            other => panic!("{other:?}"),
        }
    }

    fn body_of(response: &CallToolResponse) -> Value {
        match response {
            CallToolResponse::Complete(r) => r.structured_content.clone().unwrap(),
            other => panic!("{other:?}"),
        }
    }

    /// A refund in one turn named by `_meta`, then another with a new key argument: the
    /// two intents differ in that argument, so the second is a conflict naming it, never
    /// a replay of the first refund's receipt.
    #[test]
    fn with_meta_a_new_key_argument_is_another_intent_not_a_replay() {
        let identity = |source| Identity {
            key: effect_key(),
            workflow_id: "wf-1".into(),
            source,
            short_key: None,
        };
        let arguments = json!({ "order_id": "o1", "amount_cents": 500 });
        let arguments = arguments.as_object().unwrap();
        let name = "request_id".to_string();
        let (a, b) = (json!("a"), json!("b"));
        let meta = identity(crate::identity::Source::Meta);
        let first = intent_of(arguments, Some((&name, &a)), &meta);
        let second = intent_of(arguments, Some((&name, &b)), &meta);
        assert_ne!(first, second);
        let first: Value = serde_json::from_str(&first).unwrap();
        assert_eq!(first["request_id"], "a");
        // Named by the key argument, the argument is the key, not the intent.
        let by_argument = identity(crate::identity::Source::KeyArgument);
        assert_eq!(
            intent_of(arguments, Some((&name, &a)), &by_argument),
            Value::Object(arguments.clone()).to_string()
        );
    }

    /// A dispatch declared to have done nothing (a user's "no"), after which a look-up
    /// found an earlier dispatch committed: the answer is the receipt, not the "no".
    #[test]
    fn done_by_a_look_up_answers_the_receipt_not_the_latest_uncommitted_answer() {
        let key = effect_key();
        let earlier = CallToolResult::structured(json!({ "closure": { "id": "C-1" } }));
        let declined = CallToolResult::structured(json!({ "declined": true }));
        let done = || {
            Ok(EffectOutcome::Done {
                receipt: receipt_of(&earlier),
            })
        };
        let last = |committed| {
            Some(LastAnswer {
                response: declined.clone().into(),
                committed,
            })
        };
        let answered = answer(&key, "derived", done(), last(false)).unwrap();
        assert_eq!(body_of(&answered), json!({ "closure": { "id": "C-1" } }));
        assert_eq!(meta_of(&answered)["outcome"], "done");
        // The upstream's own answer when it is what committed.
        let answered = answer(&key, "derived", done(), last(true)).unwrap();
        assert_eq!(body_of(&answered), json!({ "declined": true }));
    }
}
