//! The tools this server offers: names, schemas, the hints they advertise, and their
//! arguments parsed into intents.
//!
//! The hints are what a tool says about itself and are passed on to clients as such;
//! how the ledger treats a tool is the operator's policy file, never these hints
//! (`create_ticket` even claims to be idempotent, which its provider is not).

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use ledger_client::policy_file::ToolHints;

/// Which tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// `refund`.
    Refund,
    /// `create_ticket`.
    CreateTicket,
    /// `send_message`.
    SendMessage,
    /// `start_deploy`.
    StartDeploy,
    /// `get_order`.
    GetOrder,
}

/// A tool as offered.
#[derive(Debug, Clone, Copy)]
pub struct ToolSpec {
    /// Which tool.
    pub kind: ToolKind,
    /// Its MCP name.
    pub name: &'static str,
    /// The provider behind it (the policy's `provider/name`).
    pub provider: &'static str,
    /// What it does.
    pub description: &'static str,
    /// What it says about itself: shown, never trusted.
    pub hints: ToolHints,
}

/// Every tool.
pub const CATALOGUE: [ToolSpec; 5] = [
    ToolSpec {
        kind: ToolKind::Refund,
        name: "refund",
        provider: "pay",
        description: "Refund an amount on an order.",
        hints: hints(Some(false), Some(true), Some(true)),
    },
    ToolSpec {
        kind: ToolKind::CreateTicket,
        name: "create_ticket",
        provider: "desk",
        description: "Open a help-desk ticket.",
        hints: hints(Some(false), Some(false), Some(true)),
    },
    ToolSpec {
        kind: ToolKind::SendMessage,
        name: "send_message",
        provider: "msg",
        description: "Send one message to each recipient. Cannot be undone; asks the user first.",
        hints: hints(Some(false), Some(true), Some(false)),
    },
    ToolSpec {
        kind: ToolKind::StartDeploy,
        name: "start_deploy",
        provider: "deploy",
        description: "Start deploying a version of a service; returns the deploy job.",
        hints: hints(Some(false), Some(true), Some(false)),
    },
    ToolSpec {
        kind: ToolKind::GetOrder,
        name: "get_order",
        provider: "pay",
        description: "Read an order and what was refunded on it.",
        hints: hints(Some(true), None, None),
    },
];

const fn hints(
    read_only: Option<bool>,
    destructive: Option<bool>,
    idempotent: Option<bool>,
) -> ToolHints {
    ToolHints {
        read_only,
        destructive,
        idempotent,
        open_world: Some(true),
    }
}

/// The tool named `name`.
pub fn find(name: &str) -> Option<&'static ToolSpec> {
    CATALOGUE.iter().find(|t| t.name == name)
}

fn schema(kind: ToolKind) -> Value {
    let string = |max: u32| json!({ "type": "string", "minLength": 1, "maxLength": max });
    let id = json!({ "type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$" });
    let (properties, required) = match kind {
        ToolKind::Refund => (
            json!({
                "order_id": id,
                "amount_cents": { "type": "integer", "minimum": 1, "maximum": 10_000_000 },
                "currency": { "type": "string", "pattern": "^[A-Z]{3}$" },
            }),
            json!(["order_id", "amount_cents", "currency"]),
        ),
        ToolKind::CreateTicket => (
            json!({
                "subject": string(200),
                "body": string(4000),
                "priority": { "type": "string", "enum": ["low", "normal", "high"] },
            }),
            json!(["subject", "body"]),
        ),
        ToolKind::SendMessage => (
            json!({
                "recipients": { "type": "array", "items": string(254), "minItems": 1, "maxItems": 50 },
                "text": string(2000),
            }),
            json!(["recipients", "text"]),
        ),
        ToolKind::StartDeploy => (
            json!({ "service": string(64), "version": string(64) }),
            json!(["service", "version"]),
        ),
        ToolKind::GetOrder => (json!({ "order_id": id }), json!(["order_id"])),
    };
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

impl ToolSpec {
    /// The tool as `tools/list` shows it; `policy` is the operator's policy, described.
    pub fn to_tool(&self, policy: &str) -> Tool {
        let schema: JsonObject = match schema(self.kind) {
            Value::Object(map) => map,
            _ => JsonObject::new(),
        };
        let h = self.hints;
        let mut annotations = ToolAnnotations::new();
        for (value, set) in [
            (
                h.read_only,
                ToolAnnotations::read_only as fn(ToolAnnotations, bool) -> ToolAnnotations,
            ),
            (h.destructive, ToolAnnotations::destructive),
            (h.idempotent, ToolAnnotations::idempotent),
            (h.open_world, ToolAnnotations::open_world),
        ] {
            if let Some(value) = value {
                annotations = set(annotations, value);
            }
        }
        Tool::new(
            self.name,
            format!("{} {policy}", self.description),
            Arc::new(schema),
        )
        .with_annotations(annotations)
    }
}

/// Arguments that do not fit the tool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid arguments for {tool}: {message}")]
pub struct ArgsError {
    /// The tool.
    pub tool: &'static str,
    /// What is wrong.
    pub message: String,
}

/// `refund` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefundArgs {
    /// The order.
    pub order_id: String,
    /// Amount in minor units.
    pub amount_cents: u64,
    /// ISO currency code.
    pub currency: String,
}

/// `create_ticket` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TicketArgs {
    /// Subject line.
    pub subject: String,
    /// Body.
    pub body: String,
    /// `low`, `normal` (default) or `high`.
    #[serde(default = "normal")]
    pub priority: String,
}

fn normal() -> String {
    "normal".into()
}

/// `send_message` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageArgs {
    /// Recipients; the intent keeps them sorted and without repeats.
    pub recipients: Vec<String>,
    /// Text.
    pub text: String,
}

/// `start_deploy` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployArgs {
    /// The service.
    pub service: String,
    /// The version.
    pub version: String,
}

/// `get_order` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderArgs {
    /// The order.
    pub order_id: String,
}

/// One call's arguments, parsed and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolArgs {
    /// `refund`.
    Refund(RefundArgs),
    /// `create_ticket`.
    CreateTicket(TicketArgs),
    /// `send_message`.
    SendMessage(MessageArgs),
    /// `start_deploy`.
    StartDeploy(DeployArgs),
    /// `get_order`.
    GetOrder(OrderArgs),
}

fn decode<T: DeserializeOwned>(tool: &'static str, arguments: &JsonObject) -> Result<T, ArgsError> {
    serde_json::from_value(Value::Object(arguments.clone())).map_err(|e| ArgsError {
        tool,
        message: e.to_string(),
    })
}

fn text(tool: &'static str, name: &str, value: &str, max: usize) -> Result<(), ArgsError> {
    let bad = |message: String| Err(ArgsError { tool, message });
    if value.trim().is_empty() {
        return bad(format!("{name} is empty"));
    }
    if value.len() > max {
        return bad(format!("{name} is {} bytes, more than {max}", value.len()));
    }
    if value.chars().any(|c| c.is_control() && c != '\n') {
        return bad(format!("{name} holds a control character"));
    }
    Ok(())
}

/// An identifier that is safe in a provider's URL path.
fn id(tool: &'static str, name: &str, value: &str) -> Result<(), ArgsError> {
    text(tool, name, value, 64)?;
    if !value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(ArgsError {
            tool,
            message: format!("{name} may hold only letters, digits, - and _"),
        });
    }
    Ok(())
}

impl ToolArgs {
    /// Parses and checks `arguments` for `spec`.
    pub fn parse(spec: &ToolSpec, arguments: &JsonObject) -> Result<Self, ArgsError> {
        let t = spec.name;
        let bad = |message: &str| {
            Err(ArgsError {
                tool: t,
                message: message.into(),
            })
        };
        Ok(match spec.kind {
            ToolKind::Refund => {
                let a: RefundArgs = decode(t, arguments)?;
                id(t, "order_id", &a.order_id)?;
                if !(1..=10_000_000).contains(&a.amount_cents) {
                    return bad("amount_cents must be in 1..=10000000");
                }
                if a.currency.len() != 3 || !a.currency.bytes().all(|b| b.is_ascii_uppercase()) {
                    return bad("currency must be three capital letters");
                }
                ToolArgs::Refund(a)
            }
            ToolKind::CreateTicket => {
                let a: TicketArgs = decode(t, arguments)?;
                text(t, "subject", &a.subject, 200)?;
                text(t, "body", &a.body, 4000)?;
                if !["low", "normal", "high"].contains(&a.priority.as_str()) {
                    return bad("priority must be low, normal or high");
                }
                ToolArgs::CreateTicket(a)
            }
            ToolKind::SendMessage => {
                let mut a: MessageArgs = decode(t, arguments)?;
                text(t, "text", &a.text, 2000)?;
                a.recipients.sort();
                a.recipients.dedup();
                if a.recipients.is_empty() || a.recipients.len() > 50 {
                    return bad("recipients must name 1 to 50 recipients");
                }
                for r in &a.recipients {
                    text(t, "a recipient", r, 254)?;
                }
                ToolArgs::SendMessage(a)
            }
            ToolKind::StartDeploy => {
                let a: DeployArgs = decode(t, arguments)?;
                text(t, "service", &a.service, 64)?;
                text(t, "version", &a.version, 64)?;
                ToolArgs::StartDeploy(a)
            }
            ToolKind::GetOrder => {
                let a: OrderArgs = decode(t, arguments)?;
                id(t, "order_id", &a.order_id)?;
                ToolArgs::GetOrder(a)
            }
        })
    }

    /// The mutation's intent, in the form the ledger hashes.
    pub fn intent(&self) -> Value {
        match self {
            ToolArgs::Refund(a) => json!({
                "order_id": a.order_id, "amount_cents": a.amount_cents, "currency": a.currency,
            }),
            ToolArgs::CreateTicket(a) => json!({
                "subject": a.subject, "body": a.body, "priority": a.priority,
            }),
            ToolArgs::SendMessage(a) => json!({ "recipients": a.recipients, "text": a.text }),
            ToolArgs::StartDeploy(a) => json!({ "service": a.service, "version": a.version }),
            ToolArgs::GetOrder(a) => json!({ "order_id": a.order_id }),
        }
    }

    /// The logical resource the mutation changes.
    pub fn target(&self) -> String {
        match self {
            ToolArgs::Refund(a) => format!("order:{}", a.order_id),
            ToolArgs::CreateTicket(_) => "desk:tickets".into(),
            ToolArgs::SendMessage(a) => format!("messages:{} recipients", a.recipients.len()),
            ToolArgs::StartDeploy(a) => format!("service:{}", a.service),
            ToolArgs::GetOrder(a) => format!("order:{}", a.order_id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(tool: &str, value: Value) -> Result<ToolArgs, ArgsError> {
        ToolArgs::parse(find(tool).unwrap(), value.as_object().unwrap())
    }

    #[test]
    fn every_tool_has_an_object_schema_with_its_hints() {
        for spec in &CATALOGUE {
            let tool = spec.to_tool("operator policy: x");
            assert_eq!(tool.input_schema["type"], "object");
            assert!(tool.description.unwrap().ends_with("operator policy: x"));
            assert!(tool.annotations.is_some());
        }
        assert!(find("rm_rf").is_none());
    }

    #[test]
    fn recipients_are_one_set_whatever_their_order() {
        let a = args(
            "send_message",
            json!({ "recipients": ["b@x", "a@x", "b@x"], "text": "hi" }),
        );
        let b = args(
            "send_message",
            json!({ "recipients": ["a@x", "b@x"], "text": "hi" }),
        );
        assert_eq!(a.unwrap().intent(), b.unwrap().intent());
    }

    #[test]
    fn bad_arguments_name_the_problem() {
        let cases = [
            (
                "refund",
                json!({ "order_id": "o", "amount_cents": 0, "currency": "EUR" }),
                "amount_cents",
            ),
            (
                "refund",
                json!({ "order_id": "o", "amount_cents": 5, "currency": "eur" }),
                "currency",
            ),
            (
                "refund",
                json!({ "order_id": "o", "amount_cents": -5, "currency": "EUR" }),
                "invalid value",
            ),
            (
                "refund",
                json!({ "order_id": "o", "amount_cents": 5, "currency": "EUR", "x": 1 }),
                "unknown field",
            ),
            (
                "create_ticket",
                json!({ "subject": " ", "body": "b" }),
                "subject is empty",
            ),
            (
                "create_ticket",
                json!({ "subject": "s", "body": "b", "priority": "now" }),
                "priority",
            ),
            (
                "send_message",
                json!({ "recipients": [], "text": "t" }),
                "1 to 50",
            ),
            ("start_deploy", json!({ "service": "api" }), "missing field"),
            (
                "get_order",
                json!({ "order_id": "x\u{7}" }),
                "control character",
            ),
            (
                "get_order",
                json!({ "order_id": "../admin/effects" }),
                "letters, digits",
            ),
        ];
        for (tool, value, expected) in cases {
            let error = args(tool, value.clone()).unwrap_err().to_string();
            assert!(error.contains(expected), "{tool} {value}: {error}");
        }
    }
}
