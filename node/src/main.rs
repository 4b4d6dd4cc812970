//! `ledger-node --config <file> [--node-id N] [--listen ip:port] [--advertise host:port]
//! [--data-dir path]`: parse the configuration, open the store, serve until SIGINT or
//! SIGTERM, then shut down gracefully.

use std::process::ExitCode;
use std::sync::Arc;

use ledger_node::config::{NodeConfig, StorageKind};
use ledger_node::RunError;
use ledger_raft_store::{DiskRef, RocksDisk, SimDisk, StoreError};

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let config = match NodeConfig::from_args(std::env::args().skip(1)) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("ledger-node: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("ledger-node: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: NodeConfig) -> Result<(), String> {
    if let Some(addr) = config.metrics_listen_addr {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
            .map_err(|e| format!("metrics endpoint on {addr}: {e}"))?;
        ledger_node::metrics::describe();
        tracing::info!("metrics served at http://{addr}/metrics");
    }
    let disk: DiskRef = match config.storage {
        StorageKind::Rocksdb => {
            let path = config.data_dir.join("raft");
            std::fs::create_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            Arc::new(RocksDisk::open(&path).map_err(|e| format!("{}: {e}", path.display()))?)
        }
        StorageKind::Memory => Arc::new(SimDisk::new()),
    };
    ledger_node::run(config, disk, shutdown_signal())
        .await
        .map_err(|e| match &e {
            // Never served, never repaired in place: the way back is a fresh member.
            RunError::Storage(store)
                if store.is_damaged_data()
                    && !matches!(store, StoreError::UnsupportedFormat { .. }) =>
            {
                format!(
                    "{e}; the node refuses to start on damaged data: wipe its data \
                     directory and add it back to the cluster as a new member"
                )
            }
            _ => e.to_string(),
        })
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(e) => {
                tracing::warn!("cannot watch SIGTERM: {e}");
                let _ = interrupt.await;
                return;
            }
        };
    tokio::select! {
        _ = interrupt => {}
        _ = terminate.recv() => {}
    }
    tracing::info!("signal received");
}
