//! [`LedgerClient`]: the ledger API in core types, over any node, with safe retries.
//!
//! Each method takes the command id the caller chose for this command. Keep it for every
//! retry of the same intention: a lost answer followed by a retry with the same id returns
//! the first outcome (the same grant), never a second attempt. A new intention needs a new
//! id. Refusals come back as [`ClientError::Refused`] with the core's typed refusal.
//!
//! A node that admits no more calls is waited out as it suggests (see [`transport`]); a
//! call whose overload budget is spent fails with [`ClientError::Overloaded`], to be sent
//! again later with the same command id.
//!
//! Claims and reports made while others of the same client are on their way travel
//! together in one `Batch` call (see [`batch`]); each is still served, retried and
//! answered as its own call.
//!
//! [`transport`]: crate::transport
//! [`batch`]: crate::batch

use tonic::transport::Channel;

use ledger_core::{
    ClaimOutcome, Decision, Declaration, EffectKey, EffectRecord, EffectState, IntentHash,
    ListPage, ListQuery, ObservationResult, Outcome, ReconcileOutcome, Refusal, Report,
    TenantConfig, TenantSettings, ToolName, ToolPolicy,
};
use ledger_proto::pb::admin_client::AdminClient;
use ledger_proto::pb::batch_item::Command as Item;
use ledger_proto::pb::batch_result::Result as Answer;
use ledger_proto::pb::ledger_client::LedgerClient as Grpc;
use ledger_proto::{pb, WatchFilter, WATCHES_FULL_METADATA};

use crate::batch::Batcher;
use crate::error::ClientError;
use crate::transport::{OverloadPolicy, RetryPolicy, TlsOptions, Transport};

/// What an amend answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmendOutcome {
    /// The intent hash the effect carried before (equal to `intent_hash` when unchanged).
    pub previous_hash: IntentHash,
    /// The intent hash it carries now.
    pub intent_hash: IntentHash,
    /// Whether this call changed the intent; false when the effect already had it.
    pub changed: bool,
}

/// Largest answer this client takes from a node (tonic's default is 4 MiB). A batch of 64
/// claims replayed with receipts of the largest size the ledger stores is over 4 MiB; a
/// page of large records can be larger still, and `ledgerctl` asks for a smaller page
/// when one is (`OUT_OF_RANGE`).
pub const ANSWER_BYTES_MAX: usize = 32 << 20;

/// A client of the ledger cluster.
#[derive(Clone)]
pub struct LedgerClient {
    transport: Transport,
    batcher: Batcher,
}

/// A change to an effect that a watch follows, as the serving node held it afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// The effect.
    pub key: EffectKey,
    /// Its record after the change; `None` once collected.
    pub record: Option<EffectRecord>,
    /// The log index the node had applied when it read the record.
    pub applied_index: u64,
}

/// The events of a watch, in the order the serving node applied them. An event is a
/// reason to read again, not an answer to act on: the node may lag the leader. The
/// watch ends with an error when the node falls too far behind, installs a snapshot
/// under a tenant-wide watch, or goes away; read again and watch again then.
#[derive(Debug)]
pub struct Watching {
    events: tonic::Streaming<pb::WatchEvent>,
}

impl Watching {
    /// The next event; `None` when the node ended the watch.
    pub async fn next(&mut self) -> Option<Result<WatchEvent, ClientError>> {
        match self.events.message().await {
            Ok(Some(event)) => Some(watch_event(event)),
            Ok(None) => None,
            Err(status) => Some(Err(ClientError::from_status(status))),
        }
    }
}

fn watch_event(event: pb::WatchEvent) -> Result<WatchEvent, ClientError> {
    let key = event
        .key
        .map(EffectKey::from)
        .ok_or_else(|| malformed("a watch event without a key"))?;
    let record = event
        .record
        .map(EffectRecord::try_from)
        .transpose()
        .map_err(malformed)?;
    Ok(WatchEvent {
        key,
        record,
        applied_index: event.applied_index,
    })
}

fn malformed(e: impl std::fmt::Display) -> ClientError {
    ClientError::Malformed(e.to_string())
}

fn unexpected(outcome: Outcome) -> ClientError {
    match outcome {
        Outcome::Refused(r) => ClientError::Refused(r),
        other => ClientError::Malformed(format!("unexpected outcome {other:?}")),
    }
}

impl LedgerClient {
    /// A client of the nodes at `endpoints` (`host:port`) with the default retry policy.
    pub fn new(endpoints: Vec<String>, api_key: &str) -> Result<Self, ClientError> {
        Self::with_retry(endpoints, api_key, RetryPolicy::default())
    }

    /// A client with an explicit retry policy.
    pub fn with_retry(
        endpoints: Vec<String>,
        api_key: &str,
        retry: RetryPolicy,
    ) -> Result<Self, ClientError> {
        Self::with_policies(endpoints, api_key, retry, OverloadPolicy::default())
    }

    /// A client with explicit retry and overload policies.
    pub fn with_policies(
        endpoints: Vec<String>,
        api_key: &str,
        retry: RetryPolicy,
        overload: OverloadPolicy,
    ) -> Result<Self, ClientError> {
        Self::with_tls(endpoints, api_key, retry, overload, None)
    }

    /// A client with explicit policies, over TLS when `tls` is given (see
    /// [`TlsOptions`]).
    pub fn with_tls(
        endpoints: Vec<String>,
        api_key: &str,
        retry: RetryPolicy,
        overload: OverloadPolicy,
        tls: Option<TlsOptions>,
    ) -> Result<Self, ClientError> {
        let transport = Transport::with_tls(endpoints, api_key, retry, overload, tls)?;
        Ok(LedgerClient {
            batcher: Batcher::new(transport.clone()),
            transport,
        })
    }

    /// The transport, for calls this type does not wrap.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    pub(crate) fn grpc(channel: Channel) -> Grpc<Channel> {
        Grpc::new(channel).max_decoding_message_size(ANSWER_BYTES_MAX)
    }

    /// Persists the record(s) of an effect; `slots > 1` declares one effect per slot.
    /// Returns the keys and whether this call created them.
    pub async fn declare(
        &self,
        command_id: &str,
        declaration: Declaration,
        slots: u32,
    ) -> Result<(Vec<EffectKey>, bool), ClientError> {
        let message = pb::DeclareRequest::new(command_id, declaration, slots);
        let t = &self.transport;
        let response = t
            .call(|ch| {
                let request = t.request(message.clone());
                async move { Self::grpc(ch).declare(request).await }
            })
            .await?;
        match Outcome::try_from(response.into_inner()).map_err(malformed)? {
            Outcome::Declared { keys, created } => Ok((keys, created)),
            other => Err(unexpected(other)),
        }
    }

    /// Replaces the intent of an existing effect with `declaration.intent_json` while
    /// nothing can have happened (`not_started`, or `failed_before_effect` with nothing
    /// unsettled); the key, tool, target, workflow and authority must be the effect's.
    /// Otherwise the refusal is `AmendNotAllowed`, `Conflict` or `TooManyAmendments`.
    pub async fn amend(
        &self,
        command_id: &str,
        declaration: Declaration,
    ) -> Result<AmendOutcome, ClientError> {
        let message = pb::AmendRequest::new(command_id, declaration);
        let t = &self.transport;
        let response = t
            .call(|ch| {
                let request = t.request(message.clone());
                async move { Self::grpc(ch).amend(request).await }
            })
            .await?;
        match Outcome::try_from(response.into_inner()).map_err(malformed)? {
            Outcome::Amended {
                previous_hash,
                intent_hash,
                changed,
            } => Ok(AmendOutcome {
                previous_hash,
                intent_hash,
                changed,
            }),
            other => Err(unexpected(other)),
        }
    }

    /// Asks to dispatch the effect (declaring it if new).
    pub async fn claim(
        &self,
        command_id: &str,
        declaration: Declaration,
        holder: &str,
        lease_ms: Option<u64>,
        confirmation: Option<String>,
    ) -> Result<ClaimOutcome, ClientError> {
        let message =
            pb::ClaimRequest::new(command_id, declaration, holder, lease_ms, confirmation);
        match self.batcher.call(Item::Claim(message)).await? {
            Answer::Claim(response) => ClaimOutcome::try_from(response).map_err(malformed),
            other => Err(malformed(format!("a claim answered with {other:?}"))),
        }
    }

    /// Extends the lease of the attempt holding `fencing_token`; returns its new end.
    pub async fn heartbeat(
        &self,
        command_id: &str,
        key: EffectKey,
        fencing_token: u64,
        lease_ms: Option<u64>,
    ) -> Result<u64, ClientError> {
        let message = pb::HeartbeatRequest::new(command_id, key, fencing_token, lease_ms);
        let t = &self.transport;
        let response = t
            .call(|ch| {
                let request = t.request(message.clone());
                async move { Self::grpc(ch).heartbeat(request).await }
            })
            .await?;
        Ok(response.into_inner().lease_until_ms)
    }

    /// Reports how a dispatch attempt ended; returns the effect's state and receipt.
    pub async fn report(
        &self,
        command_id: &str,
        key: EffectKey,
        fencing_token: u64,
        report: Report,
    ) -> Result<(EffectState, Option<String>), ClientError> {
        let message = pb::ReportRequest::new(command_id, key, fencing_token, report);
        let response = match self.batcher.call(Item::Report(message)).await? {
            Answer::Report(response) => response,
            other => return Err(malformed(format!("a report answered with {other:?}"))),
        };
        match Outcome::try_from(response).map_err(malformed)? {
            Outcome::Reported { state, receipt } => Ok((state, receipt)),
            other => Err(unexpected(other)),
        }
    }

    /// Asks for a fenced reconciliation attempt.
    pub async fn begin_reconcile(
        &self,
        command_id: &str,
        key: EffectKey,
        holder: &str,
        lease_ms: Option<u64>,
    ) -> Result<ReconcileOutcome, ClientError> {
        let message = pb::BeginReconcileRequest::new(command_id, key, holder, lease_ms);
        let t = &self.transport;
        let response = t
            .call(|ch| {
                let request = t.request(message.clone());
                async move { Self::grpc(ch).begin_reconcile(request).await }
            })
            .await?;
        ReconcileOutcome::try_from(response.into_inner()).map_err(malformed)
    }

    /// Records an observation; returns the effect's state and whether it escalated.
    pub async fn observe(
        &self,
        command_id: &str,
        key: EffectKey,
        fencing_token: u64,
        result: ObservationResult,
        detail: &str,
    ) -> Result<(EffectState, bool), ClientError> {
        let message = pb::ObserveRequest::new(command_id, key, fencing_token, result, detail);
        let t = &self.transport;
        let response = t
            .call(|ch| {
                let request = t.request(message.clone());
                async move { Self::grpc(ch).observe(request).await }
            })
            .await?;
        match Outcome::try_from(response.into_inner()).map_err(malformed)? {
            Outcome::Observed { state, escalated } => Ok((state, escalated)),
            other => Err(unexpected(other)),
        }
    }

    /// Records an operator's decision on an escalated effect (operator key). With
    /// `escalation_token` (the [`EffectRecord::escalation_token`] of the record the
    /// decision was made on), the ledger refuses it as `EscalationChanged` when the
    /// effect's open escalation is another one; without, it settles whichever escalation
    /// is open.
    pub async fn decide(
        &self,
        command_id: &str,
        key: EffectKey,
        escalation_token: Option<u64>,
        decision: Decision,
        operator: &str,
        note: &str,
    ) -> Result<EffectState, ClientError> {
        let message =
            pb::DecideRequest::new(command_id, key, escalation_token, decision, operator, note);
        let t = &self.transport;
        let response = t
            .call(|ch| {
                let request = t.request(message.clone());
                async move { Self::grpc(ch).decide(request).await }
            })
            .await?;
        match Outcome::try_from(response.into_inner()).map_err(malformed)? {
            Outcome::Decided { state } => Ok(state),
            other => Err(unexpected(other)),
        }
    }

    /// The record of `key`, read linearizably; `None` when it does not exist.
    pub async fn get(&self, key: EffectKey) -> Result<Option<EffectRecord>, ClientError> {
        let message = pb::GetRequest::from(key);
        let t = &self.transport;
        let result = t
            .call(|ch| {
                let request = t.request(message.clone());
                async move { Self::grpc(ch).get(request).await }
            })
            .await;
        match result {
            Ok(response) => {
                let record = response
                    .into_inner()
                    .record
                    .ok_or_else(|| malformed("record is missing"))?;
                EffectRecord::try_from(record).map(Some).map_err(malformed)
            }
            Err(ClientError::Refused(Refusal::UnknownEffect(_))) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A page of records, read linearizably, and where the listing goes on: ask again
    /// with `after` set to [`ListPage::continue_after`] until it is `None`. A page may hold
    /// fewer records than the limit, even none, and still not be the last, when a filter
    /// few records match made the node stop reading for it. (From a node that predates
    /// `continue_after`, a full page goes on after its last record.)
    pub async fn list(&self, query: ListQuery) -> Result<ListPage, ClientError> {
        let message = pb::ListRequest::from(query);
        // The page size the node serves (the limit asked for, capped), which a full page
        // from a node that predates `continue_after` fills.
        let limit = ledger_proto::list_limit(message.limit);
        let t = &self.transport;
        let response = t
            .call(|ch| {
                let request = t.request(message.clone());
                async move { Self::grpc(ch).list(request).await }
            })
            .await?;
        let answer = response.into_inner();
        let sent_where_to_go_on = answer.continue_after.is_some();
        let page = ListPage::try_from(answer).map_err(malformed)?;
        Ok(if sent_where_to_go_on {
            page
        } else {
            ListPage::ended_at_limit(page.records, limit)
        })
    }

    /// Follows the records `filter` selects as a node applies changes to them (see
    /// [`Watching`]). Starts on whichever node answers first. A node that serves all the
    /// watches it may says so; the other nodes are tried then, before the transport backs
    /// off (any node serves a watch; its redirect would pick the leader again).
    pub async fn watch(&self, filter: WatchFilter) -> Result<Watching, ClientError> {
        let message = pb::WatchRequest::from(filter);
        let t = &self.transport;
        let response = t
            .call(|ch| {
                let others = t.others();
                let message = &message;
                async move {
                    let mut answer = Self::grpc(ch).watch(t.request(message.clone())).await;
                    for other in others {
                        match &answer {
                            Err(s) if s.metadata().contains_key(WATCHES_FULL_METADATA) => {
                                answer = Self::grpc(other).watch(t.request(message.clone())).await
                            }
                            _ => break,
                        }
                    }
                    answer
                }
            })
            .await?;
        Ok(Watching {
            events: response.into_inner(),
        })
    }

    /// Registers a tenant or changes its settings (operator key).
    pub async fn put_tenant(
        &self,
        command_id: &str,
        tenant: &str,
        settings: TenantSettings,
    ) -> Result<(), ClientError> {
        let message = pb::PutTenantRequest::new(command_id, tenant, settings);
        let t = &self.transport;
        t.call(|ch| {
            let request = t.request(message.clone());
            async move { AdminClient::new(ch).put_tenant(request).await }
        })
        .await
        .map(|_| ())
    }

    /// A tenant's settings and tool policies; `None` when the tenant is not registered.
    /// The operator key reads any tenant, a tenant key only its own.
    pub async fn get_tenant(&self, tenant: &str) -> Result<Option<TenantConfig>, ClientError> {
        let message = pb::GetTenantRequest {
            tenant: tenant.to_owned(),
        };
        let t = &self.transport;
        let result = t
            .call(|ch| {
                let request = t.request(message.clone());
                async move { AdminClient::new(ch).get_tenant(request).await }
            })
            .await;
        match result {
            Ok(response) => TenantConfig::try_from(response.into_inner())
                .map(Some)
                .map_err(malformed),
            Err(ClientError::Refused(Refusal::UnknownTenant(_))) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sets a tool's policy for a tenant (operator key).
    pub async fn put_tool_policy(
        &self,
        command_id: &str,
        tenant: &str,
        tool: ToolName,
        policy: ToolPolicy,
    ) -> Result<(), ClientError> {
        let message = pb::PutToolPolicyRequest::new(command_id, tenant, tool, policy);
        let t = &self.transport;
        t.call(|ch| {
            let request = t.request(message.clone());
            async move { AdminClient::new(ch).put_tool_policy(request).await }
        })
        .await
        .map(|_| ())
    }
}
