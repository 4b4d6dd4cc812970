//! The providers' HTTP routes and injected faults.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{Method, Request};
use hyper::body::Incoming;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use super::state::{DeployRequest, MessageRequest, RefundRequest, Settings, State, TicketRequest};
use crate::http::{error_response, json_response, read_body, CloseConnection, HandlerResult};

/// What happens to the answer of a committed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Action {
    /// Wait `hold_ms` before answering.
    Hold,
    /// Close the connection without answering.
    Drop,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fault {
    path: String,
    action: Action,
    #[serde(default)]
    hold_ms: u64,
    #[serde(default = "one")]
    times: u32,
}

fn one() -> u32 {
    1
}

/// The providers: state, faults, and requests held right now.
pub struct Providers {
    state: Mutex<State>,
    faults: Mutex<Vec<Fault>>,
    held: AtomicU64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// An answer: a status and a body, or a status and an error message.
type Answer = Result<(u16, Value), (u16, String)>;

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, (u16, String)> {
    serde_json::from_slice(bytes).map_err(|e| (400, format!("bad request body: {e}")))
}

/// The value of `name` in the query string, undecoded (the values used are plain).
fn query<'a>(req: &'a Request<Incoming>, name: &str) -> Option<&'a str> {
    req.uri().query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == name).then_some(v)
    })
}

impl Providers {
    /// Empty providers.
    pub fn new(settings: Settings) -> Self {
        Providers {
            state: Mutex::new(State::new(settings)),
            faults: Mutex::new(Vec::new()),
            held: AtomicU64::new(0),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Answers one request.
    pub async fn handle(&self, req: Request<Incoming>) -> HandlerResult {
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let header = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let mut params: BTreeMap<String, String> =
            ["idempotency_key", "external_ref", "client_ref", "job_ref"]
                .into_iter()
                .filter_map(|name| Some((name.to_owned(), query(&req, name)?.to_owned())))
                .collect();
        if let Some(key) = header("idempotency-key") {
            params.insert("Idempotency-Key".into(), key);
        }
        let body = match read_body(req.into_body()).await {
            Ok(body) => body,
            Err(e) => return Ok(error_response(400, &e)),
        };
        let response = match self.route(&method, &path, &params, &body) {
            Ok((status, value)) => json_response(status, &value),
            Err((status, message)) => error_response(status, &message),
        };
        if method == Method::POST && response.status().is_success() {
            self.apply_fault(&path).await?;
        }
        Ok(response)
    }

    /// What a request answers; `params` holds the query parameters and the idempotency key.
    fn route(
        &self,
        method: &Method,
        path: &str,
        params: &BTreeMap<String, String>,
        body: &[u8],
    ) -> Answer {
        let param = |name: &str| params.get(name).map(String::as_str).unwrap_or_default();
        let now = now_ms();
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        match (method, segments.as_slice()) {
            (&Method::POST, ["pay", "refunds"]) => {
                let request = parse::<RefundRequest>(body)?;
                self.state()
                    .refund(param("Idempotency-Key"), request, now)
                    .map(|(refund, replayed)| (if replayed { 200 } else { 201 }, refund))
                    .map_err(|e| (e.status, e.message))
            }
            (&Method::GET, ["pay", "refunds"]) => {
                let refunds = self.state().refunds_by_key(param("idempotency_key"));
                Ok((200, json!({ "refunds": refunds })))
            }
            (&Method::GET, ["pay", "orders", id]) => Ok((200, self.state().order(id))),
            (&Method::POST, ["desk", "tickets"]) => {
                let request = parse::<TicketRequest>(body)?;
                Ok((201, self.state().create_ticket(request, now)))
            }
            (&Method::GET, ["desk", "tickets"]) => {
                let tickets = self.state().tickets_by_ref(param("external_ref"));
                Ok((200, json!({ "tickets": tickets })))
            }
            (&Method::POST, ["msg", "messages"]) => {
                let request = parse::<MessageRequest>(body)?;
                Ok((202, self.state().send_message(request, now)))
            }
            (&Method::GET, ["msg", "messages"]) => {
                let messages = self.state().messages_by_ref(param("client_ref"), now);
                Ok((200, json!({ "messages": messages })))
            }
            (&Method::POST, ["deploy", "jobs"]) => {
                let request = parse::<DeployRequest>(body)?;
                Ok((201, self.state().start_job(request, now)))
            }
            (&Method::GET, ["deploy", "jobs"]) => {
                let jobs = self.state().jobs_by_ref(param("job_ref"), now);
                Ok((200, json!({ "jobs": jobs })))
            }
            (&Method::GET, ["deploy", "jobs", id]) => self
                .state()
                .job(id, now)
                .map(|job| (200, job))
                .ok_or((404, "no such job".into())),
            (&Method::GET, ["admin", "effects"]) => Ok((200, self.state().effects(now))),
            (&Method::GET, ["admin", "held"]) => {
                Ok((200, json!({ "held": self.held.load(Ordering::SeqCst) })))
            }
            (&Method::POST, ["admin", "faults"]) => {
                let fault = parse::<Fault>(body)?;
                self.faults
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(fault);
                Ok((200, json!({ "armed": true })))
            }
            _ => Err((404, format!("no route for {method} {path}"))),
        }
    }

    /// Applies the first armed fault for `path`, after the provider committed.
    async fn apply_fault(&self, path: &str) -> Result<(), CloseConnection> {
        let fault = {
            let mut faults = self.faults.lock().unwrap_or_else(|e| e.into_inner());
            let Some(i) = faults.iter().position(|f| f.path == path) else {
                return Ok(());
            };
            let fault = faults[i].clone();
            faults[i].times = faults[i].times.saturating_sub(1);
            if faults[i].times == 0 {
                faults.remove(i);
            }
            fault
        };
        match fault.action {
            Action::Hold => {
                self.held.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(fault.hold_ms)).await;
                self.held.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            }
            Action::Drop => Err(CloseConnection),
        }
    }
}

/// Counts of what every provider holds, from `GET /admin/effects`.
pub fn counts(effects: &Value) -> BTreeMap<String, usize> {
    ["refunds", "tickets", "messages", "jobs"]
        .into_iter()
        .map(|k| (k.to_owned(), effects[k].as_array().map_or(0, Vec::len)))
        .collect()
}
