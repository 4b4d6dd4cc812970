//! The cluster itself: each node's status, the leader, waiting for readiness, forming the
//! cluster and changing its membership.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use ledger_client::{ClientError, LedgerClient};
use ledger_proto::pb;

use crate::cli::{Init, MemberAdd, MemberRemove, Members, Voters};
use crate::failure::{CliResult, Exit, Failure};
use crate::output::{or_dash, print_json, say, Format, Table};

/// One node's view, as `status --output json` prints it.
#[derive(Debug, Serialize)]
struct NodeView {
    endpoint: String,
    /// Whether the node answered; when not, `error` says why and the rest is empty.
    up: bool,
    error: Option<String>,
    node_id: Option<u64>,
    role: Option<String>,
    leader_id: Option<u64>,
    term: Option<u64>,
    last_log_index: Option<u64>,
    committed_index: Option<u64>,
    applied_index: Option<u64>,
    snapshot_index: Option<u64>,
    purged_index: Option<u64>,
    voters: Vec<MemberView>,
    learners: Vec<MemberView>,
    records_by_state: BTreeMap<String, u64>,
    ledger_clock_ms: Option<u64>,
    /// With `--digest`: the SHA-256 of the node's state, hex, and the applied index it
    /// reflects.
    #[serde(skip_serializing_if = "Option::is_none")]
    state_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    state_digest_index: Option<u64>,
}

#[derive(Debug, Serialize)]
struct MemberView {
    node_id: u64,
    addr: String,
}

fn members(list: &[pb::Member]) -> Vec<MemberView> {
    list.iter()
        .map(|m| MemberView {
            node_id: m.node_id,
            addr: m.addr.clone(),
        })
        .collect()
}

impl NodeView {
    fn of(endpoint: &str, answer: Result<pb::StatusResponse, ClientError>) -> Self {
        match answer {
            Ok(s) => NodeView {
                endpoint: endpoint.to_owned(),
                up: true,
                error: None,
                node_id: Some(s.node_id),
                role: Some(s.role),
                leader_id: s.leader_id,
                term: Some(s.term),
                last_log_index: s.last_log_index,
                committed_index: s.committed_index,
                applied_index: s.applied_index,
                snapshot_index: s.snapshot_index,
                purged_index: s.purged_index,
                voters: members(&s.voters),
                learners: members(&s.learners),
                records_by_state: s.records_by_state.into_iter().collect(),
                ledger_clock_ms: Some(s.ledger_clock_ms),
                state_digest: (!s.state_digest.is_empty())
                    .then(|| ledger_core::intent::hex(&s.state_digest)),
                state_digest_index: s.state_digest_index,
            },
            Err(e) => NodeView {
                endpoint: endpoint.to_owned(),
                up: false,
                error: Some(e.to_string()),
                node_id: None,
                role: None,
                leader_id: None,
                term: None,
                last_log_index: None,
                committed_index: None,
                applied_index: None,
                snapshot_index: None,
                purged_index: None,
                voters: Vec::new(),
                learners: Vec::new(),
                records_by_state: BTreeMap::new(),
                ledger_clock_ms: None,
                state_digest: None,
                state_digest_index: None,
            },
        }
    }
}

/// Every endpoint's view, with its state digest when `digest`; fails only when a node
/// refuses the key. The nodes are asked at once, so a slow or hung node (a digest reads
/// the whole ledger) delays the answer by its own time only, not by the sum of all.
async fn views(client: &LedgerClient, digest: bool) -> Result<Vec<NodeView>, Failure> {
    let endpoints = client.transport().endpoints().to_vec();
    let mut asked = tokio::task::JoinSet::new();
    for i in 0..endpoints.len() {
        let client = client.clone();
        asked.spawn(async move {
            let answer = if digest {
                client.status_with_digest(i).await
            } else {
                client.status_of(i).await
            };
            (i, answer)
        });
    }
    let mut answers: Vec<_> = asked.join_all().await;
    answers.sort_by_key(|(i, _)| *i);
    let mut out = Vec::new();
    for ((_, answer), endpoint) in answers.into_iter().zip(&endpoints) {
        if let Err(e) = &answer {
            if Failure::refused_key(e) {
                return Err(Failure::from_client("status", e.clone()));
            }
        }
        out.push(NodeView::of(endpoint, answer));
    }
    Ok(out)
}

/// `status`: one row per endpoint; a node that does not answer is `down`. With `digest`,
/// each row also has the node's state digest and the index it reflects.
pub async fn status(client: &LedgerClient, digest: bool, format: Format) -> CliResult {
    let views = views(client, digest).await?;
    if format == Format::Json {
        print_json(&serde_json::json!({ "nodes": views }));
        return Ok(Exit::Success);
    }
    let mut columns = vec![
        "endpoint",
        "node",
        "role",
        "leader",
        "term",
        "last_log",
        "committed",
        "applied",
        "snapshot",
        "records",
    ];
    if digest {
        columns.extend(["digest_index", "state_digest"]);
    }
    let mut table = Table::new(&columns);
    for v in &views {
        let records = v
            .records_by_state
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(state, n)| format!("{state}={n}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut row = vec![
            v.endpoint.clone(),
            or_dash(v.node_id),
            v.role.clone().unwrap_or_else(|| "down".into()),
            or_dash(v.leader_id),
            or_dash(v.term),
            or_dash(v.last_log_index),
            or_dash(v.committed_index),
            or_dash(v.applied_index),
            or_dash(v.snapshot_index),
            if v.up {
                records
            } else {
                v.error.clone().unwrap_or_default()
            },
        ];
        if digest {
            row.extend([
                or_dash(v.state_digest_index),
                v.state_digest.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
        table.row(row);
    }
    table.print();
    Ok(Exit::Success)
}

/// `leader`.
pub async fn leader(client: &LedgerClient, format: Format) -> CliResult {
    let (id, addr) = client.find_leader().await.ok_or_else(|| {
        Failure::hinted(
            "no node knows a leader",
            "is the cluster running and initialised? check --endpoints, or run `ledgerctl init`",
        )
    })?;
    print_leader(id, &addr, format);
    Ok(Exit::Success)
}

fn print_leader(id: u64, addr: &str, format: Format) {
    match format {
        Format::Json => print_json(&serde_json::json!({ "leader_id": id, "leader_addr": addr })),
        Format::Table => say!("{id} {addr}"),
    }
}

/// `wait-leader`.
pub async fn wait_leader(client: &LedgerClient, timeout_ms: u64, format: Format) -> CliResult {
    let (id, addr) = client
        .wait_for_leader(timeout_ms)
        .await
        .map_err(|e| Failure::from_client("wait-leader", e))?;
    print_leader(id, &addr, format);
    Ok(Exit::Success)
}

/// `wait-ready`: every endpoint answers a status call.
pub async fn wait_ready(client: &LedgerClient, timeout_ms: u64) -> CliResult {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
    for (i, endpoint) in client.transport().endpoints().iter().enumerate() {
        while let Err(e) = client.status_of(i).await {
            if Failure::refused_key(&e) {
                return Err(Failure::from_client("wait-ready", e));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Failure::hinted(
                    format!("{endpoint} not ready after {timeout_ms} ms: {e}"),
                    "is the node running? see its log, or wait longer with --timeout-ms",
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(Exit::Success)
}

/// `init ID=HOST:PORT ...`.
pub async fn init(client: &LedgerClient, args: &Init, format: Format) -> CliResult {
    let members = args
        .members
        .iter()
        .map(|m| {
            let (id, addr) = m
                .split_once('=')
                .ok_or_else(|| Failure::new(format!("{m} is not ID=HOST:PORT")))?;
            let id = id
                .parse::<u64>()
                .map_err(|_| Failure::new(format!("{id} in {m} is not a node id")))?;
            Ok((id, addr.to_owned()))
        })
        .collect::<Result<Vec<_>, Failure>>()?;
    client
        .initialize(&members)
        .await
        .map_err(|e| Failure::from_client("init", e))?;
    match format {
        Format::Json => print_json(&serde_json::json!({ "initialized": members.len() })),
        Format::Table => say!("initialized {} members", members.len()),
    }
    Ok(Exit::Success)
}

/// `members ...`.
pub async fn run(client: &LedgerClient, command: &Members, format: Format) -> CliResult {
    match command {
        Members::List => {
            let view = membership_view(client).await?;
            print_membership(&view.voters, &view.learners, None, format);
            Ok(Exit::Success)
        }
        Members::Add(args) => add_learner(client, args, format).await,
        Members::Set(args) => change(client, args.ids.clone(), format).await,
        Members::Promote(Voters { ids }) => {
            let mut voters = voter_ids(client).await?;
            voters.extend(ids.iter().copied());
            voters.sort_unstable();
            voters.dedup();
            change(client, voters, format).await
        }
        Members::Remove(MemberRemove { id }) => {
            let voters = voter_ids(client).await?;
            if !voters.contains(id) {
                return Err(Failure::hinted(
                    format!("node {id} is not a voter (voters: {voters:?})"),
                    "see `ledgerctl members list`",
                ));
            }
            let rest: Vec<u64> = voters.into_iter().filter(|v| v != id).collect();
            change(client, rest, format).await
        }
    }
}

/// `members add` (and the older `add-learner`).
pub async fn add_learner(client: &LedgerClient, args: &MemberAdd, format: Format) -> CliResult {
    let answer = client
        .add_learner(args.id, &args.addr)
        .await
        .map_err(|e| Failure::from_client("add learner", e))?;
    print_changed(&answer, format)
}

/// `members set` (and the older `change-membership`).
pub async fn change(client: &LedgerClient, voters: Vec<u64>, format: Format) -> CliResult {
    let answer = client
        .change_membership(voters, false)
        .await
        .map_err(|e| Failure::from_client("change membership", e))?;
    print_changed(&answer, format)
}

/// Prints the membership a change left.
fn print_changed(answer: &pb::MembershipResponse, format: Format) -> CliResult {
    print_membership(
        &members(&answer.voters),
        &members(&answer.learners),
        answer.log_index,
        format,
    );
    Ok(Exit::Success)
}

/// The membership as the leader sees it, or else the first node that answers.
async fn membership_view(client: &LedgerClient) -> Result<NodeView, Failure> {
    let views = views(client, false).await?;
    let leader = views
        .iter()
        .position(|v| v.role.as_deref() == Some("leader"))
        .or_else(|| views.iter().position(|v| v.up));
    match leader {
        Some(i) => Ok(views.into_iter().nth(i).expect("an index of views")),
        None => Err(Failure::hinted(
            "no endpoint answered a status call",
            "is the cluster running? check --endpoints or $LEDGER_ENDPOINTS",
        )),
    }
}

async fn voter_ids(client: &LedgerClient) -> Result<Vec<u64>, Failure> {
    Ok(membership_view(client)
        .await?
        .voters
        .iter()
        .map(|m| m.node_id)
        .collect())
}

fn print_membership(
    voters: &[MemberView],
    learners: &[MemberView],
    log_index: Option<u64>,
    format: Format,
) {
    if format == Format::Json {
        print_json(&serde_json::json!({
            "log_index": log_index,
            "voters": voters,
            "learners": learners,
        }));
        return;
    }
    let mut table = Table::new(&["node", "addr", "role"]);
    for (list, role) in [(voters, "voter"), (learners, "learner")] {
        for m in list {
            table.row(vec![m.node_id.to_string(), m.addr.clone(), role.into()]);
        }
    }
    table.print();
    if let Some(index) = log_index {
        say!("membership log index: {index}");
    }
}

/// `snapshot save FILE`: the backup, written to a temporary file next to FILE (readable
/// by its owner only) and renamed once whole, so FILE is never a partial backup; a save
/// that fails removes the temporary file.
pub async fn save(client: &LedgerClient, file: &std::path::Path, format: Format) -> CliResult {
    // FILE's whole name and `.partial`, so that saves to `b.1` and `b.2` never share one.
    let mut partial = file.as_os_str().to_owned();
    partial.push(".partial");
    let partial = std::path::PathBuf::from(partial);
    let failed =
        |e: std::io::Error| Failure::new(format!("cannot write {}: {e}", partial.display()));
    let out = crate::output::create_private(&partial).map_err(failed)?;
    let written = async {
        let mut out = std::io::BufWriter::new(out);
        let backup = client
            .backup(&mut out)
            .await
            .map_err(|e| Failure::from_client("backup", e))?;
        let out = out.into_inner().map_err(|e| failed(e.into_error()))?;
        out.sync_all().map_err(failed)?;
        std::fs::rename(&partial, file).map_err(failed)?;
        Ok(backup)
    }
    .await;
    let backup = written.inspect_err(|_| {
        // Nothing to add if it cannot be removed: the failure is what is reported.
        let _ = std::fs::remove_file(&partial);
    })?;
    let digest = ledger_core::intent::hex(&backup.state_digest);
    match format {
        Format::Json => print_json(&serde_json::json!({
            "file": file.display().to_string(),
            "bytes": backup.bytes,
            "applied_index": backup.applied_index,
            "state_digest": digest,
        })),
        Format::Table => say!(
            "saved {} ({} bytes): the ledger at log index {}, state digest {digest}",
            file.display(),
            backup.bytes,
            backup.applied_index
        ),
    }
    Ok(Exit::Success)
}
