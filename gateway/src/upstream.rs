//! The gateway's connection to one upstream MCP server, as an MCP client of either era.
//!
//! The connection is made on first use with rmcp's auto lifecycle: `server/discover`
//! (MCP 2026-07-28, stateless) and, when the upstream is older, the 2025-11-25
//! `initialize` handshake. A connection that broke is made again on the next request.
//!
//! What matters for the ledger is what a failed request proves, so every failure is
//! sorted: [`UpstreamError::NotSent`] (the request provably never reached the upstream),
//! [`UpstreamError::Rpc`] (the upstream answered with a JSON-RPC error) and
//! [`UpstreamError::Lost`] (it may have arrived and acted; the answer is unknown).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ErrorData, Implementation, ProtocolVersion, Tool,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, RequestContext, RunningService, ServiceError,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient};
use tokio::sync::Mutex;

use crate::config::UpstreamConfig;

/// The gateway as a client of its upstreams.
#[derive(Debug, Clone, Copy)]
pub struct GatewayClient;

impl ClientHandler for GatewayClient {
    fn get_info(&self) -> ClientConfig {
        // Form elicitation: an upstream tool may ask the user (an `input_required`
        // round), and the gateway passes the question to its client.
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("ledger-mcp-gateway", env!("CARGO_PKG_VERSION")),
        )
    }

    /// A question asked in the middle of a call (the 2025-11-25 way, over a session) has
    /// nobody to answer it: the gateway's client is not on that connection. It is
    /// refused as an error, never answered for the user (a decline would read as the
    /// user's answer, and the call's result would be kept as the effect's).
    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Err(ErrorData::invalid_request(
            "the ledger gateway cannot put a question to the user in the middle of a call; \
             ask with an input_required result (MCP 2026-07-28)",
            None,
        ))
    }
}

/// A live connection to an upstream.
pub type Session = RunningService<RoleClient, GatewayClient>;

/// Why a request to an upstream did not get a result.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// The request never left: the upstream could not be reached.
    #[error("upstream {upstream} unreachable, nothing was sent: {detail}")]
    NotSent {
        /// The upstream.
        upstream: String,
        /// Why.
        detail: String,
    },
    /// The upstream answered with a JSON-RPC error.
    #[error("upstream {upstream} answered with error {}: {}", .error.code.0, .error.message)]
    Rpc {
        /// The upstream.
        upstream: String,
        /// Its error.
        error: ErrorData,
    },
    /// The request may have reached the upstream; no answer came back.
    #[error("upstream {upstream} gave no answer: {detail}")]
    Lost {
        /// The upstream.
        upstream: String,
        /// What happened.
        detail: String,
    },
}

/// The connection to an upstream, or why there is none.
#[derive(Default)]
struct Slot {
    session: Option<Arc<Session>>,
    /// When the last handshake failed, and why: callers that queued behind it get the
    /// same answer for a while instead of each waiting out a handshake of their own.
    failed: Option<(tokio::time::Instant, String)>,
}

/// How long a failed handshake answers for the upstream before another is tried.
const HANDSHAKE_RETRY_MS: u64 = 1_000;

/// One upstream server.
pub struct Upstream {
    config: UpstreamConfig,
    session: Mutex<Slot>,
}

/// Whether `error` or one of its sources says that a connection was refused, or that no
/// local address could be had for it: errors only a connect gives, so the request cannot
/// have been sent. (An unreachable host or network is not taken as proof: an open
/// connection can report one after its request left.)
fn never_connected(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            if matches!(io.kind(), ConnectionRefused | AddrNotAvailable) {
                return true;
            }
        }
        next = e.source();
    }
    false
}

impl Upstream {
    /// An upstream, not connected yet.
    pub fn new(config: UpstreamConfig) -> Self {
        Upstream {
            config,
            session: Mutex::new(Slot::default()),
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    fn not_sent(&self, detail: String) -> UpstreamError {
        UpstreamError::NotSent {
            upstream: self.config.name.clone(),
            detail,
        }
    }

    fn lost(&self, detail: String) -> UpstreamError {
        UpstreamError::Lost {
            upstream: self.config.name.clone(),
            detail,
        }
    }

    /// The live connection, made now if there is none. A failure to connect proves that
    /// nothing of the request it was for was sent.
    pub async fn session(&self) -> Result<Arc<Session>, UpstreamError> {
        let mut slot = self.session.lock().await;
        if let Some(session) = slot.session.as_ref().filter(|s| !s.is_closed()) {
            return Ok(session.clone());
        }
        if let Some((at, detail)) = &slot.failed {
            if at.elapsed() < Duration::from_millis(HANDSHAKE_RETRY_MS) {
                return Err(self.not_sent(format!(
                    "{detail} (the last handshake, {} ms ago)",
                    at.elapsed().as_millis()
                )));
            }
        }
        let mut headers = HashMap::new();
        for (name, value) in &self.config.headers {
            let name = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| self.not_sent(format!("header {name}: {e}")))?;
            let value = http::HeaderValue::from_str(value)
                .map_err(|e| self.not_sent(format!("header {name}: {e}")))?;
            headers.insert(name, value);
        }
        let mut transport_config =
            StreamableHttpClientTransportConfig::with_uri(self.config.url.clone())
                .custom_headers(headers);
        transport_config.max_concurrent_requests = self.config.concurrency;
        let transport = StreamableHttpClientTransport::from_config(transport_config);
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        };
        let timeout = Duration::from_millis(self.config.timeout_ms);
        let made = tokio::time::timeout(
            timeout,
            GatewayClient.serve_with_lifecycle(transport, lifecycle),
        )
        .await;
        let session = match made {
            Ok(Ok(session)) => session,
            Ok(Err(e)) => return Err(self.handshake_failed(&mut slot, e.to_string())),
            Err(_) => {
                let detail = format!("no handshake within {timeout:?}");
                return Err(self.handshake_failed(&mut slot, detail));
            }
        };
        tracing::info!(upstream = %self.config.name, "connected");
        let session = Arc::new(session);
        *slot = Slot {
            session: Some(session.clone()),
            failed: None,
        };
        Ok(session)
    }

    fn handshake_failed(&self, slot: &mut Slot, detail: String) -> UpstreamError {
        tracing::warn!(upstream = %self.config.name, %detail, "cannot connect");
        slot.failed = Some((tokio::time::Instant::now(), detail.clone()));
        self.not_sent(detail)
    }

    /// Forgets a connection that broke, so the next request makes a new one.
    async fn forget(&self, broken: &Arc<Session>) {
        let mut slot = self.session.lock().await;
        if slot
            .session
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, broken))
        {
            slot.session = None;
        }
    }

    /// Sorts the failure of a request that was handed to the connection.
    async fn failed(&self, session: &Arc<Session>, error: ServiceError) -> UpstreamError {
        match error {
            ServiceError::McpError(error) => UpstreamError::Rpc {
                upstream: self.config.name.clone(),
                error,
            },
            ServiceError::TransportSend(e) => {
                self.forget(session).await;
                if never_connected(&e) {
                    self.not_sent(e.to_string())
                } else {
                    self.lost(e.to_string())
                }
            }
            ServiceError::TransportClosed => {
                self.forget(session).await;
                self.lost("the connection closed".into())
            }
            other => self.lost(other.to_string()),
        }
    }

    /// Runs `request` on the connection within the upstream's timeout, and sorts what a
    /// failure proves.
    async fn request<T, F, Fut>(&self, request: F) -> Result<T, UpstreamError>
    where
        F: FnOnce(Arc<Session>) -> Fut,
        Fut: std::future::Future<Output = Result<T, ServiceError>>,
    {
        let session = self.session().await?;
        let timeout = Duration::from_millis(self.config.timeout_ms);
        match tokio::time::timeout(timeout, request(session.clone())).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(self.failed(&session, e).await),
            Err(_) => Err(self.lost(format!("no answer within {timeout:?}"))),
        }
    }

    /// One `tools/call`, answered within the upstream's timeout.
    pub async fn call_tool(
        &self,
        params: CallToolRequestParams,
    ) -> Result<CallToolResponse, UpstreamError> {
        self.request(|s| async move { s.call_tool_once(params).await })
            .await
    }

    /// Every tool it lists.
    pub async fn list_tools(&self) -> Result<Vec<Tool>, UpstreamError> {
        self.request(|s| async move { s.list_all_tools().await })
            .await
    }

    /// Runs `request` on the connection, within the timeout, for the requests the
    /// gateway passes through untouched.
    pub async fn forward<T, F, Fut>(&self, request: F) -> Result<T, ErrorData>
    where
        F: FnOnce(Arc<Session>) -> Fut,
        Fut: std::future::Future<Output = Result<T, ServiceError>>,
    {
        self.request(request).await.map_err(to_mcp_error)
    }
}

/// The MCP error a client sees for an upstream failure of a request passed through.
pub fn to_mcp_error(error: UpstreamError) -> ErrorData {
    match error {
        UpstreamError::Rpc { error, .. } => error,
        other => ErrorData::internal_error(other.to_string(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream nobody listens for: the call is not sent, and the calls right after it
    /// are told so at once instead of each trying a handshake of their own.
    #[tokio::test]
    async fn an_unreachable_upstream_fails_fast_and_proves_nothing_was_sent() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let upstream = Upstream::new(UpstreamConfig {
            name: "gone".into(),
            url: format!("http://{addr}/mcp"),
            headers: Default::default(),
            timeout_ms: 5_000,
            concurrency: 4,
        });
        let first = upstream
            .call_tool(CallToolRequestParams::new("refund"))
            .await;
        assert!(
            matches!(first, Err(UpstreamError::NotSent { .. })),
            "{first:?}"
        );
        let second = upstream
            .call_tool(CallToolRequestParams::new("refund"))
            .await;
        match second {
            Err(UpstreamError::NotSent { detail, .. }) => {
                assert!(detail.contains("the last handshake"), "{detail}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_refused_connection_anywhere_in_the_chain_proves_nothing_was_sent() {
        #[derive(Debug)]
        struct Wrapper(std::io::Error);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "request failed")
            }
        }
        impl std::error::Error for Wrapper {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let refused = Wrapper(std::io::ErrorKind::ConnectionRefused.into());
        let reset = Wrapper(std::io::ErrorKind::ConnectionReset.into());
        let unreachable = Wrapper(std::io::ErrorKind::HostUnreachable.into());
        assert!(never_connected(&refused));
        assert!(!never_connected(&reset));
        assert!(!never_connected(&unreachable));
    }
}
