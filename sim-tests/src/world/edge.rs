//! The simulated providers behind the shipped edge: the tool servers' ledger path sends
//! and looks up through `ledger-providers` ([`ProviderClient`], [`classify`], [`Search`]),
//! and this module is the far side of its transport: routes, bodies and answers in the
//! shapes the example's fake providers use.
//!
//! | provider | create | search by provider key |
//! |---|---|---|
//! | `refund` | `POST /pay/refunds` (idempotency key) | the example's refunds search |
//! | `wire` | `POST /bank/wires` (idempotency key) | `GET /bank/wires?idempotency_key=K` → `wires`, forgets after the horizon |
//! | `ticket` | `POST /desk/tickets` | the example's tickets search |
//! | `append` | `POST /files/lines` | `GET /files/lines?ref=K` → `lines` |
//! | `message` | `POST /chat/messages` | none: [`Unobservable`] |
//!
//! A creating request's body carries what the provider stores: the intended effect it
//! belongs to (`intent_id`, its ground truth), the parameters, and the reference.
//!
//! [`classify`]: ledger_providers::classify

use serde_json::{json, Value};

use ledger_client::ProviderAdapter;
use ledger_providers::{
    example, JsonAnswer, Method, ProviderClient, ProviderRequest, Search, SearchSpec, Unobservable,
};

use super::provider::{Lookup, ProviderReply, ProviderRequest as WorldRequest};
use super::{ProviderKind, World};

impl ProviderKind {
    /// Where its creating requests go.
    pub fn create_path(self) -> &'static str {
        match self {
            ProviderKind::Refund => example::REFUNDS,
            ProviderKind::Wire => "/bank/wires",
            ProviderKind::Ticket => example::TICKETS,
            ProviderKind::Append => "/files/lines",
            ProviderKind::Message => "/chat/messages",
        }
    }

    /// Its search by provider key; `None` for a provider without one.
    pub fn search(self) -> Option<SearchSpec> {
        match self {
            ProviderKind::Refund => Some(example::refunds()),
            // The bank forgets keys after its horizon, and its search with them. The
            // adapter does not say so (`forgets_after_horizon` off): the ledger's own rule,
            // that a miss reported past the horizon proves nothing, is what keeps a second
            // wire from being sent.
            ProviderKind::Wire => Some(SearchSpec::new(
                "/bank/wires?idempotency_key={provider_key}",
                "wires",
            )),
            ProviderKind::Ticket => Some(example::tickets()),
            ProviderKind::Append => {
                Some(SearchSpec::new("/files/lines?ref={provider_key}", "lines"))
            }
            ProviderKind::Message => None,
        }
    }

    /// The look-up reconciliation uses, through `client`.
    pub fn adapter(self, client: &ProviderClient) -> Box<dyn ProviderAdapter> {
        match self.search() {
            Some(spec) => Box::new(Search::new(client, spec)),
            None => Box::new(Unobservable),
        }
    }

    fn of_create_path(path: &str) -> Option<ProviderKind> {
        ProviderKind::ALL
            .into_iter()
            .find(|k| k.create_path() == path)
    }
}

/// The creating request for slot `intent_id` of an intent with `params`, carrying
/// `provider_key` as the reference (and as the idempotency key where honoured).
pub fn create_request(
    kind: ProviderKind,
    intent_id: &str,
    params: &str,
    provider_key: &str,
) -> (&'static str, Option<String>, Value) {
    let body = json!({ "intent_id": intent_id, "params": params, "reference": provider_key });
    let key = kind.honours_key().then(|| provider_key.to_owned());
    (kind.create_path(), key, body)
}

/// The world's request for a creating `request`, or the 4xx answer to a malformed one.
pub fn world_request(request: &ProviderRequest) -> Result<WorldRequest, JsonAnswer> {
    let refused = |status: u16, error: String| JsonAnswer {
        status,
        body: json!({ "error": error }),
    };
    let kind = ProviderKind::of_create_path(&request.path)
        .ok_or_else(|| refused(404, format!("no route for POST {}", request.path)))?;
    let body = request.body.as_ref().unwrap_or(&Value::Null);
    let field = |name: &str| body[name].as_str().map(str::to_owned);
    let (Some(intent_id), Some(params)) = (field("intent_id"), field("params")) else {
        return Err(refused(400, "the body needs intent_id and params".into()));
    };
    Ok(WorldRequest {
        kind,
        intent_id,
        params,
        idempotency_key: request.idempotency_key.clone(),
        reference: field("reference"),
    })
}

/// A provider's reply as its HTTP answer.
pub fn answer_of(reply: ProviderReply) -> JsonAnswer {
    match reply {
        ProviderReply::Done {
            receipt,
            deduplicated,
        } => JsonAnswer {
            status: if deduplicated { 200 } else { 201 },
            body: serde_json::from_str(&receipt).unwrap_or(Value::String(receipt)),
        },
        ProviderReply::Rejected { status, reason } | ProviderReply::Failed { status, reason } => {
            JsonAnswer {
                status,
                body: json!({ "error": reason }),
            }
        }
    }
}

impl World {
    /// The answer to a search `path` (`GET`).
    pub fn search(&self, path: &str) -> JsonAnswer {
        let asked = ProviderKind::ALL.into_iter().find_map(|kind| {
            let spec = kind.search()?;
            Some((kind, spec.provider_key_in(path)?, spec.list))
        });
        let Some((kind, key, list)) = asked else {
            return JsonAnswer {
                status: 404,
                body: json!({ "error": format!("no route for GET {path}") }),
            };
        };
        match self.lookup(kind, &key, &key) {
            Lookup::Found { receipt } => {
                let found = serde_json::from_str(&receipt).unwrap_or(Value::String(receipt));
                listed(list, vec![found])
            }
            Lookup::NotFound => listed(list, Vec::new()),
            Lookup::Unknown { detail } => JsonAnswer {
                status: 409,
                body: json!({ "error": detail }),
            },
        }
    }
}

/// A search's answer: `items` under the field `list`.
fn listed(list: String, items: Vec<Value>) -> JsonAnswer {
    let mut body = serde_json::Map::new();
    body.insert(list, Value::Array(items));
    JsonAnswer {
        status: 200,
        body: Value::Object(body),
    }
}

/// Whether `request` reads.
pub fn is_read(request: &ProviderRequest) -> bool {
    request.method == Method::Get
}
