//! Which effect a protected `tools/call` names, from the first source that has it:
//!
//! 1. the request's `_meta`, set by an agent runtime (`dev.effect-ledger/effect-key`, or
//!    `workflow-id` and `turn-id`): the same fields and rules as `ledger-mcp-server`;
//! 2. the tool's key argument, which the gateway adds to the tool's input schema as
//!    required (the caller chooses one key per intended effect and repeats it on
//!    retries; at least the configured number of characters, since the key is the
//!    tenant's, shared by all its conversations, and a short value a model makes up
//!    (`refund-1`) would come round again in another conversation and be answered with
//!    the earlier effect's result);
//! 3. derivation from the authenticated tenant, the conversation header (and the turn
//!    header, when configured) and the target the operator's policy names in the
//!    arguments, for a tool without a key argument. A tool with one requires it: a call
//!    that left it out is refused, never derived, since a retry that dropped (or added)
//!    the argument would otherwise name another effect and be sent again.
//!
//! The arguments are never part of the identity: they are the intent, bound to it. A call
//! none of the sources names is refused before anything is stored, with a message that
//! says which field to supply. When `_meta` names the effect, the key argument names
//! nothing and stays in the intent (see [`Identity::intent_keeps_key_argument`]).

use serde_json::Value;

use ledger_client::{effect_key, KeySource};
use ledger_core::{EffectKey, ToolName};
use ledger_mcp::meta::{LedgerMeta, EFFECT_KEY, TURN_ID, WORKFLOW_ID};

/// Where a call's effect identity came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The request's `_meta`.
    Meta,
    /// The tool's key argument.
    KeyArgument,
    /// Tenant, conversation (and turn) and target.
    Derived,
}

impl Source {
    /// Its name in answers and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Meta => "meta",
            Source::KeyArgument => "key_argument",
            Source::Derived => "derived",
        }
    }
}

/// The effect a call names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Its scoped key.
    pub key: EffectKey,
    /// The workflow recorded with it.
    pub workflow_id: String,
    /// Where it came from.
    pub source: Source,
    /// Set when a key argument is shorter than the tool's minimum: the refusal a call
    /// gets unless the effect it names already exists. A short key made before the
    /// minimum (or before it was raised) goes on naming its effect, so that a retry of
    /// one is not refused into being sent again under a new value; no new effect is
    /// declared under one.
    pub short_key: Option<IdentityError>,
}

impl Identity {
    /// Whether the key argument belongs in the intent: when `_meta` names the effect,
    /// the model's key argument names nothing, and left out of the intent a second call
    /// in the same turn with another value would bind the same intent to the same key
    /// and be answered with the first effect's receipt. Kept in, it is a conflict naming
    /// the argument; a second effect in one turn takes the runtime's own new key or
    /// `_meta` sequence (DESIGN.md section 2).
    pub fn intent_keeps_key_argument(&self) -> bool {
        self.source == Source::Meta
    }
}

/// Why a call names no effect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// The `_meta` fields are malformed or incomplete.
    #[error(transparent)]
    Meta(#[from] ledger_mcp::meta::MetaError),
    /// The key argument is there but unusable.
    #[error("argument {name:?} {problem}")]
    BadKeyArgument {
        /// The argument.
        name: String,
        /// What is wrong.
        problem: &'static str,
    },
    /// The key argument is shorter than the tool's minimum.
    #[error(
        "argument {name:?} is shorter than {min_chars} characters: a short value may have been \
         used in another conversation, whose effect it would name; choose a fresh random value \
         (a UUID, say) for this effect and send it again on every retry"
    )]
    ShortKeyArgument {
        /// The argument.
        name: String,
        /// The minimum.
        min_chars: usize,
    },
    /// A header is there but unusable.
    #[error("header {name:?} {problem}")]
    BadHeader {
        /// The header.
        name: String,
        /// What is wrong.
        problem: &'static str,
    },
    /// No source names the effect.
    #[error("{0}")]
    Missing(String),
    /// The key breaks the ledger's rules.
    #[error("effect key: {0}")]
    Key(#[from] ledger_client::keys::KeyError),
}

/// What a call offers to name its effect.
#[derive(Debug, Clone, Copy)]
pub struct Offered<'a> {
    /// The tenant the bearer token belongs to.
    pub tenant: &'a str,
    /// The gateway's key namespace.
    pub namespace: &'a str,
    /// The tool, by its ledger name.
    pub tool: &'a ToolName,
    /// The ledger fields of the request's `_meta`.
    pub meta: &'a LedgerMeta,
    /// The key argument's name, when the tool has one, and its value in the call.
    pub key_argument: Option<(&'a str, Option<&'a Value>)>,
    /// Fewest characters a key argument's value has.
    pub key_argument_min_chars: usize,
    /// Whether the tool may derive its key.
    pub derive: bool,
    /// The conversation header's name and value, when configured.
    pub conversation: Option<(&'a str, Option<&'a str>)>,
    /// The turn header's name and value, when configured.
    pub turn: Option<(&'a str, Option<&'a str>)>,
    /// The normalized target from the arguments, per the tool's policy.
    pub target: Option<&'a str>,
}

/// Longest key argument or identity header: what the gateway adds to it (`arg/` and the
/// tool, `conversation:`) still fits the ledger's limits.
pub const PART_BYTES_MAX: usize = 192;

/// A header's or argument's text, checked like a `_meta` field.
fn usable(text: &str) -> Result<&str, &'static str> {
    if text.is_empty() {
        Err("is empty")
    } else if text.len() > PART_BYTES_MAX {
        Err("is longer than 192 bytes")
    } else if text.chars().any(char::is_control) {
        Err("holds a control character")
    } else {
        Ok(text)
    }
}

/// The effect `offered` names, or why it names none.
pub fn resolve<'a>(offered: &Offered<'a>) -> Result<Identity, IdentityError> {
    let meta = offered.meta;
    let scoped = |source: KeySource<'_>| effect_key(offered.tenant, offered.namespace, source);
    if meta.effect_key.is_some() || meta.workflow_id.is_some() || meta.turn_id.is_some() {
        let source = meta.key_source(offered.tool, offered.target)?;
        return Ok(Identity {
            key: scoped(source)?,
            workflow_id: meta.workflow().to_owned(),
            source: Source::Meta,
            short_key: None,
        });
    }
    if let Some((name, value)) = offered.key_argument {
        let Some(value) = value else {
            return Err(IdentityError::Missing(missing_message(offered)));
        };
        let bad = |problem| IdentityError::BadKeyArgument {
            name: name.to_owned(),
            problem,
        };
        let text = value.as_str().ok_or_else(|| bad("must be a string"))?;
        let key = usable(text).map_err(bad)?;
        let short_key = (key.chars().count() < offered.key_argument_min_chars).then(|| {
            IdentityError::ShortKeyArgument {
                name: name.to_owned(),
                min_chars: offered.key_argument_min_chars,
            }
        });
        // Scoped by the tool: a model that reuses a value on another tool names another
        // effect, not a conflicting one.
        let key = format!("arg/{}/{key}", offered.tool);
        return Ok(Identity {
            key: scoped(KeySource::Explicit(&key))?,
            workflow_id: format!("key-argument:{name}"),
            source: Source::KeyArgument,
            short_key,
        });
    }
    let header = |h: Option<(&'a str, Option<&'a str>)>| -> Result<Option<&'a str>, IdentityError> {
        match h {
            Some((name, Some(value))) => {
                usable(value)
                    .map(Some)
                    .map_err(|problem| IdentityError::BadHeader {
                        name: name.to_owned(),
                        problem,
                    })
            }
            _ => Ok(None),
        }
    };
    if offered.derive {
        if let Some(conversation) = header(offered.conversation)? {
            if let Some((name, None)) = offered.turn {
                // Without it every turn of the conversation would be one effect.
                return Err(IdentityError::Missing(format!(
                    "the header {name:?} naming the turn is missing; with a turn header \
                     configured, a key derived from the conversation needs it. Nothing was \
                     stored or sent."
                )));
            }
            let turn = header(offered.turn)?;
            let workflow_id = format!("conversation:{conversation}");
            let key = scoped(KeySource::Derived {
                workflow_id: &workflow_id,
                step_id: turn.unwrap_or("-"),
                tool: offered.tool,
                target: offered.target,
                sequence: meta.sequence.as_deref(),
            })?;
            return Ok(Identity {
                key,
                workflow_id,
                source: Source::Derived,
                short_key: None,
            });
        }
    }
    Err(IdentityError::Missing(missing_message(offered)))
}

/// What a caller can supply to name the effect.
fn missing_message(offered: &Offered<'_>) -> String {
    let mut ways = vec![format!(
        "_meta {EFFECT_KEY} (or {WORKFLOW_ID} and {TURN_ID}) from the agent runtime"
    )];
    if let Some((name, _)) = offered.key_argument {
        ways.push(format!(
            "the argument {name:?}, which its schema requires: one key per intended effect, \
             the same on every retry"
        ));
    } else if offered.derive {
        if let Some((name, _)) = offered.conversation {
            ways.push(format!("the HTTP header {name:?} naming the conversation"));
        }
    }
    format!(
        "tool {} changes the world and this call does not say which effect it is; supply {}. \
         Nothing was stored or sent.",
        offered.tool,
        ways.join(", or ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool() -> ToolName {
        ToolName {
            provider: "shop".into(),
            name: "refund".into(),
        }
    }

    fn offered<'a>(tool: &'a ToolName, meta: &'a LedgerMeta) -> Offered<'a> {
        Offered {
            tenant: "acme",
            namespace: "gateway",
            tool,
            meta,
            key_argument: Some(("request_id", None)),
            key_argument_min_chars: 1,
            derive: true,
            conversation: Some(("x-conversation-id", None)),
            turn: None,
            target: Some("order-1"),
        }
    }

    #[test]
    fn meta_wins_over_the_key_argument_and_a_missing_key_argument_is_never_derived() {
        let tool = tool();
        let with_meta = LedgerMeta {
            effect_key: Some("runtime-key".into()),
            ..LedgerMeta::default()
        };
        let none = LedgerMeta::default();
        let key_value = json!("model-key");
        let mut o = offered(&tool, &with_meta);
        o.key_argument = Some(("request_id", Some(&key_value)));
        o.conversation = Some(("x-conversation-id", Some("c-1")));
        let id = resolve(&o).unwrap();
        assert_eq!(
            (id.source, id.key.key.as_str()),
            (Source::Meta, "runtime-key")
        );

        o.meta = &none;
        let id = resolve(&o).unwrap();
        assert_eq!(
            (id.source, id.key.key.as_str()),
            (Source::KeyArgument, "arg/shop/refund/model-key")
        );

        // Left out, with a conversation to derive from: refused, not another effect.
        o.key_argument = Some(("request_id", None));
        let e = resolve(&o).unwrap_err();
        assert!(
            matches!(&e, IdentityError::Missing(m) if m.contains("\"request_id\"")),
            "{e}"
        );
        // A tool without a key argument derives.
        o.key_argument = None;
        let id = resolve(&o).unwrap();
        assert_eq!(id.source, Source::Derived);
        assert_eq!(id.workflow_id, "conversation:c-1");
    }

    #[test]
    fn a_derived_key_is_stable_and_separates_targets_turns_and_tenants() {
        let tool = tool();
        let none = LedgerMeta::default();
        let mut o = offered(&tool, &none);
        o.key_argument = None;
        o.conversation = Some(("x-conversation-id", Some("c-1")));
        let first = resolve(&o).unwrap().key;
        assert_eq!(resolve(&o).unwrap().key, first);
        let mut other = o;
        other.target = Some("order-2");
        assert_ne!(resolve(&other).unwrap().key, first);
        let mut other = o;
        other.turn = Some(("x-turn-id", Some("t-2")));
        assert_ne!(resolve(&other).unwrap().key, first);
        // A turn header configured but not sent is not "no turn": it is refused.
        other.turn = Some(("x-turn-id", None));
        assert!(matches!(resolve(&other), Err(IdentityError::Missing(_))));
        let mut other = o;
        other.tenant = "globex";
        assert_ne!(resolve(&other).unwrap().key, first);
    }

    #[test]
    fn a_call_that_names_no_effect_is_told_which_field_to_supply() {
        let tool = tool();
        let none = LedgerMeta::default();
        let e = resolve(&offered(&tool, &none)).unwrap_err().to_string();
        for says in [EFFECT_KEY, "\"request_id\"", "Nothing was stored"] {
            assert!(e.contains(says), "{e} should name {says}");
        }
        // A tool with a key argument is never derived, so the header is not offered.
        assert!(!e.contains("x-conversation-id"), "{e}");
        let mut derived = offered(&tool, &none);
        derived.key_argument = None;
        let e = resolve(&derived).unwrap_err().to_string();
        assert!(e.contains("\"x-conversation-id\""), "{e}");
        let mut no_derive = offered(&tool, &none);
        no_derive.derive = false;
        no_derive.conversation = Some(("x-conversation-id", Some("c-1")));
        assert!(matches!(
            resolve(&no_derive),
            Err(IdentityError::Missing(_))
        ));
    }

    /// A key argument is shared by all the tenant's conversations: a short value a model
    /// makes up would come round again elsewhere and be answered with that effect's result.
    #[test]
    fn a_key_argument_shorter_than_the_minimum_is_refused() {
        let tool = tool();
        let none = LedgerMeta::default();
        let short = json!("refund-1");
        let random = json!("5f0c2a9e-refund-1");
        let mut o = offered(&tool, &none);
        o.key_argument_min_chars = 16;
        o.key_argument = Some(("request_id", Some(&short)));
        let named = resolve(&o).unwrap();
        let e = named.short_key.expect("short");
        assert!(
            matches!(&e, IdentityError::ShortKeyArgument { min_chars: 16, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("\"request_id\""), "{e}");
        assert!(named.key.key.ends_with("/refund-1"), "{}", named.key);
        o.key_argument = Some(("request_id", Some(&random)));
        let named = resolve(&o).unwrap();
        assert_eq!(named.source, Source::KeyArgument);
        assert_eq!(named.short_key, None);
    }

    #[test]
    fn only_an_identity_from_meta_keeps_the_key_argument_in_the_intent() {
        let tool = tool();
        let with_meta = LedgerMeta {
            workflow_id: Some("wf".into()),
            turn_id: Some("t-1".into()),
            ..LedgerMeta::default()
        };
        let none = LedgerMeta::default();
        let key_value = json!("model-key");
        let mut o = offered(&tool, &with_meta);
        o.key_argument = Some(("request_id", Some(&key_value)));
        assert!(resolve(&o).unwrap().intent_keeps_key_argument());
        o.meta = &none;
        assert!(!resolve(&o).unwrap().intent_keeps_key_argument());
    }

    #[test]
    fn unusable_keys_and_headers_are_typed_errors() {
        let tool = tool();
        let none = LedgerMeta::default();
        let number = json!(7);
        let empty = json!("");
        for value in [&number, &empty] {
            let mut o = offered(&tool, &none);
            o.key_argument = Some(("request_id", Some(value)));
            assert!(matches!(
                resolve(&o),
                Err(IdentityError::BadKeyArgument { .. })
            ));
        }
        let mut o = offered(&tool, &none);
        o.key_argument = None;
        o.conversation = Some(("x-conversation-id", Some("a\u{7}b")));
        assert!(matches!(resolve(&o), Err(IdentityError::BadHeader { .. })));
        let half = LedgerMeta {
            workflow_id: Some("wf".into()),
            ..LedgerMeta::default()
        };
        assert!(matches!(
            resolve(&offered(&tool, &half)),
            Err(IdentityError::Meta(_))
        ));
    }
}
