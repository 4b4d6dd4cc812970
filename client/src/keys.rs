//! Effect keys, derived by code and never by a model.
//!
//! A key is either handed over explicitly by the caller (an agent runtime that keeps its
//! own durable step ids; for MCP, a `_meta` field), or derived from durable workflow
//! state: the workflow id, the step or turn id, the tool and the canonical intent. Both
//! forms are stable across retries, instances and restarts, so a retried call names the
//! same effect; neither contains anything a model chose freely.
//!
//! A derived key includes the canonical intent: the same tool called twice in one turn
//! with the same arguments is one effect, and a call whose arguments differ is another
//! effect. An explicit key carries no intent, so the ledger compares intents and reports
//! a reuse with different arguments as a conflict naming the differing fields.

use ledger_core::intent::{canonicalize, hex, IntentError};
use ledger_core::key::FieldError;
use ledger_core::{EffectKey, ToolName};

/// Prefix of derived keys; a new derivation gets a new prefix, never a changed meaning.
const DERIVED_KEY_PREFIX: &str = "d1-";

/// Where an effect's key comes from.
#[derive(Debug, Clone, Copy)]
pub enum KeySource<'a> {
    /// A key the caller chose in code, used as it is.
    Explicit(&'a str),
    /// A key derived from durable workflow state.
    Derived {
        /// The workflow (conversation, job, saga) the effect belongs to.
        workflow_id: &'a str,
        /// The step or turn within the workflow.
        step_id: &'a str,
        /// The tool.
        tool: &'a ToolName,
        /// The intent as JSON text.
        intent_json: &'a str,
        /// JSON pointers the tool's policy removes before hashing (request ids,
        /// timestamps), so a retry that regenerates them derives the same key.
        volatile_fields: &'a [String],
    },
}

/// Why no key could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The key, tenant or namespace breaks the ledger's rules.
    #[error(transparent)]
    InvalidField(#[from] FieldError),
    /// The intent cannot be canonicalised.
    #[error(transparent)]
    InvalidIntent(#[from] IntentError),
    /// A part of a derived key is empty.
    #[error("{0} is empty; a derived key needs a workflow id and a step id")]
    EmptyPart(&'static str),
}

/// The scoped key of an effect of `tenant` in `namespace`, from `source`.
pub fn effect_key(
    tenant: &str,
    namespace: &str,
    source: KeySource<'_>,
) -> Result<EffectKey, KeyError> {
    let key = match source {
        KeySource::Explicit(key) => key.to_owned(),
        KeySource::Derived {
            workflow_id,
            step_id,
            tool,
            intent_json,
            volatile_fields,
        } => derive(workflow_id, step_id, tool, intent_json, volatile_fields)?,
    };
    let key = EffectKey::new(tenant, namespace, key);
    key.validate()?;
    Ok(key)
}

/// `d1-` and the SHA-256 of a canonical JSON array of the parts: no separator inside a
/// part can make two different sets of parts derive the same key.
fn derive(
    workflow_id: &str,
    step_id: &str,
    tool: &ToolName,
    intent_json: &str,
    volatile_fields: &[String],
) -> Result<String, KeyError> {
    if workflow_id.is_empty() {
        return Err(KeyError::EmptyPart("workflow id"));
    }
    if step_id.is_empty() {
        return Err(KeyError::EmptyPart("step id"));
    }
    let intent = canonicalize(intent_json, volatile_fields)?;
    let parts = serde_json::json!([
        "effect-ledger/derived-key/v1",
        workflow_id,
        step_id,
        tool.provider,
        tool.name,
        intent.json,
    ]);
    let digest = canonicalize(&parts.to_string(), &[])?;
    Ok(format!("{DERIVED_KEY_PREFIX}{}", hex(&digest.hash.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refund() -> ToolName {
        ToolName {
            provider: "pay".into(),
            name: "refund".into(),
        }
    }

    fn derived(workflow: &str, step: &str, intent: &str, volatile: &[String]) -> EffectKey {
        let tool = refund();
        let source = KeySource::Derived {
            workflow_id: workflow,
            step_id: step,
            tool: &tool,
            intent_json: intent,
            volatile_fields: volatile,
        };
        effect_key("acme", "mcp", source).unwrap()
    }

    #[test]
    fn derived_key_ignores_member_order_spacing_and_volatile_fields() {
        let volatile = vec!["/request_id".to_owned()];
        let a = derived(
            "wf",
            "t1",
            r#"{"amount":5,"order":"o1","request_id":"r1"}"#,
            &volatile,
        );
        let b = derived(
            "wf",
            "t1",
            r#"{ "order":"o1", "amount":5.0, "request_id":"r2" }"#,
            &volatile,
        );
        assert_eq!(a, b);
        assert!(
            a.key.starts_with("d1-") && a.key.len() == 3 + 64,
            "{}",
            a.key
        );
    }

    #[test]
    fn derived_key_changes_with_any_part() {
        let base = derived("wf", "t1", r#"{"amount":5}"#, &[]);
        for other in [
            derived("wf2", "t1", r#"{"amount":5}"#, &[]),
            derived("wf", "t2", r#"{"amount":5}"#, &[]),
            derived("wf", "t1", r#"{"amount":6}"#, &[]),
        ] {
            assert_ne!(base, other);
        }
        let tool = ToolName {
            provider: "pay".into(),
            name: "refund_v2".into(),
        };
        let other_tool = KeySource::Derived {
            workflow_id: "wf",
            step_id: "t1",
            tool: &tool,
            intent_json: r#"{"amount":5}"#,
            volatile_fields: &[],
        };
        assert_ne!(base, effect_key("acme", "mcp", other_tool).unwrap());
    }

    #[test]
    fn parts_cannot_be_shifted_across_the_boundary() {
        assert_ne!(
            derived("wf/a", "b", "{}", &[]),
            derived("wf", "a/b", "{}", &[])
        );
    }

    #[test]
    fn explicit_keys_are_checked_against_the_ledger_rules() {
        let ok = effect_key("acme", "mcp", KeySource::Explicit("wf-9/turn-3/refund")).unwrap();
        assert_eq!(ok.key, "wf-9/turn-3/refund");
        for bad in ["", "has#hash", "has space", &"k".repeat(300)] {
            assert!(matches!(
                effect_key("acme", "mcp", KeySource::Explicit(bad)),
                Err(KeyError::InvalidField(_))
            ));
        }
        assert!(effect_key("bad tenant", "mcp", KeySource::Explicit("k")).is_err());
    }

    #[test]
    fn derived_keys_need_both_ids_and_a_valid_intent() {
        let tool = refund();
        let mut source = KeySource::Derived {
            workflow_id: "",
            step_id: "t",
            tool: &tool,
            intent_json: "{}",
            volatile_fields: &[],
        };
        assert_eq!(
            effect_key("acme", "mcp", source),
            Err(KeyError::EmptyPart("workflow id"))
        );
        if let KeySource::Derived {
            workflow_id,
            intent_json,
            ..
        } = &mut source
        {
            *workflow_id = "wf";
            *intent_json = "{not json";
        }
        assert!(matches!(
            effect_key("acme", "mcp", source),
            Err(KeyError::InvalidIntent(_))
        ));
    }
}
