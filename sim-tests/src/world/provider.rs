//! How a provider handles one request, with the faults a boundary can suffer: the provider
//! crashing after it received the request and before applying it, the answer lost after
//! it applied it, or a slow backend.
//!
//! A send is a task on the provider machine; the caller waits for its answer up to
//! [`PROVIDER_TIMEOUT_MS`] and sees a timeout when no answer comes, exactly like an HTTP
//! client. A request sent at `t` reaches the provider [`TRANSIT_MS`] later and, processed
//! for `p` ms, is applied by `t + TRANSIT_MS + p` on the wall clock: a look-up at or after
//! that time sees it, even when a clock jump wakes the look-up and the provider's task at
//! the same instant, or wakes the provider's task only after the jump (the request was
//! in transit, or being processed, across it). A keyed provider records the key when the
//! request arrives, so a concurrent request with the same key waits for the first one's
//! result instead of applying again.

use std::time::Duration;

use tokio::sync::oneshot;

use super::{
    KeyEntry, Mutation, Pending, ProviderKind, State, World, HORIZON_MS, PROCESSING_MS_MAX,
    PROVIDER_TIMEOUT_MS,
};
use crate::workload::wall_clock_ms;

/// How long a request takes to reach the provider.
const TRANSIT_MS: u64 = 2;

/// One request to a provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderRequest {
    /// The provider.
    pub kind: ProviderKind,
    /// The intended effect the request is for (part of its payload, e.g. the text).
    pub intent_id: String,
    /// The parameters (canonical JSON).
    pub params: String,
    /// The idempotency key, honoured by keyed providers within their horizon.
    pub idempotency_key: Option<String>,
    /// The external reference stored with the effect, where the provider keeps one.
    pub reference: Option<String>,
}

/// What happens to one request at the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendFault {
    /// Nothing: applied, answered.
    None,
    /// The provider received it and crashed before applying it: never applied, no answer.
    CrashBeforeMutate,
    /// Applied, but the answer is lost.
    LostResponse,
    /// Applied after this long (ms), then answered.
    Slow(u64),
    /// Applied, then the provider failed and answered 503.
    FailAfterCommit,
}

/// A provider's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderReply {
    /// The effect exists; `deduplicated` when this request did not apply it again.
    Done {
        /// The provider's receipt.
        receipt: String,
        /// Whether a stored result was returned instead of applying.
        deduplicated: bool,
    },
    /// Refused without applying anything (4xx).
    Rejected {
        /// The status code.
        status: u16,
        /// Why.
        reason: String,
    },
    /// Failed with a server error (5xx): whether it applied is not said.
    Failed {
        /// The status code.
        status: u16,
        /// Why.
        reason: String,
    },
}

/// What a look-up at the provider found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The effect exists.
    Found {
        /// Its receipt.
        receipt: String,
    },
    /// The provider has no such effect.
    NotFound,
    /// The provider cannot tell.
    Unknown {
        /// Why not.
        detail: String,
    },
}

impl World {
    /// Sends `request` with `fault`, applied after `processing_ms` (or the fault's delay);
    /// `Err` is a timeout: no answer within [`PROVIDER_TIMEOUT_MS`].
    pub async fn send(
        &self,
        request: ProviderRequest,
        fault: SendFault,
        processing_ms: u64,
    ) -> Result<ProviderReply, String> {
        let (tx, rx) = oneshot::channel();
        let world = self.clone();
        let processing_ms = match fault {
            SendFault::Slow(ms) => ms,
            _ => processing_ms,
        }
        .min(PROCESSING_MS_MAX);
        self.lock().in_flight += 1;
        let sent_at_ms = wall_clock_ms();
        self.machine.spawn(async move {
            let reply = world
                .process(request, fault, sent_at_ms, processing_ms)
                .await;
            world.lock().in_flight -= 1;
            let _ = tx.send(reply);
        });
        let timeout = Duration::from_millis(PROVIDER_TIMEOUT_MS);
        let deadline = tokio::time::Instant::now() + timeout;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(Some(reply))) => Ok(reply),
            Ok(_) => {
                tokio::time::sleep_until(deadline).await;
                Err(format!("no answer within {PROVIDER_TIMEOUT_MS} ms"))
            }
            Err(_) => Err(format!("no answer within {PROVIDER_TIMEOUT_MS} ms")),
        }
    }

    /// The provider's side of one request sent at `sent_at_ms`; `None` when no answer goes
    /// back.
    async fn process(
        &self,
        request: ProviderRequest,
        fault: SendFault,
        sent_at_ms: u64,
        processing_ms: u64,
    ) -> Option<ProviderReply> {
        tokio::time::sleep(Duration::from_millis(TRANSIT_MS)).await;
        self.lock().requests += 1;
        let keyed = request
            .idempotency_key
            .clone()
            .filter(|_| request.kind.honours_key())
            .map(|key| (request.kind, key));
        if let Some(id) = &keyed {
            if let Some(answer) = self.seen_key(id, &request).await {
                return Some(answer);
            }
        }
        if fault == SendFault::CrashBeforeMutate {
            if let Some(id) = &keyed {
                self.lock().keys.remove(id);
            }
            return None;
        }
        let (arrival, due_ms) = {
            let mut state = self.lock();
            state.arrivals += 1;
            let arrival = state.arrivals;
            // Due by the promise: received one transit after it was sent, applied within
            // the processing time of that, even when a clock jump woke this task later.
            let due_ms = sent_at_ms + TRANSIT_MS + processing_ms;
            state.pending.insert(arrival, Pending { due_ms, request });
            (arrival, due_ms)
        };
        tokio::time::sleep(Duration::from_millis(
            due_ms.saturating_sub(wall_clock_ms()),
        ))
        .await;
        let receipt = {
            let mut state = self.lock();
            match state.pending.remove(&arrival) {
                Some(pending) => apply(&mut state, &pending),
                None => state
                    .applied_early
                    .remove(&arrival)
                    .expect("a pending request is applied once"),
            }
        };
        match fault {
            SendFault::LostResponse => None,
            SendFault::FailAfterCommit => Some(ProviderReply::Failed {
                status: 503,
                reason: "applied, then the provider failed".into(),
            }),
            _ => Some(ProviderReply::Done {
                receipt,
                deduplicated: false,
            }),
        }
    }

    /// A keyed request whose key is live: the answer it gets without applying. Records
    /// the key and returns `None` when it is new (or its horizon passed).
    async fn seen_key(
        &self,
        id: &(ProviderKind, String),
        request: &ProviderRequest,
    ) -> Option<ProviderReply> {
        let now = wall_clock_ms();
        {
            let mut state = self.lock();
            match state.keys.get(id) {
                Some(e) if now < e.first_seen_ms + HORIZON_MS => {
                    if request.kind == ProviderKind::Refund && e.params != request.params {
                        return Some(ProviderReply::Rejected {
                            status: 409,
                            reason: "idempotency key reused with other parameters".into(),
                        });
                    }
                }
                _ => {
                    let entry = KeyEntry {
                        params: request.params.clone(),
                        first_seen_ms: now,
                        receipt: None,
                    };
                    state.keys.insert(id.clone(), entry);
                    return None;
                }
            }
        }
        // The first request with this key is applied or still being processed: wait for
        // its result, as a provider holding the key's lock would.
        loop {
            match self.lock().keys.get(id).map(|e| e.receipt.clone()) {
                Some(Some(receipt)) => {
                    return Some(ProviderReply::Done {
                        receipt,
                        deduplicated: true,
                    })
                }
                Some(None) => {}
                // The first request died with a provider crash: this one is applied.
                None => return None,
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What `kind`'s look-up API says about an effect sent with `reference` and `key`.
    pub fn lookup(&self, kind: ProviderKind, reference: &str, key: &str) -> Lookup {
        let mut state = self.lock();
        apply_due(&mut state, wall_clock_ms());
        let state = state;
        let now = wall_clock_ms();
        let by_reference = || {
            state
                .mutations
                .get(&kind)
                .into_iter()
                .flatten()
                .find(|m| m.reference.as_deref() == Some(reference) && m.visible_from_ms <= now)
                .map(|m| m.receipt.clone())
        };
        let entry = state.keys.get(&(kind, key.to_owned()));
        match kind {
            ProviderKind::Refund => match (by_reference(), entry) {
                (Some(receipt), _) => Lookup::Found { receipt },
                (None, Some(e)) if e.receipt.is_none() => Lookup::Unknown {
                    detail: "a refund with this key is still being processed".into(),
                },
                (None, _) => Lookup::NotFound,
            },
            ProviderKind::Wire => match entry.filter(|e| now < e.first_seen_ms + HORIZON_MS) {
                Some(KeyEntry {
                    receipt: Some(receipt),
                    ..
                }) => Lookup::Found {
                    receipt: receipt.clone(),
                },
                Some(_) => Lookup::Unknown {
                    detail: "a transfer with this key is still being processed".into(),
                },
                None => Lookup::NotFound,
            },
            ProviderKind::Ticket | ProviderKind::Append => match by_reference() {
                Some(receipt) => Lookup::Found { receipt },
                None => Lookup::NotFound,
            },
            ProviderKind::Message => Lookup::Unknown {
                detail: ledger_providers::NO_LOOKUP.into(),
            },
        }
    }
}

/// Applies `pending`: records the mutation (and the receipt of its key, for a keyed
/// provider) and returns its receipt. The provider promised to apply it by its due time,
/// so its search shows it from then (plus the search lag), even when a clock jump woke
/// the processing task later.
fn apply(state: &mut State, pending: &Pending) -> String {
    let request = &pending.request;
    let applied_at_ms = pending.due_ms.min(wall_clock_ms());
    let applied = state.mutations.entry(request.kind).or_default();
    let id = format!("{}-{}", request.kind.name(), applied.len() + 1);
    let receipt = serde_json::json!({ "id": id }).to_string();
    applied.push(Mutation {
        intent_id: request.intent_id.clone(),
        params: request.params.clone(),
        reference: request.reference.clone(),
        key: request.idempotency_key.clone(),
        receipt: receipt.clone(),
        at: crate::sim_elapsed(),
        visible_from_ms: applied_at_ms + request.kind.visibility_lag_ms(),
    });
    if let Some(key) = request
        .idempotency_key
        .clone()
        .filter(|_| request.kind.honours_key())
    {
        if let Some(entry) = state.keys.get_mut(&(request.kind, key)) {
            entry.receipt = Some(receipt.clone());
        }
    }
    receipt
}

/// Applies, in the order they fell due, the pending requests due by `now_ms`.
fn apply_due(state: &mut State, now_ms: u64) {
    let mut due: Vec<(u64, u64)> = state
        .pending
        .iter()
        .filter(|(_, p)| p.due_ms <= now_ms)
        .map(|(arrival, p)| (p.due_ms, *arrival))
        .collect();
    due.sort_unstable();
    for (_, arrival) in due {
        if let Some(pending) = state.pending.remove(&arrival) {
            let receipt = apply(state, &pending);
            state.applied_early.insert(arrival, receipt);
        }
    }
}
