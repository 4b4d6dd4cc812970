//! Settling an unknown outcome with one of the upstream's own read tools.
//!
//! Per protected tool the operator names a look-up tool, its arguments (with the
//! effect's provider key in them) and where in its result the effect shows. The answer
//! is only what was seen: found (committed, with the found item as receipt), not found,
//! or unknown. Whether "not found" proves anything is the ledger's judgement under the
//! tool's policy (design §7: only from a look-up under an attempt granted after the
//! latest dispatch's lease end plus the processing bound and the visibility lag; the
//! client library waits for that and looks again), never this module's.

use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, JsonObject};
use serde_json::Value;

use ledger_client::reconcile::{BoxFuture, Observation, ProviderAdapter};
use ledger_core::EffectRecord;

use crate::config::LookupConfig;
use crate::receipt::{receipt_of, text_of};
use crate::upstream::Upstream;

/// Looks effects up through an upstream's read tool.
pub struct UpstreamLookup {
    upstream: Arc<Upstream>,
    config: LookupConfig,
}

/// `template` with every `{provider_key}` in its strings replaced by `provider_key`.
pub fn fill(template: &Value, provider_key: &str) -> Value {
    match template {
        Value::String(s) => Value::String(s.replace("{provider_key}", provider_key)),
        Value::Array(items) => Value::Array(items.iter().map(|v| fill(v, provider_key)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), fill(v, provider_key)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// What a look-up tool's successful result says about the effect.
pub fn judge(config: &LookupConfig, result: &CallToolResult) -> Observation {
    let body = match &result.structured_content {
        Some(body) => body.clone(),
        None => match serde_json::from_str::<Value>(&text_of(result)) {
            Ok(body) => body,
            Err(_) => {
                return Observation::Unknown {
                    detail: format!(
                        "look-up {} answered neither structured content nor JSON text",
                        config.tool
                    ),
                }
            }
        },
    };
    let at = body.pointer(&config.found);
    let found = |item: Value| {
        let kept = match &config.receipt {
            Some(pointer) => body.pointer(pointer).cloned().unwrap_or(item),
            None => item,
        };
        Observation::Committed {
            receipt: receipt_of(&CallToolResult::structured(kept)),
            detail: format!("look-up {} found it", config.tool),
        }
    };
    let not_found = || Observation::NotCommitted {
        detail: format!("look-up {} found nothing", config.tool),
    };
    match (&config.equals, at) {
        (Some(expected), Some(value)) if value == expected => found(body.clone()),
        (Some(_), Some(Value::Null)) => not_found(),
        (Some(_), None) => Observation::Unknown {
            detail: format!("look-up {} has nothing at {}", config.tool, config.found),
        },
        (Some(expected), Some(value)) => Observation::Unknown {
            detail: format!(
                "look-up {} shows {} = {value}, not {expected}",
                config.tool, config.found
            ),
        },
        (None, Some(Value::Array(items))) => match items.first() {
            Some(first) => found(first.clone()),
            None => not_found(),
        },
        (None, Some(other)) => Observation::Unknown {
            detail: format!(
                "look-up {} shows {other} at {}, not a list",
                config.tool, config.found
            ),
        },
        (None, None) => Observation::Unknown {
            detail: format!("look-up {} has nothing at {}", config.tool, config.found),
        },
    }
}

impl UpstreamLookup {
    /// Looks up with `config`'s tool on `upstream`.
    pub fn new(upstream: Arc<Upstream>, config: LookupConfig) -> Self {
        UpstreamLookup { upstream, config }
    }

    /// What the look-up tool says about the effect sent with `provider_key`.
    pub async fn find(&self, provider_key: &str) -> Observation {
        let arguments = match fill(&self.config.arguments, provider_key) {
            Value::Object(map) => map,
            _ => JsonObject::new(),
        };
        let params = CallToolRequestParams::new(self.config.tool.clone()).with_arguments(arguments);
        match self.upstream.call_tool(params).await {
            Ok(CallToolResponse::Complete(result)) if result.is_error != Some(true) => {
                judge(&self.config, &result)
            }
            Ok(CallToolResponse::Complete(result)) => Observation::Unknown {
                detail: format!(
                    "look-up {} answered an error: {}",
                    self.config.tool,
                    text_of(&result)
                ),
            },
            Ok(_) => Observation::Unknown {
                detail: format!("look-up {} did not answer with a result", self.config.tool),
            },
            Err(e) => Observation::Unknown {
                detail: e.to_string(),
            },
        }
    }
}

impl ProviderAdapter for UpstreamLookup {
    fn observe<'a>(&'a self, effect: &'a EffectRecord) -> BoxFuture<'a, Observation> {
        Box::pin(self.find(&effect.provider_key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(equals: Option<Value>) -> LookupConfig {
        LookupConfig {
            tool: "find_refunds".into(),
            arguments: json!({ "idempotency_key": "{provider_key}", "limit": 1 }),
            found: if equals.is_some() {
                "/status"
            } else {
                "/refunds"
            }
            .into(),
            equals,
            receipt: None,
        }
    }

    #[test]
    fn the_provider_key_fills_the_argument_template() {
        let filled = fill(&config(None).arguments, "pk-1");
        assert_eq!(filled, json!({ "idempotency_key": "pk-1", "limit": 1 }));
    }

    #[test]
    fn a_list_is_found_when_not_empty_and_proves_nothing_otherwise() {
        let c = config(None);
        let hit = CallToolResult::structured(json!({ "refunds": [{ "id": "re_1" }] }));
        match judge(&c, &hit) {
            Observation::Committed { receipt, .. } => assert!(receipt.contains("re_1")),
            other => panic!("{other:?}"),
        }
        let empty = CallToolResult::structured(json!({ "refunds": [] }));
        assert!(matches!(
            judge(&c, &empty),
            Observation::NotCommitted { .. }
        ));
        let odd = CallToolResult::structured(json!({ "refunds": "many" }));
        assert!(matches!(judge(&c, &odd), Observation::Unknown { .. }));
        let missing = CallToolResult::structured(json!({}));
        assert!(matches!(judge(&c, &missing), Observation::Unknown { .. }));
    }

    #[test]
    fn a_value_is_found_when_equal_absent_when_null_unknown_otherwise() {
        let c = config(Some(json!("succeeded")));
        let done = CallToolResult::structured(json!({ "status": "succeeded" }));
        assert!(matches!(judge(&c, &done), Observation::Committed { .. }));
        let none = CallToolResult::structured(json!({ "status": null }));
        assert!(matches!(judge(&c, &none), Observation::NotCommitted { .. }));
        let other_shape = CallToolResult::structured(json!({ "error": "rate limited" }));
        assert!(matches!(
            judge(&c, &other_shape),
            Observation::Unknown { .. }
        ));
        let pending = CallToolResult::structured(json!({ "status": "pending" }));
        assert!(matches!(judge(&c, &pending), Observation::Unknown { .. }));
    }

    #[test]
    fn json_text_counts_when_there_is_no_structured_content() {
        let c = config(None);
        let text = CallToolResult::success(vec![rmcp::model::ContentBlock::text(
            json!({ "refunds": [] }).to_string(),
        )]);
        assert!(matches!(judge(&c, &text), Observation::NotCommitted { .. }));
    }
}
