//! The operator's configuration: tenants, tool policies, and the policy file applied to
//! the cluster or compared with it.

use serde::Serialize;
use serde_json::Value;

use ledger_client::{LedgerClient, PolicyFile};
use ledger_core::{ReplayClass, TenantConfig, TenantSettings, ToolName, ToolPolicy};

use crate::cli::{Class, Policy, Tenant, TenantPut, Tool, ToolGet, ToolPut};
use crate::failure::{CliResult, Exit, Failure};
use crate::output::{plain, print_fields, print_json, say, Format, Table};
use crate::unique_id;

/// `tenant get|put`.
pub async fn tenant(client: &LedgerClient, command: &Tenant, format: Format) -> CliResult {
    match command {
        Tenant::Get(args) => {
            let config = fetch_tenant(client, &args.tenant).await?;
            print_tenant(&args.tenant, &config, format);
            Ok(Exit::Success)
        }
        Tenant::Put(args) => put_tenant(client, args, format).await,
    }
}

/// `tool get|put`.
pub async fn tool(client: &LedgerClient, command: &Tool, format: Format) -> CliResult {
    match command {
        Tool::Get(args) => get_tool(client, args, format).await,
        Tool::Put(args) => put_tool(client, args, format).await,
    }
}

/// `policy apply|diff`.
pub async fn policy(client: &LedgerClient, command: &Policy, format: Format) -> CliResult {
    match command {
        Policy::Apply(args) => {
            let file = load(&args.file)?;
            let sent = file
                .apply(client)
                .await
                .map_err(|e| Failure::from_client("apply policies", e))?;
            let path = args.file.display();
            match format {
                Format::Json => print_json(&serde_json::json!({ "applied": sent })),
                Format::Table => say!("applied {sent} tenant and tool policies from {path}"),
            }
            Ok(Exit::Success)
        }
        Policy::Diff(args) => diff(client, &load(&args.file)?, format).await,
    }
}

fn load(path: &std::path::Path) -> Result<PolicyFile, Failure> {
    PolicyFile::load(path).map_err(|e| Failure::new(e.to_string()))
}

async fn fetch_tenant(client: &LedgerClient, tenant: &str) -> Result<TenantConfig, Failure> {
    client
        .get_tenant(tenant)
        .await
        .map_err(|e| Failure::from_client("get tenant", e))?
        .ok_or_else(|| {
            Failure::hinted(
                format!("tenant {tenant} is not registered"),
                "register it with `ledgerctl tenant put` or `ledgerctl policy apply`",
            )
        })
}

fn print_tenant(tenant: &str, config: &TenantConfig, format: Format) {
    if format == Format::Json {
        let tools: Vec<Value> = config
            .tools
            .iter()
            .map(|(tool, policy)| serde_json::json!({ "tool": tool.to_string(), "policy": policy }))
            .collect();
        print_json(&serde_json::json!({
            "tenant": tenant,
            "settings": config.settings,
            "tools": tools,
        }));
        return;
    }
    let mut fields = vec![("tenant", tenant.to_owned())];
    let settings = members(&config.settings);
    fields.extend(settings.iter().map(|(k, v)| (k.as_str(), plain(v))));
    print_fields(&fields);
    say!("");
    let mut table = Table::new(&[
        "tool",
        "class",
        "horizon_ms",
        "retention_ms",
        "dispatches_max",
    ]);
    for (tool, policy) in &config.tools {
        table.row(vec![
            tool.to_string(),
            policy.class.to_string(),
            policy.provider_horizon_ms.to_string(),
            policy.retention_ms.to_string(),
            policy.dispatch_attempts_max.to_string(),
        ]);
    }
    table.print();
}

/// The members of a serialised struct, by name.
fn members<T: Serialize>(value: &T) -> Vec<(String, Value)> {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => map.into_iter().collect(),
        _ => Vec::new(),
    }
}

/// `tenant put` (and the older `put-tenant`).
pub async fn put_tenant(client: &LedgerClient, args: &TenantPut, format: Format) -> CliResult {
    let d = TenantSettings::default();
    let settings = TenantSettings {
        command_retention_ms: args.command_retention_ms.unwrap_or(d.command_retention_ms),
        tombstone_retention_ms: args
            .tombstone_retention_ms
            .unwrap_or(d.tombstone_retention_ms),
        live_records_max: args.live_records_max.unwrap_or(d.live_records_max),
        stored_bytes_max: args.stored_bytes_max.unwrap_or(d.stored_bytes_max),
    };
    client
        .put_tenant(&unique_id("put-tenant"), &args.tenant, settings.clone())
        .await
        .map_err(|e| Failure::from_client("put tenant", e))?;
    match format {
        Format::Json => print_json(&serde_json::json!({
            "tenant": args.tenant,
            "settings": settings,
        })),
        Format::Table => say!("tenant {} stored", args.tenant),
    }
    Ok(Exit::Success)
}

fn parse_tool_name(s: &str) -> Result<ToolName, Failure> {
    s.split_once('/')
        .filter(|(p, n)| !p.is_empty() && !n.is_empty())
        .map(|(provider, name)| ToolName {
            provider: provider.into(),
            name: name.into(),
        })
        .ok_or_else(|| Failure::new(format!("{s} is not provider/name")))
}

async fn get_tool(client: &LedgerClient, args: &ToolGet, format: Format) -> CliResult {
    let tool = parse_tool_name(&args.tool)?;
    let config = fetch_tenant(client, &args.tenant).await?;
    let policy = config.tools.get(&tool).ok_or_else(|| {
        Failure::hinted(
            format!("tenant {} has no policy for {tool}", args.tenant),
            "set one with `ledgerctl tool put` or `ledgerctl policy apply`",
        )
    })?;
    print_policy(&args.tenant, &tool, policy, format);
    Ok(Exit::Success)
}

fn print_policy(tenant: &str, tool: &ToolName, policy: &ToolPolicy, format: Format) {
    if format == Format::Json {
        print_json(&serde_json::json!({
            "tenant": tenant,
            "tool": tool.to_string(),
            "policy": policy,
        }));
        return;
    }
    let mut fields = vec![("tenant", tenant.to_owned()), ("tool", tool.to_string())];
    let class = policy.class.to_string();
    let policy = members(policy);
    fields.extend(policy.iter().map(|(k, v)| match k.as_str() {
        "class" => ("class", class.clone()),
        k => (k, plain(v)),
    }));
    print_fields(&fields);
}

fn class(c: Class) -> ReplayClass {
    match c {
        Class::ReadOnly => ReplayClass::ReadOnly,
        Class::KeyedIdempotent => ReplayClass::KeyedIdempotent,
        Class::UnkeyedCreate => ReplayClass::UnkeyedCreate,
        Class::Irreversible => ReplayClass::Irreversible,
        Class::LongRunningJob => ReplayClass::LongRunningJob,
    }
}

/// `tool put` (and the older `put-tool`).
pub async fn put_tool(client: &LedgerClient, args: &ToolPut, format: Format) -> CliResult {
    let tool = parse_tool_name(&args.tool)?;
    let mut policy = ToolPolicy::for_class(class(args.class));
    let set = |field: &mut u64, value: Option<u64>| {
        if let Some(v) = value {
            *field = v;
        }
    };
    set(&mut policy.provider_horizon_ms, args.horizon_ms);
    set(&mut policy.retention_ms, args.retention_ms);
    set(&mut policy.lease_ms, args.lease_ms);
    set(&mut policy.visibility_lag_ms, args.visibility_lag_ms);
    set(&mut policy.retry_window_ms, args.retry_window_ms);
    if args.processing_ms.is_some() {
        policy.processing_ms_max = args.processing_ms;
    }
    policy
        .validate()
        .map_err(|e| Failure::new(format!("invalid policy for {} {tool}: {e}", args.tenant)))?;
    client
        .put_tool_policy(
            &unique_id("put-tool"),
            &args.tenant,
            tool.clone(),
            policy.clone(),
        )
        .await
        .map_err(|e| Failure::from_client("put tool policy", e))?;
    match format {
        Format::Json => print_policy(&args.tenant, &tool, &policy, format),
        Format::Table => say!("policy of {tool} for tenant {} stored", args.tenant),
    }
    Ok(Exit::Success)
}

/// One way the cluster differs from the policy file.
#[derive(Debug, Serialize)]
struct Difference {
    tenant: String,
    /// The tool, or `None` for the tenant's settings.
    tool: Option<String>,
    /// The differing field; `None` when the whole entry is on one side only.
    field: Option<String>,
    /// The cluster's value (`null` when it has no such entry).
    cluster: Value,
    /// The file's value (`null` when it has no such entry).
    file: Value,
}

/// Every difference between `file` and the cluster's configuration of the tenants the
/// file names: settings and policies field by field, tenants and tools on one side only.
async fn differences(client: &LedgerClient, file: &PolicyFile) -> Result<Vec<Difference>, Failure> {
    let mut tenants: Vec<&str> = file.tenants.iter().map(|t| t.name.as_str()).collect();
    tenants.extend(file.tools.iter().map(|t| t.tenant.as_str()));
    tenants.sort_unstable();
    tenants.dedup();
    let mut out = Vec::new();
    for tenant in tenants {
        let cluster = client
            .get_tenant(tenant)
            .await
            .map_err(|e| Failure::from_client("get tenant", e))?;
        let Some(cluster) = cluster else {
            out.push(Difference {
                tenant: tenant.into(),
                tool: None,
                field: None,
                cluster: Value::Null,
                file: Value::String("registered".into()),
            });
            continue;
        };
        if let Some(entry) = file.tenants.iter().find(|t| t.name == tenant) {
            compare(&mut out, tenant, None, &cluster.settings, &entry.settings);
        }
        for entry in file.tools.iter().filter(|t| t.tenant == tenant) {
            let name = Some(entry.tool.to_string());
            match cluster.tools.get(&entry.tool) {
                Some(policy) => compare(&mut out, tenant, name, policy, &entry.policy),
                None => out.push(Difference {
                    tenant: tenant.into(),
                    tool: name,
                    field: None,
                    cluster: Value::Null,
                    file: serde_json::to_value(&entry.policy).unwrap_or(Value::Null),
                }),
            }
        }
        for (tool, policy) in &cluster.tools {
            if file.policy(tenant, tool).is_none() {
                out.push(Difference {
                    tenant: tenant.into(),
                    tool: Some(tool.to_string()),
                    field: None,
                    cluster: serde_json::to_value(policy).unwrap_or(Value::Null),
                    file: Value::Null,
                });
            }
        }
    }
    Ok(out)
}

fn compare<T: Serialize>(
    out: &mut Vec<Difference>,
    tenant: &str,
    tool: Option<String>,
    cluster: &T,
    file: &T,
) {
    let file = members(file);
    for ((field, cluster), (_, file)) in members(cluster).into_iter().zip(file) {
        if cluster != file {
            out.push(Difference {
                tenant: tenant.into(),
                tool: tool.clone(),
                field: Some(field),
                cluster,
                file,
            });
        }
    }
}

async fn diff(client: &LedgerClient, file: &PolicyFile, format: Format) -> CliResult {
    let found = differences(client, file).await?;
    if format == Format::Json {
        print_json(&serde_json::json!({ "equal": found.is_empty(), "differences": found }));
    } else {
        for d in &found {
            let what = match &d.tool {
                Some(tool) => format!("tool {} {tool}", d.tenant),
                None => format!("tenant {}", d.tenant),
            };
            match (&d.field, d.cluster.is_null(), d.file.is_null()) {
                (Some(field), _, _) => {
                    say!("{what}: {field}: cluster {}, file {}", d.cluster, d.file)
                }
                (None, true, _) => say!("{what}: only in the file"),
                (None, _, true) => say!("{what}: only in the cluster"),
                (None, false, false) => say!("{what}: differs"),
            }
        }
        if found.is_empty() {
            say!("the cluster matches the policy file");
        }
    }
    Ok(if found.is_empty() {
        Exit::Success
    } else {
        Exit::Different
    })
}
