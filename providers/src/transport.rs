//! A request to a provider, its answer, and what carries it.
//!
//! The one distinction a transport must keep is the one the ledger needs: a request that
//! provably never left ([`SendError::NotSent`]) did nothing; once it may have left
//! ([`SendError::AfterSend`]), only the provider knows what happened.

use ledger_client::reconcile::BoxFuture;
use serde_json::Value;

/// The two methods the edges use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// A read or search.
    Get,
    /// A creating request.
    Post,
}

impl Method {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// One request: method, path with query, the idempotency key (an `Idempotency-Key`
/// header over HTTP) and a JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderRequest {
    /// The method.
    pub method: Method,
    /// The path, with its query string.
    pub path: String,
    /// The idempotency key, for providers that honour one.
    pub idempotency_key: Option<String>,
    /// The body.
    pub body: Option<Value>,
}

/// A status and a JSON body (`null` when the body is not JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct JsonAnswer {
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub body: Value,
}

/// Why an exchange gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Nothing left this process: no connection could be made.
    #[error("not sent: {0}")]
    NotSent(String),
    /// The request may have reached the provider; what it did is unknown.
    #[error("sent, no answer: {0}")]
    AfterSend(String),
}

/// Carries requests to the providers and their answers back.
pub trait ProviderTransport: Send + Sync {
    /// Sends `request`; the answer, or why there is none.
    fn send<'a>(
        &'a self,
        request: &'a ProviderRequest,
    ) -> BoxFuture<'a, Result<JsonAnswer, SendError>>;
}
