//! Reaching the cluster: a list of node endpoints, lazily connected channels, leader
//! preference, and retries.
//!
//! Every node accepts every call (followers forward to the leader), so any endpoint will
//! do; the client prefers the leader to save a hop. When a call fails in a way that says
//! nothing about the command's fate (no answer, no leader, a timeout), the client asks the
//! other nodes who leads now and follows that answer (the redirect), or moves on to the next
//! endpoint when nobody knows. A retry re-sends the *same* request, command id included: if
//! the first attempt was applied and only its answer was lost, the ledger returns the first
//! outcome instead of applying it twice, so a leader change mid-call costs a retry, never a
//! second grant.
//!
//! A node that admits no more calls answers `RESOURCE_EXHAUSTED` with a suggested wait
//! (`retry-after-ms`) and has proposed nothing of the call. That is no failure of the node:
//! the client waits the hint (capped, plus up to half of it again at random, so that callers
//! turned away together do not return together) and re-sends the same request to the same
//! node, without spending an attempt, until [`OverloadPolicy::wait_ms_max`] of such waits
//! are spent; then the call fails with [`ClientError::Overloaded`], a clear "try later".
//!
//! A refusal travels in a header, and an intent conflict's can be large: channels take
//! header blocks up to [`HEADER_LIST_BYTES_MAX`], not hyper's default of 16 KiB.
//!
//! With [`TlsOptions`] every connection is TLS: the nodes' certificates must be signed by
//! the given CA, and a client certificate is presented when one is given (nodes that
//! require client certificates refuse a client without one). The simulation has no TLS.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ledger_proto::pb;
use ledger_proto::pb::admin_client::AdminClient;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};

use crate::error::ClientError;

/// How calls are retried.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts per call, the first included.
    pub attempts: u32,
    /// Pause before the first retry; doubles up to `backoff_ms_max`.
    pub backoff_ms: u64,
    /// Longest pause between retries.
    pub backoff_ms_max: u64,
    /// Deadline of one attempt.
    pub attempt_timeout_ms: u64,
}

/// How calls turned away by an overloaded node are retried.
#[derive(Debug, Clone)]
pub struct OverloadPolicy {
    /// Longest total wait on overload answers in one call; beyond it the call fails with
    /// [`ClientError::Overloaded`]. Zero fails at the first overload answer.
    pub wait_ms_max: u64,
    /// Longest single wait, whatever the node suggests.
    pub hint_ms_max: u64,
}

impl Default for OverloadPolicy {
    fn default() -> Self {
        OverloadPolicy {
            wait_ms_max: 10_000,
            hint_ms_max: 2_000,
        }
    }
}

pub use ledger_proto::RETRY_AFTER_MS_METADATA;

/// Shortest wait after an overload answer, so that a zero hint cannot spin.
const OVERLOAD_WAIT_MS_MIN: u64 = 10;

/// Deadline of one leader query made after a failure; a node that does not answer in
/// this time is skipped.
const LEADER_PROBE_TIMEOUT_MS: u64 = 300;

/// Largest block of headers this client takes from a node (hyper's default is 16 KiB).
/// A refusal travels as JSON in a header (`ledger-refusal-bin`, in base64), and an intent
/// conflict names every top-level member that differs: up to every member name of two
/// intents of `INTENT_BYTES_MAX` (64 KiB) each, about 175 KiB in base64. A block over the
/// limit fails as a transport error, which is retried and ends as "maybe applied" instead
/// of the conflict the node answered.
pub const HEADER_LIST_BYTES_MAX: u32 = 1 << 20;

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 10,
            backoff_ms: 50,
            backoff_ms_max: 1_000,
            attempt_timeout_ms: 6_000,
        }
    }
}

/// Endpoints, channels and the retry loop shared by every call.
#[derive(Clone)]
pub struct Transport {
    inner: Arc<Inner>,
}

/// TLS towards the nodes.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// The CA (PEM) whose certificates the nodes present.
    pub ca_cert_pem: Vec<u8>,
    /// A client certificate chain and its key (PEM), presented to the nodes.
    pub client_identity_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// The name the nodes' certificates are checked against instead of each endpoint's
    /// host (for endpoints given by an address the certificates do not name).
    pub domain_name: Option<String>,
}

impl TlsOptions {
    /// Reads the CA and, when given, the client certificate and key from PEM files.
    pub fn from_files(
        ca_cert: &std::path::Path,
        client_cert: Option<&std::path::Path>,
        client_key: Option<&std::path::Path>,
    ) -> Result<Self, ClientError> {
        let read = |path: &std::path::Path| {
            std::fs::read(path)
                .map_err(|e| ClientError::Config(format!("cannot read {}: {e}", path.display())))
        };
        let client_identity_pem = match (client_cert, client_key) {
            (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
            (None, None) => None,
            _ => {
                return Err(ClientError::Config(
                    "a client certificate needs its key, and a key its certificate".into(),
                ))
            }
        };
        Ok(TlsOptions {
            ca_cert_pem: read(ca_cert)?,
            client_identity_pem,
            domain_name: None,
        })
    }

    /// The endpoint for `addr` over TLS.
    #[cfg(not(madsim))]
    fn endpoint(&self, addr: &str) -> Result<Endpoint, ClientError> {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        let mut tls =
            ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca_cert_pem));
        if let Some((cert, key)) = &self.client_identity_pem {
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        if let Some(name) = &self.domain_name {
            tls = tls.domain_name(name.clone());
        }
        Endpoint::from_shared(format!("https://{addr}"))
            .map_err(|err| ClientError::Config(format!("bad endpoint {addr}: {err}")))?
            .tls_config(tls)
            .map_err(|err| ClientError::Config(format!("TLS towards {addr}: {err}")))
    }

    #[cfg(madsim)]
    fn endpoint(&self, _addr: &str) -> Result<Endpoint, ClientError> {
        Err(ClientError::Config(
            "TLS is not available in the simulation".into(),
        ))
    }
}

/// The endpoint for `addr`, plaintext or over TLS.
fn endpoint(addr: &str, tls: Option<&TlsOptions>) -> Result<Endpoint, ClientError> {
    match tls {
        Some(tls) => tls.endpoint(addr),
        None => Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|err| ClientError::Config(format!("bad endpoint {addr}: {err}"))),
    }
}

struct Inner {
    endpoints: Vec<String>,
    tls: Option<TlsOptions>,
    channels: Mutex<Vec<Option<Channel>>>,
    preferred: AtomicUsize,
    authorization: String,
    retry: RetryPolicy,
    overload: OverloadPolicy,
    /// When the transport was made, and how many jitter draws it made: the jitter's
    /// sources, so that simulated runs draw the same waits.
    created: tokio::time::Instant,
    draws: AtomicU64,
}

/// The wait a node suggests, when `status` is its answer that it admits no more calls:
/// `RESOURCE_EXHAUSTED` without a ledger refusal (a tenant's quota refusal has the same
/// code and is final). `Some(None)` when the answer carries no usable hint.
pub fn overload_hint(status: &Status) -> Option<Option<u64>> {
    if status.code() != Code::ResourceExhausted || crate::error::refusal_of(status).is_some() {
        return None;
    }
    Some(
        status
            .metadata()
            .get(RETRY_AFTER_MS_METADATA)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok()),
    )
}

/// Whether a failed attempt may be retried (on this or another node). Only failures that
/// say nothing about the command's fate qualify; the same command id makes the retry safe.
pub fn retryable(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::ResourceExhausted
            | Code::Unknown
            | Code::Internal
    ) && crate::error::refusal_of(status).is_none()
}

impl Transport {
    /// A transport over `endpoints` (`host:port`), authenticating with `api_key`.
    pub fn new(
        endpoints: Vec<String>,
        api_key: &str,
        retry: RetryPolicy,
    ) -> Result<Self, ClientError> {
        Self::with_policies(endpoints, api_key, retry, OverloadPolicy::default())
    }

    /// [`Transport::new`], with an explicit policy for overload answers.
    pub fn with_policies(
        endpoints: Vec<String>,
        api_key: &str,
        retry: RetryPolicy,
        overload: OverloadPolicy,
    ) -> Result<Self, ClientError> {
        Self::with_tls(endpoints, api_key, retry, overload, None)
    }

    /// [`Transport::with_policies`], over TLS when `tls` is given.
    pub fn with_tls(
        endpoints: Vec<String>,
        api_key: &str,
        retry: RetryPolicy,
        overload: OverloadPolicy,
        tls: Option<TlsOptions>,
    ) -> Result<Self, ClientError> {
        if endpoints.is_empty() {
            return Err(ClientError::Config("no endpoints".into()));
        }
        for e in &endpoints {
            endpoint(e, tls.as_ref())?;
        }
        let channels = Mutex::new(vec![None; endpoints.len()]);
        Ok(Transport {
            inner: Arc::new(Inner {
                endpoints,
                tls,
                channels,
                preferred: AtomicUsize::new(0),
                authorization: format!("Bearer {api_key}"),
                retry,
                overload,
                created: tokio::time::Instant::now(),
                draws: AtomicU64::new(0),
            }),
        })
    }

    /// The endpoints, in configuration order.
    pub fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }

    /// The channels of every endpoint but the preferred one, in order after it.
    pub fn others(&self) -> Vec<Channel> {
        let n = self.inner.endpoints.len();
        let preferred = self.inner.preferred.load(Ordering::Relaxed) % n;
        (1..n)
            .map(|step| self.channel((preferred + step) % n))
            .collect()
    }

    /// Prefers `addr` for the next calls, if it is one of the endpoints.
    pub fn prefer(&self, addr: &str) {
        if let Some(i) = self.inner.endpoints.iter().position(|e| e == addr) {
            self.inner.preferred.store(i, Ordering::Relaxed);
        }
    }

    /// The channel to endpoint `i`.
    pub fn channel(&self, i: usize) -> Channel {
        let mut channels = self.inner.channels.lock().expect("channel lock");
        channels[i]
            .get_or_insert_with(|| {
                endpoint(&self.inner.endpoints[i], self.inner.tls.as_ref())
                    .expect("validated in new")
                    .connect_timeout(Duration::from_millis(500))
                    .tcp_nodelay(true)
                    .http2_max_header_list_size(HEADER_LIST_BYTES_MAX)
                    .connect_lazy()
            })
            .clone()
    }

    /// Wraps `message` with the caller's credentials.
    pub fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        if let Ok(value) = self.inner.authorization.parse() {
            request.metadata_mut().insert("authorization", value);
        }
        request
    }

    /// Runs `call` against the preferred endpoint, moving to the next one and retrying
    /// (the same request, built again by `call` with [`Transport::request`]) while failures
    /// are retryable. An overload answer is waited out on the same endpoint (see the
    /// module's documentation) without spending an attempt.
    pub async fn call<T, F, Fut>(&self, call: F) -> Result<T, ClientError>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        self.call_after_overload(0, call).await.0
    }

    /// [`Transport::call`] for requests that already waited `waited_ms` on overload
    /// answers (the items of a batch, turned away before), which count against the same
    /// budget; also returns how long this call waited on such answers.
    pub(crate) async fn call_after_overload<T, F, Fut>(
        &self,
        waited_ms: u64,
        mut call: F,
    ) -> (Result<T, ClientError>, u64)
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let retry = &self.inner.retry;
        let mut backoff_ms = retry.backoff_ms;
        let mut overload_waited_ms = waited_ms;
        let waited = |total: u64| total - waited_ms;
        let mut last = None;
        let mut attempt = 0;
        while attempt < retry.attempts {
            let i = self.inner.preferred.load(Ordering::Relaxed) % self.inner.endpoints.len();
            let fut = call(self.channel(i));
            let timeout = Duration::from_millis(retry.attempt_timeout_ms);
            let status = match tokio::time::timeout(timeout, fut).await {
                Ok(Ok(value)) => return (Ok(value), waited(overload_waited_ms)),
                Ok(Err(status)) => status,
                Err(_) => Status::deadline_exceeded(format!(
                    "no answer from {} in {} ms",
                    self.inner.endpoints[i], retry.attempt_timeout_ms
                )),
            };
            if let Some(hint) = overload_hint(&status) {
                let wait_ms = match self.overload_wait(hint, overload_waited_ms) {
                    Ok(wait_ms) => wait_ms,
                    Err(e) => return (Err(e), waited(overload_waited_ms)),
                };
                tracing::debug!(endpoint = %self.inner.endpoints[i], wait_ms, "overloaded; waiting");
                tokio::time::sleep(Duration::from_millis(wait_ms)).await;
                overload_waited_ms += wait_ms;
                continue;
            }
            if !retryable(&status) {
                return (
                    Err(ClientError::from_status(status)),
                    waited(overload_waited_ms),
                );
            }
            tracing::debug!(endpoint = %self.inner.endpoints[i], attempt, error = %status, "retrying");
            last = Some(status);
            attempt += 1;
            if attempt < retry.attempts {
                self.redirect_after_failure(i).await;
                tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
                backoff_ms = (backoff_ms * 2).min(retry.backoff_ms_max);
            }
        }
        let unavailable = ClientError::Unavailable {
            attempts: retry.attempts,
            last: last.map(|s| s.message().to_owned()).unwrap_or_default(),
        };
        (Err(unavailable), waited(overload_waited_ms))
    }

    /// How long to wait after an overload answer suggesting `hint` (ms; the retry policy's
    /// back-off when it suggests none), for a call that already waited `waited_ms` on such
    /// answers; [`ClientError::Overloaded`] when that wait would pass the overload budget.
    pub(crate) fn overload_wait(
        &self,
        hint: Option<u64>,
        waited_ms: u64,
    ) -> Result<u64, ClientError> {
        let (hint_ms, wait_ms) = self.draw_overload_wait(hint);
        self.within_overload_budget(hint_ms, wait_ms, waited_ms)?;
        Ok(wait_ms)
    }

    /// The hint an overload answer suggested (the retry policy's back-off when none) and
    /// the wait drawn from it.
    pub(crate) fn draw_overload_wait(&self, hint: Option<u64>) -> (u64, u64) {
        let hint_ms = hint.unwrap_or(self.inner.retry.backoff_ms);
        (hint_ms, self.overload_wait_ms(hint_ms))
    }

    /// [`ClientError::Overloaded`] when waiting `wait_ms` more, after `waited_ms`, would
    /// pass the overload budget.
    pub(crate) fn within_overload_budget(
        &self,
        hint_ms: u64,
        wait_ms: u64,
        waited_ms: u64,
    ) -> Result<(), ClientError> {
        if waited_ms + wait_ms > self.inner.overload.wait_ms_max {
            return Err(ClientError::Overloaded {
                retry_after_ms: hint_ms,
                waited_ms,
            });
        }
        Ok(())
    }

    /// The wait after an overload answer suggesting `hint_ms`: the hint, capped by
    /// [`OverloadPolicy::hint_ms_max`], plus up to half of it again.
    fn overload_wait_ms(&self, hint_ms: u64) -> u64 {
        let base_ms = hint_ms
            .min(self.inner.overload.hint_ms_max)
            .max(OVERLOAD_WAIT_MS_MIN);
        self.jittered_ms(base_ms)
    }

    /// `base_ms` plus up to half of it again, so that callers that failed together do not
    /// come back together (drawn as [`Transport::jitter`] draws: the same in every replay
    /// of a simulated run).
    pub(crate) fn jittered_ms(&self, base_ms: u64) -> u64 {
        base_ms + base_ms * (self.jitter() % 500) / 1_000
    }

    /// A pseudo-random number from the time since the transport was made and a counter:
    /// different for callers turned away together (their answers arrive at different
    /// instants), and the same in every replay of a simulated run (whose clock is the
    /// simulator's).
    fn jitter(&self) -> u64 {
        let draw = self.inner.draws.fetch_add(1, Ordering::Relaxed);
        let nanos = self.inner.created.elapsed().as_nanos() as u64;
        splitmix64(nanos ^ draw.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }
}

/// SplitMix64's output function: spreads nearby inputs over the whole range.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Transport {
    /// After endpoint `failed` did not serve a call: prefer the leader as the other nodes
    /// see it, or else the next endpoint.
    async fn redirect_after_failure(&self, failed: usize) {
        let n = self.inner.endpoints.len();
        for step in 1..n {
            let i = (failed + step) % n;
            if let Some(addr) = self.leader_seen_by(i, LEADER_PROBE_TIMEOUT_MS).await {
                if self.inner.endpoints.contains(&addr) {
                    tracing::debug!(leader = %addr, "following the leader");
                    self.prefer(&addr);
                    return;
                }
            }
        }
        self.inner
            .preferred
            .store((failed + 1) % n, Ordering::Relaxed);
    }

    /// The leader's address as endpoint `i` reports it, if it answers within `timeout_ms`
    /// and knows one.
    pub async fn leader_seen_by(&self, i: usize, timeout_ms: u64) -> Option<String> {
        self.leader_of(i, timeout_ms).await.ok()?.leader_addr
    }

    /// Who leads as endpoint `i` sees it, asked once. Any API key may ask (unlike
    /// [`Transport::status_of`], which needs the operator key).
    pub async fn leader_of(
        &self,
        i: usize,
        timeout_ms: u64,
    ) -> Result<pb::LeaderResponse, ClientError> {
        let request = self.request(pb::LeaderRequest {});
        let mut admin = AdminClient::new(self.channel(i));
        self.once(i, timeout_ms, admin.leader(request)).await
    }

    /// The status of endpoint `i`, asked once (it is that node's view that matters).
    /// Needs the operator key: a tenant key is refused (`PERMISSION_DENIED`).
    pub async fn status_of(
        &self,
        i: usize,
        with_state_digest: bool,
        timeout_ms: u64,
    ) -> Result<pb::StatusResponse, ClientError> {
        let request = self.request(pb::StatusRequest { with_state_digest });
        let mut admin = AdminClient::new(self.channel(i));
        self.once(i, timeout_ms, admin.status(request)).await
    }

    /// The answer of `call` to endpoint `i`, asked once within `timeout_ms`.
    async fn once<T>(
        &self,
        i: usize,
        timeout_ms: u64,
        call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, ClientError> {
        match tokio::time::timeout(Duration::from_millis(timeout_ms), call).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(ClientError::from_status(status)),
            Err(_) => Err(ClientError::Unavailable {
                attempts: 1,
                last: format!("{} did not answer", self.inner.endpoints[i]),
            }),
        }
    }
}
