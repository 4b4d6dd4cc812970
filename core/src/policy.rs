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
use crate::limits::{BUDGET_MAX, LEASE_MS_MAX, VOLATILE_FIELDS_MAX};

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
}

impl ToolPolicy {
    /// A policy for `class` with conservative defaults: 30 s leases, a 24 h provider
    /// horizon for keyed tools (none otherwise), 7 days of retention, 3 dispatch attempts
    /// (1 for irreversible tools), 5 observations, and confirmation for irreversible tools.
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
        Ok(())
    }
}

/// Per-tenant settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantSettings {
    /// How long the ledger remembers a command id and its outcome, so that a retry of a
    /// command whose answer was lost gets the same answer.
    pub command_retention_ms: u64,
}

impl Default for TenantSettings {
    fn default() -> Self {
        TenantSettings {
            command_retention_ms: 24 * 60 * 60 * 1000,
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
            ..base
        };
        for p in [zero_lease, long_lease, no_budget, bad_pointer] {
            assert!(p.validate().is_err(), "{p:?}");
        }
    }
}
