//! `ledgerctl`: the operator's and the demo's command line.
//!
//! ```text
//! ledgerctl [--endpoints h:p,h:p] [--api-key KEY]
//!           [--ca-cert PEM [--client-cert PEM --client-key PEM]] <command> [args]
//!   status                         each node's view of the cluster (operator key)
//!   leader                         the leader's id
//!   wait-ready [--timeout-ms N]    wait until every endpoint answers (operator key)
//!   wait-leader [--timeout-ms N]   wait until a leader is known
//!   init ID=HOST:PORT ...          form a new cluster
//!   add-learner ID HOST:PORT       add a node as learner
//!   change-membership ID ...       make these nodes the voters
//!   put-tenant TENANT
//!   put-tool TENANT PROVIDER/NAME CLASS [--horizon-ms N] [--retention-ms N] [--lease-ms N]
//!            [--processing-ms N] [--visibility-lag-ms N] [--retry-window-ms N]
//!   apply-policies FILE            store every tenant and tool policy of a policy file
//!   claim KEY TOOL INTENT_JSON --command-id ID [--holder H] [--workflow W] [--endpoint I]
//!   report KEY TOKEN (committed RECEIPT | failed PROOF | unknown REASON) --command-id ID
//!   get KEY
//! ```
//! `KEY` is `tenant/namespace/key`; `TOOL` is `provider/name[@version]`. Outcomes print as
//! one JSON line. Endpoints default to `$LEDGER_ENDPOINTS`, the key to `$LEDGER_API_KEY`.
//! With `--ca-cert` (`$LEDGER_CA_CERT`) the nodes are reached over TLS and their
//! certificates checked against that CA; `--client-cert` and `--client-key`
//! (`$LEDGER_CLIENT_CERT`, `$LEDGER_CLIENT_KEY`) present a client certificate.

use std::collections::BTreeMap;
use std::process::ExitCode;

use ledger_client::{
    ClientError, LedgerClient, OverloadPolicy, PolicyFile, RetryPolicy, TlsOptions,
};
use ledger_core::{
    Authority, Declaration, EffectKey, ReplayClass, Report, TenantSettings, ToolName, ToolPolicy,
    ToolRef,
};

type CliResult = Result<(), String>;

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime starts");
    match runtime.block_on(run(std::env::args().skip(1).collect())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ledgerctl: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Positional arguments and `--flag value` pairs.
struct Args {
    positional: Vec<String>,
    flags: BTreeMap<String, String>,
}

impl Args {
    fn parse(raw: Vec<String>) -> Result<Self, String> {
        let mut positional = Vec::new();
        let mut flags = BTreeMap::new();
        let mut it = raw.into_iter();
        while let Some(arg) = it.next() {
            match arg.strip_prefix("--") {
                Some(flag) => {
                    let value = it.next().ok_or_else(|| format!("--{flag} needs a value"))?;
                    flags.insert(flag.to_owned(), value);
                }
                None => positional.push(arg),
            }
        }
        Ok(Args { positional, flags })
    }

    fn flag(&self, name: &str) -> Option<&str> {
        self.flags.get(name).map(String::as_str)
    }

    fn number(&self, name: &str) -> Result<Option<u64>, String> {
        self.flag(name)
            .map(|v| {
                v.parse()
                    .map_err(|_| format!("--{name} {v} is not a number"))
            })
            .transpose()
    }

    fn arg(&self, i: usize, what: &str) -> Result<&str, String> {
        self.positional
            .get(i)
            .map(String::as_str)
            .ok_or_else(|| format!("missing {what}"))
    }
}

/// TLS from `--ca-cert`, `--client-cert`, `--client-key` or their environment variables;
/// none without a CA.
fn tls_options(args: &Args) -> Result<Option<TlsOptions>, String> {
    let given = |flag: &str, var: &str| {
        args.flag(flag)
            .map(std::path::PathBuf::from)
            .or_else(|| std::env::var_os(var).map(std::path::PathBuf::from))
    };
    let cert = given("client-cert", "LEDGER_CLIENT_CERT");
    let key = given("client-key", "LEDGER_CLIENT_KEY");
    match given("ca-cert", "LEDGER_CA_CERT") {
        Some(ca) => TlsOptions::from_files(&ca, cert.as_deref(), key.as_deref())
            .map(Some)
            .map_err(|e| e.to_string()),
        None if cert.is_some() || key.is_some() => {
            Err("--client-cert and --client-key need --ca-cert (or LEDGER_CA_CERT)".into())
        }
        None => Ok(None),
    }
}

async fn run(raw: Vec<String>) -> CliResult {
    let args = Args::parse(raw)?;
    let endpoints: Vec<String> = args
        .flag("endpoints")
        .map(str::to_owned)
        .or_else(|| std::env::var("LEDGER_ENDPOINTS").ok())
        .ok_or("--endpoints or LEDGER_ENDPOINTS is required")?
        .split(',')
        .map(str::to_owned)
        .collect();
    let api_key = args
        .flag("api-key")
        .map(str::to_owned)
        .or_else(|| std::env::var("LEDGER_API_KEY").ok())
        .ok_or("--api-key or LEDGER_API_KEY is required")?;
    let client = LedgerClient::with_tls(
        endpoints.clone(),
        &api_key,
        RetryPolicy::default(),
        OverloadPolicy::default(),
        tls_options(&args)?,
    )
    .map_err(|e| e.to_string())?;
    if let Some(i) = args.number("endpoint")? {
        let i = i as usize;
        let addr = endpoints
            .get(i)
            .ok_or(format!("--endpoint {i} is out of range"))?;
        client.transport().prefer(addr);
    }
    let command = args.arg(0, "command")?;
    match command {
        "status" => status(&client).await,
        "leader" => {
            let (id, addr) = client.find_leader().await.ok_or("no leader known")?;
            println!("{id} {addr}");
            Ok(())
        }
        "wait-leader" => {
            let timeout_ms = args.number("timeout-ms")?.unwrap_or(10_000);
            let (id, addr) = client.wait_for_leader(timeout_ms).await.map_err(show)?;
            println!("leader {id} at {addr}");
            Ok(())
        }
        "wait-ready" => {
            let timeout_ms = args.number("timeout-ms")?.unwrap_or(30_000);
            wait_ready(&client, timeout_ms).await
        }
        "init" => init(&client, &args).await,
        "add-learner" => {
            let id = parse_id(args.arg(1, "node id")?)?;
            let response = client
                .add_learner(id, args.arg(2, "address")?)
                .await
                .map_err(show)?;
            println!("{response:?}");
            Ok(())
        }
        "change-membership" => {
            let voters = args.positional[1..]
                .iter()
                .map(|v| parse_id(v))
                .collect::<Result<_, _>>()?;
            let response = client
                .change_membership(voters, false)
                .await
                .map_err(show)?;
            println!("{response:?}");
            Ok(())
        }
        "put-tenant" => {
            let tenant = args.arg(1, "tenant")?;
            let id = format!("ledgerctl/put-tenant/{tenant}");
            client
                .put_tenant(&id, tenant, TenantSettings::default())
                .await
                .map_err(show)
        }
        "put-tool" => put_tool(&client, &args).await,
        "apply-policies" => {
            let path = args.arg(1, "policy file")?;
            let file = PolicyFile::load(std::path::Path::new(path)).map_err(|e| e.to_string())?;
            let sent = file.apply(&client).await.map_err(show)?;
            println!("applied {sent} tenant and tool policies from {path}");
            Ok(())
        }
        "claim" => claim(&client, &args).await,
        "report" => report(&client, &args).await,
        "get" => {
            let record = client
                .get(parse_key(args.arg(1, "key")?)?)
                .await
                .map_err(show)?;
            println!("{}", json(&record));
            Ok(())
        }
        other => Err(format!(
            "unknown command {other}; see the usage at the top of ledgerctl.rs"
        )),
    }
}

fn show(e: ClientError) -> String {
    e.to_string()
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("<unprintable: {e}>"))
}

fn parse_id(s: &str) -> Result<u64, String> {
    s.parse().map_err(|_| format!("{s} is not a node id"))
}

fn parse_key(s: &str) -> Result<EffectKey, String> {
    let mut parts = s.splitn(3, '/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(t), Some(n), Some(k)) => Ok(EffectKey::new(t, n, k)),
        _ => Err(format!("{s} is not tenant/namespace/key")),
    }
}

fn parse_tool(s: &str) -> Result<ToolRef, String> {
    let (name, version) = s.split_once('@').unwrap_or((s, "v1"));
    let (provider, name) = name
        .split_once('/')
        .ok_or_else(|| format!("{s} is not provider/name[@version]"))?;
    Ok(ToolRef {
        provider: provider.into(),
        name: name.into(),
        contract_version: version.into(),
    })
}

async fn status(client: &LedgerClient) -> CliResult {
    for (i, endpoint) in client.transport().endpoints().iter().enumerate() {
        match client.status_of(i).await {
            Err(e @ ClientError::Status { code, .. }) if refused_key(code) => {
                return Err(format!("status needs the operator key (--api-key): {e}"));
            }
            Ok(s) => println!(
                "{endpoint} node={} role={} leader={:?} term={} last_log={:?} committed={:?} \
                 applied={:?} snapshot={:?} records={:?}",
                s.node_id,
                s.role,
                s.leader_id,
                s.term,
                s.last_log_index,
                s.committed_index,
                s.applied_index,
                s.snapshot_index,
                s.records_by_state.iter().collect::<BTreeMap<_, _>>(),
            ),
            Err(e) => println!("{endpoint} down: {e}"),
        }
    }
    Ok(())
}

/// Whether a node refused the API key itself, which no amount of waiting changes.
fn refused_key(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::PermissionDenied | tonic::Code::Unauthenticated
    )
}

async fn wait_ready(client: &LedgerClient, timeout_ms: u64) -> CliResult {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(timeout_ms);
    for i in 0..client.transport().endpoints().len() {
        while let Err(e) = client.status_of(i).await {
            if let ClientError::Status { code, .. } = &e {
                if refused_key(*code) {
                    return Err(format!(
                        "wait-ready needs the operator key (--api-key): {e}"
                    ));
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "{} not ready: {e}",
                    client.transport().endpoints()[i]
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

async fn init(client: &LedgerClient, args: &Args) -> CliResult {
    let members = args.positional[1..]
        .iter()
        .map(|m| {
            let (id, addr) = m
                .split_once('=')
                .ok_or(format!("{m} is not ID=HOST:PORT"))?;
            Ok((parse_id(id)?, addr.to_owned()))
        })
        .collect::<Result<Vec<_>, String>>()?;
    client.initialize(&members).await.map_err(show)?;
    println!("initialized {} members", members.len());
    Ok(())
}

async fn put_tool(client: &LedgerClient, args: &Args) -> CliResult {
    let tenant = args.arg(1, "tenant")?;
    let tool = parse_tool(args.arg(2, "tool")?)?;
    let class = match args.arg(3, "class")? {
        "read_only" => ReplayClass::ReadOnly,
        "keyed_idempotent" => ReplayClass::KeyedIdempotent,
        "unkeyed_create" => ReplayClass::UnkeyedCreate,
        "irreversible" => ReplayClass::Irreversible,
        "long_running_job" => ReplayClass::LongRunningJob,
        other => return Err(format!("unknown class {other}")),
    };
    let mut policy = ToolPolicy::for_class(class);
    if let Some(v) = args.number("horizon-ms")? {
        policy.provider_horizon_ms = v;
    }
    if let Some(v) = args.number("retention-ms")? {
        policy.retention_ms = v;
    }
    if let Some(v) = args.number("lease-ms")? {
        policy.lease_ms = v;
    }
    if let Some(v) = args.number("processing-ms")? {
        policy.processing_ms_max = Some(v);
    }
    if let Some(v) = args.number("visibility-lag-ms")? {
        policy.visibility_lag_ms = v;
    }
    if let Some(v) = args.number("retry-window-ms")? {
        policy.retry_window_ms = v;
    }
    let name = ToolName {
        provider: tool.provider,
        name: tool.name,
    };
    let id = format!("ledgerctl/put-tool/{tenant}/{name}/{policy:?}");
    let id: String = id
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(128)
        .collect();
    client
        .put_tool_policy(&id, tenant, name, policy)
        .await
        .map_err(show)
}

async fn claim(client: &LedgerClient, args: &Args) -> CliResult {
    let key = parse_key(args.arg(1, "key")?)?;
    let tool = parse_tool(args.arg(2, "tool")?)?;
    let intent_json = args.arg(3, "intent")?.to_owned();
    let command_id = args.flag("command-id").ok_or("--command-id is required")?;
    let declaration = Declaration {
        workflow_id: args.flag("workflow").unwrap_or("cli").into(),
        target: format!("{}/{}", tool.provider, key.key),
        authority: Authority {
            principal: args.flag("principal").unwrap_or("ledgerctl").into(),
            policy_generation: 1,
        },
        key,
        tool,
        intent_json,
    };
    let holder = args.flag("holder").unwrap_or("ledgerctl");
    let outcome = client
        .claim(
            command_id,
            declaration,
            holder,
            args.number("lease-ms")?,
            args.flag("confirm").map(Into::into),
        )
        .await
        .map_err(show)?;
    println!("{}", json(&outcome));
    Ok(())
}

async fn report(client: &LedgerClient, args: &Args) -> CliResult {
    let key = parse_key(args.arg(1, "key")?)?;
    let token = parse_id(args.arg(2, "fencing token")?)?;
    let detail = args.arg(4, "receipt, proof or reason")?.to_owned();
    let report = match args.arg(3, "committed|failed|unknown")? {
        "committed" => Report::Committed { receipt: detail },
        "failed" => Report::FailedBeforeEffect { proof: detail },
        "unknown" => Report::Unknown { reason: detail },
        other => return Err(format!("unknown report {other}")),
    };
    let command_id = args.flag("command-id").ok_or("--command-id is required")?;
    let (state, receipt) = client
        .report(command_id, key, token, report)
        .await
        .map_err(show)?;
    println!(
        "{}",
        json(&serde_json::json!({ "state": state.as_str(), "receipt": receipt }))
    );
    Ok(())
}
