//! `ledgerctl`: the operator's command line for a ledger cluster.
//!
//! ```text
//! ledgerctl [--endpoints h:p,..] [--api-key KEY] [--output table|json] <command>
//!   status | leader | wait-ready | wait-leader | init ID=HOST:PORT ...
//!   members list | add ID HOST:PORT | promote ID.. | set ID.. | remove ID
//!   tenant get|put TENANT     tool get|put TENANT PROVIDER/NAME ...
//!   policy apply|diff FILE
//!   get KEY | list --tenant T [filters] [--limit N] [--after KEY] [--all]
//!   decide KEY (committed --receipt R | not-committed) --operator NAME --note TEXT
//!   export --tenant T [--file PATH]
//!   claim KEY TOOL INTENT_JSON --command-id ID | report KEY TOKEN ENDING DETAIL --command-id ID
//!   completions bash|zsh|fish
//! ```
//! `ledgerctl help <command>` or `<command> --help` says more. Endpoints come from
//! `--endpoints` or `$LEDGER_ENDPOINTS`, the key from `--api-key` or `$LEDGER_API_KEY`.
//! With `--ca-cert` (`$LEDGER_CA_CERT`) the nodes are reached over TLS and their
//! certificates checked against that CA; `--client-cert` and `--client-key` present a
//! client certificate.
//! The older spellings `add-learner`, `change-membership`, `put-tenant`, `put-tool` and
//! `apply-policies` still work.
//!
//! Modules: [`cli`] is the clap definition; [`cluster`], [`config`], [`records`] and
//! [`effects`] run the commands over [`LedgerClient`]; [`output`] prints tables or JSON;
//! [`failure`] turns client errors into messages that say what to do next.

mod cli;
mod cluster;
mod config;
mod effects;
mod failure;
mod output;
mod records;

use std::io::Write;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{CommandFactory, FromArgMatches};

use ledger_client::{LedgerClient, OverloadPolicy, RetryPolicy, TlsOptions};
use ledger_core::EffectKey;

use cli::{Cli, Command, Global, Shell, Snapshot, Voters};
use failure::{CliResult, Exit, Failure};

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let on_command_line =
        |id: &str| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
    cli.global.key_flags = (on_command_line("api_key"), on_command_line("api_key_file"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime starts");
    match runtime.block_on(run(cli)) {
        Ok(Exit::Success) => ExitCode::SUCCESS,
        Ok(Exit::Different) => ExitCode::from(1),
        Err(e) => {
            eprintln!("ledgerctl: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli) -> CliResult {
    let format = cli.global.output;
    if let Command::Completions(args) = &cli.command {
        return completions(args.shell);
    }
    let client = connect(&cli.global)?;
    let c = &client;
    match &cli.command {
        Command::Status(args) => cluster::status(c, args.digest, format).await,
        Command::Leader => cluster::leader(c, format).await,
        Command::WaitReady(w) => cluster::wait_ready(c, w.timeout_ms).await,
        Command::WaitLeader(w) => cluster::wait_leader(c, w.timeout_ms, format).await,
        Command::Init(args) => cluster::init(c, args, format).await,
        Command::Members(m) => cluster::run(c, m, format).await,
        Command::AddLearner(args) => cluster::add_learner(c, args, format).await,
        Command::ChangeMembership(Voters { ids }) => cluster::change(c, ids.clone(), format).await,
        Command::Tenant(t) => config::tenant(c, t, format).await,
        Command::PutTenant(args) => config::put_tenant(c, args, format).await,
        Command::Tool(t) => config::tool(c, t, format).await,
        Command::PutTool(args) => config::put_tool(c, args, format).await,
        Command::Policy(p) => config::policy(c, p, format).await,
        Command::ApplyPolicies(file) => {
            let apply = cli::Policy::Apply(cli::PolicyFileArg {
                file: file.file.clone(),
            });
            config::policy(c, &apply, format).await
        }
        Command::Get(args) => records::get(c, args, format).await,
        Command::List(args) => records::list(c, args, format).await,
        Command::Decide(args) => records::decide(c, args, format).await,
        Command::Export(args) => records::export(c, args).await,
        Command::Watch(args) => records::watch(c, args, format).await,
        Command::Claim(args) => effects::claim(c, args, format).await,
        Command::Report(args) => effects::report(c, args, format).await,
        Command::Snapshot(Snapshot::Save { file }) => cluster::save(c, file, format).await,
        Command::Completions(_) => unreachable!("handled before connecting"),
    }
}

/// A client of the global options' endpoints with their key.
/// The API key: from `--api-key` or `--api-key-file`, a flag on the command line winning
/// over a variable in the environment; two of the same kind are a usage error.
fn api_key(global: &Global) -> Result<String, Failure> {
    let (key_flag, file_flag) = global.key_flags;
    let file = match (&global.api_key, &global.api_key_file) {
        (None, None) => return Err(Failure::no_api_key()),
        (Some(key), None) => return Ok(key.clone()),
        (None, Some(path)) => path,
        (Some(_), Some(_)) if key_flag == file_flag => {
            return Err(Failure::new(if key_flag {
                "give --api-key or --api-key-file, not both"
            } else {
                "LEDGER_API_KEY and LEDGER_API_KEY_FILE are both set: unset one"
            }))
        }
        (Some(key), Some(_)) if key_flag => return Ok(key.clone()),
        (Some(_), Some(path)) => path,
    };
    let text = std::fs::read_to_string(file).map_err(|e| {
        Failure::new(format!(
            "cannot read the API key from {}: {e}",
            file.display()
        ))
    })?;
    let key = text.lines().next().unwrap_or_default().trim().to_owned();
    if key.is_empty() {
        return Err(Failure::new(format!(
            "{} holds no API key on its first line",
            file.display()
        )));
    }
    Ok(key)
}

fn connect(global: &Global) -> Result<LedgerClient, Failure> {
    let endpoints: Vec<String> = global
        .endpoints
        .iter()
        .map(|e| e.trim().to_owned())
        .filter(|e| !e.is_empty())
        .collect();
    if endpoints.is_empty() {
        return Err(Failure::no_endpoints());
    }
    let api_key = api_key(global)?;
    let api_key = api_key.as_str();
    let tls = match &global.ca_cert {
        Some(ca) => Some(
            TlsOptions::from_files(
                ca,
                global.client_cert.as_deref(),
                global.client_key.as_deref(),
            )
            .map_err(|e| Failure::new(format!("TLS: {e}")))?,
        ),
        None if global.client_cert.is_some() || global.client_key.is_some() => {
            return Err(Failure::new(
                "--client-cert and --client-key need --ca-cert (or LEDGER_CA_CERT)",
            ));
        }
        None => None,
    };
    let client = LedgerClient::with_tls(
        endpoints.clone(),
        api_key,
        RetryPolicy::default(),
        OverloadPolicy::default(),
        tls,
    )
    .map_err(|e| Failure::new(format!("cannot build a client: {e}")))?;
    if let Some(i) = global.endpoint {
        let addr = endpoints.get(i).ok_or_else(|| {
            Failure::new(format!(
                "--endpoint {i} is out of range: there are {} endpoints (0-based)",
                endpoints.len()
            ))
        })?;
        client.transport().prefer(addr);
    }
    Ok(client)
}

fn completions(shell: Shell) -> CliResult {
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "ledgerctl", &mut script);
    std::io::stdout()
        .write_all(&script)
        .map_err(|e| Failure::new(format!("cannot write the completion script: {e}")))?;
    Ok(Exit::Success)
}

/// `tenant/namespace/key`; the key may itself hold `/`.
pub(crate) fn parse_key(s: &str) -> Result<EffectKey, Failure> {
    let mut parts = s.splitn(3, '/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(t), Some(n), Some(k)) if !t.is_empty() && !n.is_empty() && !k.is_empty() => {
            Ok(EffectKey::new(t, n, k))
        }
        _ => Err(Failure::new(format!("{s} is not tenant/namespace/key"))),
    }
}

/// A command id no other invocation uses: a transport retry inside this invocation
/// re-sends it, a second run of ledgerctl sends a new one.
pub(crate) fn unique_id(verb: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("ledgerctl/{verb}/{nanos:x}-{}", std::process::id())
}
