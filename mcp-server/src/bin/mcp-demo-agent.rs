//! `mcp-demo-agent --socket PATH --server NAME=HOST:PORT --server NAME=HOST:PORT
//! --token TOKEN --providers HOST:PORT`: the agent side of `deploy/mcp-demo.sh`.
//!
//! Starts the lossy proxy on `PATH` in front of two tool-server instances and shows, on
//! the providers' own state, that a lost answer followed by a retry through the other
//! instance causes no second effect: a refund, then a message to three recipients that
//! needs the user's confirmation (an `input_required` round trip). Exits non-zero if any
//! provider holds more (or fewer) effects than intended.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Parser;
use http::Method;
use rmcp::model::{CallToolRequestParams, CallToolResponse};
use serde_json::{json, Value};

use ledger_mcp_example::agent::{self, Agent, Session};
use ledger_mcp_example::fake::counts;
use ledger_mcp_example::http::send_json;
use ledger_mcp_example::proxy::LossyProxy;

/// The agent side of deploy/mcp-demo.sh: a lossy proxy in front of two tool-server
/// instances, a refund and a confirmed message whose answers get lost, and the
/// providers' own state at the end (exit status 1 if it holds any effect twice).
#[derive(Debug, Parser)]
#[command(name = "mcp-demo-agent", version)]
struct Options {
    /// Where the lossy proxy listens (a Unix socket).
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    /// A tool-server instance, NAME=HOST:PORT; give exactly two.
    #[arg(long = "server", value_name = "NAME=HOST:PORT", value_parser = server, num_args = 1, required = true)]
    servers: Vec<(String, String)>,
    /// The agent's bearer token.
    #[arg(long)]
    token: String,
    /// The fake providers, HOST:PORT, whose state is shown.
    #[arg(long, value_name = "HOST:PORT")]
    providers: String,
}

fn server(value: &str) -> Result<(String, String), String> {
    value
        .split_once('=')
        .map(|(name, addr)| (name.to_owned(), addr.to_owned()))
        .ok_or_else(|| format!("{value} is not NAME=HOST:PORT"))
}

fn options() -> anyhow::Result<(Options, BTreeMap<String, String>)> {
    let options = Options::parse();
    let servers: BTreeMap<String, String> = options.servers.iter().cloned().collect();
    if servers.len() != 2 {
        bail!("give exactly two --server NAME=HOST:PORT");
    }
    Ok((options, servers))
}

struct Demo {
    proxy: LossyProxy,
    names: Vec<String>,
    token: String,
    providers: String,
}

impl Demo {
    async fn session(&self, i: usize) -> anyhow::Result<Session> {
        let agent = Agent { confirms: true };
        Ok(agent::connect(self.proxy.socket(), &self.names[i], &self.token, agent).await?)
    }

    async fn counts(&self) -> anyhow::Result<BTreeMap<String, usize>> {
        let answer = send_json(
            &self.providers,
            Method::GET,
            "/admin/effects",
            &[],
            None,
            5_000,
        )
        .await?;
        Ok(counts(&answer.body))
    }

    /// Sends `call` through instance `i` with its answer lost.
    async fn lose(&self, i: usize, tool: &str, call: CallToolRequestParams) -> anyhow::Result<()> {
        self.proxy.lose_next_answer(tool);
        let answer = self.session(i).await?.call_tool_once(call).await;
        if answer.is_ok() {
            bail!("the answer to {tool} arrived although it should have been lost");
        }
        println!(
            "   {} answered; the proxy lost the answer ({tool})",
            self.names[i]
        );
        Ok(())
    }

    /// Sends `call` through instance `i` and returns its structured result.
    async fn complete(&self, i: usize, call: CallToolRequestParams) -> anyhow::Result<Value> {
        match self.session(i).await?.call_tool_once(call).await? {
            CallToolResponse::Complete(result) => {
                result.structured_content.context("no structured content")
            }
            other => bail!("expected a result, got {other:?}"),
        }
    }
}

fn step(text: &str) {
    println!("\n== {text}");
}

async fn refund(demo: &Demo) -> anyhow::Result<()> {
    step("the agent asks mcp-a for a refund of 5.00 EUR (workflow wf-981, turn 4)");
    let args = json!({ "order_id": "o-981", "amount_cents": 500, "currency": "EUR" });
    let call = agent::call("refund", args, agent::turn_meta("wf-981", "turn-4"));
    demo.lose(0, "refund", call.clone()).await?;
    step("the agent retries the same call (same _meta, same arguments) through mcp-b");
    let retry = demo.complete(1, call).await?;
    let outcome = retry["effect"]["outcome"].as_str().unwrap_or_default();
    println!("   {outcome}: receipt {}", retry["receipt"]);
    Ok(())
}

async fn message(demo: &Demo) -> anyhow::Result<()> {
    step("the agent asks mcp-a to message three people (irreversible)");
    let args = json!({
        "recipients": ["ana@example.com", "bo@example.com", "cy@example.com"],
        "text": "Your refund of 5.00 EUR is on its way.",
    });
    let call = agent::call("send_message", args, agent::turn_meta("wf-981", "turn-5"));
    let asked = demo.session(0).await?.call_tool_once(call.clone()).await?;
    let CallToolResponse::InputRequired(asked) = asked else {
        bail!("expected input_required, got {asked:?}");
    };
    println!("   mcp-a answered input_required: the user must confirm; the user confirms");
    let mut resend = call;
    let confirmed = serde_json::to_value(agent::confirmation(true))?;
    resend.input_responses = Some([("confirm".to_owned(), confirmed)].into());
    resend.request_state = asked.request_state;
    step("the confirmed call is re-sent through mcp-b");
    demo.lose(1, "send_message", resend.clone()).await?;
    step("the agent re-sends it once more, through mcp-a");
    let retry = demo.complete(0, resend).await?;
    for m in retry["messages"].as_array().into_iter().flatten() {
        let recipient = m["recipient"].as_str().unwrap_or_default();
        println!(
            "   {recipient}: {}",
            m["effect"]["outcome"].as_str().unwrap_or_default()
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (o, servers) = options()?;
    let _ = std::fs::remove_file(&o.socket);
    let demo = Demo {
        proxy: LossyProxy::start(&o.socket, servers.clone())?,
        names: servers.keys().cloned().collect(),
        token: o.token,
        providers: o.providers,
    };
    refund(&demo).await?;
    message(&demo).await?;
    step("what the providers hold (their own state, not the tools' answers)");
    let counts = demo.counts().await?;
    println!("   {counts:?}");
    if counts.get("refunds") != Some(&1) || counts.get("messages") != Some(&3) {
        bail!("expected one refund and three messages");
    }
    println!("\ntwo lost answers, two retries through the other instance: one refund, one message per recipient");
    Ok(())
}
