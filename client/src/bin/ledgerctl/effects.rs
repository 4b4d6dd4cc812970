//! Claiming an effect and reporting an attempt by hand, as a tool server would: for demos,
//! scripts and trying a policy out. The caller chooses each command id, so a retry with
//! the same id gets the first answer.

use ledger_client::LedgerClient;
use ledger_core::{Authority, Declaration, Report, ToolRef};

use crate::cli::{Claim, Ending, ReportArgs};
use crate::failure::{CliResult, Exit, Failure};
use crate::output::{print_fields, print_json, print_outcome, Format};
use crate::parse_key;

fn parse_tool(s: &str) -> Result<ToolRef, Failure> {
    let (name, version) = s.split_once('@').unwrap_or((s, "v1"));
    let (provider, name) = name
        .split_once('/')
        .ok_or_else(|| Failure::new(format!("{s} is not provider/name[@version]")))?;
    Ok(ToolRef {
        provider: provider.into(),
        name: name.into(),
        contract_version: version.into(),
    })
}

/// `claim`: the outcome as the core names it (`Proceed`, `Replay`, `InFlight`, ...).
pub async fn claim(client: &LedgerClient, args: &Claim, format: Format) -> CliResult {
    let key = parse_key(&args.key)?;
    let tool = parse_tool(&args.tool)?;
    let declaration = Declaration {
        workflow_id: args.workflow.clone(),
        target: format!("{}/{}", tool.provider, key.key),
        authority: Authority {
            principal: args.principal.clone(),
            policy_generation: 1,
        },
        key,
        tool,
        intent_json: args.intent_json.clone(),
    };
    let outcome = client
        .claim(
            &args.command_id,
            declaration,
            &args.holder,
            args.lease_ms,
            args.confirm.clone(),
        )
        .await
        .map_err(|e| Failure::from_client("claim", e))?;
    match format {
        Format::Json => print_json(&outcome),
        Format::Table => print_outcome(&outcome),
    }
    Ok(Exit::Success)
}

/// `report`: the effect's state and receipt after the report.
pub async fn report(client: &LedgerClient, args: &ReportArgs, format: Format) -> CliResult {
    let key = parse_key(&args.key)?;
    let detail = args.detail.clone();
    let report = match args.ending {
        Ending::Committed => Report::Committed { receipt: detail },
        Ending::Failed => Report::FailedBeforeEffect { proof: detail },
        Ending::Unknown => Report::Unknown { reason: detail },
    };
    let (state, receipt) = client
        .report(&args.command_id, key, args.token, report)
        .await
        .map_err(|e| Failure::from_client("report", e))?;
    match format {
        Format::Json => print_json(&serde_json::json!({
            "state": state.as_str(),
            "receipt": receipt,
        })),
        Format::Table => print_fields(&[
            ("state", state.as_str().into()),
            ("receipt", receipt.unwrap_or_else(|| "-".into())),
        ]),
    }
    Ok(Exit::Success)
}
