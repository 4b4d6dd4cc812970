//! The command line as clap parses it: global options, every subcommand and its
//! arguments. Nothing here talks to the cluster; `main` hands the parsed values to the
//! module that runs them; the arguments of the record commands are in [`records`].

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::output::Format;

mod records;

pub use records::{Claim, Decide, Ending, Export, Get, List, ReportArgs, State, Verdict, Watch};

/// The effect ledger's operator command line.
///
/// Talks to any set of ledger nodes: cluster status and membership, tenant and tool
/// policies, effect records (get, list, export) and the operator's decision on an
/// escalated effect. KEY is `tenant/namespace/key`, TOOL is `provider/name[@version]`.
///
/// Exit status: 0 on success, 1 when `policy diff` finds differences, 2 on a usage
/// error or a failed command.
#[derive(Debug, Parser)]
#[command(name = "ledgerctl", version)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand takes.
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// The nodes to talk to, host:port, comma-separated.
    #[arg(
        long,
        env = "LEDGER_ENDPOINTS",
        value_delimiter = ',',
        global = true,
        hide_env_values = true,
        value_name = "HOST:PORT,..."
    )]
    pub endpoints: Vec<String>,
    /// The API key: the operator's for cluster and configuration commands, a tenant's
    /// for that tenant's effects.
    #[arg(
        long,
        env = "LEDGER_API_KEY",
        global = true,
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub api_key: Option<String>,
    /// A file holding the API key (its first line), so the key is not on a command line,
    /// where `ps` and shell histories show it. A key given on the command line, either
    /// way, wins over one from the environment.
    #[arg(
        long,
        env = "LEDGER_API_KEY_FILE",
        global = true,
        hide_env_values = true,
        value_name = "FILE"
    )]
    pub api_key_file: Option<PathBuf>,
    /// Whether `api_key` and `api_key_file` were given on the command line (set from the
    /// parse, not an option).
    #[arg(skip)]
    pub key_flags: (bool, bool),
    /// How results are printed: aligned tables and `key: value` lines, or one JSON
    /// document per result.
    #[arg(long, value_enum, default_value_t = Format::Table, global = true)]
    pub output: Format,
    /// Send calls to this endpoint first (0-based index into --endpoints); followers
    /// forward to the leader.
    #[arg(long, global = true, value_name = "INDEX")]
    pub endpoint: Option<usize>,
    /// Reach the nodes over TLS, trusting this CA (PEM).
    #[arg(
        long,
        env = "LEDGER_CA_CERT",
        global = true,
        hide_env_values = true,
        value_name = "PEM"
    )]
    pub ca_cert: Option<PathBuf>,
    /// A client certificate to present (PEM; with --client-key).
    #[arg(
        long,
        env = "LEDGER_CLIENT_CERT",
        global = true,
        hide_env_values = true,
        value_name = "PEM"
    )]
    pub client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long,
        env = "LEDGER_CLIENT_KEY",
        global = true,
        hide_env_values = true,
        value_name = "PEM"
    )]
    pub client_key: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Each node's view of the cluster: role, leader, term, log indexes, records per state
    /// (operator key).
    Status(StatusArgs),
    /// The leader's id and address, as the first answering node knows it (any key).
    Leader,
    /// Wait until every endpoint answers a status call (operator key).
    WaitReady(Wait),
    /// Wait until some node knows a leader.
    WaitLeader(Wait),
    /// Form a new cluster of these voters, through the first endpoint (operator key).
    Init(Init),
    /// Cluster membership: list, add a learner, promote, set or remove voters.
    #[command(subcommand)]
    Members(Members),
    /// A tenant's settings and tool policies.
    #[command(subcommand)]
    Tenant(Tenant),
    /// One tool's policy for one tenant.
    #[command(subcommand)]
    Tool(Tool),
    /// The operator's policy file: apply it, or compare it with the cluster.
    #[command(subcommand)]
    Policy(Policy),
    /// One effect's record.
    Get(Get),
    /// A page of one tenant's records, filtered; `--all` follows every page.
    List(List),
    /// Settle an escalated effect: the operator's decision, who made it and why
    /// (operator key).
    Decide(Decide),
    /// Every record of the named tenants as JSON lines, for audit; follows every page.
    Export(Export),
    /// Follow records as they change: one line (or JSON object) per change, as the
    /// serving node applies it.
    Watch(Watch),
    /// Claim an effect: declare it if new and ask for an attempt to dispatch.
    Claim(Claim),
    /// Report how a dispatch attempt ended.
    Report(ReportArgs),
    /// Backups of the whole ledger (operator key).
    #[command(subcommand)]
    Snapshot(Snapshot),
    /// Print a shell completion script for ledgerctl.
    Completions(Completions),
    /// `members add`.
    #[command(hide = true)]
    AddLearner(MemberAdd),
    /// `members set`.
    #[command(hide = true)]
    ChangeMembership(Voters),
    /// `tenant put`.
    #[command(hide = true)]
    PutTenant(TenantPut),
    /// `tool put`.
    #[command(hide = true)]
    PutTool(ToolPut),
    /// `policy apply`.
    #[command(hide = true)]
    ApplyPolicies(PolicyFileArg),
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Also each node's state digest (the SHA-256 of its ledger state) and the log index
    /// it reflects: replicas at the same index must agree, and a backup's digest is
    /// compared with it. Costs each node a pass over its whole state.
    #[arg(long)]
    pub digest: bool,
}

#[derive(Debug, Subcommand)]
pub enum Snapshot {
    /// Write the whole ledger, as the leader holds it now, to FILE; prints the log index
    /// and the state digest it holds. Restore it into a new cluster with `ledger-node
    /// restore --from FILE` on every member before `init`.
    Save {
        /// Where to write the backup.
        file: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct Wait {
    /// Give up after this long.
    #[arg(long, default_value_t = 30_000, value_name = "MS")]
    pub timeout_ms: u64,
}

#[derive(Debug, Args)]
pub struct Init {
    /// The voters, each ID=HOST:PORT.
    #[arg(required = true, value_name = "ID=HOST:PORT")]
    pub members: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum Members {
    /// The voters and learners, as the leader (or else the first answering node) sees them
    /// (operator key).
    List,
    /// Add a node as a learner; returns once it has caught up (operator key).
    Add(MemberAdd),
    /// Make these nodes voters besides the current ones (operator key).
    Promote(Voters),
    /// Make exactly these nodes the voters (operator key).
    Set(Voters),
    /// Remove a voter: the voters become the current ones without it (operator key).
    Remove(MemberRemove),
}

#[derive(Debug, Args)]
pub struct MemberAdd {
    /// The new node's id.
    pub id: u64,
    /// Its gRPC address.
    #[arg(value_name = "HOST:PORT")]
    pub addr: String,
}

#[derive(Debug, Args)]
pub struct Voters {
    /// Node ids.
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<u64>,
}

#[derive(Debug, Args)]
pub struct MemberRemove {
    /// The voter to remove.
    pub id: u64,
}

#[derive(Debug, Subcommand)]
pub enum Tenant {
    /// A tenant's settings and its tools' policies.
    Get(TenantName),
    /// Register a tenant or replace its settings; omitted settings take the defaults
    /// (operator key).
    Put(TenantPut),
}

#[derive(Debug, Args)]
pub struct TenantName {
    /// The tenant id.
    pub tenant: String,
}

#[derive(Debug, Args)]
pub struct TenantPut {
    /// The tenant id.
    pub tenant: String,
    /// How long a command id's answer is remembered.
    #[arg(long, value_name = "MS")]
    pub command_retention_ms: Option<u64>,
    /// How long a collected record's tombstone is kept.
    #[arg(long, value_name = "MS")]
    pub tombstone_retention_ms: Option<u64>,
    /// Most records the tenant may keep.
    #[arg(long, value_name = "N")]
    pub live_records_max: Option<u64>,
    /// Most approximate bytes of the tenant's records and tombstones.
    #[arg(long, value_name = "BYTES")]
    pub stored_bytes_max: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum Tool {
    /// One tool's policy for a tenant.
    Get(ToolGet),
    /// Set one tool's policy for a tenant: the class's defaults, with the values given
    /// (operator key).
    Put(ToolPut),
}

#[derive(Debug, Args)]
pub struct ToolGet {
    /// The tenant id.
    pub tenant: String,
    /// The tool, provider/name.
    pub tool: String,
}

#[derive(Debug, Args)]
pub struct ToolPut {
    /// The tenant id.
    pub tenant: String,
    /// The tool, provider/name.
    pub tool: String,
    /// How the ledger treats the tool.
    #[arg(value_enum)]
    pub class: Class,
    /// How long the provider deduplicates its key.
    #[arg(long, value_name = "MS")]
    pub horizon_ms: Option<u64>,
    /// How long the ledger keeps a finished record.
    #[arg(long, value_name = "MS")]
    pub retention_ms: Option<u64>,
    /// The default lease of an attempt.
    #[arg(long, value_name = "MS")]
    pub lease_ms: Option<u64>,
    /// The provider's declared processing bound; without it a look-up never proves
    /// absence and a keyed tool's unknown outcome is reconciled, not re-sent.
    #[arg(long, value_name = "MS")]
    pub processing_ms: Option<u64>,
    /// How long after commit the provider's look-up shows an effect.
    #[arg(long, value_name = "MS")]
    pub visibility_lag_ms: Option<u64>,
    /// How long callers may retry an effect; retention must cover it.
    #[arg(long, value_name = "MS")]
    pub retry_window_ms: Option<u64>,
}

/// A replay class, spelled as in the policy file.
#[derive(Debug, Clone, Copy, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum Class {
    ReadOnly,
    KeyedIdempotent,
    UnkeyedCreate,
    Irreversible,
    LongRunningJob,
}

#[derive(Debug, Subcommand)]
pub enum Policy {
    /// Store every tenant and tool policy of a policy file (operator key).
    Apply(PolicyFileArg),
    /// Compare a policy file with the cluster's tenant configurations: exit status 0 when
    /// equal, 1 when different, with every difference printed.
    Diff(PolicyFileArg),
}

#[derive(Debug, Args)]
pub struct PolicyFileArg {
    /// The TOML policy file (see mcp-server/policies.toml).
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct Completions {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Shells with completion scripts.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}
