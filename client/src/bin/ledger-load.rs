//! `ledger-load`: N concurrent clients, each claiming a new effect and reporting it
//! committed, against a running cluster; prints throughput and latency percentiles, beside
//! a reference row of the same clients calling the Admin leader RPC (a round trip that
//! touches neither Raft nor the disk, and that any API key may make), so the table shows
//! what replication costs.
//!
//! ```text
//! ledger-load --endpoints h:p,h:p,h:p --api-key KEY [--clients 16] [--seconds 10]
//!             [--tool pay/refund] [--namespace load]
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ledger_client::{LedgerClient, RetryPolicy};
use ledger_core::{Authority, ClaimOutcome, Declaration, EffectKey, Report, ToolRef};
use tokio::sync::Mutex;

struct Options {
    endpoints: Vec<String>,
    api_key: String,
    clients: usize,
    seconds: u64,
    tool: ToolRef,
    tenant: String,
    namespace: String,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        endpoints: Vec::new(),
        api_key: String::new(),
        clients: 16,
        seconds: 10,
        tool: ToolRef {
            provider: "pay".into(),
            name: "refund".into(),
            contract_version: "v1".into(),
        },
        tenant: "acme".into(),
        namespace: "load".into(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag} {value}: not a number"))
        };
        match flag.as_str() {
            "--endpoints" => o.endpoints = value.split(',').map(str::to_owned).collect(),
            "--api-key" => o.api_key = value.clone(),
            "--clients" => o.clients = number()? as usize,
            "--seconds" => o.seconds = number()?,
            "--tenant" => o.tenant = value.clone(),
            "--namespace" => o.namespace = value.clone(),
            "--tool" => {
                let (p, n) = value.split_once('/').ok_or("--tool is provider/name")?;
                o.tool.provider = p.into();
                o.tool.name = n.into();
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if o.endpoints.is_empty() || o.api_key.is_empty() {
        return Err("--endpoints and --api-key are required".into());
    }
    Ok(o)
}

/// Latencies in microseconds and failures, per operation.
#[derive(Default)]
struct Samples {
    effect: Vec<u64>,
    claim: Vec<u64>,
    report: Vec<u64>,
    status: Vec<u64>,
    errors: u64,
}

fn main() -> std::process::ExitCode {
    let options = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("ledger-load: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime starts");
    runtime.block_on(run(options));
    std::process::ExitCode::SUCCESS
}

async fn run(o: Options) {
    let retry = RetryPolicy::default();
    let client = LedgerClient::with_retry(o.endpoints.clone(), &o.api_key, retry).expect("client");
    client.find_leader().await;
    let samples = Arc::new(Mutex::new(Samples::default()));
    let run_id = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let o = Arc::new(o);

    let deadline = Instant::now() + Duration::from_secs(o.seconds);
    let tasks: Vec<_> = (0..o.clients)
        .map(|c| {
            let (client, samples, o) = (client.clone(), samples.clone(), o.clone());
            tokio::spawn(async move { effects(client, c, run_id, deadline, o, samples).await })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    let effects_elapsed = o.seconds as f64;

    let status_seconds = (o.seconds / 2).max(1);
    let deadline = Instant::now() + Duration::from_secs(status_seconds);
    let tasks: Vec<_> = (0..o.clients)
        .map(|_| {
            let (client, samples) = (client.clone(), samples.clone());
            tokio::spawn(async move { statuses(client, deadline, samples).await })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }

    let mut s = samples.lock().await;
    println!(
        "{} clients, {} s of claim+report on {} node(s)\n",
        o.clients,
        o.seconds,
        o.endpoints.len()
    );
    println!(
        "{:<34} {:>8} {:>10} {:>9} {:>9} {:>9}",
        "operation", "count", "per s", "p50 ms", "p99 ms", "p999 ms"
    );
    let effects_per_s = s.effect.len() as f64 / effects_elapsed;
    row("effect (claim + report)", &mut s.effect, effects_per_s);
    let claims_per_s = s.claim.len() as f64 / effects_elapsed;
    row("  claim (replicated)", &mut s.claim, claims_per_s);
    let reports_per_s = s.report.len() as f64 / effects_elapsed;
    row("  report (replicated)", &mut s.report, reports_per_s);
    let status_per_s = s.status.len() as f64 / status_seconds as f64;
    row(
        "reference: leader RPC (no Raft)",
        &mut s.status,
        status_per_s,
    );
    println!("\nerrors: {}", s.errors);
}

fn row(name: &str, samples: &mut [u64], per_s: f64) {
    samples.sort_unstable();
    let pct = |p: f64| -> f64 {
        if samples.is_empty() {
            return 0.0;
        }
        let i = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[i] as f64 / 1000.0
    };
    println!(
        "{:<34} {:>8} {:>10.0} {:>9.2} {:>9.2} {:>9.2}",
        name,
        samples.len(),
        per_s,
        pct(0.50),
        pct(0.99),
        pct(0.999)
    );
}

async fn effects(
    client: LedgerClient,
    c: usize,
    run_id: u128,
    deadline: Instant,
    o: Arc<Options>,
    samples: Arc<Mutex<Samples>>,
) {
    let mut i = 0u64;
    while Instant::now() < deadline {
        i += 1;
        let key = format!("{run_id}-{c}-{i}");
        let declaration = Declaration {
            key: EffectKey::new(&o.tenant, &o.namespace, &key),
            workflow_id: format!("load-{run_id}-{c}"),
            tool: o.tool.clone(),
            authority: Authority {
                principal: "load".into(),
                policy_generation: 1,
            },
            target: format!("load/{key}"),
            intent_json: format!(r#"{{"amount":{i},"client":{c}}}"#),
        };
        let started = Instant::now();
        let claim = client
            .claim(
                &format!("{key}/claim"),
                declaration.clone(),
                "ledger-load",
                None,
                None,
            )
            .await;
        let claimed = Instant::now();
        let Ok(ClaimOutcome::Proceed(grant)) = claim else {
            samples.lock().await.errors += 1;
            continue;
        };
        let report = Report::Committed {
            receipt: format!("r-{key}"),
        };
        let reported = client
            .report(
                &format!("{key}/report"),
                declaration.key,
                grant.fencing_token,
                report,
            )
            .await;
        let done = Instant::now();
        let mut s = samples.lock().await;
        if reported.is_err() {
            s.errors += 1;
            continue;
        }
        s.claim.push((claimed - started).as_micros() as u64);
        s.report.push((done - claimed).as_micros() as u64);
        s.effect.push((done - started).as_micros() as u64);
    }
}

async fn statuses(client: LedgerClient, deadline: Instant, samples: Arc<Mutex<Samples>>) {
    while Instant::now() < deadline {
        let started = Instant::now();
        let ok = client.transport().leader_of(0, 1_000).await.is_ok();
        let elapsed = started.elapsed().as_micros() as u64;
        let mut s = samples.lock().await;
        if ok {
            s.status.push(elapsed);
        } else {
            s.errors += 1;
        }
    }
}
