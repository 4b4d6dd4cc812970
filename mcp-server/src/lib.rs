//! A stateless MCP tool server that cannot do a thing twice, with fake providers to prove it.
//!
//! The server speaks MCP 2026-07-28 over Streamable HTTP without sessions (rmcp's
//! `StreamableHttpService` with no session manager), and 2025-11-25 too: a client of that
//! revision does its `initialize` handshake and gets no session, so its requests stand
//! alone as well. Each `tools/call` carries its tenant
//! (bearer token), its effect identity (`_meta`), and its arguments, so any instance can
//! take any request, including a retry whose first answer was lost and an
//! `input_required` re-send. Mutating tools run through the effect ledger with
//! [`ledger_client::EffectRunner`]; the read-only tool bypasses it.
//!
//! Map of the modules:
//! - [`config`]: the server's TOML configuration.
//! - [`server`]: the MCP handler: checks, tenant, `_meta`, effect key, dispatch to a tool.
//! - [`meta`], [`reply`], [`metrics`]: the `_meta` identity fields, answers from
//!   outcomes and counters, shared with the gateway (from `ledger-mcp`).
//! - [`tools`]: the five tools, their schemas, hints and intents.
//! - `call`: what a checked call runs against; `effects`: each tool's effect, around
//!   the client library.
//! - [`confirm`]: the user's confirmation as an `input_required` round trip.
//! - [`providers`]: each tool's provider requests over HTTP, and its look-ups (the
//!   logic is `ledger-providers`', shared with the simulation).
//! - [`fake`]: the fake providers (payments, help desk, messaging, deploys).
//! - [`proxy`]: an HTTP proxy that loses answers on purpose.
//! - [`agent`]: an MCP client as an agent runtime would use it.
//! - [`http`]: small hyper helpers.

pub mod agent;
mod call;
pub mod config;
pub mod confirm;
mod effects;
pub mod fake;
pub mod http;
pub mod providers;
pub mod proxy;
pub mod server;
pub mod tools;

pub use ledger_mcp::{meta, metrics, reply};

use std::future::Future;
use std::net::SocketAddr;

use tokio::net::TcpListener;

pub use config::ServerConfig;
pub use server::{StartError, ToolServer};

/// Binds the server's listener; returns it and its address.
pub async fn bind(config: &ServerConfig) -> Result<(TcpListener, SocketAddr), StartError> {
    ledger_mcp::serve::bind(config.listen_addr)
        .await
        .map_err(|e| StartError::Listen {
            addr: config.listen_addr.to_string(),
            message: e.to_string(),
        })
}

/// Serves MCP on `listener` until `shutdown` resolves.
pub async fn serve(
    config: ServerConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartError> {
    let allowed_hosts = config.allowed_hosts.clone();
    let handler = ToolServer::new(config)?;
    ledger_mcp::serve::serve(handler, &allowed_hosts, listener, shutdown).await;
    Ok(())
}
