//! Calling the providers, classifying what they answered, and looking effects up there.
//!
//! Classification is where "ambiguous is not failure" is decided for HTTP: a request that
//! never left is proven not committed; a 2xx is committed, its body the receipt; a 4xx
//! (except 408, 409, 425 and 429, which say "not now" rather than "no") is the provider's
//! refusal and proves nothing happened; everything else (5xx, a reset connection, a
//! timeout) is unknown.
//!
//! Each dispatch sends the attempt's provider key where the provider can keep it: as the
//! idempotency key (payments), or as a reference the provider stores and can be searched
//! by (help desk, messaging, deploys). The [`ProviderAdapter`]s search by it.

use http::Method;
use serde_json::{json, Value};

use ledger_client::reconcile::BoxFuture;
use ledger_client::{DispatchResult, Observation, ProviderAdapter};
use ledger_core::EffectRecord;

use crate::http::{send_json, JsonAnswer, SendError};
use crate::tools::{DeployArgs, RefundArgs, TicketArgs};

/// Longest provider body kept in a proof or reason.
const DETAIL_CHARS_MAX: usize = 1_000;

/// The providers' address and timing.
#[derive(Debug, Clone)]
pub struct ProviderClient {
    addr: String,
    timeout_ms: u64,
}

fn shortened(body: &Value) -> String {
    body.to_string().chars().take(DETAIL_CHARS_MAX).collect()
}

/// What an exchange with a provider proves.
pub fn classify(answer: Result<JsonAnswer, SendError>) -> DispatchResult {
    match answer {
        Err(SendError::NotSent(e)) => DispatchResult::NotCommitted {
            proof: format!("never sent: {e}"),
        },
        Err(SendError::AfterSend(e)) => DispatchResult::Unknown { reason: e },
        Ok(a) if (200..300).contains(&a.status) => DispatchResult::Committed {
            receipt: a.body.to_string(),
        },
        Ok(a) if (400..500).contains(&a.status) && !matches!(a.status, 408 | 409 | 425 | 429) => {
            DispatchResult::NotCommitted {
                proof: format!(
                    "the provider refused with {}: {}",
                    a.status,
                    shortened(&a.body)
                ),
            }
        }
        Ok(a) => DispatchResult::Unknown {
            reason: format!("the provider answered {}: {}", a.status, shortened(&a.body)),
        },
    }
}

/// A job's receipt: the job without its changing status.
fn job_receipt(mut job: Value) -> Value {
    if let Some(object) = job.as_object_mut() {
        object.remove("status");
    }
    job
}

impl ProviderClient {
    /// The providers at `addr` (`host:port`).
    pub fn new(addr: impl Into<String>, timeout_ms: u64) -> Self {
        ProviderClient {
            addr: addr.into(),
            timeout_ms,
        }
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<JsonAnswer, SendError> {
        send_json(&self.addr, method, path, headers, body, self.timeout_ms).await
    }

    /// Refunds under `provider_key` as the idempotency key.
    pub async fn refund(&self, provider_key: &str, a: &RefundArgs) -> DispatchResult {
        let body = json!({
            "order_id": a.order_id, "amount_cents": a.amount_cents, "currency": a.currency,
        });
        let headers = [("idempotency-key", provider_key)];
        classify(
            self.send(Method::POST, "/pay/refunds", &headers, Some(&body))
                .await,
        )
    }

    /// Opens a ticket carrying `provider_key` as its external reference.
    pub async fn create_ticket(&self, provider_key: &str, a: &TicketArgs) -> DispatchResult {
        let body = json!({
            "subject": a.subject, "body": a.body, "priority": a.priority,
            "external_ref": provider_key,
        });
        classify(
            self.send(Method::POST, "/desk/tickets", &[], Some(&body))
                .await,
        )
    }

    /// Sends `text` to `to`, carrying `provider_key` as the client reference.
    pub async fn send_message(&self, provider_key: &str, to: &str, text: &str) -> DispatchResult {
        let body = json!({ "to": to, "text": text, "client_ref": provider_key });
        classify(
            self.send(Method::POST, "/msg/messages", &[], Some(&body))
                .await,
        )
    }

    /// Starts a deploy job carrying `provider_key` as its reference.
    pub async fn start_deploy(&self, provider_key: &str, a: &DeployArgs) -> DispatchResult {
        let body = json!({ "service": a.service, "version": a.version, "job_ref": provider_key });
        match classify(
            self.send(Method::POST, "/deploy/jobs", &[], Some(&body))
                .await,
        ) {
            DispatchResult::Committed { receipt } => DispatchResult::Committed {
                receipt: serde_json::from_str(&receipt)
                    .map(|job| job_receipt(job).to_string())
                    .unwrap_or(receipt),
            },
            other => other,
        }
    }

    /// A read: the body of a 2xx answer, or why there is none.
    pub async fn read(&self, path: &str) -> Result<Value, String> {
        match self.send(Method::GET, path, &[], None).await {
            Ok(a) if (200..300).contains(&a.status) => Ok(a.body),
            Ok(a) => Err(format!(
                "the provider answered {}: {}",
                a.status,
                shortened(&a.body)
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The first object of the list `field` at `path`, as an observation.
    async fn search(&self, path: &str, field: &str, receipt: fn(Value) -> Value) -> Observation {
        match self.read(path).await {
            Ok(body) => match body[field].as_array().and_then(|list| list.first()) {
                Some(found) => Observation::Committed {
                    receipt: receipt(found.clone()).to_string(),
                    detail: format!("GET {path} found it"),
                },
                None => Observation::NotCommitted {
                    detail: format!("GET {path} found nothing"),
                },
            },
            Err(e) => Observation::Unknown {
                detail: format!("GET {path}: {e}"),
            },
        }
    }
}

/// Looks up what a tool's dispatch leaves at its provider, by the effect's provider key.
pub struct Lookup {
    client: ProviderClient,
    kind: LookupKind,
}

/// Which search.
#[derive(Debug, Clone, Copy)]
pub enum LookupKind {
    /// Refunds by idempotency key.
    Refund,
    /// Tickets by external reference.
    Ticket,
    /// Messages by client reference (search lags behind sends: the policy's
    /// `visibility_lag_ms`).
    Message,
    /// Deploy jobs by job reference.
    Deploy,
}

impl Lookup {
    /// The search of `kind` at `client`'s providers.
    pub fn new(client: &ProviderClient, kind: LookupKind) -> Self {
        Lookup {
            client: client.clone(),
            kind,
        }
    }
}

impl ProviderAdapter for Lookup {
    fn observe<'a>(&'a self, effect: &'a EffectRecord) -> BoxFuture<'a, Observation> {
        let k = &effect.provider_key;
        let (path, field, receipt): (String, &str, fn(Value) -> Value) = match self.kind {
            LookupKind::Refund => (
                format!("/pay/refunds?idempotency_key={k}"),
                "refunds",
                |v| v,
            ),
            LookupKind::Ticket => (format!("/desk/tickets?external_ref={k}"), "tickets", |v| v),
            LookupKind::Message => (format!("/msg/messages?client_ref={k}"), "messages", |v| v),
            LookupKind::Deploy => (format!("/deploy/jobs?job_ref={k}"), "jobs", job_receipt),
        };
        Box::pin(async move { self.client.search(&path, field, receipt).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: Value) -> Result<JsonAnswer, SendError> {
        Ok(JsonAnswer { status, body })
    }

    #[test]
    fn only_proof_counts_as_not_committed() {
        assert!(matches!(
            classify(answer(201, json!({ "id": 1 }))),
            DispatchResult::Committed { receipt } if receipt == r#"{"id":1}"#
        ));
        assert!(matches!(
            classify(answer(400, json!({}))),
            DispatchResult::NotCommitted { .. }
        ));
        assert!(matches!(
            classify(Err(SendError::NotSent("connection refused".into()))),
            DispatchResult::NotCommitted { .. }
        ));
        for ambiguous in [
            answer(500, json!({})),
            answer(503, Value::Null),
            answer(409, json!({})),
            answer(429, json!({})),
            answer(408, json!({})),
            Err(SendError::AfterSend("reset".into())),
        ] {
            assert!(matches!(
                classify(ambiguous),
                DispatchResult::Unknown { .. }
            ));
        }
    }

    #[test]
    fn proofs_stay_within_the_ledger_limit() {
        let DispatchResult::NotCommitted { proof } =
            classify(answer(400, json!("x".repeat(10_000))))
        else {
            panic!("a 400 is a refusal");
        };
        assert!(proof.len() < ledger_core::limits::DETAIL_BYTES_MAX);
    }
}
