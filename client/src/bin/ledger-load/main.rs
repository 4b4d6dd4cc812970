//! `ledger-load`: N concurrent clients, each claiming a new effect and reporting it
//! committed, against a running cluster; prints throughput and latency percentiles, beside
//! a reference row of the same clients calling the Admin leader RPC (a round trip that
//! touches neither Raft nor the disk, and that any API key may make), so the table shows
//! what replication costs.
//!
//! With `--preload N` it first fills the ledger with N retained effects (claimed and
//! reported committed by many concurrent clients, as fast as the cluster takes them), so
//! the measurement runs against a ledger of that size. `--output json` prints one JSON
//! object instead of the table, for scripts (`deploy/bench.sh`) that build their own.
//!
//! Failed calls are counted in two kinds: back-pressure (the node answered
//! `RESOURCE_EXHAUSTED`: too many commands waiting) and every other failure.
//!
//! With `--etcd` the endpoints are etcd members and each client puts new keys instead
//! (see `etcd`), for a reference measured the same way at the same client counts.
//!
//! By default each client starts its next effect when the last one is answered (a closed
//! loop: the offered load follows the system's speed). With `--rate R` effects start on a
//! fixed schedule instead, R a second whatever the answers (an open loop, at most
//! `--clients` in flight), and each latency counts from the effect's scheduled start, so
//! an effect that waited for a free client or behind a slow one is not measured as fast.
//! That is how two systems are compared at the same offered load. An open loop also
//! reports its start lag: how long after its scheduled start each operation began. It is
//! part of every latency; on a machine the load generator shares with the system, a large
//! lag means the generator waited for CPU.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod etcd;
mod report;

use clap::{Parser, ValueEnum};
use ledger_client::{ClientError, LedgerClient, OverloadPolicy, RetryPolicy, TlsOptions};
use ledger_core::{Authority, ClaimOutcome, Declaration, EffectKey, Report, ToolRef};
use report::{Failure, Preloaded, Samples, Summary, Target};

/// Load generator for a running effect ledger cluster.
#[derive(Parser, Debug)]
#[command(name = "ledger-load", version)]
struct Options {
    /// Node endpoints, comma-separated (`host:port,host:port`).
    #[arg(long, env = "LEDGER_ENDPOINTS", value_delimiter = ',', required = true)]
    endpoints: Vec<String>,
    /// A tenant API key of `--tenant`.
    #[arg(long, env = "LEDGER_API_KEY", required_unless_present = "etcd")]
    api_key: Option<String>,
    /// The endpoints are etcd members: put new keys (256-byte values) instead of
    /// claiming and reporting effects, with the same clients and the same percentiles.
    #[arg(long, conflicts_with = "preload")]
    etcd: bool,
    /// Concurrent clients during the measurement.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    clients: u32,
    /// Open loop: start this many effects (or etcd puts) a second on a fixed schedule,
    /// whatever the answers, with at most `--clients` in flight; latencies count from
    /// each one's scheduled start.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    rate: Option<u32>,
    /// Length of the measurement, in seconds.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
    /// The tool every effect calls, `provider/name` (version v1).
    #[arg(long, default_value = "pay/refund", value_parser = parse_tool)]
    tool: ToolRef,
    /// Tenant of every effect key (the API key's tenant).
    #[arg(long, default_value = "acme")]
    tenant: String,
    /// Namespace of every effect key.
    #[arg(long, default_value = "load")]
    namespace: String,
    /// Before measuring, fill the ledger with this many retained effects.
    #[arg(long, default_value_t = 0)]
    preload: u64,
    /// Concurrent clients while preloading.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    preload_clients: u32,
    /// Skip the reference row (leader RPC), which otherwise runs for half of `--seconds`.
    #[arg(long)]
    no_reference: bool,
    /// Attempts per call, the first included (leader changes, unreachable nodes).
    #[arg(long, default_value_t = RetryPolicy::default().attempts,
          value_parser = clap::value_parser!(u32).range(1..))]
    attempts: u32,
    /// Longest total wait on a node's "overloaded, try later" answers per call, as the
    /// client library waits them out; 0 counts every such answer instead.
    #[arg(long, default_value_t = OverloadPolicy::default().wait_ms_max)]
    overload_wait_ms: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    output: Output,
    /// Reach the nodes over TLS, trusting this CA (PEM).
    #[arg(long, env = "LEDGER_CA_CERT", value_name = "PEM")]
    ca_cert: Option<PathBuf>,
    /// A client certificate (PEM) to present; needs `--client-key` and `--ca-cert`.
    #[arg(long, env = "LEDGER_CLIENT_CERT", value_name = "PEM", requires_all = ["client_key", "ca_cert"])]
    client_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(
        long,
        env = "LEDGER_CLIENT_KEY",
        value_name = "PEM",
        requires = "client_cert"
    )]
    client_key: Option<PathBuf>,
}

/// How the results are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    /// A human-readable table.
    Table,
    /// One JSON object on one line.
    Json,
}

fn parse_tool(value: &str) -> Result<ToolRef, String> {
    let (provider, name) = value
        .split_once('/')
        .filter(|(p, n)| !p.is_empty() && !n.is_empty())
        .ok_or_else(|| format!("{value}: expected provider/name"))?;
    Ok(ToolRef {
        provider: provider.into(),
        name: name.into(),
        contract_version: "v1".into(),
    })
}

/// Back-pressure is the client library's "overloaded, try later" (the node's
/// `RESOURCE_EXHAUSTED` with a retry hint, waited out as long as `--overload-wait-ms`
/// allows), or a bare `RESOURCE_EXHAUSTED` status.
fn classify(error: &ClientError) -> Failure {
    match error {
        ClientError::Overloaded { .. }
        | ClientError::Status {
            code: tonic::Code::ResourceExhausted,
            ..
        } => Failure::BackPressure,
        other => Failure::Other(other.to_string()),
    }
}

fn main() -> std::process::ExitCode {
    let options = Options::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("ledger-load: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(options)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ledger-load: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// One effect's identity: which run, which client, which of its effects.
struct Effect<'a> {
    options: &'a Options,
    run_id: u128,
    phase: &'static str,
    client: u64,
    seq: u64,
}

impl Effect<'_> {
    fn declaration(&self) -> (String, Declaration) {
        let (o, c, i) = (self.options, self.client, self.seq);
        let key = format!("{}-{}-{c}-{i}", self.phase, self.run_id);
        let declaration = Declaration {
            key: EffectKey::new(&o.tenant, &o.namespace, &key),
            workflow_id: format!("load-{}-{}-{c}", self.phase, self.run_id),
            tool: o.tool.clone(),
            authority: Authority {
                principal: "load".into(),
                policy_generation: 1,
            },
            target: format!("load/{key}"),
            intent_json: format!(r#"{{"amount":{i},"client":{c}}}"#),
        };
        (key, declaration)
    }
}

/// Claims and reports one effect; the claim's and the whole pair's latency, counted from
/// `since` (now, or in an open loop the effect's scheduled start).
async fn claim_and_report(
    client: &LedgerClient,
    effect: &Effect<'_>,
    since: Instant,
) -> Result<(Duration, Duration), Failure> {
    let (key, declaration) = effect.declaration();
    let claim = client
        .claim(
            &format!("{key}/claim"),
            declaration.clone(),
            "ledger-load",
            None,
            None,
        )
        .await;
    let claimed = since.elapsed();
    let grant = match claim {
        Ok(ClaimOutcome::Proceed(grant)) => grant,
        Ok(other) => return Err(Failure::Other(format!("claim did not proceed: {other:?}"))),
        Err(e) => return Err(classify(&e)),
    };
    let report = Report::Committed {
        receipt: format!("r-{key}"),
    };
    client
        .report(
            &format!("{key}/report"),
            declaration.key,
            grant.fencing_token,
            report,
        )
        .await
        .map_err(|e| classify(&e))?;
    Ok((claimed, since.elapsed()))
}

async fn run(o: Options) -> Result<(), String> {
    if o.etcd {
        return run_etcd(o).await;
    }
    let retry = RetryPolicy {
        attempts: o.attempts,
        ..RetryPolicy::default()
    };
    let overload = OverloadPolicy {
        wait_ms_max: o.overload_wait_ms,
        ..OverloadPolicy::default()
    };
    let tls = o
        .ca_cert
        .as_deref()
        .map(|ca| TlsOptions::from_files(ca, o.client_cert.as_deref(), o.client_key.as_deref()))
        .transpose()
        .map_err(|e| e.to_string())?;
    let api_key = o.api_key.clone().unwrap_or_default();
    let client = LedgerClient::with_tls(o.endpoints.clone(), &api_key, retry, overload, tls)
        .map_err(|e| e.to_string())?;
    client.find_leader().await;
    let run_id = run_id();
    let o = Arc::new(o);

    let preload = if o.preload > 0 {
        Some(preload(&client, &o, run_id).await)
    } else {
        None
    };

    let started = Instant::now();
    let cpu = Cpu::start();
    let mut samples = match o.rate {
        Some(rate) => {
            let (client, o2) = (client.clone(), o.clone());
            open_loop(rate, o.clients, o.seconds, move |seq, scheduled| {
                let (client, o) = (client.clone(), o2.clone());
                async move { scheduled_effect(&client, &o, run_id, seq, scheduled).await }
            })
            .await?
        }
        None => {
            let deadline = started + Duration::from_secs(o.seconds);
            let tasks: Vec<_> = (0..u64::from(o.clients))
                .map(|c| {
                    let (client, o) = (client.clone(), o.clone());
                    tokio::spawn(async move { effects(client, c, run_id, deadline, o).await })
                })
                .collect();
            merged(tasks).await?
        }
    };
    let effects_s = started.elapsed().as_secs_f64();
    let cpu_s = cpu.seconds();

    let mut reference_s = 0.0;
    if !o.no_reference {
        let started = Instant::now();
        let deadline = started + Duration::from_secs((o.seconds / 2).max(1));
        let tasks: Vec<_> = (0..o.clients)
            .map(|_| {
                let client = client.clone();
                tokio::spawn(async move { statuses(client, deadline).await })
            })
            .collect();
        samples.merge(merged(tasks).await?);
        reference_s = started.elapsed().as_secs_f64();
    }

    let report = Summary {
        target: Target::Ledger,
        clients: o.clients,
        rate: o.rate,
        nodes: o.endpoints.len(),
        reference: !o.no_reference,
        preload,
        effects_s,
        cpu_s,
        reference_s,
    };
    print(&report, &o, &mut samples)
}

/// `--etcd`: the measurement's clients put new keys into etcd.
async fn run_etcd(o: Options) -> Result<(), String> {
    let channels = etcd::channels(&o.endpoints)?;
    let run_id = run_id();
    let started = Instant::now();
    let cpu = Cpu::start();
    let mut samples = match o.rate {
        Some(rate) => {
            open_loop(rate, o.clients, o.seconds, move |seq, scheduled| {
                let channel = channels[seq as usize % channels.len()].clone();
                etcd::scheduled_put(channel, run_id, seq, scheduled)
            })
            .await?
        }
        None => {
            let deadline = started + Duration::from_secs(o.seconds);
            let tasks: Vec<_> = (0..u64::from(o.clients))
                .map(|c| {
                    let channel = channels[c as usize % channels.len()].clone();
                    tokio::spawn(etcd::puts(channel, c, run_id, deadline))
                })
                .collect();
            merged(tasks).await?
        }
    };
    let report = Summary {
        target: Target::Etcd,
        clients: o.clients,
        rate: o.rate,
        nodes: o.endpoints.len(),
        reference: false,
        preload: None,
        effects_s: started.elapsed().as_secs_f64(),
        cpu_s: cpu.seconds(),
        reference_s: 0.0,
    };
    print(&report, &o, &mut samples)
}

/// The CPU time this process spends from a point on (every thread, user and system).
struct Cpu(Option<f64>);

impl Cpu {
    fn start() -> Self {
        Cpu(process_cpu_seconds())
    }

    /// Seconds of CPU since [`Cpu::start`]; NaN where the system does not say.
    fn seconds(&self) -> f64 {
        match (self.0, process_cpu_seconds()) {
            (Some(start), Some(now)) => now - start,
            _ => f64::NAN,
        }
    }
}

/// The process's CPU time so far, from `getrusage`.
fn process_cpu_seconds() -> Option<f64> {
    // SAFETY: `getrusage` only writes the struct it is given, zeroed and of its type.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return None;
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(seconds(usage.ru_utime) + seconds(usage.ru_stime))
}

/// This run's id, in every key it writes: the start time in ms.
fn run_id() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// The samples of every client task.
async fn merged(tasks: Vec<tokio::task::JoinHandle<Samples>>) -> Result<Samples, String> {
    let mut samples = Samples::default();
    for t in tasks {
        samples.merge(t.await.map_err(|e| format!("a client task failed: {e}"))?);
    }
    Ok(samples)
}

fn print(report: &Summary, o: &Options, samples: &mut Samples) -> Result<(), String> {
    match o.output {
        Output::Table => report.print_table(samples),
        Output::Json => println!("{}", report.json(samples)),
    }
    if samples.effect.is_empty() {
        return Err(match &samples.first_failure {
            Some(first) => format!("nothing completed; the first failure: {first}"),
            None => "nothing completed".into(),
        });
    }
    Ok(())
}

/// Claims and reports `--preload` effects with `--preload-clients` concurrent clients;
/// a failed pair is counted and its slot taken again, so exactly N effects end committed
/// (unless the failures outnumber them tenfold, when the phase gives up).
async fn preload(client: &LedgerClient, o: &Arc<Options>, run_id: u128) -> Preloaded {
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..u64::from(o.preload_clients))
        .map(|c| {
            let (client, o, next, done) = (client.clone(), o.clone(), next.clone(), done.clone());
            tokio::spawn(async move {
                let mut s = Samples::default();
                loop {
                    let seq = next.fetch_add(1, Ordering::Relaxed);
                    let gave_up = s.back_pressure + s.failures > 10 * o.preload;
                    if done.load(Ordering::Relaxed) >= o.preload || gave_up {
                        return s;
                    }
                    let effect = Effect {
                        options: &o,
                        run_id,
                        phase: "pre",
                        client: c,
                        seq,
                    };
                    match claim_and_report(&client, &effect, Instant::now()).await {
                        Ok(_) => {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(f) => s.fail(f),
                    }
                }
            })
        })
        .collect();
    let mut s = Samples::default();
    for t in tasks {
        if let Ok(task) = t.await {
            s.merge(task);
        }
    }
    Preloaded {
        records: done.load(Ordering::Relaxed),
        seconds: started.elapsed().as_secs_f64(),
        back_pressure: s.back_pressure,
        failures: s.failures,
        first_failure: s.first_failure,
    }
}

async fn effects(
    client: LedgerClient,
    c: u64,
    run_id: u128,
    deadline: Instant,
    o: Arc<Options>,
) -> Samples {
    let mut s = Samples::default();
    let mut seq = 0u64;
    while Instant::now() < deadline {
        seq += 1;
        let effect = Effect {
            options: &o,
            run_id,
            phase: "run",
            client: c,
            seq,
        };
        s.count_effect(claim_and_report(&client, &effect, Instant::now()).await);
    }
    s
}

/// When operation `seq` of an open loop at `rate` a second is due, after `start`.
fn scheduled_at(start: Instant, rate: u32, seq: u64) -> Instant {
    start + Duration::from_nanos(seq.saturating_mul(1_000_000_000) / u64::from(rate))
}

/// `--rate`: starts operation `seq` (from 0) at its scheduled time for `seconds`, `rate` a
/// second, with at most `in_flight` unanswered; `op(seq, scheduled)` measures from
/// `scheduled`. An operation due while `in_flight` are unanswered starts once one is,
/// and the ones after it start late too: their wait is in their latency, as it would be
/// for a caller who does not wait for the ledger before asking.
async fn open_loop<F, Fut>(
    rate: u32,
    in_flight: u32,
    seconds: u64,
    op: F,
) -> Result<Samples, String>
where
    F: Fn(u64, Instant) -> Fut,
    Fut: std::future::Future<Output = Samples> + Send + 'static,
{
    let slots = Arc::new(tokio::sync::Semaphore::new(in_flight as usize));
    let mut running = tokio::task::JoinSet::new();
    let mut samples = Samples::default();
    let start = Instant::now();
    for seq in 0..u64::from(rate).saturating_mul(seconds) {
        let scheduled = scheduled_at(start, rate, seq);
        tokio::time::sleep_until(scheduled.into()).await;
        let slot = slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| format!("in-flight slots closed: {e}"))?;
        let operation = op(seq, scheduled);
        running.spawn(async move {
            let lag = scheduled.elapsed();
            let mut done = operation.await;
            drop(slot);
            done.start_lag.push(lag.as_micros() as u64);
            done
        });
        while let Some(done) = running.try_join_next() {
            samples.merge(done.map_err(|e| format!("an operation's task failed: {e}"))?);
        }
    }
    while let Some(done) = running.join_next().await {
        samples.merge(done.map_err(|e| format!("an operation's task failed: {e}"))?);
    }
    Ok(samples)
}

/// Effect `seq` of an open loop, due at `scheduled`: its latencies count from then.
async fn scheduled_effect(
    client: &LedgerClient,
    o: &Options,
    run_id: u128,
    seq: u64,
    scheduled: Instant,
) -> Samples {
    let mut s = Samples::default();
    let effect = Effect {
        options: o,
        run_id,
        phase: "rate",
        // As many workflows as a closed loop of `--clients` has.
        client: seq % u64::from(o.clients),
        seq,
    };
    s.count_effect(claim_and_report(client, &effect, scheduled).await);
    s
}

async fn statuses(client: LedgerClient, deadline: Instant) -> Samples {
    let mut s = Samples::default();
    while Instant::now() < deadline {
        let started = Instant::now();
        match client.transport().leader_of(0, 1_000).await {
            Ok(_) => s.status.push(started.elapsed().as_micros() as u64),
            Err(e) => s.fail(classify(&e)),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_without_a_slash_is_refused() {
        assert!(parse_tool("refund").is_err());
        assert!(parse_tool("/refund").is_err());
        let tool = parse_tool("pay/refund").unwrap();
        assert_eq!(
            (tool.provider.as_str(), tool.name.as_str()),
            ("pay", "refund")
        );
    }

    #[test]
    fn overloaded_answers_count_as_back_pressure() {
        let direct = ClientError::Status {
            code: tonic::Code::ResourceExhausted,
            message: "overloaded: 4096 commands waiting".into(),
        };
        let after_waiting = ClientError::Overloaded {
            retry_after_ms: 100,
            waited_ms: 10_000,
        };
        let down = ClientError::Unavailable {
            attempts: 10,
            last: "no leader available: election".into(),
        };
        assert_eq!(classify(&direct), Failure::BackPressure);
        assert_eq!(classify(&after_waiting), Failure::BackPressure);
        assert!(matches!(classify(&down), Failure::Other(what) if what.contains("no leader")));
    }

    #[test]
    fn flags_parse_with_defaults_and_refuse_zero_clients() {
        let o = Options::try_parse_from([
            "ledger-load",
            "--endpoints",
            "a:1,b:2",
            "--api-key",
            "k",
            "--preload",
            "100000",
            "--output",
            "json",
        ])
        .unwrap();
        assert_eq!(o.endpoints, ["a:1", "b:2"]);
        assert_eq!((o.clients, o.seconds, o.preload), (16, 10, 100_000));
        assert_eq!(o.output, Output::Json);
        let zero = Options::try_parse_from([
            "ledger-load",
            "--endpoints",
            "a:1",
            "--api-key",
            "k",
            "--clients",
            "0",
        ]);
        assert!(zero.is_err());
    }

    /// Work on this thread until 50 ms of CPU are counted: they are (within 10 s of wall
    /// time however busy the machine is), and no more than the cores could have given in
    /// the time it took, so a wrong unit shows either way.
    #[test]
    fn cpu_time_counts_the_work_done() {
        let cpu = Cpu::start();
        let spin = Instant::now();
        let mut n = 0u64;
        while cpu.seconds() < 0.05 && spin.elapsed() < Duration::from_secs(10) {
            for _ in 0..10_000 {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        let (used, wall) = (cpu.seconds(), spin.elapsed().as_secs_f64());
        assert!(used >= 0.05, "{used} s of CPU counted in {wall} s of work");
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        assert!(
            used <= wall * cores + 0.02,
            "{used} s of CPU counted in {wall} s on {cores} cores"
        );
    }

    #[test]
    fn an_open_loop_schedules_evenly_from_its_start() {
        let start = Instant::now();
        assert_eq!(scheduled_at(start, 4, 0), start);
        assert_eq!(
            scheduled_at(start, 4, 3),
            start + Duration::from_millis(750)
        );
        assert_eq!(
            scheduled_at(start, 3, 1),
            start + Duration::from_nanos(333_333_333)
        );
        assert_eq!(scheduled_at(start, 1, 60), start + Duration::from_secs(60));
    }

    /// 40 operations of 50 ms each, due over one second: one at a time they take two, and
    /// the last ones' latencies include the second they waited past their schedule, which
    /// is their start lag; with room for all, none waits.
    #[tokio::test]
    async fn an_open_loop_counts_the_wait_for_a_free_slot_in_the_latency() {
        let op = |_seq, scheduled: Instant| async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let mut s = Samples::default();
            s.effect.push(scheduled.elapsed().as_micros() as u64);
            s
        };
        let one_at_a_time = open_loop(40, 1, 1, op).await.unwrap();
        assert_eq!(one_at_a_time.effect.len(), 40);
        let slowest = one_at_a_time.effect.iter().max().copied().unwrap();
        assert!(
            slowest >= 900_000,
            "the last waited about 1 s, measured {slowest} us"
        );
        assert_eq!(one_at_a_time.start_lag.len(), 40);
        let latest = one_at_a_time.start_lag.iter().max().copied().unwrap();
        assert!(
            latest >= 900_000,
            "the last started about 1 s late, measured {latest} us"
        );
        let all_at_once = open_loop(40, 40, 1, op).await.unwrap();
        assert_eq!(all_at_once.effect.len(), 40);
        let slowest = all_at_once.effect.iter().max().copied().unwrap();
        assert!(
            slowest < 500_000,
            "none waited for a slot, measured {slowest} us"
        );
        let latest = all_at_once.start_lag.iter().max().copied().unwrap();
        assert!(
            latest < 450_000,
            "none started late for want of a slot, measured {latest} us"
        );
    }

    #[test]
    fn etcd_needs_no_api_key_and_takes_no_preload() {
        let o = Options::try_parse_from(["ledger-load", "--endpoints", "a:1", "--etcd"]).unwrap();
        assert!(o.etcd && o.api_key.is_none());
        let ledger = Options::try_parse_from(["ledger-load", "--endpoints", "a:1"]);
        assert!(ledger.is_err(), "the ledger needs an API key");
        let preload = Options::try_parse_from([
            "ledger-load",
            "--endpoints",
            "a:1",
            "--etcd",
            "--preload",
            "10",
        ]);
        assert!(preload.is_err());
    }
}
