//! `ledger-node`: parse the command line and the configuration file, open the store,
//! serve until SIGINT or SIGTERM, then shut down gracefully. At SIGHUP the configuration
//! file is read again and its secrets and certificates put in force (see
//! `ledger_node::security`). `ledger-node --help` lists the flags; every flag also reads
//! an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};

use ledger_node::config::{NodeConfig, Overrides, StorageKind};
use ledger_node::security::Security;
use ledger_node::RunError;
use ledger_raft_store::{DiskRef, RocksDisk, SimDisk, StoreError};

/// The node's Rust allocations: mimalloc spends less CPU than glibc's malloc on the
/// apply and call paths; built without transparent huge pages, whose arenas grew a node's
/// RSS past its budget at millions of retained records (README, "mimalloc").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A replicated effect-ledger node: serves the ledger's gRPC API, the cluster's Raft
/// transport and the standard health service on its listen address, and Prometheus
/// metrics on `metrics_listen_addr` when configured.
#[derive(Debug, Parser)]
#[command(name = "ledger-node", version)]
struct Cli {
    /// The node's TOML configuration (see node/src/config.rs and deploy/).
    #[arg(long, env = "LEDGER_NODE_CONFIG", value_name = "FILE")]
    config: PathBuf,
    /// This node's Raft id, instead of the file's `node_id`.
    #[arg(long, env = "LEDGER_NODE_ID", value_name = "N")]
    node_id: Option<u64>,
    /// Where to listen, instead of the file's `listen_addr`.
    #[arg(long, env = "LEDGER_LISTEN", value_name = "IP:PORT")]
    listen: Option<SocketAddr>,
    /// The data folder, instead of the file's `data_dir`.
    #[arg(long, env = "LEDGER_DATA_DIR", value_name = "PATH")]
    data_dir: Option<PathBuf>,
    /// How log lines are written to stderr (filter them with RUST_LOG, default info).
    #[arg(long, env = "LEDGER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Option<NodeCommand>,
}

/// What to do instead of serving.
#[derive(Debug, Subcommand)]
enum NodeCommand {
    /// Install a backup (`ledgerctl snapshot save`) into this node's data directory,
    /// which must never have been part of a cluster, then exit. Run it on every member
    /// of the new cluster with the same file, start them, then `ledgerctl init`.
    Restore {
        /// The backup.
        #[arg(long, value_name = "FILE")]
        from: PathBuf,
    },
}

/// The format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs.json().init(),
    }
    let overrides = Overrides {
        node_id: cli.node_id,
        listen_addr: cli.listen,
        data_dir: cli.data_dir,
    };
    let config = match NodeConfig::load(&cli.config, overrides.clone()) {
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
    if let Some(NodeCommand::Restore { from }) = cli.command {
        return match runtime.block_on(restore(&config, &from)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ledger-node: restore: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match runtime.block_on(serve(config, cli.config, overrides)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: NodeConfig, path: PathBuf, overrides: Overrides) -> Result<(), String> {
    if let Some(addr) = config.metrics_listen_addr {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
            .map_err(|e| format!("metrics endpoint on {addr}: {e}"))?;
        ledger_node::metrics::describe();
        ledger_node::gauges::describe();
        tracing::info!("metrics served at http://{addr}/metrics");
    }
    let disk: DiskRef = match config.storage {
        StorageKind::Rocksdb => open_rocksdb(&config)?,
        StorageKind::Memory => Arc::new(SimDisk::new()),
    };
    let started = ledger_node::start(&config, disk).await;
    let served = match started {
        Ok(node) => {
            let reloads = tokio::spawn(reload_on_hangup(node.security.clone(), path, overrides));
            let served = ledger_node::serve(node, &config, shutdown_signal()).await;
            reloads.abort();
            served
        }
        Err(e) => Err(e),
    };
    served.map_err(|e| match &e {
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

/// Where the node's RocksDB lives: `data_dir/raft`.
fn rocksdb_dir(config: &NodeConfig) -> PathBuf {
    config.data_dir.join("raft")
}

/// The node's RocksDB (`rocksdb_dir`), created if missing, within the configured memory
/// budgets.
fn open_rocksdb(config: &NodeConfig) -> Result<DiskRef, String> {
    let path = rocksdb_dir(config);
    std::fs::create_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let disk = RocksDisk::open_with(&path, config.rocksdb)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Arc::new(disk))
}

/// Installs the backup at `from` into the node's storage (`config.data_dir`).
async fn restore(config: &NodeConfig, from: &std::path::Path) -> Result<(), String> {
    let file = std::fs::File::open(from).map_err(|e| format!("{}: {e}", from.display()))?;
    let disk = open_rocksdb(config)?;
    let restored = ledger_raft_store::restore(disk, std::io::BufReader::new(file))
        .await
        .map_err(|e| e.to_string())?;
    let digest = ledger_core::intent::hex(&restored.state_digest);
    println!(
        "restored {} into {}: the ledger at log index {} of its cluster, state digest {digest}",
        from.display(),
        rocksdb_dir(config).display(),
        restored
            .source_index
            .map_or_else(|| "-".to_owned(), |i| i.to_string()),
    );
    Ok(())
}

/// At every SIGHUP, reads the configuration file again and puts its secrets and
/// certificates in force; a file that does not load changes nothing and is logged.
async fn reload_on_hangup(security: Security, path: PathBuf, overrides: Overrides) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(signal) => signal,
        Err(e) => {
            tracing::warn!("cannot watch SIGHUP, secrets and certificates will not reload: {e}");
            return;
        }
    };
    while hangups.recv().await.is_some() {
        tracing::info!("SIGHUP: reading {} again", path.display());
        let reloaded = NodeConfig::load(&path, overrides.clone())
            .map_err(|e| e.to_string())
            .and_then(|config| security.reload(&config));
        match reloaded {
            Ok(()) => {
                tracing::info!("reloaded: the file's keys, secrets and certificates are in force")
            }
            Err(e) => {
                tracing::error!("reload refused, the secrets and certificates in force stay: {e}")
            }
        }
    }
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
