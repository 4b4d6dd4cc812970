//! Effect records: one by key, pages of a tenant's records, every record for audit, and
//! the operator's decision on an escalated effect.

use std::io::{BufWriter, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use ledger_client::{ClientError, LedgerClient, WatchFilter};
use ledger_core::{Decision, EffectKey, EffectRecord, EffectState, ListPage, ListQuery, ToolName};

use crate::cli::{Decide, Export, Get, List, State, Verdict, Watch};
use crate::failure::{CliResult, Exit, Failure};
use crate::output::{or_dash, print_fields, print_json, say, write_json_line, Format, Table};
use crate::{parse_key, unique_id};

fn state(s: State) -> EffectState {
    match s {
        State::NotStarted => EffectState::NotStarted,
        State::InProgress => EffectState::InProgress,
        State::Committed => EffectState::Committed,
        State::FailedBeforeEffect => EffectState::FailedBeforeEffect,
        State::UnknownAfterDispatch => EffectState::UnknownAfterDispatch,
    }
}

/// `get KEY`.
pub async fn get(client: &LedgerClient, args: &Get, format: Format) -> CliResult {
    let key = parse_key(&args.key)?;
    let record = client
        .get(key.clone())
        .await
        .map_err(|e| Failure::from_client("get", e))?
        .ok_or_else(|| {
            Failure::hinted(
                format!("no effect {key}"),
                "check the key (tenant/namespace/key); a record past its retention is collected",
            )
        })?;
    match format {
        Format::Json => print_json(&record),
        Format::Table => print_record(&record),
    }
    Ok(Exit::Success)
}

fn escalation(record: &EffectRecord) -> String {
    record
        .escalation
        .as_ref()
        .map_or_else(|| "-".into(), |e| format!("{:?}", e.reason))
}

/// The open escalation as `get` shows it: why, when, and the token that names it (what
/// `decide --escalation-token` takes).
fn escalation_in_full(record: &EffectRecord) -> String {
    match (&record.escalation, record.escalation_token()) {
        (Some(e), Some(token)) => format!(
            "{:?} at {} ms (escalation token {token})",
            e.reason, e.at_ms
        ),
        _ => "-".into(),
    }
}

fn print_record(r: &EffectRecord) {
    let decision = r.decision.as_ref().map(|d| {
        let what = match &d.decision {
            Decision::Committed { receipt } => format!("committed (receipt {receipt})"),
            Decision::NotCommitted => "not committed".into(),
        };
        format!("{what} by {} at {} ms: {}", d.operator, d.at_ms, d.note)
    });
    print_fields(&[
        ("key", r.key.to_string()),
        ("state", r.state.as_str().into()),
        ("escalated", escalation_in_full(r)),
        (
            "tool",
            format!(
                "{}/{}@{}",
                r.tool.provider, r.tool.name, r.tool.contract_version
            ),
        ),
        ("class", r.policy.class.to_string()),
        ("workflow", r.workflow_id.clone()),
        ("target", r.target.clone()),
        ("principal", r.authority.principal.clone()),
        ("intent", r.intent.clone()),
        ("intent_hash", r.intent_hash.to_string()),
        ("provider_key", r.provider_key.clone()),
        ("receipt", or_dash(r.receipt.as_ref())),
        ("declared_at_ms", r.declared_at_ms.to_string()),
        ("updated_at_ms", r.updated_at_ms.to_string()),
        ("attempts", r.attempts.len().to_string()),
        ("dispatches_in_budget", r.dispatches_in_budget.to_string()),
        (
            "observations_in_budget",
            r.observations_in_budget.to_string(),
        ),
        ("ambiguous", r.ambiguous.to_string()),
        ("horizon_deadline_ms", or_dash(r.horizon_deadline_ms)),
        ("retention_deadline_ms", or_dash(r.retention_deadline_ms)),
        ("decision", or_dash(decision)),
    ]);
}

/// The filters `list` applies itself, to each page the server returns: the `List` RPC
/// selects by state, escalation, workflow and age only.
struct LocalFilter {
    tool: Option<ToolName>,
    target: Option<String>,
}

impl LocalFilter {
    fn keeps(&self, r: &EffectRecord) -> bool {
        self.tool
            .as_ref()
            .is_none_or(|t| r.tool.provider == t.provider && r.tool.name == t.name)
            && self.target.as_ref().is_none_or(|t| r.target == *t)
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// `list`: one page, or every page with `--all`. `next` is the key to pass as `--after`
/// for the following page; absent on the last page.
pub async fn list(client: &LedgerClient, args: &List, format: Format) -> CliResult {
    let tool = match &args.tool {
        Some(t) => Some(
            t.split_once('/')
                .map(|(provider, name)| ToolName {
                    provider: provider.into(),
                    name: name.into(),
                })
                .ok_or_else(|| Failure::new(format!("--tool {t} is not provider/name")))?,
        ),
        None => None,
    };
    let filter = LocalFilter {
        tool,
        target: args.target.clone(),
    };
    let mut query = ListQuery {
        tenant: args.tenant.clone(),
        escalated: args.escalated,
        state: args.state.map(state),
        workflow_id: args.workflow.clone(),
        updated_at_or_before_ms: args
            .updated_before_ms
            .or(args.older_than_ms.map(|age| now_ms().saturating_sub(age))),
        after: args.after.as_deref().map(parse_key).transpose()?,
        limit: args.limit as usize,
    };
    let mut records = Vec::new();
    // A page of a narrow filter may come back with fewer records than asked, even none,
    // and still go on: without --all, pages are read until one holds a record or the
    // listing ends, so that one call shows something whenever there is something.
    let next = loop {
        let page = fitting_page(client, &mut query, "list").await?;
        let found = !page.records.is_empty();
        records.extend(page.records.into_iter().filter(|r| filter.keeps(r)));
        match page.continue_after {
            Some(next) if args.all || !found => query.after = Some(next),
            next => break next,
        }
    };
    match format {
        Format::Json => print_json(&serde_json::json!({
            "records": records,
            "next": next.as_ref().map(EffectKey::to_string),
        })),
        Format::Table => {
            let mut table = Table::new(&[
                "key",
                "state",
                "escalated",
                "tool",
                "workflow",
                "updated_at_ms",
                "attempts",
            ]);
            for r in &records {
                table.row(vec![
                    r.key.to_string(),
                    r.state.as_str().into(),
                    escalation(r),
                    format!("{}/{}", r.tool.provider, r.tool.name),
                    r.workflow_id.clone(),
                    r.updated_at_ms.to_string(),
                    r.attempts.len().to_string(),
                ]);
            }
            table.print();
            if let Some(next) = next {
                say!("next: {next} (pass --after {next}, or --all for every page)");
            }
        }
    }
    Ok(Exit::Success)
}

/// `decide KEY committed --receipt R | not-committed`.
pub async fn decide(client: &LedgerClient, args: &Decide, format: Format) -> CliResult {
    let key = parse_key(&args.key)?;
    let decision = match (args.decision, &args.receipt) {
        (Verdict::Committed, Some(receipt)) => Decision::Committed {
            receipt: receipt.clone(),
        },
        (Verdict::Committed, None) => {
            return Err(Failure::new(
                "committed needs --receipt: what the provider holds",
            ))
        }
        (Verdict::NotCommitted, None) => Decision::NotCommitted,
        (Verdict::NotCommitted, Some(_)) => {
            return Err(Failure::new(
                "--receipt goes with committed, not with not-committed",
            ))
        }
    };
    let command_id = args
        .command_id
        .clone()
        .unwrap_or_else(|| unique_id("decide"));
    let settled = client
        .decide(
            &command_id,
            key.clone(),
            args.escalation_token,
            decision,
            &args.operator,
            &args.note,
        )
        .await
        .map_err(|e| Failure::from_command("decide", &command_id, e))?;
    match format {
        Format::Json => print_json(&serde_json::json!({
            "key": key.to_string(),
            "state": settled.as_str(),
            "command_id": command_id,
        })),
        Format::Table => print_fields(&[
            ("key", key.to_string()),
            ("state", settled.as_str().into()),
            ("command_id", command_id),
        ]),
    }
    Ok(Exit::Success)
}

/// `export`: every record of each tenant, one JSON document per line, following pages.
pub async fn export(client: &LedgerClient, args: &Export) -> CliResult {
    let mut out: Box<dyn Write> = match &args.file {
        Some(path) => Box::new(BufWriter::new(
            crate::output::create_private(path)
                .map_err(|e| Failure::new(format!("cannot create {}: {e}", path.display())))?,
        )),
        None => Box::new(BufWriter::new(std::io::stdout().lock())),
    };
    let write_failed = |e: std::io::Error| Failure::new(format!("cannot write the export: {e}"));
    let mut written = 0_usize;
    for tenant in &args.tenant {
        let mut query = ListQuery {
            tenant: tenant.clone(),
            escalated: false,
            state: None,
            workflow_id: None,
            updated_at_or_before_ms: None,
            after: None,
            limit: args.page_size as usize,
        };
        loop {
            let page = fitting_page(client, &mut query, &format!("export {tenant}")).await?;
            for record in &page.records {
                write_json_line(&mut out, record).map_err(write_failed)?;
            }
            written += page.records.len();
            match page.continue_after {
                Some(next) => query.after = Some(next),
                None => break,
            }
        }
    }
    out.flush().map_err(write_failed)?;
    if let Some(path) = &args.file {
        eprintln!("exported {written} records to {}", path.display());
    }
    Ok(Exit::Success)
}

/// The page `query` asks for. A page of large records can be larger than any answer the
/// client takes (`ANSWER_BYTES_MAX`, refused as `OUT_OF_RANGE`): then `query`'s limit is
/// halved, for this page and the ones after it, until one fits.
async fn fitting_page(
    client: &LedgerClient,
    query: &mut ListQuery,
    what: &str,
) -> Result<ListPage, Failure> {
    loop {
        match client.list(query.clone()).await {
            Err(ClientError::Status {
                code: tonic::Code::OutOfRange,
                ..
            }) if query.limit > 1 => query.limit /= 2,
            page => return page.map_err(|e| Failure::from_client(what, e)),
        }
    }
}

/// `watch`: one line per change until `--count` events, an interrupt, or the node ends
/// the watch (then the error says to read again and watch again).
pub async fn watch(client: &LedgerClient, args: &Watch, format: Format) -> CliResult {
    let key = args.key.as_deref().map(parse_key).transpose()?;
    let tenant = match (&args.tenant, &key) {
        (Some(tenant), _) => tenant.clone(),
        (None, Some(key)) => key.tenant.clone(),
        (None, None) => return Err(Failure::new("watch needs --tenant or --key")),
    };
    let filter = WatchFilter {
        tenant,
        key,
        state: args.state.map(state),
        escalated: args.escalated,
        workflow_id: args.workflow.clone(),
    };
    let mut events = client
        .watch(filter)
        .await
        .map_err(|e| Failure::from_client("watch", e))?;
    let mut seen = 0;
    while args.count.is_none_or(|n| seen < n) {
        let Some(event) = events.next().await else {
            break;
        };
        let event = event.map_err(|e| Failure::from_client("watch", e))?;
        seen += 1;
        match format {
            Format::Json => print_json(&serde_json::json!({
                "key": event.key.to_string(),
                "record": event.record,
                "applied_index": event.applied_index,
            })),
            Format::Table => match &event.record {
                Some(r) => say!(
                    "{} {} {} applied={}",
                    event.key,
                    r.state.as_str(),
                    escalation(r),
                    event.applied_index
                ),
                None => say!("{} collected applied={}", event.key, event.applied_index),
            },
        }
    }
    Ok(Exit::Success)
}
