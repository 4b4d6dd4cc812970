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

use tokio::net::TcpListener;

pub use config::GatewayConfig;
pub use handler::{Gateway, StartError};

/// Binds the gateway's listener; returns it and its address.
pub async fn bind(config: &GatewayConfig) -> Result<(TcpListener, SocketAddr), StartError> {
    ledger_mcp::serve::bind(config.listen_addr)
        .await
        .map_err(|e| StartError::Listen {
            addr: config.listen_addr.to_string(),
            message: e.to_string(),
        })
}

/// Serves MCP on `listener` until `shutdown` resolves (`ledger_mcp::serve`: no sessions in
/// either era, so any instance takes any request).
pub async fn serve(
    config: GatewayConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartError> {
    let allowed_hosts = config.allowed_hosts.clone();
    let handler = Gateway::new(config)?;
    ledger_mcp::serve::serve(handler, &allowed_hosts, listener, shutdown).await;
    Ok(())
}
