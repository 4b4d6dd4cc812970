//! The MCP handler: checks a `tools/call`, derives its effect, and hands it to the tool.
//!
//! Every request stands alone (stateless MCP): the tenant comes from the request's bearer
//! token, the effect's identity from its `_meta`, the intent from its arguments. Checks
//! run in an order that stores nothing until all of them passed: tool, size, tenant,
//! `_meta`, arguments, policy, key. Only then does the ledger hear of the call.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, Implementation, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig as McpServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};

use ledger_client::policy_file::describe;
use ledger_client::{effect_key, target_of, PolicyFile};
use ledger_core::{Authority, Declaration, ReplayClass, ToolName, ToolPolicy, ToolRef};
use ledger_mcp::config::FrontEndConfig;
use ledger_mcp::tenants::Tenant;

use crate::call::{Call, Inner};
use crate::config::ServerConfig;
use crate::confirm::Confirmations;
use crate::meta::LedgerMeta;
use crate::providers::Providers;
use crate::tools::{ToolArgs, ToolSpec, CATALOGUE};

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The policy file could not be loaded.
    #[error(transparent)]
    Policies(#[from] ledger_client::policy_file::PolicyFileError),
    /// The ledger client could not be made.
    #[error(transparent)]
    Ledger(#[from] ledger_client::ClientError),
    /// The request-state key is unusable.
    #[error(transparent)]
    Key(#[from] crate::confirm::KeyError),
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {message}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        message: String,
    },
}

/// One instance's MCP handler; cheap to clone (one per request).
#[derive(Clone)]
pub struct ToolServer {
    inner: Arc<Inner>,
}

/// A call that passed every check.
struct Checked<'a> {
    spec: &'static ToolSpec,
    tenant: &'a Tenant,
    meta: LedgerMeta,
    args: ToolArgs,
    policy: &'a ToolPolicy,
}

fn invalid(message: impl Into<String>) -> ErrorData {
    ErrorData::invalid_params(message.into(), None)
}

impl ToolServer {
    /// A handler for `config`: loads the operator's policies and prepares a ledger client
    /// per tenant.
    pub fn new(config: ServerConfig) -> Result<Self, StartError> {
        let policies = PolicyFile::load(&config.policy_file)?;
        let tenants = config.front_end().connect()?;
        let providers = Providers::new(config.provider_addr.clone(), config.provider_timeout_ms);
        let confirmations = Confirmations::new(&config.request_state_key)?;
        Ok(ToolServer {
            inner: Arc::new(Inner {
                config,
                tenants,
                policies,
                providers,
                confirmations,
            }),
        })
    }
}

impl Inner {
    /// The tenant whose agent token the request carries.
    fn tenant(&self, context: &RequestContext<RoleServer>) -> Option<&Tenant> {
        self.tenants
            .by_bearer(context.extensions.get::<http::request::Parts>())
    }

    fn policy(&self, tenant: &str, spec: &ToolSpec) -> Option<&ToolPolicy> {
        let tool = ToolName {
            provider: spec.provider.into(),
            name: spec.name.into(),
        };
        self.policies.policy(tenant, &tool)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = crate::tools::find(&request.name).map_or("unknown", |spec| spec.name);
        let answer = self.answer_call(request, context).await;
        crate::metrics::count_call(tool, &answer);
        answer
    }

    async fn answer_call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let checked = self.check(&request, &context)?;
        if checked.policy.class == ReplayClass::ReadOnly {
            return crate::effects::read_only(self, &checked.args).await;
        }
        let declaration = self.declaration(&checked)?;
        let call = Call {
            server: self,
            tenant: checked.tenant,
            policy: checked.policy,
            declaration,
            request_state: request.request_state,
            input_responses: request.input_responses,
            amend: checked.meta.amend,
        };
        crate::effects::run(&call, &checked.args).await
    }

    /// Every check of a call, in an order that stores nothing until all passed.
    fn check<'a>(
        &'a self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<Checked<'a>, ErrorData> {
        let spec = crate::tools::find(&request.name).ok_or_else(|| {
            invalid(format!(
                "unknown tool {:?}; tools/list names the tools",
                request.name
            ))
        })?;
        let arguments = request.arguments.clone().unwrap_or_default();
        let size = serde_json::to_string(&arguments).map_or(usize::MAX, |s| s.len());
        if size > self.config.arguments_bytes_max {
            return Err(invalid(format!(
                "arguments are {size} bytes, more than the limit of {}",
                self.config.arguments_bytes_max
            )));
        }
        let tenant = self.tenant(context).ok_or_else(|| {
            ErrorData::invalid_request("no or unknown bearer token: the tenant is unknown", None)
        })?;
        let meta = LedgerMeta::from_meta(&context.meta.0 .0).map_err(|e| invalid(e.to_string()))?;
        if let Some(claimed) = meta.tenant.as_deref().filter(|t| *t != tenant.name) {
            return Err(invalid(format!(
                "wrong tenant: _meta names {claimed:?}, the token belongs to {:?}",
                tenant.name
            )));
        }
        let args = ToolArgs::parse(spec, &arguments).map_err(|e| invalid(e.to_string()))?;
        let policy = self.policy(&tenant.name, spec).ok_or_else(|| {
            ErrorData::internal_error(
                format!(
                    "no operator policy for {}/{}; the tool stays off",
                    spec.provider, spec.name
                ),
                None,
            )
        })?;
        Ok(Checked {
            spec,
            tenant,
            meta,
            args,
            policy,
        })
    }

    /// The effect a checked call declares, its key derived in code.
    fn declaration(&self, c: &Checked<'_>) -> Result<Declaration, ErrorData> {
        let intent_json = c.args.intent().to_string();
        let tool = ToolName {
            provider: c.spec.provider.into(),
            name: c.spec.name.into(),
        };
        let target = target_of(&intent_json, &c.policy.target_fields)
            .map_err(|e| invalid(format!("effect target: {e}")))?;
        let source = c
            .meta
            .key_source(&tool, target.as_deref())
            .map_err(|e| invalid(e.to_string()))?;
        let key = effect_key(&c.tenant.name, &self.config.namespace, source)
            .map_err(|e| invalid(format!("effect key: {e}")))?;
        Ok(Declaration {
            key,
            workflow_id: c.meta.workflow().to_owned(),
            tool: ToolRef {
                provider: tool.provider,
                name: tool.name,
                contract_version: "v1".into(),
            },
            authority: Authority {
                principal: format!("agent:{}", c.tenant.name),
                policy_generation: 1,
            },
            target: c.args.target(),
            intent_json,
        })
    }

    /// The catalogue, each tool with its policy for the caller's tenant; a caller without
    /// a tenant's token sees no tenant's policies.
    fn list(&self, context: &RequestContext<RoleServer>) -> ListToolsResult {
        let tenant = self.tenant(context);
        let tools = CATALOGUE
            .iter()
            .map(|spec| {
                let policy = match tenant {
                    None => "Its policy is shown to a tenant's token.".to_owned(),
                    Some(tenant) => self.policy(&tenant.name, spec).map_or_else(
                        || "No operator policy: calls are refused.".to_owned(),
                        |p| format!("[{}]", describe(p, &spec.hints)),
                    ),
                };
                spec.to_tool(&policy)
            })
            .collect();
        ListToolsResult::with_all_items(tools)
    }
}

impl ServerHandler for ToolServer {
    fn get_info(&self) -> McpServerConfig {
        McpServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "ledger-mcp-example",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_protocol_version(ProtocolVersion::V_2026_07_28)
            .with_instructions(
                "Mutating tools run through the effect ledger. Set _meta \
                 dev.effect-ledger/effect-key, or dev.effect-ledger/workflow-id and \
                 dev.effect-ledger/turn-id, from the agent runtime; a retry with the same \
                 _meta and arguments never causes a second effect.",
            )
    }

    /// Both eras, with the same identity rules: a 2025-11-25 client's `initialize` is
    /// answered without a session, and its calls carry `_meta` like a 2026-07-28 one's.
    /// Only the confirmation of irreversible tools (an `input_required` round) needs
    /// 2026-07-28.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Owned(vec![
            ProtocolVersion::V_2026_07_28,
            ProtocolVersion::V_2025_11_25,
        ])
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(self.inner.list(&context))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.clone();
        let result = self.inner.call_tool(request, context).await;
        if let Err(e) = &result {
            tracing::info!(tool = %name, error = %e.message, "refused");
        }
        result
    }
}
