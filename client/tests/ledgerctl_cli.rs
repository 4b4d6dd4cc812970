//! `ledgerctl` as operators and scripts run it: its help texts against golden files, and
//! `list`, `decide`, `export` and `policy diff` against a ledger node in this process.
//!
//! `UPDATE_GOLDEN=1 cargo test -p ledger-client --test ledgerctl_cli` rewrites the golden
//! files under `client/tests/golden/` from the binary's current help.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::{Ledger, OPERATOR_KEY, POLICIES, TENANT, TENANT_KEY};
use ledger_client::LedgerClient;
use ledger_core::limits::LIST_PAGE_VISITS_MAX;
use ledger_core::{
    Authority, ClaimOutcome, Declaration, EffectKey, EffectRecord, EffectState, ListQuery, Report,
    ToolRef,
};

/// Runs `ledgerctl` with `args`, with no endpoint or key from the environment.
fn ledgerctl_blocking(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ledgerctl"))
        .args(args)
        .env_remove("LEDGER_ENDPOINTS")
        .env_remove("LEDGER_API_KEY")
        .env_remove("LEDGER_API_KEY_FILE")
        .output()
        .expect("ledgerctl runs")
}

/// Runs `ledgerctl` against `ledger` with `key` off the runtime's threads, so the node in
/// this process keeps serving.
async fn ledgerctl(ledger: &Ledger, key: &str, args: &[&str]) -> Output {
    let mut argv: Vec<String> = vec![
        "--endpoints".into(),
        ledger.addr().into(),
        "--api-key".into(),
        key.into(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    tokio::task::spawn_blocking(move || {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        ledgerctl_blocking(&argv)
    })
    .await
    .expect("ledgerctl finished")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}

fn succeeded(out: &Output) -> String {
    assert!(
        out.status.success(),
        "ledgerctl failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout(out)
}

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.txt"))
}

#[test]
fn help_texts_match_their_golden_files() {
    let cases: [(&str, &[&str]); 4] = [
        ("help", &["--help"]),
        ("list-help", &["list", "--help"]),
        ("decide-help", &["decide", "--help"]),
        ("export-help", &["export", "--help"]),
    ];
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    for (name, args) in cases {
        let out = ledgerctl_blocking(args);
        let text = succeeded(&out);
        let path = golden_path(name);
        if update {
            std::fs::write(&path, &text).expect("write golden file");
            continue;
        }
        let golden = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
        assert_eq!(
            text,
            golden,
            "`ledgerctl {}` differs from {}; rerun with UPDATE_GOLDEN=1 if the change is meant",
            args.join(" "),
            path.display()
        );
    }
}

#[test]
fn an_unknown_command_and_a_missing_endpoint_say_what_to_do() {
    let out = ledgerctl_blocking(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unrecognized subcommand"));
    let out = ledgerctl_blocking(&["status"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("$LEDGER_ENDPOINTS"), "{err}");
}

/// A decision whose answer never came may have been applied: the failure names its command
/// id, so that it can be sent again with `--command-id` and applied at most once.
#[test]
fn a_decision_left_unanswered_names_its_command_id() {
    // A port nothing listens on (bound, then closed).
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let out = ledgerctl_blocking(&[
        "--endpoints",
        &addr,
        "--api-key",
        "operator-key-000001",
        "decide",
        "acme/tests/k1",
        "not-committed",
        "--operator",
        "ops",
        "--note",
        "checked",
        "--any-escalation",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let id = err
        .split("--command-id ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("no command id named: {err}"));
    assert!(id.starts_with("ledgerctl/decide/"), "{err}");
}

fn declaration(tool: &str, key: &str, workflow: &str) -> Declaration {
    let (provider, name) = tool.split_once('/').expect("provider/name");
    Declaration {
        key: EffectKey::new(TENANT, "cli", key),
        workflow_id: workflow.into(),
        tool: ToolRef {
            provider: provider.into(),
            name: name.into(),
            contract_version: "v1".into(),
        },
        authority: Authority {
            principal: "user:cli".into(),
            policy_generation: 1,
        },
        target: format!("{tool}:{key}"),
        intent_json: format!(r#"{{"key":"{key}"}}"#),
    }
}

/// Claims `key` and returns the grant's fencing token.
async fn grant(client: &LedgerClient, d: &Declaration, id: &str) -> u64 {
    match client.claim(id, d.clone(), "cli-test", None, None).await {
        Ok(ClaimOutcome::Proceed(g)) => g.fencing_token,
        other => panic!("expected a grant for {}, got {other:?}", d.key),
    }
}

/// A committed effect `key`.
async fn committed(client: &LedgerClient, key: &str) -> EffectKey {
    let d = declaration("pay/refund", key, "wf-done");
    let token = grant(client, &d, &format!("claim-{key}")).await;
    let receipt = Report::Committed {
        receipt: format!("re-{key}"),
    };
    client
        .report(&format!("report-{key}"), d.key.clone(), token, receipt)
        .await
        .expect("report");
    d.key
}

/// An effect `key` whose dispatch budget (three attempts) is spent: escalated.
async fn escalated(client: &LedgerClient, key: &str) -> EffectKey {
    let d = declaration("desk/create_ticket", key, "wf-stuck");
    for i in 0..3 {
        let token = grant(client, &d, &format!("claim-{key}-{i}")).await;
        let failed = Report::FailedBeforeEffect {
            proof: "HTTP 429 before processing".into(),
        };
        client
            .report(&format!("report-{key}-{i}"), d.key.clone(), token, failed)
            .await
            .expect("report");
    }
    match client
        .claim(
            &format!("claim-{key}-last"),
            d.clone(),
            "cli-test",
            None,
            None,
        )
        .await
    {
        Ok(ClaimOutcome::Escalated { .. }) => d.key,
        other => panic!("expected {key} escalated, got {other:?}"),
    }
}

/// The keys of `list --output json`'s records, and its `next` token.
fn listed(text: &str) -> (Vec<String>, Option<String>) {
    let page: serde_json::Value = serde_json::from_str(text).expect("one JSON document");
    let records: Vec<EffectRecord> =
        serde_json::from_value(page["records"].clone()).expect("records");
    let next = page["next"].as_str().map(str::to_owned);
    (records.iter().map(|r| r.key.to_string()).collect(), next)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_by_state_and_escalation_and_follows_pages() {
    let ledger = Ledger::start().await;
    let client = ledger.client(TENANT_KEY);
    let done_a = committed(&client, "done-a").await.to_string();
    let done_b = committed(&client, "done-b").await.to_string();
    let stuck = escalated(&client, "stuck").await.to_string();
    let open = declaration("pay/refund", "open", "wf-open");
    grant(&client, &open, "claim-open").await;

    let json = ["--output", "json", "list", "--tenant", TENANT];
    let by_state = |state: &'static str| {
        let mut args = json.to_vec();
        args.extend(["--state", state]);
        args
    };
    let out = ledgerctl(&ledger, TENANT_KEY, &by_state("committed")).await;
    assert_eq!(
        listed(&succeeded(&out)).0,
        vec![done_a.clone(), done_b.clone()]
    );
    let out = ledgerctl(&ledger, TENANT_KEY, &by_state("in_progress")).await;
    assert_eq!(listed(&succeeded(&out)).0, vec![open.key.to_string()]);

    let mut args = json.to_vec();
    args.push("--escalated");
    let out = ledgerctl(&ledger, OPERATOR_KEY, &args).await;
    assert_eq!(listed(&succeeded(&out)).0, vec![stuck.clone()]);

    // One record per page: the token leads to the next one; --all reads every page.
    let mut args = json.to_vec();
    args.extend(["--limit", "1"]);
    let (first, next) = listed(&succeeded(&ledgerctl(&ledger, TENANT_KEY, &args).await));
    assert_eq!(first, vec![done_a.clone()]);
    let next = next.expect("a next page");
    let mut args_after = args.clone();
    args_after.extend(["--after", next.as_str()]);
    let (second, _) = listed(&succeeded(
        &ledgerctl(&ledger, TENANT_KEY, &args_after).await,
    ));
    assert_eq!(second, vec![done_b.clone()]);
    args.push("--all");
    let (all, next) = listed(&succeeded(&ledgerctl(&ledger, TENANT_KEY, &args).await));
    assert_eq!(all.len(), 4, "{all:?}");
    assert_eq!(next, None);

    // The table names each record with its state.
    let out = ledgerctl(&ledger, TENANT_KEY, &["list", "--tenant", TENANT]).await;
    let table = succeeded(&out);
    assert!(table.starts_with("KEY"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&done_a) && l.contains("committed")),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decide_settles_an_escalated_effect_with_the_operator_key_only() {
    let ledger = Ledger::start().await;
    let client = ledger.client(TENANT_KEY);
    let key = escalated(&client, "ticket-1").await;
    let key_text = key.to_string();
    let before = client.get(key.clone()).await.unwrap().unwrap();
    let token = before.escalation_token().expect("escalated");
    let (named, earlier) = (token.to_string(), (token - 1).to_string());
    // `get` shows the token that names the escalation.
    let shown = succeeded(&ledgerctl(&ledger, TENANT_KEY, &["get", key_text.as_str()]).await);
    assert!(
        shown.contains(&format!("(escalation token {token})")),
        "{shown}"
    );
    let decide = [
        "decide",
        key_text.as_str(),
        "committed",
        "--receipt",
        "ticket 4711 found in the console",
        "--operator",
        "ops:jane",
        "--note",
        "checked the help desk by hand",
        "--escalation-token",
        named.as_str(),
    ];

    let out = ledgerctl(&ledger, TENANT_KEY, &decide).await;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("operator key"), "{err}");
    assert!(client
        .get(key.clone())
        .await
        .unwrap()
        .unwrap()
        .escalation
        .is_some());

    // Operator and note are required, and which escalation is decided on.
    let out = ledgerctl(&ledger, OPERATOR_KEY, &decide[..5]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--operator"));
    let out = ledgerctl(&ledger, OPERATOR_KEY, &decide[..9]).await;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--escalation-token") && err.contains("--any-escalation"),
        "{err}"
    );

    // A decision made on another escalation than the open one is refused, and changes
    // nothing.
    let mut stale = decide;
    stale[10] = earlier.as_str();
    let out = ledgerctl(&ledger, OPERATOR_KEY, &stale).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("look at the provider again"), "{err}");
    assert_eq!(client.get(key.clone()).await.unwrap().unwrap(), before);

    let mut args = vec!["--output", "json"];
    args.extend(decide);
    let answer: serde_json::Value =
        serde_json::from_str(&succeeded(&ledgerctl(&ledger, OPERATOR_KEY, &args).await))
            .expect("JSON");
    assert_eq!(answer["state"], "committed");

    let record = client.get(key.clone()).await.unwrap().unwrap();
    assert_eq!(record.state, EffectState::Committed);
    assert!(record.escalation.is_none());
    let decision = record.decision.expect("the decision is recorded");
    assert_eq!(decision.operator, "ops:jane");
    assert_eq!(decision.note, "checked the help desk by hand");
    assert_eq!(
        record.receipt.as_deref(),
        Some("ticket 4711 found in the console")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_prints_one_json_line_per_record_across_pages() {
    let ledger = Ledger::start().await;
    let client = ledger.client(TENANT_KEY);
    let mut keys = Vec::new();
    for i in 0..5 {
        keys.push(committed(&client, &format!("e-{i}")).await.to_string());
    }
    keys.push(escalated(&client, "e-stuck").await.to_string());
    keys.sort();

    let out = ledgerctl(
        &ledger,
        OPERATOR_KEY,
        &["export", "--tenant", TENANT, "--page-size", "2"],
    )
    .await;
    let text = succeeded(&out);
    let exported: Vec<EffectRecord> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one record"))
        .collect();
    let exported_keys: Vec<String> = exported.iter().map(|r| r.key.to_string()).collect();
    assert_eq!(exported_keys, keys);
    let escalated_record = exported.iter().find(|r| r.key.key == "e-stuck").unwrap();
    assert!(escalated_record.escalation.is_some());

    let dir = std::env::temp_dir().join(format!("ledgerctl-export-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("audit.jsonl");
    // An export over an older, world-readable one is still its owner's alone.
    std::fs::write(&file, "an older export").unwrap();
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let file_arg = file.to_str().unwrap();
    let out = ledgerctl(
        &ledger,
        OPERATOR_KEY,
        &["export", "--tenant", TENANT, "--file", file_arg],
    )
    .await;
    assert!(succeeded(&out).is_empty());
    assert_owner_only(&file);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A filter that few of a tenant's many records match: the node reads a bounded number of
/// entries per page and says where to go on (an early page may hold no record at all),
/// and `list` follows such pages until it has something to show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_few_records_match_is_read_in_bounded_pages() {
    const SLOTS: u32 = 1_000;
    let ledger = Ledger::start().await;
    let client = ledger.client(TENANT_KEY);
    // The one old record sorts after every newer one.
    let old = committed(&client, "zz-old").await;
    let old_at = client
        .get(old.clone())
        .await
        .expect("get")
        .expect("record")
        .updated_at_ms;
    // Ledger time follows the leader's clock: the records declared next are newer.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let groups = (LIST_PAGE_VISITS_MAX as u32).div_ceil(SLOTS) + 1;
    for group in 0..groups {
        let d = declaration("pay/refund", &format!("aa-{group}"), "wf-many");
        client
            .declare(&format!("declare-aa-{group}"), d, SLOTS)
            .await
            .expect("declare");
    }
    let query = ListQuery {
        tenant: TENANT.into(),
        escalated: false,
        state: None,
        workflow_id: None,
        updated_at_or_before_ms: Some(old_at),
        after: None,
        limit: 10,
    };
    let first = client.list(query.clone()).await.expect("list");
    assert!(first.records.is_empty(), "{:?}", first.records);
    // A caller that does not say it reads continue_after would take that empty page for
    // the last: it is refused instead.
    let mut raw = ledger_proto::pb::ledger_client::LedgerClient::new(client.transport().channel(0));
    let mut unaware = ledger_proto::pb::ListRequest::from(query.clone());
    unaware.follows_continue_after = false;
    let refused = raw
        .list(client.transport().request(unaware))
        .await
        .expect_err("a page it would misread");
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert!(refused.message().contains("continue_after"), "{refused:?}");
    let mut q = query;
    q.after = Some(first.continue_after.expect("the listing goes on"));
    let mut found = Vec::new();
    let mut pages = 1;
    loop {
        let page = client.list(q.clone()).await.expect("list");
        pages += 1;
        found.extend(page.records.into_iter().map(|r| r.key));
        match page.continue_after {
            Some(next) => q.after = Some(next),
            None => break,
        }
    }
    assert_eq!(found, vec![old.clone()]);
    let records = (groups * SLOTS) as usize + 1;
    assert!(pages >= records / LIST_PAGE_VISITS_MAX, "{pages} pages");

    let at = old_at.to_string();
    let args = [
        "--output",
        "json",
        "list",
        "--tenant",
        TENANT,
        "--updated-before-ms",
        &at,
        "--limit",
        "10",
    ];
    let (listed_keys, next) = listed(&succeeded(&ledgerctl(&ledger, TENANT_KEY, &args).await));
    assert_eq!(listed_keys, vec![old.to_string()]);
    assert_eq!(next, None);
}

/// Records large enough that a page of the default 1,000 is a larger answer than the
/// client takes (`ANSWER_BYTES_MAX`): `export` and `list --all` ask for smaller pages
/// and still give every record, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_too_large_for_one_answer_are_asked_for_in_halves() {
    const RECORDS: usize = 600;
    const INTENT_BYTES: usize = 60_000;
    const { assert!(RECORDS * INTENT_BYTES > ledger_client::ANSWER_BYTES_MAX) };
    let ledger = Ledger::start().await;
    let client = ledger.client(TENANT_KEY);
    let mut keys: Vec<String> = Vec::new();
    for chunk in (0..RECORDS).collect::<Vec<_>>().chunks(50) {
        let mut declared = tokio::task::JoinSet::new();
        for i in chunk {
            let key = format!("large-{i:04}");
            let mut d = declaration("pay/refund", &key, "wf-large");
            d.intent_json = format!(r#"{{"pad":"{}"}}"#, "x".repeat(INTENT_BYTES));
            let client = client.clone();
            declared.spawn(async move {
                client
                    .declare(&format!("declare-{key}"), d.clone(), 1)
                    .await
                    .expect("declare");
                d.key.to_string()
            });
        }
        keys.extend(declared.join_all().await);
    }
    keys.sort();
    let export = ledgerctl(&ledger, OPERATOR_KEY, &["export", "--tenant", TENANT]).await;
    let exported: Vec<String> = succeeded(&export)
        .lines()
        .map(|l| {
            let record: EffectRecord = serde_json::from_str(l).expect("one record per line");
            record.key.to_string()
        })
        .collect();
    assert_eq!(exported, keys, "export");
    let list = [
        "--output", "json", "list", "--tenant", TENANT, "--all", "--limit", "1000",
    ];
    let (listed_keys, next) = listed(&succeeded(&ledgerctl(&ledger, OPERATOR_KEY, &list).await));
    assert_eq!(listed_keys, keys, "list --all");
    assert_eq!(next, None);
}

/// A key read from a file (its first line) authenticates as the key itself does, and a
/// file without one is a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_may_be_read_from_a_file() {
    let ledger = Ledger::start().await;
    let dir = std::env::temp_dir().join(format!("ledgerctl-keyfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |key_text: &str, args: &[&str]| {
        let file = dir.join("key");
        std::fs::write(&file, key_text).unwrap();
        let mut argv: Vec<String> = vec![
            "--endpoints".into(),
            ledger.addr().into(),
            "--api-key-file".into(),
            file.to_str().unwrap().into(),
        ];
        argv.extend(args.iter().map(|a| a.to_string()));
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        ledgerctl_blocking(&argv)
    };
    let operator = tokio::task::block_in_place(|| run(&format!("{OPERATOR_KEY}\n"), &["status"]));
    succeeded(&operator);
    let tenant = tokio::task::block_in_place(|| run(TENANT_KEY, &["status"]));
    assert!(!tenant.status.success(), "a tenant's key reads no status");
    // A flag wins over the environment; two flags are a usage error.
    let file = dir.join("operator-key");
    std::fs::write(&file, OPERATOR_KEY).unwrap();
    let with_env = |env: &[(&str, &str)], args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ledgerctl"));
        command
            .env_remove("LEDGER_API_KEY")
            .env_remove("LEDGER_API_KEY_FILE")
            .args(["--endpoints", ledger.addr()])
            .args(args);
        for (name, value) in env {
            command.env(name, value);
        }
        command.output().expect("ledgerctl runs")
    };
    let file_arg = file.to_str().unwrap();
    let flag_over_env = tokio::task::block_in_place(|| {
        with_env(
            &[("LEDGER_API_KEY", TENANT_KEY)],
            &["--api-key-file", file_arg, "status"],
        )
    });
    succeeded(&flag_over_env);
    let key_flag_over_file_env = tokio::task::block_in_place(|| {
        with_env(
            &[("LEDGER_API_KEY_FILE", "/nonexistent")],
            &["--api-key", OPERATOR_KEY, "status"],
        )
    });
    succeeded(&key_flag_over_file_env);
    let both = tokio::task::block_in_place(|| {
        with_env(
            &[],
            &[
                "--api-key",
                OPERATOR_KEY,
                "--api-key-file",
                file_arg,
                "status",
            ],
        )
    });
    assert_eq!(both.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&both.stderr).contains("not both"));
    let empty = tokio::task::block_in_place(|| run("\n", &["status"]));
    assert_eq!(empty.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&empty.stderr).contains("no API key"),
        "{}",
        String::from_utf8_lossy(&empty.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Backups and exports hold every record: only their owner may read them.
fn assert_owner_only(file: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(file)
        .expect("the file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{} has mode {mode:o}", file.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_diff_exits_zero_when_equal_and_one_naming_each_difference() {
    let ledger = Ledger::start().await;
    let dir = std::env::temp_dir().join(format!("ledgerctl-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let same = dir.join("same.toml");
    std::fs::write(&same, POLICIES).unwrap();
    let out = ledgerctl(
        &ledger,
        OPERATOR_KEY,
        &["policy", "diff", same.to_str().unwrap()],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    let changed = dir.join("changed.toml");
    let text = POLICIES.replace(
        "tool = \"pay/refund\"\nclass = \"keyed_idempotent\"",
        "tool = \"pay/refund\"\nclass = \"keyed_idempotent\"\ndispatch_attempts_max = 7",
    );
    assert_ne!(text, POLICIES);
    std::fs::write(&changed, text).unwrap();
    let out = ledgerctl(
        &ledger,
        OPERATOR_KEY,
        &["policy", "diff", changed.to_str().unwrap()],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let diff = stdout(&out);
    assert_eq!(
        diff.trim(),
        "tool acme pay/refund: dispatch_attempts_max: cluster 3, file 7"
    );

    let out = ledgerctl(
        &ledger,
        OPERATOR_KEY,
        &["policy", "apply", changed.to_str().unwrap()],
    )
    .await;
    succeeded(&out);
    let out = ledgerctl(
        &ledger,
        OPERATOR_KEY,
        &["policy", "diff", changed.to_str().unwrap()],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `watch --key` prints the record as it is, then each change: here the commit of the
/// attempt that was in flight when the watch began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_the_record_then_the_commit() {
    let ledger = Ledger::start().await;
    let client = ledger.client(TENANT_KEY);
    let d = declaration("pay/refund", "watched-1", "wf-watch");
    let token = grant(&client, &d, "claim-watched-1").await;
    let key = d.key.to_string();
    let watching = {
        let argv = [
            "--endpoints",
            ledger.addr(),
            "--api-key",
            TENANT_KEY,
            "--output",
            "json",
            "watch",
            "--key",
            &key,
            "--count",
            "2",
        ]
        .map(str::to_owned);
        tokio::task::spawn_blocking(move || {
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            ledgerctl_blocking(&argv)
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    client
        .report(
            "report-watched-1",
            d.key.clone(),
            token,
            Report::Committed {
                receipt: "re-watched-1".into(),
            },
        )
        .await
        .expect("report");
    let out = tokio::time::timeout(std::time::Duration::from_secs(20), watching)
        .await
        .expect("the watch ends after two events")
        .expect("ledgerctl finished");
    let states: Vec<String> = succeeded(&out)
        .lines()
        .map(|line| {
            let event: serde_json::Value = serde_json::from_str(line).expect("one JSON per line");
            assert_eq!(event["key"], key.as_str());
            event["record"]["state"]
                .as_str()
                .expect("a state")
                .to_owned()
        })
        .collect();
    assert_eq!(states, ["InProgress", "Committed"]);
}

/// `snapshot save` writes the whole ledger to a file whose state digest is the node's,
/// and refuses a tenant key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_save_writes_the_ledger_with_its_digest() {
    let ledger = Ledger::start().await;
    let client = ledger.client(TENANT_KEY);
    committed(&client, "saved-1").await;
    let dir = std::env::temp_dir().join(format!("ledgerctl-backup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("ledger.backup");
    let path = file.to_str().expect("utf-8 path");
    let refused = ledgerctl(&ledger, TENANT_KEY, &["snapshot", "save", path]).await;
    assert!(
        !refused.status.success(),
        "a tenant key cannot back up the ledger"
    );
    assert!(!file.exists());
    assert!(
        !dir.join("ledger.backup.partial").exists(),
        "a failed save leaves no partial file"
    );
    let out = ledgerctl(
        &ledger,
        OPERATOR_KEY,
        &["--output", "json", "snapshot", "save", path],
    )
    .await;
    let saved: serde_json::Value = serde_json::from_str(&succeeded(&out)).expect("JSON");
    assert_owner_only(&file);
    let bytes = std::fs::read(&file).expect("the backup file");
    assert_eq!(saved["bytes"], bytes.len() as u64);
    let status = ledger
        .client(OPERATOR_KEY)
        .status_with_digest(0)
        .await
        .expect("status");
    let digest = ledger_core::intent::hex(&status.state_digest);
    assert_eq!(saved["state_digest"], digest.as_str());
    // The check operators make: `status --digest` shows the same digest at that index.
    let out = ledgerctl(
        &ledger,
        OPERATOR_KEY,
        &["--output", "json", "status", "--digest"],
    )
    .await;
    let shown: serde_json::Value = serde_json::from_str(&succeeded(&out)).expect("JSON");
    let node = &shown["nodes"][0];
    assert_eq!(node["state_digest"], digest.as_str(), "{shown}");
    assert_eq!(
        node["state_digest_index"], saved["applied_index"],
        "{shown}"
    );
    let out = ledgerctl(&ledger, OPERATOR_KEY, &["--output", "json", "status"]).await;
    let plain: serde_json::Value = serde_json::from_str(&succeeded(&out)).expect("JSON");
    assert!(
        plain["nodes"][0].get("state_digest").is_none(),
        "no digest unless asked: {plain}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `status` asks every endpoint at once and lists them in the order given, a node that
/// cannot be reached marked down beside the answers of the others, digests included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_every_endpoint_in_order_with_the_unreachable_down() {
    let ledger = Ledger::start().await;
    // Nothing listens on a port the kernel just handed out and took back.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .to_string();
    let endpoints = format!("{closed},{},{closed}", ledger.addr());
    let argv: Vec<String> = [
        "--endpoints",
        &endpoints,
        "--api-key",
        OPERATOR_KEY,
        "--output",
        "json",
        "status",
        "--digest",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let out = tokio::task::spawn_blocking(move || {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        ledgerctl_blocking(&argv)
    })
    .await
    .expect("ledgerctl finished");
    let json: serde_json::Value = serde_json::from_str(&succeeded(&out)).expect("JSON");
    let nodes = json["nodes"].as_array().expect("a list of nodes");
    let rows: Vec<(&str, bool)> = nodes
        .iter()
        .map(|n| (n["endpoint"].as_str().unwrap(), n["up"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        rows,
        [
            (closed.as_str(), false),
            (ledger.addr(), true),
            (closed.as_str(), false)
        ]
    );
    let digest = nodes[1]["state_digest"]
        .as_str()
        .expect("the live node's digest");
    assert_eq!(digest.len(), 64, "a SHA-256 in hex: {digest}");
    assert!(nodes[0]["error"].as_str().is_some_and(|e| !e.is_empty()));
}
