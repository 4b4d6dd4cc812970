//! The public `Ledger` gRPC service: authenticate, turn the request into a core command,
//! apply it through Raft wherever the leader is, and answer with the outcome.
//!
//! Every call runs in a debug-level span carrying the effect key and command id, and a
//! refusal is logged at info with the same fields, so one effect's story can be followed
//! across nodes. Malformed requests are INVALID_ARGUMENT before anything is proposed;
//! refusals come back from the state machine as values and are mapped to statuses in
//! `ledger_proto::status`.
//!
//! `Batch` carries several claims and reports in one call, for clients that coalesce
//! their concurrent calls: each item is served exactly as its own call (admitted, applied,
//! logged and counted on its own, concurrently with the others), and its answer or status
//! is the item's result.

use tonic::{Request, Response, Status};
use tracing::Instrument;

use ledger_core::{Caller, Outcome};
use ledger_proto::convert::{IntoCommand, OutcomeError, WireError};
use ledger_proto::{outcome_to_response, pb, refusal_to_status, WatchFilter};

use crate::auth::Authenticator;
use crate::error::NodeError;
use crate::metrics::{result_label, Stopwatch, CALL_SECONDS};
use crate::node::LedgerNode;
use crate::watch::{EventStream, Watches};
use crate::wire::{ReadRequest, ReadResponse};

/// Most items one `Batch` call may carry; each is admitted on its own, so this bounds
/// only the size of one request and answer.
pub const BATCH_ITEMS_MAX: usize = 256;

/// Serves the ledger API on one node.
pub struct LedgerService {
    node: LedgerNode,
    auth: Authenticator,
    watches: Watches,
    /// Becomes true when the node stops serving: watches end then.
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl LedgerService {
    /// The service for `node`; its watches end when `stopping` turns true.
    pub fn new(
        node: LedgerNode,
        auth: Authenticator,
        stopping: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        LedgerService {
            node,
            auth,
            watches: Watches::default(),
            stopping,
        }
    }

    /// Authenticates, converts, applies, answers.
    async fn apply<Req, Resp>(&self, request: Request<Req>) -> Result<Response<Resp>, Status>
    where
        Req: IntoCommand,
        Resp: TryFrom<Outcome, Error = OutcomeError>,
    {
        let caller = self.auth.caller(&request)?;
        self.serve(caller, request.into_inner())
            .await
            .map(Response::new)
    }

    /// Converts `message` of an authenticated `caller`, applies it, answers it.
    async fn serve<Req, Resp>(&self, caller: Caller, message: Req) -> Result<Resp, Status>
    where
        Req: IntoCommand,
        Resp: TryFrom<Outcome, Error = OutcomeError>,
    {
        let command = message.into_command(caller)?;
        // The span is for following a call at debug level; creating it at info would
        // format its fields on every call only for the rare event that needs them, so
        // a refusal, the one event of a call at info, carries them itself.
        let span = tracing::debug_span!(
            "ledger",
            command = command.body.name(),
            effect = command.body.effect_key().map(tracing::field::display),
            command_id = %command.command_id,
        );
        let name = command.body.name();
        let refusal_context = (
            command.body.effect_key().cloned(),
            command.command_id.clone(),
        );
        async {
            let started = Stopwatch::start();
            let result = self.node.submit(command).await;
            metrics::histogram!(
                CALL_SECONDS,
                "command" => name,
                "result" => result_label(&result),
            )
            .record(started.elapsed());
            let outcome = result?;
            crate::metrics::count_outcome(name, &outcome);
            if let Outcome::Refused(refusal) = &outcome {
                let (effect, command_id) = &refusal_context;
                tracing::info!(
                    command = name,
                    effect = effect.as_ref().map(tracing::field::display),
                    %command_id,
                    %refusal,
                    "refused"
                );
            } else {
                tracing::debug!(?outcome, "applied");
            }
            outcome_to_response(outcome)
        }
        .instrument(span)
        .await
    }

    /// One item of a batch, served as its own call would be.
    async fn serve_item(&self, caller: Caller, item: pb::BatchItem) -> pb::BatchResult {
        use pb::batch_item::Command as Item;
        use pb::batch_result::Result as Answer;
        let answer = match item.command {
            Some(Item::Claim(message)) => self.serve(caller, message).await.map(Answer::Claim),
            Some(Item::Report(message)) => self.serve(caller, message).await.map(Answer::Report),
            None => Err(WireError::Missing("batch item command".into()).into()),
        };
        pb::BatchResult {
            result: Some(answer.unwrap_or_else(|status| {
                Answer::Error(ledger_proto::status_to_item_error(&status))
            })),
        }
    }

    /// The tenant whose records `caller` may read.
    fn check_reader(caller: &Caller, tenant: &str) -> Result<(), Status> {
        match caller {
            Caller::Tenant(t) if t != tenant => {
                Err(refusal_to_status(&ledger_core::Refusal::WrongTenant {
                    caller: t.clone(),
                    owner: tenant.to_owned(),
                }))
            }
            _ => Ok(()),
        }
    }
}

#[tonic::async_trait]
impl pb::ledger_server::Ledger for LedgerService {
    async fn declare(
        &self,
        request: Request<pb::DeclareRequest>,
    ) -> Result<Response<pb::DeclareResponse>, Status> {
        self.apply(request).await
    }

    async fn claim(
        &self,
        request: Request<pb::ClaimRequest>,
    ) -> Result<Response<pb::ClaimResponse>, Status> {
        self.apply(request).await
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        self.apply(request).await
    }

    async fn report(
        &self,
        request: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::ReportResponse>, Status> {
        self.apply(request).await
    }

    async fn begin_reconcile(
        &self,
        request: Request<pb::BeginReconcileRequest>,
    ) -> Result<Response<pb::BeginReconcileResponse>, Status> {
        self.apply(request).await
    }

    async fn observe(
        &self,
        request: Request<pb::ObserveRequest>,
    ) -> Result<Response<pb::ObserveResponse>, Status> {
        self.apply(request).await
    }

    async fn decide(
        &self,
        request: Request<pb::DecideRequest>,
    ) -> Result<Response<pb::DecideResponse>, Status> {
        self.apply(request).await
    }

    async fn amend(
        &self,
        request: Request<pb::AmendRequest>,
    ) -> Result<Response<pb::AmendResponse>, Status> {
        self.apply(request).await
    }

    async fn batch(
        &self,
        request: Request<pb::BatchRequest>,
    ) -> Result<Response<pb::BatchResponse>, Status> {
        let caller = self.auth.caller(&request)?;
        let items = request.into_inner().items;
        if items.len() > BATCH_ITEMS_MAX {
            return Err(Status::invalid_argument(format!(
                "malformed request: a batch carries at most {BATCH_ITEMS_MAX} items, not {}",
                items.len()
            )));
        }
        let answers = items
            .into_iter()
            .map(|item| self.serve_item(caller.clone(), item));
        let results = futures::future::join_all(answers).await;
        Ok(Response::new(pb::BatchResponse { results }))
    }

    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        let caller = self.auth.caller(&request)?;
        let key = ledger_core::EffectKey::try_from(request.into_inner())?;
        Self::check_reader(&caller, &key.tenant)?;
        match self.node.read(ReadRequest::Get(key.clone())).await? {
            ReadResponse::Record(Some(record)) => Ok(Response::new(pb::GetResponse {
                record: Some((*record).into()),
                tombstone: None,
            })),
            ReadResponse::Record(None) => {
                Err(refusal_to_status(&ledger_core::Refusal::UnknownEffect(key)))
            }
            other => Err(NodeError::Internal(format!("unexpected read answer {other:?}")).into()),
        }
    }

    type WatchStream = EventStream;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let caller = self.auth.caller(&request)?;
        let filter = WatchFilter::try_from(request.into_inner())?;
        Self::check_reader(&caller, &filter.tenant)?;
        if let Some(key) = &filter.key {
            key.validate()
                .map_err(|e| refusal_to_status(&ledger_core::Refusal::InvalidField(e)))?;
            Self::check_reader(&caller, &key.tenant)?;
            if key.tenant != filter.tenant {
                return Err(Status::invalid_argument(format!(
                    "key {key} is not of tenant {}",
                    filter.tenant
                )));
            }
        }
        let events = self.watches.start(self.node.reader.clone(), filter)?;
        Ok(Response::new(crate::watch::ending_at(
            events,
            self.stopping.clone(),
        )))
    }

    async fn list(
        &self,
        request: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        let caller = self.auth.caller(&request)?;
        let request = request.into_inner();
        let follows_continue_after = request.follows_continue_after;
        let query = ledger_core::ListQuery::try_from(request)?;
        Self::check_reader(&caller, &query.tenant)?;
        let limit = query.limit;
        let page = self.node.list(query).await?;
        if !follows_continue_after && page.continue_after.is_some() && page.records.len() < limit {
            // It would take this page for the last and miss the records after it.
            return Err(Status::failed_precondition(format!(
                "the filter matched {} of the {} records read for this page of {limit}; \
                 a client that reads continue_after pages through such a listing (ledgerctl \
                 and the client library of this version), or narrow the filter to a state, a \
                 workflow or escalations alone",
                page.records.len(),
                ledger_core::limits::LIST_PAGE_VISITS_MAX,
            )));
        }
        Ok(Response::new(page.into()))
    }
}
