//! `ledger-mcp-server --config <file> [--listen ip:port] [--instance name]`: serve the
//! example MCP tools statelessly until SIGINT or SIGTERM. Prints `listening <addr>` on
//! stdout once bound, so scripts can use port 0. `--help` lists the flags; each also
//! reads an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use ledger_mcp_example::{bind, serve, ServerConfig};

/// A stateless MCP tool server (Streamable HTTP, protocol 2026-07-28) whose mutating
/// tools run through the effect ledger, with fake providers to run against.
#[derive(Debug, Parser)]
#[command(name = "ledger-mcp-server", version)]
struct Cli {
    /// The server's TOML configuration (mcp-server/src/config.rs documents every field).
    #[arg(long, env = "LEDGER_MCP_CONFIG", value_name = "FILE")]
    config: PathBuf,
    /// Where to listen, instead of the file's `listen_addr` (port 0 picks one).
    #[arg(long, env = "LEDGER_MCP_LISTEN", value_name = "IP:PORT")]
    listen: Option<SocketAddr>,
    /// This instance's name (the holder of its attempts), instead of the file's.
    #[arg(long, env = "LEDGER_MCP_INSTANCE", value_name = "NAME")]
    instance: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ledger-mcp-server: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let config = ServerConfig::load(&cli.config, cli.listen, cli.instance)?;
    if let Some(addr) = config.metrics_listen_addr {
        ledger_mcp::serve::serve_metrics(addr).map_err(anyhow::Error::msg)?;
    }
    let (listener, addr) = bind(&config).await?;
    tracing::info!(instance = %config.instance, %addr, "serving MCP");
    println!("listening {addr}");
    serve(config, listener, ledger_mcp::serve::shutdown_signal()).await?;
    Ok(())
}
