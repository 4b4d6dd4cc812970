//! The fake providers' state: what they really did, countable from outside.
//!
//! Four providers with the behaviour real ones have, and nothing the ledger could lean
//! on that real ones lack:
//! - payments honour an idempotency key for a while (24 h by default) and then forget it:
//!   the same key later makes a new refund. Each refund keeps the key it was made with as
//!   metadata, and search by that metadata works forever;
//! - the help desk takes no key at all: every create is a new ticket, findable later by
//!   the external reference the caller attached;
//! - messaging takes no key either and its search is eventually consistent: a message
//!   becomes findable by client reference only after a visibility lag;
//! - deploys are jobs that move from queued to running to succeeded over time; a second
//!   create is a second job.
//!
//! Any route's look-ups can be made to lag behind its writes
//! ([`State::set_visibility_lag_ms`]): an effect is stamped with the time look-ups start
//! to show it when it is committed.
//!
//! Time is an argument (`now_ms`), so the behaviour is testable without sleeping.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::faults::Route;

/// How the providers behave over time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// How long payments remember an idempotency key.
    pub key_ttl_ms: u64,
    /// How long after sending a message becomes findable.
    pub message_visibility_lag_ms: u64,
    /// How long a deploy job runs after it starts.
    pub deploy_duration_ms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            key_ttl_ms: 24 * 60 * 60 * 1000,
            message_visibility_lag_ms: 0,
            deploy_duration_ms: 1_000,
        }
    }
}

/// A refusal, as an HTTP status and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The HTTP status.
    pub status: u16,
    /// Why.
    pub message: String,
}

fn refused(status: u16, message: impl Into<String>) -> Refused {
    Refused {
        status,
        message: message.into(),
    }
}

/// A refund request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefundRequest {
    /// The order refunded.
    pub order_id: String,
    /// Amount in the currency's minor unit.
    pub amount_cents: u64,
    /// ISO currency code.
    pub currency: String,
}

/// A ticket request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TicketRequest {
    /// Subject line.
    pub subject: String,
    /// Body text.
    pub body: String,
    /// `low`, `normal` or `high`.
    pub priority: String,
    /// The caller's reference, kept for look-ups (not deduplicated).
    pub external_ref: String,
}

/// A message request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageRequest {
    /// The recipient.
    pub to: String,
    /// The text.
    pub text: String,
    /// The caller's reference, kept for look-ups (not deduplicated).
    pub client_ref: String,
}

/// A deploy request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployRequest {
    /// The service deployed.
    pub service: String,
    /// The version deployed.
    pub version: String,
    /// The caller's reference, kept for look-ups (not deduplicated).
    pub job_ref: String,
}

#[derive(Debug, Clone)]
struct KeyEntry {
    refund: usize,
    request: RefundRequest,
    first_seen_ms: u64,
}

/// An effect as its provider holds it.
#[derive(Debug, Clone)]
struct Stored {
    /// What the provider shows of it (a job's view has no status; it is computed).
    view: Value,
    /// When it was committed.
    created_at_ms: u64,
    /// From when look-ups and searches show it.
    visible_at_ms: u64,
}

impl Stored {
    fn visible(&self, now_ms: u64) -> bool {
        now_ms >= self.visible_at_ms
    }
}

/// Everything the four providers hold.
#[derive(Debug, Default)]
pub struct State {
    settings: Settings,
    /// Extra visibility lag per route, on top of the provider's own.
    extra_lag_ms: BTreeMap<Route, u64>,
    refunds: Vec<Stored>,
    refund_keys: BTreeMap<String, KeyEntry>,
    tickets: Vec<Stored>,
    messages: Vec<Stored>,
    jobs: Vec<Stored>,
}

impl State {
    /// Empty providers with `settings`.
    pub fn new(settings: Settings) -> Self {
        State {
            settings,
            ..State::default()
        }
    }

    /// Makes effects of `route` committed from now on show up in its look-ups and
    /// searches `lag_ms` after their commit, on top of the provider's own lag.
    pub fn set_visibility_lag_ms(&mut self, route: Route, lag_ms: u64) {
        self.extra_lag_ms.insert(route, lag_ms);
    }

    /// How long after its commit an effect of `route` committed now becomes visible.
    pub fn visibility_lag_ms(&self, route: Route) -> u64 {
        let own = match route {
            Route::Message => self.settings.message_visibility_lag_ms,
            _ => 0,
        };
        let extra = self.extra_lag_ms.get(&route).copied().unwrap_or_default();
        own.saturating_add(extra)
    }

    fn stored(&self, route: Route, view: Value, now_ms: u64) -> Stored {
        Stored {
            view,
            created_at_ms: now_ms,
            visible_at_ms: now_ms.saturating_add(self.visibility_lag_ms(route)),
        }
    }

    /// Refunds `request` under `key`: the first request with a key creates the refund,
    /// later ones within the key's lifetime replay it (`true`), a different request under
    /// the same key is refused. Past the lifetime the key is forgotten.
    pub fn refund(
        &mut self,
        key: &str,
        request: RefundRequest,
        now_ms: u64,
    ) -> Result<(Value, bool), Refused> {
        if key.is_empty() || key.len() > 255 {
            return Err(refused(400, "Idempotency-Key must be 1 to 255 bytes"));
        }
        if request.amount_cents == 0 {
            return Err(refused(400, "amount_cents must be positive"));
        }
        self.forget_expired_keys(now_ms);
        if let Some(entry) = self.refund_keys.get(key) {
            if entry.request != request {
                return Err(refused(
                    422,
                    "this Idempotency-Key was used with different parameters",
                ));
            }
            return Ok((self.refunds[entry.refund].view.clone(), true));
        }
        let refund = json!({
            "refund_id": format!("re_{}", self.refunds.len() + 1),
            "order_id": request.order_id,
            "amount_cents": request.amount_cents,
            "currency": request.currency,
            "idempotency_key": key,
            "created_at_ms": now_ms,
        });
        self.refunds
            .push(self.stored(Route::Refund, refund.clone(), now_ms));
        let entry = KeyEntry {
            refund: self.refunds.len() - 1,
            request,
            first_seen_ms: now_ms,
        };
        self.refund_keys.insert(key.to_owned(), entry);
        Ok((refund, false))
    }

    fn forget_expired_keys(&mut self, now_ms: u64) {
        let ttl = self.settings.key_ttl_ms;
        self.refund_keys
            .retain(|_, e| now_ms < e.first_seen_ms.saturating_add(ttl));
    }

    /// Refunds made with idempotency key `key` that search shows at `now_ms`, by their
    /// metadata (remembered forever, unlike the deduplication).
    pub fn refunds_by_key(&self, key: &str, now_ms: u64) -> Vec<Value> {
        self.refunds
            .iter()
            .filter(|r| r.view["idempotency_key"] == key && r.visible(now_ms))
            .map(|r| r.view.clone())
            .collect()
    }

    /// Order `id`: a fixed total and what was refunded on it (at once, whatever the lag
    /// of refund search).
    pub fn order(&self, order_id: &str) -> Value {
        let refunds: Vec<&Value> = self
            .refunds
            .iter()
            .map(|r| &r.view)
            .filter(|r| r["order_id"] == order_id)
            .collect();
        let refunded: u64 = refunds
            .iter()
            .filter_map(|r| r["amount_cents"].as_u64())
            .sum();
        json!({
            "order_id": order_id,
            "total_cents": 100_000,
            "refunded_cents": refunded,
            "refunds": refunds.len(),
        })
    }

    /// Creates a ticket; every call is a new one.
    pub fn create_ticket(&mut self, request: TicketRequest, now_ms: u64) -> Value {
        let ticket = json!({
            "ticket_id": format!("tk_{}", self.tickets.len() + 1),
            "subject": request.subject,
            "body": request.body,
            "priority": request.priority,
            "external_ref": request.external_ref,
            "created_at_ms": now_ms,
        });
        self.tickets
            .push(self.stored(Route::Ticket, ticket.clone(), now_ms));
        ticket
    }

    /// Tickets carrying `external_ref` that search shows at `now_ms`.
    pub fn tickets_by_ref(&self, external_ref: &str, now_ms: u64) -> Vec<Value> {
        self.tickets
            .iter()
            .filter(|t| t.view["external_ref"] == external_ref && t.visible(now_ms))
            .map(|t| t.view.clone())
            .collect()
    }

    /// Sends a message; every call is a new one.
    pub fn send_message(&mut self, request: MessageRequest, now_ms: u64) -> Value {
        let message = json!({
            "message_id": format!("msg_{}", self.messages.len() + 1),
            "to": request.to,
            "text": request.text,
            "client_ref": request.client_ref,
            "sent_at_ms": now_ms,
        });
        self.messages
            .push(self.stored(Route::Message, message.clone(), now_ms));
        message
    }

    /// Messages carrying `client_ref` that search shows at `now_ms`.
    pub fn messages_by_ref(&self, client_ref: &str, now_ms: u64) -> Vec<Value> {
        self.messages
            .iter()
            .filter(|m| m.view["client_ref"] == client_ref && m.visible(now_ms))
            .map(|m| m.view.clone())
            .collect()
    }

    /// Starts a deploy job; every call is a new one.
    pub fn start_job(&mut self, request: DeployRequest, now_ms: u64) -> Value {
        let view = json!({
            "job_id": format!("job_{}", self.jobs.len() + 1),
            "service": request.service,
            "version": request.version,
            "job_ref": request.job_ref,
        });
        self.jobs.push(self.stored(Route::Deploy, view, now_ms));
        self.job_view(self.jobs.len() - 1, now_ms)
    }

    fn job_view(&self, index: usize, now_ms: u64) -> Value {
        let job = &self.jobs[index];
        let elapsed = now_ms.saturating_sub(job.created_at_ms);
        let status = if elapsed < 100 {
            "queued"
        } else if elapsed < 100 + self.settings.deploy_duration_ms {
            "running"
        } else {
            "succeeded"
        };
        let mut view = job.view.clone();
        view["status"] = json!(status);
        view
    }

    /// Job `job_id` as it stands at `now_ms`, once look-ups show it.
    pub fn job(&self, job_id: &str, now_ms: u64) -> Option<Value> {
        let index = self
            .jobs
            .iter()
            .position(|j| j.view["job_id"] == job_id && j.visible(now_ms))?;
        Some(self.job_view(index, now_ms))
    }

    /// Jobs carrying `job_ref` that search shows, as they stand at `now_ms`.
    pub fn jobs_by_ref(&self, job_ref: &str, now_ms: u64) -> Vec<Value> {
        (0..self.jobs.len())
            .filter(|&i| self.jobs[i].view["job_ref"] == job_ref && self.jobs[i].visible(now_ms))
            .map(|i| self.job_view(i, now_ms))
            .collect()
    }

    /// Every effect every provider holds, visible or not, for counting from outside.
    pub fn effects(&self, now_ms: u64) -> Value {
        let views = |list: &[Stored]| list.iter().map(|s| s.view.clone()).collect::<Vec<_>>();
        json!({
            "refunds": views(&self.refunds),
            "tickets": views(&self.tickets),
            "messages": views(&self.messages),
            "jobs": (0..self.jobs.len()).map(|i| self.job_view(i, now_ms)).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refund(amount_cents: u64) -> RefundRequest {
        RefundRequest {
            order_id: "o-1".into(),
            amount_cents,
            currency: "EUR".into(),
        }
    }

    #[test]
    fn a_key_replays_its_refund_until_it_is_forgotten() {
        let mut s = State::new(Settings {
            key_ttl_ms: 1_000,
            ..Settings::default()
        });
        let (first, replayed) = s.refund("k", refund(5), 0).unwrap();
        assert!(!replayed);
        assert_eq!(
            s.refund("k", refund(5), 999).unwrap(),
            (first.clone(), true)
        );
        assert_eq!(s.refunds_by_key("k", 999), vec![first]);
        // Forgotten: the same key now makes a second refund; search still finds both.
        let (second, replayed) = s.refund("k", refund(5), 1_000).unwrap();
        assert!(!replayed);
        assert_eq!(second["refund_id"], json!("re_2"));
        assert_eq!(s.refunds_by_key("k", 1_000).len(), 2);
        assert_eq!(s.order("o-1")["refunds"], json!(2));
    }

    #[test]
    fn a_key_reused_with_other_parameters_is_refused() {
        let mut s = State::new(Settings::default());
        s.refund("k", refund(5), 0).unwrap();
        assert_eq!(s.refund("k", refund(6), 1).unwrap_err().status, 422);
        assert_eq!(s.refund("", refund(6), 1).unwrap_err().status, 400);
        assert_eq!(s.refund("k2", refund(0), 1).unwrap_err().status, 400);
        assert!(s.refunds_by_key("never", 1).is_empty());
    }

    #[test]
    fn unkeyed_providers_create_on_every_call() {
        let mut s = State::new(Settings {
            message_visibility_lag_ms: 300,
            ..Settings::default()
        });
        let t = TicketRequest {
            subject: "s".into(),
            body: "b".into(),
            priority: "normal".into(),
            external_ref: "r".into(),
        };
        s.create_ticket(t.clone(), 0);
        s.create_ticket(t, 1);
        assert_eq!(s.tickets_by_ref("r", 1).len(), 2);
        let m = MessageRequest {
            to: "a@example.com".into(),
            text: "hi".into(),
            client_ref: "c".into(),
        };
        s.send_message(m, 1_000);
        assert!(s.messages_by_ref("c", 1_299).is_empty(), "not visible yet");
        assert_eq!(s.messages_by_ref("c", 1_300).len(), 1);
    }

    #[test]
    fn a_route_lag_hides_effects_committed_after_it_was_set_until_it_passes() {
        let mut s = State::new(Settings {
            message_visibility_lag_ms: 100,
            ..Settings::default()
        });
        s.refund("before", refund(5), 0).unwrap();
        for route in Route::ALL {
            s.set_visibility_lag_ms(route, 1_000);
        }
        assert_eq!(
            s.visibility_lag_ms(Route::Message),
            1_100,
            "added to its own"
        );
        s.refund("k", refund(5), 10).unwrap();
        let ticket = TicketRequest {
            subject: "s".into(),
            body: "b".into(),
            priority: "normal".into(),
            external_ref: "r".into(),
        };
        s.create_ticket(ticket, 10);
        let job = DeployRequest {
            service: "api".into(),
            version: "1".into(),
            job_ref: "j".into(),
        };
        s.start_job(job, 10);
        assert_eq!(s.refunds_by_key("before", 10).len(), 1, "committed before");
        assert!(s.refunds_by_key("k", 1_009).is_empty());
        assert!(s.tickets_by_ref("r", 1_009).is_empty());
        assert!(s.jobs_by_ref("j", 1_009).is_empty());
        assert!(s.job("job_1", 1_009).is_none());
        // The write path and the ground truth know it at once.
        assert!(
            s.refund("k", refund(5), 11).unwrap().1,
            "the key still replays"
        );
        assert_eq!(s.effects(11)["tickets"].as_array().unwrap().len(), 1);
        assert_eq!(s.order("o-1")["refunds"], json!(2));
        assert_eq!(s.refunds_by_key("k", 1_010).len(), 1);
        assert_eq!(s.tickets_by_ref("r", 1_010).len(), 1);
        assert_eq!(s.jobs_by_ref("j", 1_010).len(), 1);
        assert!(s.job("job_1", 1_010).is_some());
    }

    #[test]
    fn a_job_moves_from_queued_to_succeeded() {
        let mut s = State::new(Settings {
            deploy_duration_ms: 500,
            ..Settings::default()
        });
        let job = s.start_job(
            DeployRequest {
                service: "api".into(),
                version: "1.2".into(),
                job_ref: "j".into(),
            },
            0,
        );
        assert_eq!(job["status"], "queued");
        assert_eq!(s.job("job_1", 300).unwrap()["status"], "running");
        assert_eq!(s.job("job_1", 600).unwrap()["status"], "succeeded");
        assert_eq!(s.jobs_by_ref("j", 600).len(), 1);
        assert!(s.job("job_9", 0).is_none());
    }
}
