//! Tool policies from the operator's TOML file, and their application to the ledger.
//!
//! How a tool is treated (replay class, provider horizon, retention, retry budget,
//! confirmation) is the operator's statement, per tenant and tool. A tool's own
//! annotations (`readOnlyHint`, `idempotentHint`, `destructiveHint`) come from the party
//! the ledger protects against and are only ever shown next to the policy, never used.
//!
//! ```toml
//! [[tenant]]
//! name = "acme"
//! command_retention_ms = 86400000    # how long a command id's answer is remembered
//! tombstone_retention_ms = 2592000000 # how long a collected record's tombstone is kept
//! live_records_max = 1000000        # most records not yet collected
//! stored_bytes_max = 1073741824     # most approximate bytes of records and tombstones
//!
//! [[tool]]
//! tenant = "acme"
//! tool = "pay/refund"               # provider/name
//! class = "keyed_idempotent"        # read_only | keyed_idempotent | unkeyed_create
//!                                   # | irreversible | long_running_job
//! provider_horizon_ms = 86400000    # how long the provider deduplicates its key
//! retention_ms = 604800000          # how long the ledger keeps a finished record
//! dispatch_attempts_max = 3         # the retry budget before a person decides
//! observations_max = 5              # ambiguous observations before a person decides
//! confirmation_required = false
//! lease_ms = 30000
//! lease_ms_max = 600000
//! volatile_fields = ["/request_id"] # JSON pointers left out of the intent hash
//! target_fields = ["/order_id"]     # JSON pointers naming the logical target resource
//! processing_ms_max = 15000         # the provider's declared processing bound; omitted:
//!                                   # none, a look-up never proves absence and a keyed
//!                                   # tool's unknown outcome is reconciled, not re-sent
//! visibility_lag_ms = 2000          # how long until its look-up shows a committed effect
//! retry_window_ms = 86400000        # how long callers may retry (retention must cover it)
//! ```
//! Every tenant field after `name` is optional and defaults to `TenantSettings::default()`;
//! every tool field after `class` is optional and defaults to `ToolPolicy::for_class(class)`.

use std::path::Path;

use serde::Deserialize;

use ledger_core::key::validate_tenant;
use ledger_core::{ReplayClass, TenantSettings, ToolName, ToolPolicy};

use crate::effect::ids::Invocations;
use crate::error::ClientError;
use crate::ledger::LedgerClient;

/// Why a policy file was refused.
#[derive(Debug, thiserror::Error)]
pub enum PolicyFileError {
    /// The file could not be read.
    #[error("cannot read {path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// The text is not TOML of this shape.
    #[error("invalid policy file: {0}")]
    Parse(String),
    /// An entry is invalid; the message names it.
    #[error("invalid policy for {entry}: {message}")]
    Invalid {
        /// `tenant` or `tenant tool`.
        entry: String,
        /// What is wrong.
        message: String,
    },
}

/// A tenant the file registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantEntry {
    /// The tenant id.
    pub name: String,
    /// Its settings.
    pub settings: TenantSettings,
}

/// One tool's policy for one tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolEntry {
    /// The tenant.
    pub tenant: String,
    /// The tool.
    pub tool: ToolName,
    /// The operator's policy.
    pub policy: ToolPolicy,
}

/// The operator's policies, as loaded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyFile {
    /// Tenants to register.
    pub tenants: Vec<TenantEntry>,
    /// Tool policies, at most one per tenant and tool.
    pub tools: Vec<ToolEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileText {
    #[serde(default)]
    tenant: Vec<TenantText>,
    #[serde(default)]
    tool: Vec<ToolText>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantText {
    name: String,
    command_retention_ms: Option<u64>,
    tombstone_retention_ms: Option<u64>,
    live_records_max: Option<u64>,
    stored_bytes_max: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolText {
    tenant: String,
    tool: String,
    class: String,
    provider_horizon_ms: Option<u64>,
    retention_ms: Option<u64>,
    lease_ms: Option<u64>,
    lease_ms_max: Option<u64>,
    dispatch_attempts_max: Option<u32>,
    observations_max: Option<u32>,
    confirmation_required: Option<bool>,
    volatile_fields: Option<Vec<String>>,
    target_fields: Option<Vec<String>>,
    processing_ms_max: Option<u64>,
    visibility_lag_ms: Option<u64>,
    retry_window_ms: Option<u64>,
}

/// The class a policy file names, by its `Display` spelling.
pub fn parse_class(name: &str) -> Option<ReplayClass> {
    [
        ReplayClass::ReadOnly,
        ReplayClass::KeyedIdempotent,
        ReplayClass::UnkeyedCreate,
        ReplayClass::Irreversible,
        ReplayClass::LongRunningJob,
    ]
    .into_iter()
    .find(|c| c.to_string() == name)
}

impl ToolText {
    fn into_entry(self) -> Result<ToolEntry, PolicyFileError> {
        let entry = format!("{} {}", self.tenant, self.tool);
        let invalid = |message: String| PolicyFileError::Invalid {
            entry: entry.clone(),
            message,
        };
        validate_tenant(&self.tenant).map_err(|e| invalid(e.to_string()))?;
        let (provider, name) = self
            .tool
            .split_once('/')
            .filter(|(p, n)| !p.is_empty() && !n.is_empty())
            .ok_or_else(|| invalid("tool must be provider/name".into()))?;
        let class = parse_class(&self.class)
            .ok_or_else(|| invalid(format!("unknown class {:?}", self.class)))?;
        let d = ToolPolicy::for_class(class);
        let policy = ToolPolicy {
            class,
            provider_horizon_ms: self.provider_horizon_ms.unwrap_or(d.provider_horizon_ms),
            retention_ms: self.retention_ms.unwrap_or(d.retention_ms),
            lease_ms: self.lease_ms.unwrap_or(d.lease_ms),
            lease_ms_max: self.lease_ms_max.unwrap_or(d.lease_ms_max),
            dispatch_attempts_max: self
                .dispatch_attempts_max
                .unwrap_or(d.dispatch_attempts_max),
            observations_max: self.observations_max.unwrap_or(d.observations_max),
            confirmation_required: self
                .confirmation_required
                .unwrap_or(d.confirmation_required),
            volatile_fields: self.volatile_fields.unwrap_or(d.volatile_fields),
            target_fields: self.target_fields.unwrap_or(d.target_fields),
            processing_ms_max: self.processing_ms_max.or(d.processing_ms_max),
            visibility_lag_ms: self.visibility_lag_ms.unwrap_or(d.visibility_lag_ms),
            retry_window_ms: self.retry_window_ms.unwrap_or(d.retry_window_ms),
        };
        policy.validate().map_err(invalid)?;
        Ok(ToolEntry {
            tenant: self.tenant,
            tool: ToolName {
                provider: provider.into(),
                name: name.into(),
            },
            policy,
        })
    }
}

impl PolicyFile {
    /// Parses and checks a policy file's text.
    pub fn from_toml(text: &str) -> Result<Self, PolicyFileError> {
        let parsed: FileText =
            toml::from_str(text).map_err(|e| PolicyFileError::Parse(e.to_string()))?;
        let mut file = PolicyFile::default();
        for t in parsed.tenant {
            validate_tenant(&t.name).map_err(|e| PolicyFileError::Invalid {
                entry: t.name.clone(),
                message: e.to_string(),
            })?;
            let defaults = TenantSettings::default();
            file.tenants.push(TenantEntry {
                name: t.name,
                settings: TenantSettings {
                    command_retention_ms: t
                        .command_retention_ms
                        .unwrap_or(defaults.command_retention_ms),
                    tombstone_retention_ms: t
                        .tombstone_retention_ms
                        .unwrap_or(defaults.tombstone_retention_ms),
                    live_records_max: t.live_records_max.unwrap_or(defaults.live_records_max),
                    stored_bytes_max: t.stored_bytes_max.unwrap_or(defaults.stored_bytes_max),
                },
            });
        }
        for t in parsed.tool {
            let entry = t.into_entry()?;
            if file.policy(&entry.tenant, &entry.tool).is_some() {
                return Err(PolicyFileError::Invalid {
                    entry: format!("{} {}", entry.tenant, entry.tool),
                    message: "listed twice".into(),
                });
            }
            file.tools.push(entry);
        }
        Ok(file)
    }

    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<Self, PolicyFileError> {
        let text = std::fs::read_to_string(path).map_err(|e| PolicyFileError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::from_toml(&text)
    }

    /// The policy of `tool` for `tenant`, if the file has one.
    pub fn policy(&self, tenant: &str, tool: &ToolName) -> Option<&ToolPolicy> {
        self.tools
            .iter()
            .find(|t| t.tenant == tenant && t.tool == *tool)
            .map(|t| &t.policy)
    }

    /// Stores every tenant and tool policy in the ledger (needs the operator key);
    /// returns how many commands were sent. Records copy the policy they were declared
    /// under, so a change applies to new effects only. Each application is its own set of
    /// commands (a transport retry within it re-sends the same ids), so applying an older
    /// file again restores the older policies.
    pub async fn apply(&self, ledger: &LedgerClient) -> Result<usize, ClientError> {
        let tag = Invocations::new("policy-file").next();
        for (i, t) in self.tenants.iter().enumerate() {
            let id = format!("policy-file/{tag}/tenant/{i}");
            ledger.put_tenant(&id, &t.name, t.settings.clone()).await?;
        }
        for (i, t) in self.tools.iter().enumerate() {
            let id = format!("policy-file/{tag}/tool/{i}");
            ledger
                .put_tool_policy(&id, &t.tenant, t.tool.clone(), t.policy.clone())
                .await?;
        }
        Ok(self.tenants.len() + self.tools.len())
    }
}

/// A tool's own annotations, as it declares them: untrusted, shown and never used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolHints {
    /// `readOnlyHint`.
    pub read_only: Option<bool>,
    /// `destructiveHint`.
    pub destructive: Option<bool>,
    /// `idempotentHint`.
    pub idempotent: Option<bool>,
    /// `openWorldHint`.
    pub open_world: Option<bool>,
}

/// One line for people: the operator's policy, and beside it the tool's hints, marked as
/// not used.
pub fn describe(policy: &ToolPolicy, hints: &ToolHints) -> String {
    let mut text = format!(
        "operator policy: {}; provider horizon {} ms; {} dispatch attempt(s); \
         confirmation {}",
        policy.class,
        policy.provider_horizon_ms,
        policy.dispatch_attempts_max,
        if policy.confirmation_required {
            "required"
        } else {
            "not required"
        },
    );
    let shown: Vec<String> = [
        ("readOnlyHint", hints.read_only),
        ("destructiveHint", hints.destructive),
        ("idempotentHint", hints.idempotent),
        ("openWorldHint", hints.open_world),
    ]
    .into_iter()
    .filter_map(|(name, value)| value.map(|v| format!("{name}={v}")))
    .collect();
    if !shown.is_empty() {
        text.push_str(&format!(
            ". The tool's own hints (shown, not used): {}",
            shown.join(", ")
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
        [[tenant]]
        name = "acme"

        [[tool]]
        tenant = "acme"
        tool = "pay/refund"
        class = "keyed_idempotent"
        provider_horizon_ms = 3600000

        [[tool]]
        tenant = "acme"
        tool = "msg/send_message"
        class = "irreversible"
        dispatch_attempts_max = 2
        volatile_fields = ["/request_id"]
    "#;

    fn tool(provider: &str, name: &str) -> ToolName {
        ToolName {
            provider: provider.into(),
            name: name.into(),
        }
    }

    #[test]
    fn omitted_fields_take_the_class_defaults() {
        let file = PolicyFile::from_toml(FILE).unwrap();
        assert_eq!(file.tenants[0].settings, TenantSettings::default());
        let refund = file.policy("acme", &tool("pay", "refund")).unwrap();
        assert_eq!(
            *refund,
            ToolPolicy {
                provider_horizon_ms: 3_600_000,
                ..ToolPolicy::for_class(ReplayClass::KeyedIdempotent)
            }
        );
        let send = file.policy("acme", &tool("msg", "send_message")).unwrap();
        assert!(send.confirmation_required);
        assert_eq!(send.dispatch_attempts_max, 2);
        assert_eq!(send.volatile_fields, vec!["/request_id".to_owned()]);
        assert!(file.policy("other", &tool("pay", "refund")).is_none());
    }

    #[test]
    fn provider_timing_targets_and_retry_window_are_read() {
        let text = r#"
            [[tool]]
            tenant = "acme"
            tool = "shop/refund"
            class = "unkeyed_create"
            target_fields = ["/order_id"]
            processing_ms_max = 15000
            visibility_lag_ms = 2000
            retry_window_ms = 3600000
        "#;
        let file = PolicyFile::from_toml(text).unwrap();
        let policy = file.policy("acme", &tool("shop", "refund")).unwrap();
        assert_eq!(policy.target_fields, vec!["/order_id".to_owned()]);
        assert_eq!(policy.processing_ms_max, Some(15_000));
        assert_eq!(policy.visibility_lag_ms, 2_000);
        assert_eq!(policy.retry_window_ms, 3_600_000);
        // Omitted: no declared bound, no lag, a 24 h retry window.
        let file = PolicyFile::from_toml(FILE).unwrap();
        let refund = file.policy("acme", &tool("pay", "refund")).unwrap();
        assert_eq!(refund.processing_ms_max, None);
        assert_eq!(refund.visibility_lag_ms, 0);
        assert_eq!(refund.retry_window_ms, 24 * 60 * 60 * 1000);
        assert!(refund.target_fields.is_empty());
    }

    #[test]
    fn tenant_retention_and_quotas_are_read() {
        let text = r#"
            [[tenant]]
            name = "acme"
            tombstone_retention_ms = 60000
            live_records_max = 10
            stored_bytes_max = 4096
        "#;
        let file = PolicyFile::from_toml(text).unwrap();
        assert_eq!(
            file.tenants[0].settings,
            TenantSettings {
                tombstone_retention_ms: 60_000,
                live_records_max: 10,
                stored_bytes_max: 4_096,
                ..TenantSettings::default()
            }
        );
    }

    #[test]
    fn bad_files_are_typed_errors_naming_the_entry() {
        let cases = [
            (
                "[[tool]]\ntenant = \"acme\"\ntool = \"pay/refund\"\nclass = \"safe\"",
                "unknown class",
            ),
            (
                "[[tool]]\ntenant = \"acme\"\ntool = \"refund\"\nclass = \"read_only\"",
                "provider/name",
            ),
            (
                "[[tool]]\ntenant = \"a b\"\ntool = \"p/n\"\nclass = \"read_only\"",
                "tenant",
            ),
            (
                "[[tool]]\ntenant = \"acme\"\ntool = \"p/n\"\nclass = \"read_only\"\nlease_ms = 0",
                "lease_ms",
            ),
            (
                "[[tool]]\ntenant = \"acme\"\ntool = \"p/n\"\nclass = \"read_only\"\nsurprise = 1",
                "surprise",
            ),
            (
                "[[tool]]\ntenant = \"acme\"\ntool = \"p/n\"\nclass = \"read_only\"\nretention_ms = 1000\nretry_window_ms = 2000",
                "retention_ms (1000) must be at least retry_window_ms (2000)",
            ),
            (
                "[[tool]]\ntenant = \"acme\"\ntool = \"p/n\"\nclass = \"read_only\"\nprocessing_ms_max = 999999999999",
                "processing_ms_max",
            ),
            ("not toml at all [", "invalid policy file"),
        ];
        for (text, expected) in cases {
            let error = PolicyFile::from_toml(text).unwrap_err().to_string();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
        let twice = format!(
            "{FILE}\n[[tool]]\ntenant = \"acme\"\ntool = \"pay/refund\"\nclass = \"read_only\""
        );
        assert!(PolicyFile::from_toml(&twice)
            .unwrap_err()
            .to_string()
            .contains("listed twice"));
    }

    #[test]
    fn description_shows_hints_as_unused() {
        let policy = ToolPolicy::for_class(ReplayClass::UnkeyedCreate);
        let hints = ToolHints {
            idempotent: Some(true),
            ..ToolHints::default()
        };
        let text = describe(&policy, &hints);
        assert!(
            text.starts_with("operator policy: unkeyed_create"),
            "{text}"
        );
        assert!(
            text.ends_with("(shown, not used): idempotentHint=true"),
            "{text}"
        );
    }
}
