//! An MCP gateway that protects unmodified MCP servers, in any language, with the effect
//! ledger.
//!
//! It sits between MCP clients and one or more upstream MCP servers (Streamable HTTP) and
//! is stateless like them: any instance takes any request, including a retry whose first
//! answer was lost. It serves MCP 2026-07-28 (`server/discover`, per-request `_meta`) and
//! 2025-11-25 (the `initialize` handshake, answered without a session) with the same
//! rules, and speaks to each upstream in whichever revision it offers. Every `tools/call`
//! of a protected tool is claimed in the ledger before the upstream hears of it, carries
//! the effect's provider key to the upstream, and is settled by the upstream's own look-up
//! tool when its outcome is unknown; read-only tools and every other request pass through.
//!
//! Map of the modules:
//! - [`config`]: the operator's TOML configuration.
//! - [`handler`]: the MCP handler: tool lists rewritten, calls routed.
//! - [`protect`]: a protected call: identity, claim, upstream call, what its answer proves.
//! - [`identity`]: which effect a call names (`_meta`, key argument, or derived).
//! - [`lookup`]: settling an unknown outcome with an upstream read tool.
//! - [`receipt`]: what the ledger keeps of an answer, and a replay's answer.
//! - [`upstream`]: the connection to an upstream, and what its failures prove.

pub mod config;
pub mod handler;
pub mod identity;
pub mod lookup;
pub mod protect;
pub mod receipt;
pub mod upstream;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;

pub use config::GatewayConfig;
pub use handler::{Gateway, StartError};

/// Largest HTTP request body read (arguments have their own, smaller limit).
const REQUEST_BODY_BYTES_MAX: usize = 256 * 1024;

/// Binds the gateway's listener; returns it and its address.
pub async fn bind(config: &GatewayConfig) -> Result<(TcpListener, SocketAddr), StartError> {
    let listen = |e: std::io::Error| StartError::Listen {
        addr: config.listen_addr.to_string(),
        message: e.to_string(),
    };
    let listener = TcpListener::bind(config.listen_addr)
        .await
        .map_err(listen)?;
    let addr = listener.local_addr().map_err(listen)?;
    Ok((listener, addr))
}

/// Serves MCP on `listener` until `shutdown` resolves.
///
/// No sessions in either era: a 2025-11-25 client's `initialize` is answered without an
/// `Mcp-Session-Id`, so its later requests, like a 2026-07-28 client's, stand alone and
/// any instance can take them.
pub async fn serve(
    config: GatewayConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartError> {
    let mut http = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true);
    if !config.allowed_hosts.is_empty() {
        http = http.with_allowed_hosts(config.allowed_hosts.clone());
    }
    http.max_request_body_bytes = REQUEST_BODY_BYTES_MAX;
    let handler = Gateway::new(config)?;
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        http,
    );
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            () = &mut shutdown => return Ok(()),
        };
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
