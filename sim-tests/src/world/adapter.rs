//! The ledger's side of each provider: the operator's tool policy and the
//! [`ProviderAdapter`] that observes the provider during reconciliation.
//!
//! An adapter only claims what its provider can prove. A look-up sooner than the
//! provider's worst-case processing time after the latest dispatch may miss a request
//! still queued, so the weak providers' adapters wait until that time has passed (the
//! keyed ones see a request in progress by its key and need only the transit time); the
//! `wire` adapter answers unknown once the provider's horizon has passed, because after it
//! the provider forgets keys and "not found" proves nothing; the `message` provider
//! cannot be observed at all.

use std::time::Duration;

use ledger_client::reconcile::BoxFuture;
use ledger_client::{Observation, ProviderAdapter};
use ledger_core::{AttemptKind, EffectRecord, ReplayClass, ToolPolicy, ToolRef};

use super::{Lookup, ProviderKind, World, HORIZON_MS, PROCESSING_MS_MAX};
use crate::workload::wall_clock_ms;

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
/// provider's declared processing bound: the time its adapter waits after the latest lease
/// end (the ledger holds a not-found look-up to the same bound).
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
        lease_ms: 3_000,
        lease_ms_max: 60_000,
        dispatch_attempts_max: 4,
        observations_max: 4,
        ..ToolPolicy::for_class(class)
    }
}

/// Observes one provider for the ledger.
#[derive(Clone)]
pub struct WorldAdapter {
    /// The providers.
    pub world: World,
    /// Which one.
    pub kind: ProviderKind,
}

impl WorldAdapter {
    /// Ledger time before which a look-up could miss the latest dispatch. A send can start
    /// well after its grant was stamped (the grant's answer may be held up by a partition),
    /// but never after the attempt's lease ran out: `EffectRunner` confirms a late grant
    /// with a heartbeat before sending. So the provider is done with every send by the
    /// latest lease end plus its worst-case processing time.
    fn trustworthy_from_ms(&self, record: &EffectRecord) -> u64 {
        let settle_ms = if self.kind.honours_key() {
            TRANSIT_MS_MAX
        } else {
            PROCESSING_MS_MAX
        };
        record
            .attempts
            .iter()
            .filter(|a| a.kind == AttemptKind::Dispatch)
            .map(|a| a.lease_until_ms.max(a.granted_at_ms) + settle_ms)
            .max()
            .unwrap_or(0)
    }
}

impl ProviderAdapter for WorldAdapter {
    fn observe<'a>(&'a self, record: &'a EffectRecord) -> BoxFuture<'a, Observation> {
        Box::pin(async move {
            let wait_ms = self
                .trustworthy_from_ms(record)
                .saturating_sub(wall_clock_ms());
            tokio::time::sleep(Duration::from_millis(wait_ms)).await;
            let horizon_passed = record
                .horizon_deadline_ms
                .is_some_and(|d| wall_clock_ms() >= d);
            if self.kind == ProviderKind::Wire && horizon_passed {
                return Observation::Unknown {
                    detail: HORIZON_PASSED.into(),
                };
            }
            let found = self
                .world
                .lookup(self.kind, &record.provider_key, &record.provider_key);
            match found {
                Lookup::Found { receipt } => Observation::Committed {
                    receipt,
                    detail: format!("{} found it by reference", self.kind.name()),
                },
                Lookup::NotFound => Observation::NotCommitted {
                    detail: format!("{} has no effect with this reference", self.kind.name()),
                },
                Lookup::Unknown { detail } => Observation::Unknown { detail },
            }
        })
    }
}

/// What the `wire` adapter says once the provider's horizon has passed.
pub const HORIZON_PASSED: &str =
    "the provider forgets keys after its horizon: a look-up proves nothing";
