//! The request `_meta` fields this server reads, under its reverse-DNS prefix.
//!
//! Since MCP 2026-07-28 every request carries its own `_meta` and no session ties two
//! requests together, so the identity of an effect has to travel in each request. The
//! agent runtime (code, not the model) sets either an explicit effect key, or the
//! workflow and turn ids from which the server derives one with the tool and the target
//! the operator's policy names in the arguments. The arguments themselves are bound to
//! the effect, never part of its identity: a repaired call in the same turn is the same
//! effect, and a conflict unless the runtime asks to amend it.
//!
//! | field | meaning |
//! |---|---|
//! | `dev.effect-ledger/effect-key` | the effect key, chosen by the runtime |
//! | `dev.effect-ledger/workflow-id` | the workflow (conversation, job) |
//! | `dev.effect-ledger/turn-id` | the step or turn within it |
//! | `dev.effect-ledger/sequence` | optional: an intended further effect on the same target in the same turn (`"2"`, `"3"`, ...) |
//! | `dev.effect-ledger/amend` | optional, `true`: replace the arguments of an effect that cannot have happened yet |
//! | `dev.effect-ledger/tenant` | optional: the tenant the runtime believes it acts for |
//!
//! Any other field under the prefix is refused, so a misspelt key is an error rather than
//! a silently derived key.

use serde_json::{Map, Value};

use ledger_client::KeySource;
use ledger_core::limits::NAME_BYTES_MAX;
use ledger_core::ToolName;

/// The prefix of this server's `_meta` fields.
pub const PREFIX: &str = "dev.effect-ledger/";
/// The explicit effect key.
pub const EFFECT_KEY: &str = "dev.effect-ledger/effect-key";
/// The workflow id.
pub const WORKFLOW_ID: &str = "dev.effect-ledger/workflow-id";
/// The turn (step) id.
pub const TURN_ID: &str = "dev.effect-ledger/turn-id";
/// The tenant the caller believes it acts for.
pub const TENANT: &str = "dev.effect-ledger/tenant";
/// The sequence number of an intended further effect on the same target in one turn.
pub const SEQUENCE: &str = "dev.effect-ledger/sequence";
/// Whether to replace the arguments of an effect nothing can have happened to yet.
pub const AMEND: &str = "dev.effect-ledger/amend";

const KNOWN: [&str; 6] = [EFFECT_KEY, WORKFLOW_ID, TURN_ID, TENANT, SEQUENCE, AMEND];

/// What is wrong with the `_meta` of a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    /// A field is not a string.
    #[error("_meta field {0} must be a string")]
    NotAString(&'static str),
    /// A field is empty.
    #[error("_meta field {0} is empty")]
    Empty(&'static str),
    /// A field is too long.
    #[error("_meta field {field} is {len} bytes, more than {max}")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A field holds a control character.
    #[error("_meta field {0} holds a control character")]
    ControlCharacter(&'static str),
    /// A field under the prefix that this server does not know.
    #[error(
        "unknown _meta field {0:?}; known: {EFFECT_KEY}, {WORKFLOW_ID}, {TURN_ID}, {SEQUENCE}, \
         {AMEND}, {TENANT}"
    )]
    Unknown(String),
    /// The amend flag is not a boolean.
    #[error("_meta field {AMEND} must be true or false")]
    NotABool,
    /// Neither an explicit key nor workflow and turn ids.
    #[error(
        "a mutating call needs _meta {EFFECT_KEY}, or {WORKFLOW_ID} and {TURN_ID}: \
         the effect's identity must come from the agent runtime, not from the model"
    )]
    NoIdentity,
}

/// The ledger fields of one request's `_meta`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerMeta {
    /// The explicit effect key.
    pub effect_key: Option<String>,
    /// The workflow id.
    pub workflow_id: Option<String>,
    /// The turn id.
    pub turn_id: Option<String>,
    /// The tenant the caller believes it acts for.
    pub tenant: Option<String>,
    /// The sequence number of an intended further effect on the same target.
    pub sequence: Option<String>,
    /// Whether the caller asks to replace the arguments of a not-yet-dispatched effect.
    pub amend: bool,
}

fn field(meta: &Map<String, Value>, name: &'static str) -> Result<Option<String>, MetaError> {
    let Some(value) = meta.get(name) else {
        return Ok(None);
    };
    let text = value.as_str().ok_or(MetaError::NotAString(name))?;
    if text.is_empty() {
        return Err(MetaError::Empty(name));
    }
    if text.len() > NAME_BYTES_MAX {
        return Err(MetaError::TooLong {
            field: name,
            len: text.len(),
            max: NAME_BYTES_MAX,
        });
    }
    if text.chars().any(char::is_control) {
        return Err(MetaError::ControlCharacter(name));
    }
    Ok(Some(text.to_owned()))
}

impl LedgerMeta {
    /// Reads the ledger fields of `meta` (other prefixes are left alone).
    pub fn from_meta(meta: &Map<String, Value>) -> Result<Self, MetaError> {
        if let Some(unknown) = meta
            .keys()
            .filter(|k| k.starts_with(PREFIX))
            .find(|k| !KNOWN.contains(&k.as_str()))
        {
            return Err(MetaError::Unknown(unknown.clone()));
        }
        Ok(LedgerMeta {
            effect_key: field(meta, EFFECT_KEY)?,
            workflow_id: field(meta, WORKFLOW_ID)?,
            turn_id: field(meta, TURN_ID)?,
            tenant: field(meta, TENANT)?,
            sequence: field(meta, SEQUENCE)?,
            amend: match meta.get(AMEND) {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(MetaError::NotABool),
            },
        })
    }

    /// Where the effect's key comes from: the explicit key when given, else workflow,
    /// turn and sequence with the tool and its normalized `target` (see
    /// [`ledger_client::target_of`]).
    pub fn key_source<'a>(
        &'a self,
        tool: &'a ToolName,
        target: Option<&'a str>,
    ) -> Result<KeySource<'a>, MetaError> {
        if let Some(key) = &self.effect_key {
            return Ok(KeySource::Explicit(key));
        }
        match (&self.workflow_id, &self.turn_id) {
            (Some(workflow_id), Some(turn_id)) => Ok(KeySource::Derived {
                workflow_id,
                step_id: turn_id,
                tool,
                target,
                sequence: self.sequence.as_deref(),
            }),
            _ => Err(MetaError::NoIdentity),
        }
    }

    /// The workflow id recorded with the effect.
    pub fn workflow(&self) -> &str {
        self.workflow_id
            .as_deref()
            .unwrap_or("(runtime effect key)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    fn tool() -> ToolName {
        ToolName {
            provider: "pay".into(),
            name: "refund".into(),
        }
    }

    #[test]
    fn an_explicit_key_wins_over_workflow_and_turn() {
        let m = LedgerMeta::from_meta(&meta(json!({
            EFFECT_KEY: "wf-1/turn-2/refund",
            WORKFLOW_ID: "wf-1",
            TURN_ID: "turn-2",
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        })))
        .unwrap();
        let tool = tool();
        assert!(matches!(
            m.key_source(&tool, None),
            Ok(KeySource::Explicit("wf-1/turn-2/refund"))
        ));
        assert_eq!(m.workflow(), "wf-1");
    }

    #[test]
    fn workflow_and_turn_derive_the_key() {
        let m = LedgerMeta::from_meta(&meta(json!({ WORKFLOW_ID: "wf", TURN_ID: "t" }))).unwrap();
        let tool = tool();
        assert!(matches!(
            m.key_source(&tool, None),
            Ok(KeySource::Derived { step_id: "t", .. })
        ));
    }

    #[test]
    fn malformed_meta_is_a_typed_error() {
        let cases = [
            (json!({ EFFECT_KEY: 7 }), MetaError::NotAString(EFFECT_KEY)),
            (json!({ WORKFLOW_ID: "" }), MetaError::Empty(WORKFLOW_ID)),
            (
                json!({ TURN_ID: "a\u{0}b" }),
                MetaError::ControlCharacter(TURN_ID),
            ),
            (
                json!({ EFFECT_KEY: "k".repeat(300) }),
                MetaError::TooLong {
                    field: EFFECT_KEY,
                    len: 300,
                    max: NAME_BYTES_MAX,
                },
            ),
            (
                json!({ "dev.effect-ledger/effect_key": "k" }),
                MetaError::Unknown("dev.effect-ledger/effect_key".into()),
            ),
        ];
        for (value, expected) in cases {
            assert_eq!(LedgerMeta::from_meta(&meta(value)), Err(expected));
        }
    }

    #[test]
    fn a_mutating_call_without_identity_is_refused() {
        let tool = tool();
        for value in [json!({}), json!({ WORKFLOW_ID: "wf" })] {
            let m = LedgerMeta::from_meta(&meta(value)).unwrap();
            assert_eq!(m.key_source(&tool, None).err(), Some(MetaError::NoIdentity));
        }
    }
}
