//! The faults the fake providers can be told to inject, as data.
//!
//! Two kinds, both set with `POST /admin/faults` and cleared with `DELETE /admin/faults`:
//!
//! - a **route fault** (`{"route": "ticket", "commit_delay_ms": 8000,
//!   "fail_after_commit": false, "visibility_lag_ms": 0}`) changes how one provider
//!   route behaves from now on, for every request, until the route's faults are set
//!   again (all zero clears them):
//!   - `commit_delay_ms`: each creating request is held that long *before* it is applied;
//!     it is applied after the hold even if the client has given up by then, and the
//!     answer goes out after that (a provider that commits late);
//!   - `fail_after_commit`: a creating request that was applied is answered 503 (the
//!     effect is stored, the answer says the opposite);
//!   - `visibility_lag_ms`: an effect committed from now on shows up in the route's
//!     look-up and search routes only that long after its commit, on top of the
//!     provider's own lag (messaging's `--message-lag-ms`); `/admin/effects` and
//!     `GET /pay/orders/{id}` show it at once.
//! - an **answer fault** (`{"path": "/pay/refunds", "action": "hold" or "drop",
//!   "hold_ms": 1500, "times": 1}`) acts on the answer of the next `times` requests to
//!   `path` that were applied: `hold` waits before answering (time to crash something in
//!   between), `drop` closes the connection without an answer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A provider route that creates effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    /// Payments: `POST /pay/refunds`; look-up `GET /pay/refunds?idempotency_key=`.
    Refund,
    /// Help desk: `POST /desk/tickets`; search `GET /desk/tickets?external_ref=`.
    Ticket,
    /// Messaging: `POST /msg/messages`; search `GET /msg/messages?client_ref=`.
    Message,
    /// Deploys: `POST /deploy/jobs`; look-ups `GET /deploy/jobs/{id}` and
    /// `GET /deploy/jobs?job_ref=`.
    Deploy,
}

impl Route {
    /// Every route.
    pub const ALL: [Route; 4] = [Route::Refund, Route::Ticket, Route::Message, Route::Deploy];

    /// The path a creating request of this route is posted to.
    pub fn create_path(self) -> &'static str {
        match self {
            Route::Refund => "/pay/refunds",
            Route::Ticket => "/desk/tickets",
            Route::Message => "/msg/messages",
            Route::Deploy => "/deploy/jobs",
        }
    }

    /// The route whose creating requests are posted to `path`.
    pub fn of_create_path(path: &str) -> Option<Route> {
        Route::ALL.into_iter().find(|r| r.create_path() == path)
    }
}

/// How one route misbehaves; the default is not at all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteFaults {
    /// How long each creating request is held before it is applied.
    #[serde(default)]
    pub commit_delay_ms: u64,
    /// Whether an applied creating request is answered 503.
    #[serde(default)]
    pub fail_after_commit: bool,
    /// How long after its commit an effect shows up in look-ups and searches.
    #[serde(default)]
    pub visibility_lag_ms: u64,
}

/// `POST /admin/faults` with a route fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteFaultsText {
    route: Route,
    #[serde(default)]
    commit_delay_ms: u64,
    #[serde(default)]
    fail_after_commit: bool,
    #[serde(default)]
    visibility_lag_ms: u64,
}

/// What happens to the answer of an applied request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Wait `hold_ms` before answering.
    Hold,
    /// Close the connection without answering.
    Drop,
}

/// A fault on the answers of the next `times` applied requests to `path`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerFault {
    /// The request path (`/pay/refunds`).
    pub path: String,
    /// What happens to the answer.
    pub action: Action,
    /// How long `hold` waits.
    #[serde(default)]
    pub hold_ms: u64,
    /// How many requests it applies to.
    #[serde(default = "one")]
    pub times: u32,
}

fn one() -> u32 {
    1
}

/// A fault, as `POST /admin/faults` sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultRequest {
    /// Set a route's faults.
    Route(Route, RouteFaults),
    /// Arm an answer fault.
    Answer(AnswerFault),
}

impl FaultRequest {
    /// Parses a request body: a route fault when it names a `route`, else an answer fault.
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        if value.get("route").is_some() {
            let t: RouteFaultsText = serde_json::from_value(value).map_err(|e| {
                format!("route fault: {e}; routes: refund, ticket, message, deploy")
            })?;
            let faults = RouteFaults {
                commit_delay_ms: t.commit_delay_ms,
                fail_after_commit: t.fail_after_commit,
                visibility_lag_ms: t.visibility_lag_ms,
            };
            Ok(FaultRequest::Route(t.route, faults))
        } else {
            serde_json::from_value(value)
                .map(FaultRequest::Answer)
                .map_err(|e| format!("answer fault: {e}"))
        }
    }
}

/// Every fault set right now.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    routes: BTreeMap<Route, RouteFaults>,
    answers: Vec<AnswerFault>,
}

impl Faults {
    /// Sets `route`'s faults, replacing what it had.
    pub fn set_route(&mut self, route: Route, faults: RouteFaults) {
        if faults == RouteFaults::default() {
            self.routes.remove(&route);
        } else {
            self.routes.insert(route, faults);
        }
    }

    /// `route`'s faults.
    pub fn route(&self, route: Route) -> RouteFaults {
        self.routes.get(&route).copied().unwrap_or_default()
    }

    /// Every route's faults, for `GET /admin/faults`.
    pub fn routes(&self) -> &BTreeMap<Route, RouteFaults> {
        &self.routes
    }

    /// Arms an answer fault.
    pub fn arm(&mut self, fault: AnswerFault) {
        if fault.times > 0 {
            self.answers.push(fault);
        }
    }

    /// The first answer fault armed for `path`, counted as used once.
    pub fn take_answer(&mut self, path: &str) -> Option<AnswerFault> {
        let i = self.answers.iter().position(|f| f.path == path)?;
        let fault = self.answers[i].clone();
        self.answers[i].times -= 1;
        if self.answers[i].times == 0 {
            self.answers.remove(i);
        }
        Some(fault)
    }

    /// Clears every fault.
    pub fn clear(&mut self) {
        *self = Faults::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_naming_a_route_sets_route_faults_and_others_arm_answer_faults() {
        let route = br#"{"route": "ticket", "commit_delay_ms": 8000, "visibility_lag_ms": 5}"#;
        assert_eq!(
            FaultRequest::parse(route).unwrap(),
            FaultRequest::Route(
                Route::Ticket,
                RouteFaults {
                    commit_delay_ms: 8_000,
                    fail_after_commit: false,
                    visibility_lag_ms: 5,
                }
            )
        );
        let answer = br#"{"path": "/pay/refunds", "action": "drop"}"#;
        let FaultRequest::Answer(fault) = FaultRequest::parse(answer).unwrap() else {
            panic!("an answer fault");
        };
        assert_eq!((fault.action, fault.times), (Action::Drop, 1));
        for bad in [
            &br#"{"route": "tickets"}"#[..],
            br#"{"route": "ticket", "commit_delay": 1}"#,
            br#"{"path": "/pay/refunds", "action": "explode"}"#,
            b"not json",
        ] {
            assert!(FaultRequest::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn route_faults_last_until_set_again_and_answer_faults_until_used_up() {
        let mut faults = Faults::default();
        let slow = RouteFaults {
            commit_delay_ms: 10,
            ..RouteFaults::default()
        };
        faults.set_route(Route::Deploy, slow);
        assert_eq!(faults.route(Route::Deploy), slow);
        assert_eq!(faults.route(Route::Deploy), slow, "not used up by reading");
        faults.set_route(Route::Deploy, RouteFaults::default());
        assert!(faults.routes().is_empty());

        faults.arm(AnswerFault {
            path: "/desk/tickets".into(),
            action: Action::Hold,
            hold_ms: 5,
            times: 2,
        });
        assert!(faults.take_answer("/pay/refunds").is_none());
        assert!(faults.take_answer("/desk/tickets").is_some());
        assert!(faults.take_answer("/desk/tickets").is_some());
        assert!(faults.take_answer("/desk/tickets").is_none());
    }
}
