//! The operator's side of each provider: the tool each provider's effects record, and
//! its tool policy, with the provider's declared timing. Reconciliation looks effects up
//! through the shipped searches ([`super::edge`]); when a "not found" proves absence is
//! the ledger's judgement from these declared bounds (the runner waits for it), not the
//! look-up's.

use ledger_core::{ReplayClass, ToolPolicy, ToolRef};

use super::{ProviderKind, HORIZON_MS, PROCESSING_MS_MAX};

/// How long a request may be on its way to a keyed provider.
const TRANSIT_MS_MAX: u64 = 1_000;

impl ProviderKind {
    /// The tool as effects record it (no name shared with `crate::fixtures::ToolKind`,
    /// whose policies differ).
    pub fn tool_ref(self) -> ToolRef {
        let (provider, name) = match self {
            ProviderKind::Refund => ("pay", "refund"),
            ProviderKind::Wire => ("bank", "wire_transfer"),
            ProviderKind::Ticket => ("helpdesk", "create_ticket"),
            ProviderKind::Append => ("files", "append_line"),
            ProviderKind::Message => ("chat", "send_message"),
        };
        ToolRef {
            provider: provider.into(),
            name: name.into(),
            contract_version: "v1".into(),
        }
    }

    /// Whether its policy needs the user's confirmation (irreversible tools).
    pub fn needs_confirmation(self) -> bool {
        world_policy(self).confirmation_required
    }
}

/// The operator's policy for `kind`: its replay class, the provider's horizon for keyed
/// tools, short leases (heartbeats keep a running dispatch alive), small budgets, and the
/// provider's declared processing bound and search lag: a "not found" proves absence only
/// once the latest lease end plus both have passed. A keyed provider sees a request in
/// progress by its key, so its bound is the transit time only.
pub fn world_policy(kind: ProviderKind) -> ToolPolicy {
    let class = match kind {
        ProviderKind::Refund => ReplayClass::KeyedIdempotent,
        ProviderKind::Ticket | ProviderKind::Append => ReplayClass::UnkeyedCreate,
        ProviderKind::Wire | ProviderKind::Message => ReplayClass::Irreversible,
    };
    ToolPolicy {
        provider_horizon_ms: if kind.honours_key() { HORIZON_MS } else { 0 },
        processing_ms_max: Some(if kind.honours_key() {
            TRANSIT_MS_MAX
        } else {
            PROCESSING_MS_MAX
        }),
        visibility_lag_ms: kind.visibility_lag_ms(),
        lease_ms: 3_000,
        lease_ms_max: 60_000,
        dispatch_attempts_max: 4,
        observations_max: 4,
        ..ToolPolicy::for_class(class)
    }
}
