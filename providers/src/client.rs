//! Sending to a provider and classifying what it answered.
//!
//! Classification is where "ambiguous is not failure" is decided: a request that never
//! left is proven not committed; a 2xx is committed, its body the receipt; a 4xx (except
//! 408, 409, 425 and 429, which say "not now" rather than "no") is the provider's refusal
//! and proves nothing happened; everything else (5xx, a reset connection, a timeout) is
//! unknown.

use std::sync::Arc;

use serde_json::Value;

use ledger_client::DispatchResult;
use ledger_core::limits::{fit_detail, fit_receipt};

use crate::transport::{JsonAnswer, Method, ProviderRequest, ProviderTransport, SendError};

/// `body` as the receipt the ledger keeps: its JSON text, or, when that is longer than
/// the ledger keeps a receipt, a note of its size and SHA-256 (`fit_receipt`).
pub(crate) fn receipt_of(body: &Value) -> String {
    fit_receipt(&body.to_string())
}

/// What an exchange with a provider proves.
pub fn classify(answer: Result<JsonAnswer, SendError>) -> DispatchResult {
    match answer {
        Err(SendError::NotSent(e)) => DispatchResult::NotCommitted {
            proof: fit_detail(&format!("never sent: {e}")),
        },
        Err(SendError::AfterSend(e)) => DispatchResult::Unknown {
            reason: fit_detail(&e),
        },
        Ok(a) if (200..300).contains(&a.status) => DispatchResult::Committed {
            receipt: receipt_of(&a.body),
        },
        Ok(a) if (400..500).contains(&a.status) && !matches!(a.status, 408 | 409 | 425 | 429) => {
            DispatchResult::NotCommitted {
                proof: fit_detail(&format!(
                    "the provider refused with {}: {}",
                    a.status, a.body
                )),
            }
        }
        Ok(a) => DispatchResult::Unknown {
            reason: fit_detail(&format!("the provider answered {}: {}", a.status, a.body)),
        },
    }
}

/// The providers behind one transport. Cheap to clone.
#[derive(Clone)]
pub struct ProviderClient {
    transport: Arc<dyn ProviderTransport>,
}

impl std::fmt::Debug for ProviderClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderClient").finish_non_exhaustive()
    }
}

impl ProviderClient {
    /// The providers `transport` reaches.
    pub fn new(transport: Arc<dyn ProviderTransport>) -> Self {
        ProviderClient { transport }
    }

    /// One exchange, unclassified.
    pub async fn send(&self, request: &ProviderRequest) -> Result<JsonAnswer, SendError> {
        self.transport.send(request).await
    }

    /// A creating request: `body` posted to `path`, under `idempotency_key` where the
    /// provider honours one, classified.
    pub async fn create(
        &self,
        path: &str,
        idempotency_key: Option<&str>,
        body: Value,
    ) -> DispatchResult {
        let request = ProviderRequest {
            method: Method::Post,
            path: path.to_owned(),
            idempotency_key: idempotency_key.map(str::to_owned),
            body: Some(body),
        };
        classify(self.send(&request).await)
    }

    /// A read: the body of a 2xx answer, or why there is none.
    pub async fn read(&self, path: &str) -> Result<Value, String> {
        let request = ProviderRequest {
            method: Method::Get,
            path: path.to_owned(),
            idempotency_key: None,
            body: None,
        };
        match self.send(&request).await {
            Ok(a) if (200..300).contains(&a.status) => Ok(a.body),
            Ok(a) => Err(fit_detail(&format!(
                "the provider answered {}: {}",
                a.status, a.body
            ))),
            Err(e) => Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

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
        assert!(proof.len() <= ledger_core::limits::DETAIL_BYTES_MAX);
        let long = "é".repeat(10_000);
        for result in [
            classify(Err(SendError::NotSent(long.clone()))),
            classify(Err(SendError::AfterSend(long.clone()))),
            classify(answer(503, json!(long))),
        ] {
            let detail = match &result {
                DispatchResult::NotCommitted { proof } => proof,
                DispatchResult::Unknown { reason } => reason,
                other => panic!("{other:?}"),
            };
            assert!(
                detail.len() <= ledger_core::limits::DETAIL_BYTES_MAX,
                "{result:?}"
            );
        }
    }

    /// A committed answer larger than the ledger keeps a receipt is still a receipt the
    /// ledger takes: a note of its size and digest, the same for the same body.
    #[test]
    fn receipts_stay_within_the_ledger_limit() {
        use ledger_core::limits::RECEIPT_BYTES_MAX;
        let small = json!({ "id": "re_1" });
        assert_eq!(receipt_of(&small), small.to_string());
        let large = json!({ "id": "re_2", "log": "x".repeat(RECEIPT_BYTES_MAX) });
        let DispatchResult::Committed { receipt } = classify(answer(200, large.clone())) else {
            panic!("a 200 is committed");
        };
        assert!(
            receipt.len() <= RECEIPT_BYTES_MAX,
            "{} bytes",
            receipt.len()
        );
        assert_eq!(receipt, receipt_of(&large));
        let note: Value = serde_json::from_str(&receipt).unwrap();
        assert_eq!(note["receipt_reduced"], json!(true));
        assert_eq!(note["receipt_bytes"], json!(large.to_string().len()));
    }
}
