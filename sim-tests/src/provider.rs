//! The simulated external provider: the ground truth of which effects really happened.
//!
//! It lives outside every simulated node, like the real payment or ticket system the
//! ledger protects. A keyed tool's provider deduplicates by provider key (a re-send
//! returns the first result); an unkeyed one executes every send it gets, so a second
//! send is a duplicate effect, which is exactly what the ledger exists to prevent. Clients
//! send here when a grant tells them to, and reconcilers observe here.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// What the provider holds for one provider key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderEffect {
    /// The result of the first execution.
    pub receipt: String,
    /// How many times the mutation was executed (more than one is a duplicate effect).
    pub executions: u32,
    /// How many sends arrived (re-sends a keyed provider deduplicated included).
    pub sends: u32,
}

/// The shared provider of one run.
#[derive(Debug, Clone, Default)]
pub struct Provider {
    effects: Arc<Mutex<BTreeMap<String, ProviderEffect>>>,
}

impl Provider {
    /// A provider that holds nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, ProviderEffect>> {
        self.effects.lock().expect("provider lock")
    }

    /// Receives a send with `provider_key` and returns its result. With `deduplicates`,
    /// a key seen before returns its first result without executing again.
    pub fn send(&self, provider_key: &str, deduplicates: bool) -> String {
        let mut effects = self.lock();
        match effects.get_mut(provider_key) {
            Some(effect) if deduplicates => {
                effect.sends += 1;
                effect.receipt.clone()
            }
            Some(effect) => {
                effect.sends += 1;
                effect.executions += 1;
                effect.receipt.clone()
            }
            None => {
                let receipt = format!("receipt-{provider_key}");
                effects.insert(
                    provider_key.to_owned(),
                    ProviderEffect {
                        receipt: receipt.clone(),
                        executions: 1,
                        sends: 1,
                    },
                );
                receipt
            }
        }
    }

    /// What an observation by provider key finds: the receipt if the effect exists.
    pub fn observe(&self, provider_key: &str) -> Option<String> {
        self.lock().get(provider_key).map(|e| e.receipt.clone())
    }

    /// Everything the provider holds.
    pub fn effects(&self) -> BTreeMap<String, ProviderEffect> {
        self.lock().clone()
    }
}
