//! The simulated external provider: the ground truth of which effects really happened.
//!
//! It lives outside every simulated node, like the real payment or ticket system the
//! ledger protects. A keyed tool's provider deduplicates by provider key (a re-send
//! returns the first result); an unkeyed one executes every send it gets, so a second
//! send is a duplicate effect, which is exactly what the ledger exists to prevent. Clients
//! send here when a grant tells them to, and reconcilers observe here (the effect runner's
//! through the shipped search of `ledger-providers`, [`Provider::lookup`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use ledger_client::reconcile::BoxFuture;
use ledger_providers::{
    JsonAnswer, Method, ProviderClient, ProviderRequest, ProviderTransport, Search, SearchSpec,
    SendError,
};

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
                let receipt = serde_json::json!({ "id": format!("receipt-{provider_key}") });
                let receipt = receipt.to_string();
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

    /// Its search by provider key, as `ledger-providers` looks effects up.
    pub fn search_spec() -> SearchSpec {
        SearchSpec::new(SEARCH_PATH, "effects")
    }

    /// The shipped look-up of effects at this provider.
    pub fn lookup(&self) -> Search {
        let client = ProviderClient::new(Arc::new(self.clone()));
        Search::new(&client, Provider::search_spec())
    }
}

/// Where the provider's search answers.
const SEARCH_PATH: &str = "/effects?provider_key={provider_key}";

/// The provider's far side of `ledger-providers`' transport: it answers its search (and
/// nothing else; sends go through [`Provider::send`], where each test plans its faults).
impl ProviderTransport for Provider {
    fn send<'a>(
        &'a self,
        request: &'a ProviderRequest,
    ) -> BoxFuture<'a, Result<JsonAnswer, SendError>> {
        let asked = Provider::search_spec().provider_key_in(&request.path);
        let answer = match asked {
            Some(key) if request.method == Method::Get => {
                let found: Vec<Value> = self
                    .observe(&key)
                    .map(|r| serde_json::from_str(&r).unwrap_or(Value::String(r)))
                    .into_iter()
                    .collect();
                JsonAnswer {
                    status: 200,
                    body: serde_json::json!({ "effects": found }),
                }
            }
            _ => JsonAnswer {
                status: 404,
                body: serde_json::json!({ "error": "no such route" }),
            },
        };
        Box::pin(async move { Ok(answer) })
    }
}
