//! Effect keys, derived by code and never by a model.
//!
//! A key is either handed over explicitly by the caller (an agent runtime that keeps its
//! own durable step ids; for MCP, a `_meta` field), or derived from durable workflow
//! state: the workflow id, the step or turn id, the tool and the *target*, the logical
//! resource the mutation changes (an order id, a service), read from the intent at the
//! JSON pointers the operator's tool policy names (`target_fields`). Both forms are
//! stable across retries, instances and restarts, so a retried call names the same
//! effect; neither contains anything a model chose freely.
//!
//! The intent is never part of the identity; it is bound to it (design §2). A model that
//! repairs a call in the same turn (another amount for the same order) therefore names
//! the *same* effect, and the ledger answers a conflict naming the changed fields instead
//! of granting a second refund. A second effect on the same target in the same turn is
//! an explicit transition: a new explicit key, or a sequence number from the runtime
//! (`sequence`), which is part of the derived identity.

use ledger_core::intent::{canonicalize, hex, IntentError};
use ledger_core::key::FieldError;
use ledger_core::{EffectKey, ToolName};

/// Prefix of derived keys; a new derivation gets a new prefix, never a changed meaning.
/// (`d1-` keys hashed the intent into the identity and are no longer made.)
const DERIVED_KEY_PREFIX: &str = "d2-";

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
        /// The normalized target, from [`target_of`]; `None` when the tool's policy names
        /// no target fields (one effect per tool per turn).
        target: Option<&'a str>,
        /// The runtime's sequence number for an intended further effect on the same
        /// target in the same turn; `None` for the first.
        sequence: Option<&'a str>,
    },
}

/// Why no key could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The key, tenant or namespace breaks the ledger's rules.
    #[error(transparent)]
    InvalidField(#[from] FieldError),
    /// The intent cannot be canonicalised, or a target pointer is not a JSON pointer.
    #[error(transparent)]
    InvalidIntent(#[from] IntentError),
    /// A part of a derived key is empty.
    #[error("{0} is empty; a derived key needs a workflow id and a step id")]
    EmptyPart(&'static str),
    /// The intent has no value where the policy says the target is.
    #[error(
        "the intent has no value at target field {0}; the tool's policy names the target there"
    )]
    MissingTarget(String),
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
            target,
            sequence,
        } => derive(workflow_id, step_id, tool, target, sequence)?,
    };
    let key = EffectKey::new(tenant, namespace, key);
    key.validate()?;
    Ok(key)
}

/// The normalized target of an intent: the canonical JSON of the values at
/// `target_fields` (JSON pointers, RFC 6901), as an array in the policy's order. `None`
/// when the policy names no target fields. Member order, spacing and number forms do not
/// change it (`5` and `5.0` are one target); a missing field is an error, never a
/// silently broader identity.
pub fn target_of(intent_json: &str, target_fields: &[String]) -> Result<Option<String>, KeyError> {
    if target_fields.is_empty() {
        return Ok(None);
    }
    let canonical = canonicalize(intent_json, &[])?;
    let intent: serde_json::Value =
        serde_json::from_str(&canonical.json).map_err(|e| IntentError::Malformed(e.to_string()))?;
    let mut values = Vec::with_capacity(target_fields.len());
    for pointer in target_fields {
        ledger_core::intent::validate_pointer(pointer)?;
        let value = intent
            .pointer(pointer)
            .ok_or_else(|| KeyError::MissingTarget(pointer.clone()))?;
        values.push(value.clone());
    }
    let array = serde_json::Value::Array(values).to_string();
    Ok(Some(canonicalize(&array, &[])?.json))
}

/// `d2-` and the SHA-256 of a canonical JSON array of the parts: no separator inside a
/// part can make two different sets of parts derive the same key.
fn derive(
    workflow_id: &str,
    step_id: &str,
    tool: &ToolName,
    target: Option<&str>,
    sequence: Option<&str>,
) -> Result<String, KeyError> {
    if workflow_id.is_empty() {
        return Err(KeyError::EmptyPart("workflow id"));
    }
    if step_id.is_empty() {
        return Err(KeyError::EmptyPart("step id"));
    }
    let parts = serde_json::json!([
        "effect-ledger/derived-key/v2",
        workflow_id,
        step_id,
        tool.provider,
        tool.name,
        target,
        sequence,
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

    fn derived(workflow: &str, step: &str, target: Option<&str>, seq: Option<&str>) -> EffectKey {
        let tool = refund();
        let source = KeySource::Derived {
            workflow_id: workflow,
            step_id: step,
            tool: &tool,
            target,
            sequence: seq,
        };
        effect_key("acme", "mcp", source).unwrap()
    }

    fn order_target(intent: &str) -> Option<String> {
        target_of(intent, &["/order_id".to_owned()]).unwrap()
    }

    #[test]
    fn a_repaired_intent_names_the_same_effect() {
        let first = order_target(r#"{"order_id":"o1","amount_cents":500}"#);
        let repaired = order_target(r#"{ "amount_cents": 5000, "order_id": "o1" }"#);
        assert_eq!(first, repaired);
        let a = derived("wf", "t1", first.as_deref(), None);
        let b = derived("wf", "t1", repaired.as_deref(), None);
        assert_eq!(
            a, b,
            "the amount is bound to the effect, not part of its identity"
        );
        assert!(
            a.key.starts_with("d2-") && a.key.len() == 3 + 64,
            "{}",
            a.key
        );
    }

    #[test]
    fn another_target_or_sequence_is_another_effect() {
        let o1 = order_target(r#"{"order_id":"o1","amount_cents":500}"#);
        let o2 = order_target(r#"{"order_id":"o2","amount_cents":500}"#);
        let base = derived("wf", "t1", o1.as_deref(), None);
        for other in [
            derived("wf2", "t1", o1.as_deref(), None),
            derived("wf", "t2", o1.as_deref(), None),
            derived("wf", "t1", o2.as_deref(), None),
            derived("wf", "t1", None, None),
            derived("wf", "t1", o1.as_deref(), Some("2")),
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
            target: o1.as_deref(),
            sequence: None,
        };
        assert_ne!(base, effect_key("acme", "mcp", other_tool).unwrap());
    }

    #[test]
    fn targets_are_normalized() {
        let fields = ["/order/id".to_owned(), "/n".to_owned()];
        let a = target_of(r#"{"order":{"id":"o1"},"n":5,"x":1}"#, &fields).unwrap();
        let b = target_of(r#"{"n":5.0,"order":{"id":"o1"},"x":2}"#, &fields).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.as_deref(), Some(r#"["o1",5]"#));
        assert_eq!(target_of(r#"{"a":1}"#, &[]).unwrap(), None);
    }

    #[test]
    fn a_missing_or_malformed_target_is_refused() {
        assert_eq!(
            target_of(r#"{"amount":5}"#, &["/order_id".to_owned()]),
            Err(KeyError::MissingTarget("/order_id".into()))
        );
        assert!(matches!(
            target_of(r#"{"order_id":"o1"}"#, &["order_id".to_owned()]),
            Err(KeyError::InvalidIntent(IntentError::BadPointer(_)))
        ));
        assert!(matches!(
            target_of(
                r#"{"order_id":"o1","order_id":"o2"}"#,
                &["/order_id".to_owned()]
            ),
            Err(KeyError::InvalidIntent(_))
        ));
    }

    #[test]
    fn parts_cannot_be_shifted_across_the_boundary() {
        assert_ne!(
            derived("wf/a", "b", None, None),
            derived("wf", "a/b", None, None)
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
    fn derived_keys_need_both_ids() {
        let tool = refund();
        for (workflow, step, missing) in [("", "t", "workflow id"), ("wf", "", "step id")] {
            let source = KeySource::Derived {
                workflow_id: workflow,
                step_id: step,
                tool: &tool,
                target: None,
                sequence: None,
            };
            assert_eq!(
                effect_key("acme", "mcp", source),
                Err(KeyError::EmptyPart(missing))
            );
        }
    }
}
