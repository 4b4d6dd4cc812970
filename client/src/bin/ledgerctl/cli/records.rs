//! The arguments of the commands on effect records: `get`, `list`, `decide`, `export`,
//! `claim` and `report`.

use std::path::PathBuf;

use clap::{ArgGroup, Args, ValueEnum};

#[derive(Debug, Args)]
pub struct Get {
    /// tenant/namespace/key.
    pub key: String,
}

/// An effect state, as the ledger names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum State {
    NotStarted,
    InProgress,
    Committed,
    FailedBeforeEffect,
    UnknownAfterDispatch,
}

#[derive(Debug, Args)]
pub struct List {
    /// Whose records.
    #[arg(long)]
    pub tenant: String,
    /// Only records in this state.
    #[arg(long, value_enum)]
    pub state: Option<State>,
    /// Only records of this workflow.
    #[arg(long, value_name = "ID")]
    pub workflow: Option<String>,
    /// Only records last changed at or before this ledger time (ms since the epoch).
    #[arg(long, value_name = "MS", conflicts_with = "older_than_ms")]
    pub updated_before_ms: Option<u64>,
    /// Only records unchanged for at least this long (by this machine's clock).
    #[arg(long, value_name = "MS")]
    pub older_than_ms: Option<u64>,
    /// Only escalated records, waiting for a decision.
    #[arg(long)]
    pub escalated: bool,
    /// Only records of this tool, provider/name (filtered by ledgerctl in each page).
    #[arg(long)]
    pub tool: Option<String>,
    /// Only records with this target (filtered by ledgerctl in each page).
    #[arg(long)]
    pub target: Option<String>,
    /// Records per page asked of the server (1 to 1000; halved while a page of large
    /// records is more than one answer may carry).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    /// Start after this key: the `next` token a previous page printed.
    #[arg(long, value_name = "KEY")]
    pub after: Option<String>,
    /// Follow every page to the end.
    #[arg(long)]
    pub all: bool,
}

/// What the operator found the provider holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Verdict {
    /// The effect took place; `--receipt` says what the provider holds.
    Committed,
    /// Nothing took effect; a new attempt may be granted, with the same provider key.
    NotCommitted,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("escalation").required(true).args(["escalation_token", "any_escalation"])))]
pub struct Decide {
    /// tenant/namespace/key of the escalated effect.
    pub key: String,
    /// What the provider holds.
    #[arg(value_enum)]
    pub decision: Verdict,
    /// The provider's receipt; required with `committed`, refused with `not-committed`.
    #[arg(long, required_if_eq("decision", "committed"))]
    pub receipt: Option<String>,
    /// Who decided (kept in the record).
    #[arg(long, value_name = "NAME")]
    pub operator: String,
    /// Why: what was checked (kept in the record).
    #[arg(long, value_name = "TEXT")]
    pub note: String,
    /// The escalation decided on, by the token `ledgerctl get` shows with it. The decision
    /// is refused if the effect's open escalation is another one (someone else decided
    /// it, and the effect was attempted again and escalated anew), since what the
    /// provider held for this one says nothing of the later one.
    #[arg(long, value_name = "TOKEN")]
    pub escalation_token: Option<u64>,
    /// Settle whichever escalation is open when the decision arrives, instead of naming
    /// one with --escalation-token.
    #[arg(long)]
    pub any_escalation: bool,
    /// The decision's command id; send the same id again to retry a decision whose
    /// answer was lost. Default: a new id per invocation.
    #[arg(long, value_name = "ID")]
    pub command_id: Option<String>,
}

#[derive(Debug, Args)]
pub struct Watch {
    /// Whose records.
    #[arg(long, required_unless_present = "key")]
    pub tenant: Option<String>,
    /// One effect, tenant/namespace/key; starts with its record as it is.
    #[arg(long)]
    pub key: Option<String>,
    /// Only records in this state after the change.
    #[arg(long, value_enum)]
    pub state: Option<State>,
    /// Only records escalated after the change.
    #[arg(long)]
    pub escalated: bool,
    /// Only records of this workflow.
    #[arg(long, value_name = "ID")]
    pub workflow: Option<String>,
    /// Stop after this many events (default: until interrupted or the node ends it).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

#[derive(Debug, Args)]
pub struct Export {
    /// Whose records; repeat for several tenants.
    #[arg(long, required = true)]
    pub tenant: Vec<String>,
    /// Write to this file instead of standard output.
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// Records per page asked of the server (1 to 1000; halved while a page of large
    /// records is more than one answer may carry).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub page_size: u32,
}

#[derive(Debug, Args)]
pub struct Claim {
    /// tenant/namespace/key.
    pub key: String,
    /// provider/name[@version] (version v1 when omitted).
    pub tool: String,
    /// The intent as JSON text.
    pub intent_json: String,
    /// The claim's command id: the same id returns the same grant.
    #[arg(long, value_name = "ID")]
    pub command_id: String,
    /// Who holds the attempt's lease.
    #[arg(long, default_value = "ledgerctl")]
    pub holder: String,
    /// The workflow the effect belongs to.
    #[arg(long, default_value = "cli")]
    pub workflow: String,
    /// Who the effect is done for.
    #[arg(long, default_value = "ledgerctl")]
    pub principal: String,
    /// The lease asked for (the tool's policy clamps it).
    #[arg(long, value_name = "MS")]
    pub lease_ms: Option<u64>,
    /// What the user confirmed, for tools that require confirmation.
    #[arg(long, value_name = "TEXT")]
    pub confirm: Option<String>,
}

/// How a dispatch attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Ending {
    /// The provider committed; DETAIL is its receipt.
    Committed,
    /// Proven that nothing took effect; DETAIL is the proof.
    Failed,
    /// It may or may not have taken effect; DETAIL is why it is unknown.
    Unknown,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// tenant/namespace/key.
    pub key: String,
    /// The attempt's fencing token.
    pub token: u64,
    /// How the attempt ended.
    #[arg(value_enum)]
    pub ending: Ending,
    /// The receipt, the proof or the reason.
    pub detail: String,
    /// The report's command id.
    #[arg(long, value_name = "ID")]
    pub command_id: String,
}
