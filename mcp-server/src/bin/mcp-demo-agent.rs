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

use anyhow::{anyhow, bail, Context};
use http::Method;
use rmcp::model::{CallToolRequestParams, CallToolResponse};
use serde_json::{json, Value};

use ledger_mcp_example::agent::{self, Agent, Session};
use ledger_mcp_example::fake::counts;
use ledger_mcp_example::http::send_json;
use ledger_mcp_example::proxy::LossyProxy;

struct Options {
    socket: PathBuf,
    servers: BTreeMap<String, String>,
    token: String,
    providers: String,
}

fn options() -> anyhow::Result<Options> {
    let (mut socket, mut token, mut providers) = (None, None, None);
    let mut servers = BTreeMap::new();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| anyhow!("{flag} needs a value"))?;
        match flag.as_str() {
            "--socket" => socket = Some(PathBuf::from(value)),
            "--token" => token = Some(value),
            "--providers" => providers = Some(value),
            "--server" => {
                let (name, addr) = value.split_once('=').context("--server NAME=HOST:PORT")?;
                servers.insert(name.to_owned(), addr.to_owned());
            }
            other => bail!("unknown flag {other}"),
        }
    }
    if servers.len() != 2 {
        bail!("give exactly two --server NAME=HOST:PORT");
    }
    Ok(Options {
        socket: socket.context("--socket is required")?,
        servers,
        token: token.context("--token is required")?,
        providers: providers.context("--providers is required")?,
    })
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
    let o = options()?;
    let _ = std::fs::remove_file(&o.socket);
    let demo = Demo {
        proxy: LossyProxy::start(&o.socket, o.servers.clone())?,
        names: o.servers.keys().cloned().collect(),
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
