//! The user's confirmation of an irreversible call, as an MCP `input_required` round trip.
//!
//! Stateless MCP (2026-07-28, SEP-2322) has no session in which to hold "waiting for the
//! user": the server answers `tools/call` with an `input_required` result carrying an
//! elicitation and an opaque `requestState`, and the client re-sends the *same*
//! `tools/call` (new JSON-RPC id, possibly to another instance) with the user's answer
//! and the state echoed back. rmcp implements the exchange (`InputRequiredResult`,
//! `InputResponses`, `RequestStateCodec`); this module decides what the state binds.
//!
//! The state is sealed with an HMAC key every instance shares, bound (as associated data)
//! to the tenant, the effect key and the intent hash, and valid for ten minutes. A re-sent
//! call derives its key and intent afresh; if anything differs, the state does not open,
//! so a confirmation can never be carried over to other arguments or another effect. The
//! re-sent call maps to the same effects because its key comes from the same `_meta` and
//! arguments.

use std::time::Duration;

use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ErrorData, InputRequest,
    InputRequests, InputRequiredResult, InputResponses, RequestStateCodec, SealOptions,
};
use serde_json::json;

use ledger_core::{EffectKey, IntentHash};

/// How long a confirmation request stays answerable.
const CONFIRMATION_TTL: Duration = Duration::from_secs(10 * 60);
/// The name of the one input this server asks for.
const INPUT_NAME: &str = "confirm";

/// What the user answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Confirmed; the text is recorded with each attempt.
    Confirmed(String),
    /// Declined or cancelled: nothing may be sent.
    Declined,
}

/// Seals and opens confirmation state.
#[derive(Clone)]
pub struct Confirmations {
    codec: RequestStateCodec,
}

/// Why a configuration's key cannot seal state.
#[derive(Debug, thiserror::Error)]
#[error("request_state_key: {0}")]
pub struct KeyError(String);

fn binding(tenant: &str, key: &EffectKey, intent: &IntentHash) -> Vec<u8> {
    json!(["confirm/v1", tenant, key.to_string(), intent.to_string()])
        .to_string()
        .into_bytes()
}

impl Confirmations {
    /// Confirmations sealed with `key` (at least 32 bytes, the same on every instance).
    pub fn new(key: &str) -> Result<Self, KeyError> {
        RequestStateCodec::try_new(key.as_bytes().to_vec())
            .map(|codec| Confirmations { codec })
            .map_err(|e| KeyError(e.to_string()))
    }

    /// The `input_required` result asking the user to confirm `what`.
    pub fn ask(
        &self,
        tenant: &str,
        key: &EffectKey,
        intent: &IntentHash,
        what: String,
    ) -> Result<InputRequiredResult, ErrorData> {
        let aad = binding(tenant, key, intent);
        let options = SealOptions::new()
            .associated_data(&aad)
            .ttl(CONFIRMATION_TTL);
        let state = self
            .codec
            .seal_json_with(&json!({ "v": 1 }), &options)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let schema = serde_json::from_value(json!({
            "type": "object",
            "properties": { INPUT_NAME: { "type": "boolean", "title": "Send it" } },
            "required": [INPUT_NAME],
        }))
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let mut requests = InputRequests::new();
        requests.insert(
            INPUT_NAME.to_owned(),
            InputRequest::Elicitation(ElicitRequest::new(
                ElicitRequestParams::FormElicitationParams {
                    meta: None,
                    message: what,
                    requested_schema: schema,
                },
            )),
        );
        Ok(InputRequiredResult::new(Some(requests), Some(state)))
    }

    /// The user's answer in a re-sent call: `state` must open for this tenant, effect and
    /// intent, and the answer must be there.
    pub fn check(
        &self,
        tenant: &str,
        key: &EffectKey,
        intent: &IntentHash,
        state: &str,
        responses: Option<&InputResponses>,
    ) -> Result<Answer, ErrorData> {
        let aad = binding(tenant, key, intent);
        // One error for every way a state fails to open (the SDK's advice): forged,
        // expired and "for other arguments" look the same to the caller.
        self.codec
            .open_with(state, &aad)
            .map_err(|_| invalid("requestState does not match this call (other arguments, another effect, or expired); call again without it"))?;
        let response = responses
            .and_then(|r| r.get(INPUT_NAME))
            .ok_or_else(|| invalid("the input response \"confirm\" is missing"))?;
        let result: ElicitResult = serde_json::from_value(response.clone())
            .map_err(|_| invalid("the input response \"confirm\" is not an elicitation result"))?;
        let confirmed = result.action == ElicitationAction::Accept
            && result
                .content
                .as_ref()
                .and_then(|c| c[INPUT_NAME].as_bool())
                == Some(true);
        Ok(if confirmed {
            Answer::Confirmed(format!(
                "confirmed by the user through MCP elicitation for intent {intent}"
            ))
        } else {
            Answer::Declined
        })
    }
}

fn invalid(message: &str) -> ErrorData {
    ErrorData::invalid_params(message.to_owned(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "test-request-state-key-0123456789abcdef";

    fn accept(confirm: bool) -> InputResponses {
        let result = ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({ INPUT_NAME: confirm }));
        [(INPUT_NAME.to_owned(), serde_json::to_value(result).unwrap())].into()
    }

    fn asked(c: &Confirmations, key: &EffectKey, intent: &IntentHash) -> String {
        c.ask("acme", key, intent, "send?".into())
            .unwrap()
            .request_state
            .unwrap()
    }

    #[test]
    fn a_confirmation_opens_on_any_instance_for_the_same_call_only() {
        let (a, b) = (
            Confirmations::new(KEY).unwrap(),
            Confirmations::new(KEY).unwrap(),
        );
        let key = EffectKey::new("acme", "mcp", "k");
        let intent = IntentHash([1; 32]);
        let state = asked(&a, &key, &intent);
        let answer = b.check("acme", &key, &intent, &state, Some(&accept(true)));
        assert!(matches!(answer, Ok(Answer::Confirmed(_))));
        assert_eq!(
            b.check("acme", &key, &intent, &state, Some(&accept(false))),
            Ok(Answer::Declined)
        );
        let other_intent = IntentHash([2; 32]);
        let other_key = EffectKey::new("acme", "mcp", "k2");
        for (tenant, key, intent) in [
            ("acme", &key, &other_intent),
            ("acme", &other_key, &intent),
            ("ghost", &key, &intent),
        ] {
            assert!(b
                .check(tenant, key, intent, &state, Some(&accept(true)))
                .is_err());
        }
        assert!(b
            .check("acme", &key, &intent, "garbage", Some(&accept(true)))
            .is_err());
        assert!(b.check("acme", &key, &intent, &state, None).is_err());
    }

    #[test]
    fn a_short_key_is_refused() {
        assert!(Confirmations::new("short").is_err());
    }
}
