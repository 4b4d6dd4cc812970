//! The providers' HTTP routes, and where the injected faults act on a request.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request};
use hyper::body::Incoming;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::faults::{Action, FaultRequest, Faults, Route, RouteFaults};
use super::state::{DeployRequest, MessageRequest, RefundRequest, Settings, State, TicketRequest};
use crate::http::{error_response, json_response, read_body, CloseConnection, HandlerResult};

/// The providers: state, faults, and requests held right now.
pub struct Providers {
    state: Mutex<State>,
    faults: Mutex<Faults>,
    /// Requests applied whose answer is held (an answer fault `hold`).
    held: AtomicU64,
    /// Requests held before they are applied (a route's `commit_delay_ms`).
    pending: AtomicU64,
}

/// A request's parts that routing reads, owned, so a held request outlives its client.
#[derive(Clone)]
struct Parsed {
    method: Method,
    path: String,
    params: BTreeMap<String, String>,
    body: Bytes,
}

impl Parsed {
    /// Reads a request: its method, path, the query parameters the routes use, the
    /// idempotency key (as the parameter `Idempotency-Key`) and the body.
    async fn read(req: Request<Incoming>) -> Result<Self, String> {
        let mut params: BTreeMap<String, String> =
            ["idempotency_key", "external_ref", "client_ref", "job_ref"]
                .into_iter()
                .filter_map(|name| Some((name.to_owned(), query(&req, name)?.to_owned())))
                .collect();
        let key = req
            .headers()
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok());
        if let Some(key) = key {
            params.insert("Idempotency-Key".into(), key.to_owned());
        }
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let body = read_body(req.into_body()).await?;
        Ok(Parsed {
            method,
            path,
            params,
            body,
        })
    }
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
            faults: Mutex::new(Faults::default()),
            held: AtomicU64::new(0),
            pending: AtomicU64::new(0),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        self.faults.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Answers one request, with the faults set for its route.
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>) -> HandlerResult {
        let request = match Parsed::read(req).await {
            Ok(request) => request,
            Err(e) => return Ok(error_response(400, &e)),
        };
        let creates = Some(&request.method)
            .filter(|m| **m == Method::POST)
            .and_then(|_| Route::of_create_path(&request.path));
        let faults = creates.map_or_else(RouteFaults::default, |r| self.faults().route(r));
        let answer = if faults.commit_delay_ms > 0 {
            self.apply_late(request.clone(), faults.commit_delay_ms)
                .await
        } else {
            self.route(&request)
        };
        let committed = creates.is_some() && answer.is_ok();
        let response = match answer {
            Ok(_) if committed && faults.fail_after_commit => error_response(
                503,
                "injected fault: the request was applied, then the provider failed",
            ),
            Ok((status, value)) => json_response(status, &value),
            Err((status, message)) => error_response(status, &message),
        };
        if committed {
            self.apply_answer_fault(&request.path).await?;
        }
        Ok(response)
    }

    /// Holds `request` for `delay_ms`, then applies it. The hold and the apply run as a
    /// task of their own, which a client that gives up (dropping this future with its
    /// connection) does not cancel: the provider commits late, not never.
    async fn apply_late(self: &Arc<Self>, request: Parsed, delay_ms: u64) -> Answer {
        let this = self.clone();
        this.pending.fetch_add(1, Ordering::SeqCst);
        let task = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            let answer = this.route(&request);
            this.pending.fetch_sub(1, Ordering::SeqCst);
            answer
        });
        task.await
            .unwrap_or_else(|e| Err((500, format!("the held request failed: {e}"))))
    }

    /// What a request answers; `params` holds the query parameters and the idempotency key.
    fn route(&self, request: &Parsed) -> Answer {
        let Parsed {
            method,
            path,
            params,
            body,
        } = request;
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
                let refunds = self.state().refunds_by_key(param("idempotency_key"), now);
                Ok((200, json!({ "refunds": refunds })))
            }
            (&Method::GET, ["pay", "orders", id]) => Ok((200, self.state().order(id))),
            (&Method::POST, ["desk", "tickets"]) => {
                let request = parse::<TicketRequest>(body)?;
                Ok((201, self.state().create_ticket(request, now)))
            }
            (&Method::GET, ["desk", "tickets"]) => {
                let tickets = self.state().tickets_by_ref(param("external_ref"), now);
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
            (_, ["admin", what]) => self.admin(method, what, body, now),
            _ => Err((404, format!("no route for {method} {path}"))),
        }
    }

    /// The `/admin/...` routes: ground truth, held requests, faults.
    fn admin(&self, method: &Method, what: &str, body: &[u8], now: u64) -> Answer {
        match (method, what) {
            (&Method::GET, "effects") => Ok((200, self.state().effects(now))),
            (&Method::GET, "held") => Ok((
                200,
                json!({
                    "held": self.held.load(Ordering::SeqCst),
                    "pending": self.pending.load(Ordering::SeqCst),
                }),
            )),
            (&Method::POST, "faults") => self.set_fault(body),
            (&Method::GET, "faults") => Ok((200, json!(self.faults().routes()))),
            (&Method::DELETE, "faults") => {
                self.faults().clear();
                let mut state = self.state();
                for route in Route::ALL {
                    state.set_visibility_lag_ms(route, 0);
                }
                Ok((200, json!({ "cleared": true })))
            }
            _ => Err((404, format!("no route for {method} /admin/{what}"))),
        }
    }

    /// `POST /admin/faults`: sets a route's faults or arms an answer fault.
    fn set_fault(&self, body: &[u8]) -> Answer {
        match FaultRequest::parse(body).map_err(|e| (400, format!("bad fault: {e}")))? {
            FaultRequest::Route(route, faults) => {
                self.faults().set_route(route, faults);
                self.state()
                    .set_visibility_lag_ms(route, faults.visibility_lag_ms);
                Ok((200, json!({ "route": route, "faults": faults })))
            }
            FaultRequest::Answer(fault) => {
                self.faults().arm(fault);
                Ok((200, json!({ "armed": true })))
            }
        }
    }

    /// Applies the first answer fault armed for `path`, after the provider committed.
    async fn apply_answer_fault(&self, path: &str) -> Result<(), CloseConnection> {
        let Some(fault) = self.faults().take_answer(path) else {
            return Ok(());
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
