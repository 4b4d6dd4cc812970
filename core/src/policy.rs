//! Tool policies: how the ledger treats each tool, configured by the operator.
//!
//! A tool's own annotations (`readOnlyHint`, `idempotentHint`, `destructiveHint`) come
//! from an untrusted party and are never consulted here. The operator states, per tenant
//! and tool, its replay class and the numbers that bound retries and reconciliation.
//! A record copies the policy it was declared under, so editing a policy changes new
//! effects only and never re-judges one that is already in flight.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::intent::validate_pointer;
use crate::key::validate_name;
use crate::limits::{
    BUDGET_MAX, LEASE_MS_MAX, PROCESSING_BOUND_MS_MAX, TARGET_FIELDS_MAX, VISIBILITY_LAG_MS_MAX,
    VOLATILE_FIELDS_MAX,
};

/// How long callers may retry an effect when the operator says nothing (24 h, in ms).
pub const RETRY_WINDOW_MS_DEFAULT: u64 = 24 * 60 * 60 * 1000;

/// How a tool's effects may be replayed (DESIGN.md section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ReplayClass {
    /// Reads nothing it changes: bypasses the ledger and may be retried freely.
    ReadOnly,
    /// The provider honours an idempotency token until its horizon: a re-send of an
    /// ambiguous attempt inside the horizon is safe.
    KeyedIdempotent,
    /// The provider takes no token: an ambiguous outcome must be observed before any
    /// re-send.
    UnkeyedCreate,
    /// Cannot be undone: needs confirmation, and a spent budget stops at a person.
    Irreversible,
    /// The effect is a job; a retry returns the job, never starts a second one.
    LongRunningJob,
}

impl fmt::Display for ReplayClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReplayClass::ReadOnly => "read_only",
            ReplayClass::KeyedIdempotent => "keyed_idempotent",
            ReplayClass::UnkeyedCreate => "unkeyed_create",
            ReplayClass::Irreversible => "irreversible",
            ReplayClass::LongRunningJob => "long_running_job",
        })
    }
}

/// A tool as a policy names it: provider and tool name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ToolName {
    /// The provider behind the tool (`stripe`, `zendesk`).
    pub provider: String,
    /// The tool's name (`refund`).
    pub name: String,
}

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.provider, self.name)
    }
}

/// A tool as an effect records it: provider, name and the contract version the intent
/// was written against.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ToolRef {
    /// The provider behind the tool.
    pub provider: String,
    /// The tool's name.
    pub name: String,
    /// The version of the tool's contract (argument schema and semantics).
    pub contract_version: String,
}

impl ToolRef {
    /// The policy name of this tool.
    pub fn tool_name(&self) -> ToolName {
        ToolName {
            provider: self.provider.clone(),
            name: self.name.clone(),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), crate::key::FieldError> {
        validate_name("tool.provider", &self.provider)?;
        validate_name("tool.name", &self.name)?;
        validate_name("tool.contract_version", &self.contract_version)
    }
}

/// The operator's rules for one tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolPolicy {
    /// The tool's replay class.
    pub class: ReplayClass,
    /// How long the provider deduplicates a token after it first sees it; zero when it
    /// keeps none.
    pub provider_horizon_ms: u64,
    /// How long a finished record is kept before garbage collection. A retry arriving
    /// later is a new effect, so this must outlast every caller's retry window.
    pub retention_ms: u64,
    /// Lease of an attempt when the claim asks for none.
    pub lease_ms: u64,
    /// Longest lease a claim or heartbeat may ask for.
    pub lease_ms_max: u64,
    /// Dispatch attempts allowed before the effect escalates to a person.
    pub dispatch_attempts_max: u32,
    /// Observations that may stay ambiguous before the effect escalates to a person.
    pub observations_max: u32,
    /// Whether a claim must carry a confirmation from the user.
    pub confirmation_required: bool,
    /// JSON pointers removed from the intent before hashing.
    pub volatile_fields: Vec<String>,
    /// JSON pointers naming the logical target resource in the intent (`/order_id`,
    /// `/recipient`), from which code derives an effect key when the caller gives none.
    /// Empty when the tool names no target.
    pub target_fields: Vec<String>,
    /// The provider's declared processing bound, in ms: the longest time from a request
    /// leaving the tool server to its effect being durable at the provider. `None` when
    /// the provider declares none; then a look-up that finds nothing never proves the
    /// effect absent (DESIGN.md section 7), and a keyed tool's unknown outcome is
    /// reconciled instead of re-sent, since nothing says the re-send would reach the
    /// provider inside its horizon.
    pub processing_ms_max: Option<u64>,
    /// How long after an effect commits the provider's search or look-up shows it, in ms.
    pub visibility_lag_ms: u64,
    /// How long callers may retry an effect, in ms. Retention must cover it, or a late
    /// retry would find no record and become a second effect.
    pub retry_window_ms: u64,
}

impl ToolPolicy {
    /// A policy for `class` with conservative defaults: 30 s leases, a 24 h provider
    /// horizon for keyed tools (none otherwise), 7 days of retention, a 24 h retry window,
    /// 3 dispatch attempts (1 for irreversible tools), 5 observations, confirmation for
    /// irreversible tools, no target fields, no visibility lag and no declared processing
    /// bound (so a look-up never proves absence, and a keyed tool never re-sends an
    /// unknown outcome, until the operator declares one).
    pub fn for_class(class: ReplayClass) -> Self {
        let irreversible = class == ReplayClass::Irreversible;
        ToolPolicy {
            class,
            provider_horizon_ms: if class == ReplayClass::KeyedIdempotent {
                24 * 60 * 60 * 1000
            } else {
                0
            },
            retention_ms: 7 * 24 * 60 * 60 * 1000,
            lease_ms: 30_000,
            lease_ms_max: 10 * 60 * 1000,
            dispatch_attempts_max: if irreversible { 1 } else { 3 },
            observations_max: 5,
            confirmation_required: irreversible,
            volatile_fields: Vec::new(),
            target_fields: Vec::new(),
            processing_ms_max: None,
            visibility_lag_ms: 0,
            retry_window_ms: RETRY_WINDOW_MS_DEFAULT,
        }
    }

    /// Checks that the numbers make sense together.
    pub fn validate(&self) -> Result<(), String> {
        if self.lease_ms == 0 || self.lease_ms > self.lease_ms_max {
            return Err(format!(
                "lease_ms must be in 1..=lease_ms_max ({}), got {}",
                self.lease_ms_max, self.lease_ms
            ));
        }
        if self.lease_ms_max > LEASE_MS_MAX {
            return Err(format!("lease_ms_max must be at most {LEASE_MS_MAX}"));
        }
        for (name, value) in [
            ("dispatch_attempts_max", self.dispatch_attempts_max),
            ("observations_max", self.observations_max),
        ] {
            if !(1..=BUDGET_MAX).contains(&value) {
                return Err(format!("{name} must be in 1..={BUDGET_MAX}, got {value}"));
            }
        }
        if self.volatile_fields.len() > VOLATILE_FIELDS_MAX {
            return Err(format!(
                "at most {VOLATILE_FIELDS_MAX} volatile fields, got {}",
                self.volatile_fields.len()
            ));
        }
        for pointer in &self.volatile_fields {
            validate_pointer(pointer).map_err(|e| e.to_string())?;
        }
        if self.target_fields.len() > TARGET_FIELDS_MAX {
            return Err(format!(
                "at most {TARGET_FIELDS_MAX} target fields, got {}",
                self.target_fields.len()
            ));
        }
        for pointer in &self.target_fields {
            validate_pointer(pointer).map_err(|e| format!("target field: {e}"))?;
        }
        self.validate_times()
    }

    /// Checks the provider's timing and that retention covers both the provider horizon
    /// and the retry window.
    fn validate_times(&self) -> Result<(), String> {
        if let Some(processing_ms) = self.processing_ms_max {
            if processing_ms > PROCESSING_BOUND_MS_MAX {
                return Err(format!(
                    "processing_ms_max must be at most {PROCESSING_BOUND_MS_MAX}, got {processing_ms}"
                ));
            }
        }
        if self.visibility_lag_ms > VISIBILITY_LAG_MS_MAX {
            return Err(format!(
                "visibility_lag_ms must be at most {VISIBILITY_LAG_MS_MAX}, got {}",
                self.visibility_lag_ms
            ));
        }
        for (name, value) in [
            ("provider_horizon_ms", self.provider_horizon_ms),
            ("retry_window_ms", self.retry_window_ms),
        ] {
            if self.retention_ms < value {
                return Err(format!(
                    "retention_ms ({}) must be at least {name} ({value})",
                    self.retention_ms
                ));
            }
        }
        Ok(())
    }
}

/// Per-tenant settings: how long the ledger remembers, and how much a tenant may keep.
///
/// Quotas are judged when a declare or claim would create records: one that would go
/// beyond them is refused (`Refusal::QuotaExceeded`) and changes nothing. Writes to
/// existing records (a committed report with its receipt) are never refused for quota,
/// so usage can exceed a limit by at most the receipts of the tenant's open effects, and
/// lowering a limit below current usage only stops new effects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantSettings {
    /// How long the ledger remembers a command id and its outcome, so that a retry of a
    /// command whose answer was lost gets the same answer.
    pub command_retention_ms: u64,
    /// How long a collected record's tombstone is kept, so that a late retry is told
    /// "expired" instead of becoming a new effect. After it, the key is unknown again.
    pub tombstone_retention_ms: u64,
    /// Most records (of any state, not yet collected) the tenant may keep.
    pub live_records_max: u64,
    /// Most bytes the tenant's records and tombstones may take, approximately: key,
    /// intent and receipt bytes plus a fixed overhead each (see `usage`).
    pub stored_bytes_max: u64,
}

impl TenantSettings {
    /// Default command-id memory: one day.
    pub const COMMAND_RETENTION_MS_DEFAULT: u64 = 24 * 60 * 60 * 1000;
    /// Default tombstone window: 30 days.
    pub const TOMBSTONE_RETENTION_MS_DEFAULT: u64 = 30 * 24 * 60 * 60 * 1000;
    /// Default record quota: one million.
    pub const LIVE_RECORDS_MAX_DEFAULT: u64 = 1_000_000;
    /// Default byte quota: 1 GiB.
    pub const STORED_BYTES_MAX_DEFAULT: u64 = 1 << 30;
}

impl Default for TenantSettings {
    fn default() -> Self {
        TenantSettings {
            command_retention_ms: Self::COMMAND_RETENTION_MS_DEFAULT,
            tombstone_retention_ms: Self::TOMBSTONE_RETENTION_MS_DEFAULT,
            live_records_max: Self::LIVE_RECORDS_MAX_DEFAULT,
            stored_bytes_max: Self::STORED_BYTES_MAX_DEFAULT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_policies_are_valid() {
        for class in [
            ReplayClass::ReadOnly,
            ReplayClass::KeyedIdempotent,
            ReplayClass::UnkeyedCreate,
            ReplayClass::Irreversible,
            ReplayClass::LongRunningJob,
        ] {
            assert_eq!(ToolPolicy::for_class(class).validate(), Ok(()));
        }
    }

    #[test]
    fn inconsistent_policies_are_refused() {
        let base = ToolPolicy::for_class(ReplayClass::UnkeyedCreate);
        let zero_lease = ToolPolicy {
            lease_ms: 0,
            ..base.clone()
        };
        let long_lease = ToolPolicy {
            lease_ms: base.lease_ms_max + 1,
            ..base.clone()
        };
        let no_budget = ToolPolicy {
            dispatch_attempts_max: 0,
            ..base.clone()
        };
        let bad_pointer = ToolPolicy {
            volatile_fields: vec!["nope".into()],
            ..base.clone()
        };
        let bad_target = ToolPolicy {
            target_fields: vec!["order_id".into()],
            ..base.clone()
        };
        let many_targets = ToolPolicy {
            target_fields: (0..=TARGET_FIELDS_MAX).map(|i| format!("/f{i}")).collect(),
            ..base.clone()
        };
        let slow_provider = ToolPolicy {
            processing_ms_max: Some(PROCESSING_BOUND_MS_MAX + 1),
            ..base.clone()
        };
        let lagging_search = ToolPolicy {
            visibility_lag_ms: VISIBILITY_LAG_MS_MAX + 1,
            ..base
        };
        for p in [
            zero_lease,
            long_lease,
            no_budget,
            bad_pointer,
            bad_target,
            many_targets,
            slow_provider,
            lagging_search,
        ] {
            assert!(p.validate().is_err(), "{p:?}");
        }
    }

    #[test]
    fn retention_shorter_than_the_horizon_or_retry_window_is_refused_naming_both() {
        let base = ToolPolicy::for_class(ReplayClass::KeyedIdempotent);
        let short_of_horizon = ToolPolicy {
            retention_ms: base.provider_horizon_ms - 1,
            retry_window_ms: 0,
            ..base.clone()
        };
        let message = short_of_horizon.validate().unwrap_err();
        assert!(message.contains("86399999") && message.contains("86400000"));
        assert!(message.contains("provider_horizon_ms"), "{message}");
        let short_of_retries = ToolPolicy {
            provider_horizon_ms: 0,
            retention_ms: 1_000,
            retry_window_ms: 1_001,
            ..base
        };
        let message = short_of_retries.validate().unwrap_err();
        assert!(message.contains("1000") && message.contains("1001"));
        assert!(message.contains("retry_window_ms"), "{message}");
    }

    #[test]
    fn declared_provider_timing_and_targets_are_accepted() {
        let p = ToolPolicy {
            target_fields: vec!["/order_id".into()],
            processing_ms_max: Some(PROCESSING_BOUND_MS_MAX),
            visibility_lag_ms: VISIBILITY_LAG_MS_MAX,
            ..ToolPolicy::for_class(ReplayClass::UnkeyedCreate)
        };
        assert_eq!(p.validate(), Ok(()));
    }
}
