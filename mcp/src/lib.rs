//! The MCP side of the effect ledger, shared by the example tool server
//! (`ledger-mcp-example`) and the gateway (`ledger-mcp-gateway`), so that both read an
//! effect's identity, authenticate tenants and answer outcomes by the same rules.
//!
//! - [`config`]: what the two configurations share, and how a file is loaded.
//! - [`meta`]: the request `_meta` fields that name an effect (`dev.effect-ledger/...`).
//! - [`tenants`]: the tenants served, their bearer tokens and ledger clients.
//! - [`reply`]: tool results and MCP errors from what running an effect came to.
//! - [`metrics`]: tool calls, effects and confirmations counted.
//! - [`serve`]: Streamable HTTP without sessions in either era; metrics and signals.

pub mod config;
pub mod meta;
pub mod metrics;
pub mod reply;
pub mod serve;
pub mod tenants;
