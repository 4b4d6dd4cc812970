//! Looking an effect up at its provider by the provider key its dispatch carried.
//!
//! A [`Search`] asks one path (a template with `{provider_key}`), takes the list the
//! answer holds under one field, and says what it saw: the first item found is the
//! effect, committed, its receipt the item without the fields that change over time; an
//! empty list is "not found"; any other answer is unknown. Whether "not found" proves
//! anything is not decided here: the runner and the ledger wait until no dispatch can
//! still land or become visible (design §7).
//!
//! Two provider contracts change what a search can say. A provider whose search forgets
//! with its idempotency keys (`forgets_after_horizon`) proves nothing by a miss once the
//! effect's provider horizon has passed: the answer is unknown. Whether it has passed is
//! judged when the look-up has returned (a look-up that started before the horizon may
//! reach the provider after it), and early by the clocks' margin (`clock_margin_ms`).
//! (The ledger holds a miss reported past the provider's horizon to prove nothing in any
//! case, by its own clocks; the flag says so on this side too, as an unknown.) A provider
//! with no search at all is [`Unobservable`]: every look-up is unknown, and the ledger
//! escalates when the tool's observation budget is spent.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use ledger_client::reconcile::BoxFuture;
use ledger_client::{Observation, ProviderAdapter};
use ledger_core::limits::fit_detail;
use ledger_core::EffectRecord;

use crate::client::{receipt_of, ProviderClient};

/// What a search says once a forgetting provider's horizon has passed.
pub const HORIZON_PASSED: &str =
    "the provider forgets keys after its horizon: a look-up proves nothing";

/// Default [`SearchSpec::clock_margin_ms`]: the ledger's default bound on clock skew.
pub const CLOCK_MARGIN_MS_DEFAULT: u64 = 2_000;

/// Where and how to search for an effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchSpec {
    /// The path, with `{provider_key}` where the key goes (e.g.
    /// `/pay/refunds?idempotency_key={provider_key}`).
    pub path: String,
    /// The field of the answer that holds the list of matches.
    pub list: String,
    /// Fields of a match left out of its receipt because they change over time (a job's
    /// status), so that every look-up of one effect gives the same receipt.
    pub receipt_omits: Vec<String>,
    /// The search finds an effect only while the provider remembers its key: after the
    /// effect's provider horizon, a miss proves nothing.
    pub forgets_after_horizon: bool,
    /// How far this server's clock may be behind the provider's and the ledger's: a
    /// forgetting provider's horizon counts as passed this long before this clock reaches
    /// it.
    pub clock_margin_ms: u64,
}

impl SearchSpec {
    /// A search of `path` (with `{provider_key}`) listing matches under `list`.
    pub fn new(path: &str, list: &str) -> Self {
        SearchSpec {
            path: path.to_owned(),
            list: list.to_owned(),
            receipt_omits: Vec::new(),
            forgets_after_horizon: false,
            clock_margin_ms: CLOCK_MARGIN_MS_DEFAULT,
        }
    }

    /// The path for `provider_key`, the key percent-encoded.
    pub fn path_for(&self, provider_key: &str) -> String {
        self.path.replace("{provider_key}", &encoded(provider_key))
    }

    /// The provider key `path` asks for, when it is this search's path for a key: the
    /// inverse of [`SearchSpec::path_for`], for a provider that answers the search.
    pub fn provider_key_in(&self, path: &str) -> Option<String> {
        let (prefix, suffix) = self.path.split_once("{provider_key}")?;
        let key = path.strip_prefix(prefix)?.strip_suffix(suffix)?;
        (!key.is_empty() && key.bytes().all(unreserved)).then(|| key.to_owned())
    }

    /// The receipt of `found`: the match without the fields that change.
    pub fn receipt(&self, mut found: Value) -> String {
        if let Some(object) = found.as_object_mut() {
            for field in &self.receipt_omits {
                object.remove(field);
            }
        }
        receipt_of(&found)
    }
}

/// Whether `b` may stand in a URL unencoded.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~')
}

/// `text` with every byte but the URL-unreserved ones percent-encoded.
fn encoded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if unreserved(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Looks effects up at one provider by provider key.
#[derive(Debug, Clone)]
pub struct Search {
    client: ProviderClient,
    spec: SearchSpec,
}

impl Search {
    /// The search `spec` at `client`'s providers.
    pub fn new(client: &ProviderClient, spec: SearchSpec) -> Self {
        Search {
            client: client.clone(),
            spec,
        }
    }

    /// What the provider says about the effect sent with `provider_key`.
    pub async fn find(&self, provider_key: &str) -> Observation {
        let path = self.spec.path_for(provider_key);
        let body = match self.client.read(&path).await {
            Ok(body) => body,
            Err(e) => {
                return Observation::Unknown {
                    detail: fit_detail(&format!("GET {path}: {e}")),
                }
            }
        };
        match body.get(&self.spec.list).and_then(Value::as_array) {
            Some(list) => match list.first() {
                Some(found) => Observation::Committed {
                    receipt: self.spec.receipt(found.clone()),
                    detail: format!("GET {path} found it"),
                },
                None => Observation::NotCommitted {
                    detail: format!("GET {path} found nothing"),
                },
            },
            None => Observation::Unknown {
                detail: fit_detail(&format!(
                    "GET {path} answered without a list `{}`: {body}",
                    self.spec.list
                )),
            },
        }
    }
}

impl ProviderAdapter for Search {
    fn observe<'a>(&'a self, effect: &'a EffectRecord) -> BoxFuture<'a, Observation> {
        Box::pin(async move {
            let observation = self.find(&effect.provider_key).await;
            // After the look-up: the provider may have answered it past the horizon
            // however early it was sent.
            let horizon_passed = effect
                .horizon_deadline_ms
                .is_some_and(|d| wall_clock_ms().saturating_add(self.spec.clock_margin_ms) >= d);
            match observation {
                Observation::NotCommitted { .. }
                    if self.spec.forgets_after_horizon && horizon_passed =>
                {
                    Observation::Unknown {
                        detail: HORIZON_PASSED.into(),
                    }
                }
                other => other,
            }
        })
    }
}

/// A provider that offers no look-up: nothing it says can settle an unknown outcome.
#[derive(Debug, Clone)]
pub struct Unobservable;

/// What every look-up at an [`Unobservable`] provider says.
pub const NO_LOOKUP: &str = "the provider offers no look-up: no observation possible";

impl ProviderAdapter for Unobservable {
    fn observe<'a>(&'a self, _effect: &'a EffectRecord) -> BoxFuture<'a, Observation> {
        Box::pin(async {
            Observation::Unknown {
                detail: NO_LOOKUP.into(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_path_carries_the_key_encoded_and_a_receipt_leaves_out_what_changes() {
        let spec = SearchSpec {
            receipt_omits: vec!["status".into()],
            ..SearchSpec::new("/jobs?ref={provider_key}", "jobs")
        };
        assert_eq!(spec.path_for("el1_ab"), "/jobs?ref=el1_ab");
        assert_eq!(spec.path_for("a b&c"), "/jobs?ref=a%20b%26c");
        assert_eq!(
            spec.provider_key_in("/jobs?ref=el1_ab").as_deref(),
            Some("el1_ab")
        );
        assert_eq!(
            spec.provider_key_in("/jobs?ref=a%20b"),
            None,
            "not a key this search makes"
        );
        assert_eq!(spec.provider_key_in("/jobs?ref="), None);
        assert_eq!(spec.provider_key_in("/tickets?ref=el1_ab"), None);
        let running = json!({ "job_id": "j1", "status": "running" });
        let done = json!({ "job_id": "j1", "status": "succeeded" });
        assert_eq!(spec.receipt(running), spec.receipt(done));
        assert_eq!(
            spec.receipt(json!({ "job_id": "j1" })),
            r#"{"job_id":"j1"}"#
        );
    }
}
