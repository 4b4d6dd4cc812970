//! The example's providers: the requests each tool sends, over HTTP, and the searches
//! that look its effects up.
//!
//! Each dispatch sends the attempt's provider key where the provider can keep it: as the
//! idempotency key (payments), or as a reference the provider stores and can be searched
//! by (help desk, messaging, deploys). What an answer proves ([`classify`]) and how an
//! effect is looked up ([`Search`]) are `ledger-providers`' code, which the simulation
//! runs against its simulated providers over a transport of its own.
//!
//! [`classify`]: ledger_providers::classify

use std::sync::Arc;

use serde_json::{json, Value};

use ledger_client::reconcile::BoxFuture;
use ledger_client::DispatchResult;
use ledger_providers::{
    example, JsonAnswer, Method, ProviderClient, ProviderRequest, ProviderTransport, Search,
    SendError,
};

use crate::http::send_json;
use crate::tools::{DeployArgs, RefundArgs, TicketArgs};

/// HTTP/1.1 to the providers at one address, each exchange within a timeout.
#[derive(Debug, Clone)]
pub struct HttpTransport {
    addr: String,
    timeout_ms: u64,
}

impl ProviderTransport for HttpTransport {
    fn send<'a>(
        &'a self,
        request: &'a ProviderRequest,
    ) -> BoxFuture<'a, Result<JsonAnswer, SendError>> {
        Box::pin(async move {
            let method = match request.method {
                Method::Get => http::Method::GET,
                Method::Post => http::Method::POST,
            };
            let headers: Vec<(&str, &str)> = request
                .idempotency_key
                .iter()
                .map(|key| ("idempotency-key", key.as_str()))
                .collect();
            send_json(
                &self.addr,
                method,
                &request.path,
                &headers,
                request.body.as_ref(),
                self.timeout_ms,
            )
            .await
        })
    }
}

/// The example providers, reached over HTTP.
#[derive(Debug, Clone)]
pub struct Providers {
    client: ProviderClient,
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

impl Providers {
    /// The providers at `addr` (`host:port`), each exchange within `timeout_ms`.
    pub fn new(addr: impl Into<String>, timeout_ms: u64) -> Self {
        let transport = HttpTransport {
            addr: addr.into(),
            timeout_ms,
        };
        Providers {
            client: ProviderClient::new(Arc::new(transport)),
        }
    }

    /// The search of `kind`.
    pub fn lookup(&self, kind: LookupKind) -> Search {
        let spec = match kind {
            LookupKind::Refund => example::refunds(),
            LookupKind::Ticket => example::tickets(),
            LookupKind::Message => example::messages(),
            LookupKind::Deploy => example::deploy_jobs(),
        };
        Search::new(&self.client, spec)
    }

    /// Refunds under `provider_key` as the idempotency key.
    pub async fn refund(&self, provider_key: &str, a: &RefundArgs) -> DispatchResult {
        let body = json!({
            "order_id": a.order_id, "amount_cents": a.amount_cents, "currency": a.currency,
        });
        self.client
            .create(example::REFUNDS, Some(provider_key), body)
            .await
    }

    /// Opens a ticket carrying `provider_key` as its external reference.
    pub async fn create_ticket(&self, provider_key: &str, a: &TicketArgs) -> DispatchResult {
        let body = json!({
            "subject": a.subject, "body": a.body, "priority": a.priority,
            "external_ref": provider_key,
        });
        self.client.create(example::TICKETS, None, body).await
    }

    /// Sends `text` to `to`, carrying `provider_key` as the client reference.
    pub async fn send_message(&self, provider_key: &str, to: &str, text: &str) -> DispatchResult {
        let body = json!({ "to": to, "text": text, "client_ref": provider_key });
        self.client.create(example::MESSAGES, None, body).await
    }

    /// Starts a deploy job carrying `provider_key` as its reference; the receipt is the
    /// job without its status, as its search gives it.
    pub async fn start_deploy(&self, provider_key: &str, a: &DeployArgs) -> DispatchResult {
        let body = json!({ "service": a.service, "version": a.version, "job_ref": provider_key });
        match self.client.create(example::DEPLOY_JOBS, None, body).await {
            DispatchResult::Committed { receipt } => DispatchResult::Committed {
                receipt: serde_json::from_str(&receipt)
                    .map(|job| example::deploy_jobs().receipt(job))
                    .unwrap_or(receipt),
            },
            other => other,
        }
    }

    /// A read: the body of a 2xx answer, or why there is none.
    pub async fn read(&self, path: &str) -> Result<Value, String> {
        self.client.read(path).await
    }
}
