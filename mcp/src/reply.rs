//! What a tool call answers, from what running its effect came to.
//!
//! A committed effect (this call's or an earlier one's) is a result with the provider's
//! receipt. Everything else the agent should read is a tool error (`isError`) saying what
//! is known and what a retry will do, including an effect identity reused with other
//! arguments (a model's repair): that names the differing fields and the explicit ways
//! on (SEP-1303), and is never a second dispatch. Malformed input is an MCP protocol error
//! (invalid params).

use rmcp::model::{CallToolResult, ContentBlock, ErrorData};
use serde_json::{json, Value};

use ledger_client::{ClientError, DispatchResult, EffectOutcome, EffectRunner, RunError};
use ledger_core::{Declaration, EffectKey, ExpiredEffect, IntentConflict, Refusal};

use crate::meta::{AMEND, SEQUENCE};

/// How an effect ended, for the tool's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Finished {
    /// Committed; the receipt as JSON (a string when the receipt is not JSON).
    Committed {
        /// The provider's receipt.
        receipt: Value,
        /// Whether it was committed before this call.
        replayed: bool,
    },
    /// Not committed (yet): the tool error to answer with.
    NotCommitted(Value),
}

/// What an effect run answers.
pub fn finish(
    key: &EffectKey,
    result: Result<EffectOutcome, RunError>,
) -> Result<Finished, ErrorData> {
    let not_done = |outcome: &str, detail: String, advice: &str| {
        Ok(Finished::NotCommitted(json!({
            "effect": { "key": key.to_string(), "outcome": outcome },
            "detail": detail,
            "advice": advice,
        })))
    };
    const RETRY: &str = "the effect may have happened; call again with the same _meta and \
                         arguments: the ledger settles the outcome with the provider before \
                         anything is sent again";
    crate::metrics::count_effect(&result);
    match result {
        Ok(EffectOutcome::Done { receipt }) => Ok(committed(receipt, false)),
        Ok(EffectOutcome::Replayed { receipt }) => Ok(committed(receipt, true)),
        Ok(EffectOutcome::FailedBeforeEffect { proof }) => not_done(
            "failed_before_effect",
            proof,
            "nothing took effect; correct the request before calling again",
        ),
        Ok(EffectOutcome::Unknown { reason }) => not_done("unknown", reason, RETRY),
        Ok(EffectOutcome::NeedsReconcile(u)) => not_done(
            "unknown",
            format!("{} dispatch(es) unsettled", u.dispatches),
            RETRY,
        ),
        Ok(EffectOutcome::HorizonPassed(u)) => not_done(
            "horizon_passed",
            format!("the provider no longer deduplicates {}", u.provider_key),
            "an operator or a reconciliation must settle it; a blind re-send is not protected",
        ),
        Ok(EffectOutcome::InFlight { holder, .. }) => not_done(
            "in_flight",
            format!("another attempt, held by {holder}, is running"),
            "call again later with the same _meta and arguments",
        ),
        Ok(EffectOutcome::Escalated { reason }) => not_done(
            "escalated",
            format!("{reason:?}"),
            "an operator must decide; do not call again",
        ),
        Ok(EffectOutcome::Conflict(c)) => Ok(Finished::NotCommitted(conflict_body(key, &c))),
        Ok(EffectOutcome::Expired(e)) => Ok(Finished::NotCommitted(expired_body(key, &e))),
        Err(RunError::Ledger(ClientError::Refused(Refusal::Expired(e)))) => {
            Ok(Finished::NotCommitted(expired_body(key, &e)))
        }
        Err(RunError::Ledger(ClientError::Refused(Refusal::Conflict(c)))) => {
            Ok(Finished::NotCommitted(conflict_body(key, &c)))
        }
        Err(RunError::Ledger(ClientError::Refused(r))) => Err(refusal(key, &r)),
        Err(RunError::Ledger(e)) => not_done(
            "not_started",
            format!("the ledger could not be reached: {e}"),
            "nothing was sent; call again",
        ),
        Err(RunError::Unreported { result, source }) => match result {
            DispatchResult::Committed { receipt } => Ok(committed(receipt, false)),
            _ => not_done(
                "unknown",
                format!("the ledger did not take the report: {source}"),
                RETRY,
            ),
        },
    }
}

fn committed(receipt: String, replayed: bool) -> Finished {
    Finished::Committed {
        receipt: serde_json::from_str(&receipt).unwrap_or(Value::String(receipt)),
        replayed,
    }
}

/// The tool error for an effect identity used before with other arguments: what differs
/// and what the agent may do, for the model to read.
pub fn conflict_body(key: &EffectKey, c: &IntentConflict) -> Value {
    let fields = c.differing_fields.join(", ");
    json!({
        "effect": { "key": key.to_string(), "outcome": "conflict" },
        "detail": format!(
            "this effect was requested before with other arguments; differing fields: {fields}. \
             Nothing was sent for this call."
        ),
        "differing_fields": c.differing_fields,
        "stored_intent_hash": c.stored_hash.to_string(),
        "offered_intent_hash": c.offered_hash.to_string(),
        "advice": format!(
            "to repeat the original request, call again with its arguments; to correct it \
             while it cannot have happened yet, call again with _meta {AMEND} = true; for a \
             further, separate effect on the same target, call again with a new _meta \
             {SEQUENCE}, or with a new effect key where the call names its key itself (a \
             sequence does not change a key that is given)"
        ),
    })
}

/// The tool error for an effect whose record was collected after its retention.
pub fn expired_body(key: &EffectKey, e: &ExpiredEffect) -> Value {
    json!({
        "effect": { "key": key.to_string(), "outcome": "expired" },
        "detail": format!(
            "this effect's record was collected after its retention; it ended {} and \
             nothing was sent for this call",
            e.final_state
        ),
        "final_state": e.final_state.as_str(),
        "intent_hash": e.intent_hash.to_string(),
        "receipt_sha256": e.receipt_digest.map(|d| ledger_core::intent::hex(&d.0)),
        "collected_at_ms": e.collected_at_ms,
        "advice": "reconcile with the provider directly, or start a new effect with a new key",
    })
}

/// The MCP error for a ledger refusal.
pub fn refusal(key: &EffectKey, r: &Refusal) -> ErrorData {
    match r {
        Refusal::Conflict(c) => ErrorData::invalid_params(
            format!(
                "effect key {key} was used before with different arguments; differing fields: {}",
                c.differing_fields.join(", ")
            ),
            Some(conflict_body(key, c)),
        ),
        Refusal::InvalidField(_) | Refusal::InvalidIntent(_) | Refusal::ConfirmationRequired => {
            ErrorData::invalid_params(r.to_string(), None)
        }
        Refusal::UnknownTenant(_) | Refusal::WrongTenant { .. } | Refusal::NotPermitted { .. } => {
            ErrorData::invalid_params(format!("wrong tenant: {r}"), None)
        }
        Refusal::DeclarationTooLarge { .. } => ErrorData::invalid_params(
            format!("{r}; nothing was stored or sent: send fewer or smaller effects"),
            None,
        ),
        Refusal::QuotaExceeded { .. } => ErrorData::internal_error(
            format!("{r}; nothing was stored or sent: the tenant's ledger quota is full"),
            None,
        ),
        _ => ErrorData::internal_error(format!("the ledger refused: {r}"), None),
    }
}

/// A successful call's result: `body` as structured content and as text.
pub fn success(body: Value) -> CallToolResult {
    let mut result = CallToolResult::structured(body.clone());
    result.content = vec![ContentBlock::text(body.to_string())];
    result
}

/// A tool error: `body` as structured content and as text.
pub fn failure(body: Value) -> CallToolResult {
    let mut result = CallToolResult::structured_error(body.clone());
    result.content = vec![ContentBlock::text(body.to_string())];
    result
}

/// The body of a committed effect.
pub fn committed_body(key: &EffectKey, receipt: &Value, replayed: bool) -> Value {
    json!({
        "effect": {
            "key": key.to_string(),
            "outcome": if replayed { "replayed" } else { "done" },
        },
        "receipt": receipt,
    })
}

/// Replaces the stored arguments of `declaration`'s effect with its own, as the runtime
/// asked (`_meta` amend). The answer when the ledger refuses: a tool error saying why
/// (the effect may already have happened); `None` when the effect now carries these
/// arguments, or was never declared (the claim declares it).
pub async fn amend(
    runner: &EffectRunner,
    declaration: &Declaration,
) -> Result<Option<CallToolResult>, ErrorData> {
    let key = &declaration.key;
    match runner.amend(declaration).await {
        Ok(_) | Err(ClientError::Refused(Refusal::UnknownEffect(_))) => Ok(None),
        Err(ClientError::Refused(Refusal::AmendNotAllowed { state, escalated })) => {
            Ok(Some(failure(json!({
                "effect": { "key": key.to_string(), "outcome": "amend_refused" },
                "detail": format!(
                    "the effect is {state}{}: it may already have happened, so its \
                     arguments can no longer change",
                    if escalated { " and escalated" } else { "" }
                ),
                "advice": format!(
                    "call again without amend to learn its outcome; for a further, \
                     separate effect use a new _meta {SEQUENCE} (a new effect key where \
                     the call names its key itself)"
                ),
            }))))
        }
        Err(ClientError::Refused(Refusal::Conflict(c))) => {
            Ok(Some(failure(conflict_body(key, &c))))
        }
        Err(ClientError::Refused(r)) => Err(refusal(key, &r)),
        Err(e) => Err(ErrorData::internal_error(
            format!("the ledger could not be reached: {e}; nothing was sent"),
            None,
        )),
    }
}
