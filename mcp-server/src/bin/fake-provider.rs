//! `fake-provider [--listen ip:port] [--key-ttl-ms N] [--message-lag-ms N]
//! [--deploy-ms N]`: serve the fake payments, help desk, messaging and deploy providers
//! (API in `ledger_mcp_example::fake`). Prints `listening <addr>` on stdout once bound.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::anyhow;
use clap::Parser;
use ledger_mcp_example::fake::{self, Settings};

/// Fake payments, help desk, messaging and deploy providers that keep real state, for
/// the MCP example and its tests.
#[derive(Debug, Parser)]
#[command(name = "fake-provider", version)]
struct Cli {
    /// Where to listen (port 0 picks one; the bound address is printed).
    #[arg(long, default_value = "127.0.0.1:0", value_name = "IP:PORT")]
    listen: SocketAddr,
    /// How long the payments provider remembers an idempotency key.
    #[arg(long, value_name = "MS")]
    key_ttl_ms: Option<u64>,
    /// How long a sent message takes to show in the messaging provider's search.
    #[arg(long, value_name = "MS")]
    message_lag_ms: Option<u64>,
    /// How long a deploy job runs.
    #[arg(long, value_name = "MS")]
    deploy_ms: Option<u64>,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fake-provider: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let defaults = Settings::default();
    let settings = Settings {
        key_ttl_ms: cli.key_ttl_ms.unwrap_or(defaults.key_ttl_ms),
        message_visibility_lag_ms: cli
            .message_lag_ms
            .unwrap_or(defaults.message_visibility_lag_ms),
        deploy_duration_ms: cli.deploy_ms.unwrap_or(defaults.deploy_duration_ms),
    };
    let (addr, task) = fake::start(cli.listen, settings).await?;
    println!("listening {addr}");
    tokio::select! {
        _ = task => Err(anyhow!("the server stopped")),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}
