//! `fake-provider [--listen ip:port] [--key-ttl-ms N] [--message-lag-ms N]
//! [--deploy-ms N]`: serve the fake payments, help desk, messaging and deploy providers
//! (API in `ledger_mcp_example::fake`). Prints `listening <addr>` on stdout once bound.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::{anyhow, Context};
use ledger_mcp_example::fake::{self, Settings};

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fake-provider: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let mut listen: SocketAddr = "127.0.0.1:0".parse()?;
    let mut settings = Settings::default();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| anyhow!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .with_context(|| format!("{flag} {value}"))
        };
        match flag.as_str() {
            "--listen" => listen = value.parse().with_context(|| format!("--listen {value}"))?,
            "--key-ttl-ms" => settings.key_ttl_ms = number()?,
            "--message-lag-ms" => settings.message_visibility_lag_ms = number()?,
            "--deploy-ms" => settings.deploy_duration_ms = number()?,
            other => return Err(anyhow!("unknown flag {other}")),
        }
    }
    let (addr, task) = fake::start(listen, settings).await?;
    println!("listening {addr}");
    tokio::select! {
        _ = task => Err(anyhow!("the server stopped")),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}
