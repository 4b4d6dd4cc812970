//! Stateless tool-server instances: each turns an agent's call into provider requests,
//! through the ledger or directly, and can crash at the boundaries its episode plans.
//!
//! An [`Instance`] is a machine and its current incarnation. The ledger strategy runs the
//! client library's `EffectRunner` (claim, dispatch with the attempt's provider key,
//! heartbeats, report, waiting, reconciliation) under a holder name that changes with
//! every restart, as a real instance's would, and reaches the providers through the
//! shipped edge: `ledger-providers`' [`ProviderClient`] classifies each answer and its
//! searches look effects up, over a transport ([`Sends`]) whose far side is the world
//! ([`crate::world::edge`]). The baselines send straight to the provider with the key
//! their strategy prescribes.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ledger_client::reconcile::BoxFuture;
use ledger_client::{
    effect_key, ClientError, EffectCall, EffectOutcome, EffectRunner, KeySource, LedgerClient,
    ReconcileOptions, RunOptions,
};
use ledger_core::{Authority, Declaration, EffectKey, Refusal};
use ledger_providers::{JsonAnswer, ProviderClient, ProviderTransport, SendError};

use super::faults::{EpisodeFaults, SendPlan};
use super::{Intent, KeyMode, Strategy, ToolReply, AGENT_NAMESPACE, INSTANCE_DOWN_MS};
use crate::cluster::{client_retry, ClientNode};
use crate::fixtures::{TENANT, TENANT_KEY};
use crate::world::edge;
use crate::world::{ProviderReply, ProviderRequest, SendFault, World};

/// Lease of a dispatch attempt; heartbeats extend it every third.
const LEASE_MS: u64 = 3_000;
/// How long a ledger run waits for another attempt before answering in flight.
const WAIT_IN_FLIGHT_MS: u64 = 8_000;

/// What every instance of an episode shares.
pub struct ServerConfig {
    /// The strategy.
    pub strategy: Strategy,
    /// The providers.
    pub world: World,
    /// The episode's faults.
    pub faults: Arc<EpisodeFaults>,
    /// The ledger's nodes (ledger strategy only).
    pub ledger_endpoints: Vec<String>,
    /// How long the provider takes to apply a request without a fault (ms).
    pub processing_ms: u64,
    /// Every ledger effect key the episode's instances used (as the nodes print them).
    pub keys_used: Arc<Mutex<BTreeSet<String>>>,
}

struct Incarnation {
    machine: ClientNode,
    number: u32,
    up: bool,
    server: Arc<ToolServer>,
}

/// A tool-server machine and its current incarnation.
#[derive(Clone)]
pub struct Instance {
    name: String,
    config: Arc<ServerConfig>,
    state: Arc<Mutex<Incarnation>>,
}

impl Instance {
    /// Starts instance `name` on `machine`.
    pub fn start(name: &str, machine: ClientNode, config: Arc<ServerConfig>) -> Instance {
        let server = Arc::new(ToolServer::new(&config, &format!("{name}-i0")));
        Instance {
            name: name.to_owned(),
            config,
            state: Arc::new(Mutex::new(Incarnation {
                machine,
                number: 0,
                up: true,
                server,
            })),
        }
    }

    /// The machine and server of the running incarnation; `None` while it is down.
    pub fn current(&self) -> Option<(ClientNode, Arc<ToolServer>)> {
        let state = self.state.lock().expect("instance lock");
        state
            .up
            .then(|| (state.machine.clone(), state.server.clone()))
    }

    /// Crashes this instance (called from its own machine: never returns); it comes back
    /// after [`INSTANCE_DOWN_MS`] as a new incarnation with a new holder name.
    async fn crash(&self) {
        let machine = {
            let mut state = self.state.lock().expect("instance lock");
            state.up = false;
            state.machine.clone()
        };
        let this = self.clone();
        let on_restart = Box::new(move |machine: ClientNode| {
            Box::pin(async move {
                let mut state = this.state.lock().expect("instance lock");
                state.number += 1;
                let holder = format!("{}-i{}", this.name, state.number);
                state.server = Arc::new(ToolServer::new(&this.config, &holder));
                state.machine = machine;
                state.up = true;
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        });
        self.config
            .faults
            .supervisor
            .crash(machine, INSTANCE_DOWN_MS, on_restart)
            .await;
    }
}

/// One incarnation of a tool server.
pub struct ToolServer {
    strategy: Strategy,
    world: World,
    faults: Arc<EpisodeFaults>,
    processing_ms: u64,
    holder: String,
    runner: Option<EffectRunner>,
    keys_used: Arc<Mutex<BTreeSet<String>>>,
    fresh_keys: AtomicU64,
}

impl ToolServer {
    fn new(config: &ServerConfig, holder: &str) -> ToolServer {
        let runner = config.strategy.uses_ledger().then(|| {
            let client = LedgerClient::with_retry(
                config.ledger_endpoints.clone(),
                TENANT_KEY,
                client_retry(),
            )
            .expect("valid endpoints");
            let options = RunOptions {
                lease_ms: LEASE_MS,
                ..RunOptions::default()
            };
            EffectRunner::new(client, holder).with_options(options)
        });
        ToolServer {
            strategy: config.strategy,
            world: config.world.clone(),
            faults: config.faults.clone(),
            processing_ms: config.processing_ms,
            holder: holder.to_owned(),
            runner,
            keys_used: config.keys_used.clone(),
            fresh_keys: AtomicU64::new(0),
        }
    }

    /// Handles one call on `instance` (whose machine this runs on).
    pub async fn handle(self: Arc<Self>, intent: Intent, instance: Instance) -> ToolReply {
        match (self.strategy, &self.runner) {
            (Strategy::Ledger(mode), Some(runner)) => {
                let sends = Sends {
                    server: self.clone(),
                    instance,
                };
                let providers = ProviderClient::new(Arc::new(sends));
                self.via_ledger(runner, &intent, mode, &providers).await
            }
            _ => self.direct(&intent, &instance).await,
        }
    }

    /// Sends one request with the episode's fault for this send, crashing the instance
    /// where the plan says so.
    async fn send(
        &self,
        request: ProviderRequest,
        instance: &Instance,
    ) -> Result<ProviderReply, String> {
        let plan = self.faults.next_send();
        if plan == Some(SendPlan::CrashBeforeSend) {
            instance.crash().await;
        }
        let fault = plan.map_or(SendFault::None, SendPlan::provider_fault);
        let reply = self.world.send(request, fault, self.processing_ms).await;
        if plan == Some(SendPlan::CrashAfterMutate) {
            instance.crash().await;
        }
        reply
    }

    async fn direct(&self, intent: &Intent, instance: &Instance) -> ToolReply {
        let mut receipts = Vec::new();
        for slot in 0..intent.slots {
            let key = match self.strategy {
                Strategy::FreshKey => Some(format!(
                    "fresh-{}-{}",
                    self.holder,
                    self.fresh_keys.fetch_add(1, Ordering::Relaxed)
                )),
                s if s.sends_step_token(intent.kind) => Some(format!("tok-{}#{slot}", intent.key)),
                _ => None,
            };
            let request = ProviderRequest {
                kind: intent.kind,
                intent_id: intent.slot_intent_id(slot),
                params: slot_params(intent, slot),
                idempotency_key: key,
                reference: None,
            };
            match self.send(request, instance).await {
                Ok(ProviderReply::Done { receipt, .. }) => receipts.push(receipt),
                // A keyed provider refusing a reused key: the strategy's token already
                // names another request, the baseline's counterpart of a ledger conflict.
                Ok(ProviderReply::Rejected {
                    status: 409,
                    reason,
                }) => {
                    return ToolReply::Conflict {
                        fields: vec![format!("params ({reason})")],
                    }
                }
                Ok(ProviderReply::Rejected { status, reason }) => {
                    return ToolReply::Rejected {
                        reason: format!("{status}: {reason}"),
                    }
                }
                Ok(ProviderReply::Failed { status, reason }) => {
                    return ToolReply::Ambiguous {
                        reason: format!("{status}: {reason}"),
                    }
                }
                Err(reason) => return ToolReply::Ambiguous { reason },
            }
        }
        ToolReply::Ok { receipts }
    }

    async fn via_ledger(
        &self,
        runner: &EffectRunner,
        intent: &Intent,
        mode: KeyMode,
        providers: &ProviderClient,
    ) -> ToolReply {
        let declaration = match declaration(intent, mode) {
            Ok(d) => d,
            Err(reason) => return ToolReply::Rejected { reason },
        };
        let keys = if intent.slots > 1 {
            match runner.declare(&declaration, intent.slots).await {
                Ok(keys) => keys,
                Err(ClientError::Refused(Refusal::Conflict(c))) => {
                    return ToolReply::Conflict {
                        fields: c.differing_fields,
                    }
                }
                Err(e) => {
                    return ToolReply::Ambiguous {
                        reason: e.to_string(),
                    }
                }
            }
        } else {
            vec![declaration.key.clone()]
        };
        // Every declared slot is the episode's, sent or not.
        self.keys_used
            .lock()
            .expect("keys lock")
            .extend(keys.iter().map(ToString::to_string));
        let mut receipts = Vec::new();
        let mut unsettled = None;
        for (slot, key) in (0..).zip(keys) {
            let call = EffectCall {
                declaration: Declaration {
                    key,
                    ..declaration.clone()
                },
                confirmation: intent
                    .kind
                    .needs_confirmation()
                    .then(|| "confirmed by the user".into()),
            };
            // Every slot runs, as the MCP example's `send_message` runs every recipient:
            // one that cannot be settled now does not keep the others from being sent.
            match self.run_slot(runner, call, intent, slot, providers).await {
                ToolReply::Ok { receipts: r } => receipts.extend(r),
                other => {
                    unsettled.get_or_insert(other);
                }
            }
        }
        unsettled.unwrap_or(ToolReply::Ok { receipts })
    }

    async fn run_slot(
        &self,
        runner: &EffectRunner,
        call: EffectCall,
        intent: &Intent,
        slot: u32,
        providers: &ProviderClient,
    ) -> ToolReply {
        let adapter = intent.kind.adapter(providers);
        let reconcile = ReconcileOptions {
            rounds_max: 2,
            round_interval_ms: 500,
            // A "not found" too early to prove absence (before the latest lease end plus
            // the provider's processing bound and search lag) is looked at again under a
            // new attempt once it can, when that is at most 20 s away.
            lease_ms: 5_000,
            absence_wait_ms_max: 20_000,
        };
        let outcome = runner
            .effect(call)
            .reconcile_with(adapter.as_ref())
            .reconcile_options(reconcile)
            .wait_in_flight(WAIT_IN_FLIGHT_MS)
            .run(|attempt| {
                let (path, key, body) = edge::create_request(
                    intent.kind,
                    &intent.slot_intent_id(slot),
                    &slot_params(intent, slot),
                    &attempt.provider_key,
                );
                async move { providers.create(path, key.as_deref(), body).await }
            })
            .await;
        match outcome {
            Ok(EffectOutcome::Done { receipt } | EffectOutcome::Replayed { receipt }) => {
                ToolReply::Ok {
                    receipts: vec![receipt],
                }
            }
            Ok(EffectOutcome::FailedBeforeEffect { proof }) => {
                ToolReply::Rejected { reason: proof }
            }
            Ok(EffectOutcome::Conflict(c)) => ToolReply::Conflict {
                fields: c.differing_fields,
            },
            Ok(EffectOutcome::Escalated { reason }) => ToolReply::Escalated { reason },
            Ok(other) => ToolReply::Ambiguous {
                reason: format!("{other:?}"),
            },
            Err(e) => ToolReply::Ambiguous {
                reason: e.to_string(),
            },
        }
    }
}

/// The ledger path's transport: a creating request is one planned send of the episode
/// (with its faults, and crashes of `instance`), a read is a search of the world.
struct Sends {
    server: Arc<ToolServer>,
    instance: Instance,
}

impl ProviderTransport for Sends {
    fn send<'a>(
        &'a self,
        request: &'a ledger_providers::ProviderRequest,
    ) -> BoxFuture<'a, Result<JsonAnswer, SendError>> {
        Box::pin(async move {
            if edge::is_read(request) {
                return Ok(self.server.world.search(&request.path));
            }
            let request = match edge::world_request(request) {
                Ok(request) => request,
                Err(refused) => return Ok(refused),
            };
            match self.server.send(request, &self.instance).await {
                Ok(reply) => Ok(edge::answer_of(reply)),
                Err(reason) => Err(SendError::AfterSend(reason)),
            }
        })
    }
}

/// The parameters a provider sees for slot `slot`.
fn slot_params(intent: &Intent, slot: u32) -> String {
    if intent.slots > 1 {
        format!("{}#{slot}", intent.params_json())
    } else {
        intent.params_json()
    }
}

/// The ledger declaration of `intent`, its key from the runtime or derived.
fn declaration(intent: &Intent, mode: KeyMode) -> Result<Declaration, String> {
    let tool = intent.kind.tool_ref();
    let intent_json = intent.params_json();
    let key = match mode {
        KeyMode::Explicit => EffectKey::new(TENANT, AGENT_NAMESPACE, &intent.key),
        KeyMode::Derived => {
            let tool_name = tool.tool_name();
            // The simulated tools' policies name no target fields: one effect per tool
            // per step, so a repaired intent in the same step is the same effect.
            let source = KeySource::Derived {
                workflow_id: &intent.workflow_id,
                step_id: &intent.step_id,
                tool: &tool_name,
                target: None,
                sequence: intent.sequence.as_deref(),
            };
            effect_key(TENANT, AGENT_NAMESPACE, source).map_err(|e| e.to_string())?
        }
    };
    Ok(Declaration {
        key,
        workflow_id: intent.workflow_id.clone(),
        tool,
        authority: Authority {
            principal: "user-1".into(),
            policy_generation: 1,
        },
        target: format!("{}:{}", intent.kind.name(), intent.step_id),
        intent_json,
    })
}
