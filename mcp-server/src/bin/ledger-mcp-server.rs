//! `ledger-mcp-server --config <file> [--listen ip:port] [--instance name]`: serve the
//! example MCP tools statelessly until SIGINT or SIGTERM. Prints `listening <addr>` on
//! stdout once bound, so scripts can use port 0.

use std::process::ExitCode;

use ledger_mcp_example::{bind, serve, ServerConfig};

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ledger-mcp-server: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let config = ServerConfig::from_args(std::env::args().skip(1))?;
    if let Some(addr) = config.metrics_listen_addr {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
            .map_err(|e| anyhow::anyhow!("metrics endpoint on {addr}: {e}"))?;
        ledger_mcp_example::metrics::describe();
        tracing::info!("metrics served at http://{addr}/metrics");
    }
    let (listener, addr) = bind(&config).await?;
    tracing::info!(instance = %config.instance, %addr, "serving MCP");
    println!("listening {addr}");
    serve(config, listener, shutdown()).await?;
    Ok(())
}

async fn shutdown() {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}
