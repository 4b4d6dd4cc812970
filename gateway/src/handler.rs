//! The gateway's MCP handler: what clients see of the upstreams.
//!
//! `tools/list` merges the upstreams' lists: each protected tool's schema rewritten (its
//! key argument added, its provider-key argument removed, the operator's policy in its
//! description), read-only tools as they are, unlisted tools hidden unless the operator
//! lets them pass. A configured tool's annotations say what its policy says, whatever the
//! upstream hints. `tools/call` of a protected tool runs through the ledger
//! ([`crate::protect`]); everything else is passed to the upstream untouched.
//! Resources and prompts are those of the first upstream. Every request but the
//! handshake needs a tenant's bearer token: what the gateway forwards goes out with the
//! upstream's own credentials.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, GetPromptRequestParams, GetPromptResponse,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, MetaObject, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, RequestMetaObject, ResultType,
    ServerCapabilities, ServerConfig as McpServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{json, Value};

use ledger_client::policy_file::{describe, ToolHints};
use ledger_client::PolicyFile;
use ledger_core::{ReplayClass, ToolName, ToolPolicy};
use ledger_mcp::config::FrontEndConfig;
use ledger_mcp::tenants::{Tenant, Tenants};

use crate::config::{GatewayConfig, ToolConfig, Unlisted};
use crate::lookup::UpstreamLookup;
use crate::protect::{forwarded_meta, request_meta, Protected};
use crate::upstream::{to_mcp_error, Upstream};

/// Why a gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The policy file could not be loaded.
    #[error(transparent)]
    Policies(#[from] ledger_client::policy_file::PolicyFileError),
    /// The ledger client could not be made.
    #[error(transparent)]
    Ledger(#[from] ledger_client::ClientError),
    /// The configuration and the policies together would let an effect happen twice, or
    /// refuse every call of a tool.
    #[error("unsafe gateway configuration: {0}")]
    Unsafe(String),
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {message}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        message: String,
    },
}

/// One instance's state.
pub(crate) struct Inner {
    pub config: GatewayConfig,
    tenants: Tenants,
    policies: PolicyFile,
    upstreams: Vec<Arc<Upstream>>,
    lookups: HashMap<String, UpstreamLookup>,
    /// Which upstream lists each tool, as last listed.
    routes: RwLock<HashMap<String, usize>>,
}

/// The gateway's MCP handler; cheap to clone (one per request).
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

/// The description a client reads for the key argument the gateway adds. With the
/// identity from `_meta`, a new value in the same step is a conflict, not a second thing
/// (`Identity::intent_keeps_key_argument`); either way it is never answered with an
/// earlier call's result.
fn key_argument_help(min_chars: usize) -> String {
    format!(
        "Identifies this effect: choose a fresh random value (a UUID, say; at least \
         {min_chars} characters) for each thing you intend to do, and send the same value \
         again when you retry it. A retry with the same value never does the thing twice, and \
         a call with a new value is never answered with an earlier call's result: it is a new \
         thing, or, where the host names the step's effect itself, refused as a conflict \
         naming this argument."
    )
}

/// `tool`'s annotations as the operator's policy says, not as the upstream hints (an
/// untrusted party: an irreversible tool that hints `readOnlyHint` would be approved
/// without asking by hosts that auto-approve read-only tools). `readOnlyHint` is true for
/// a read-only policy only; `destructiveHint` for an irreversible one (or no policy, whose
/// calls are refused); `idempotentHint` for a keyed idempotent one. The title and
/// `openWorldHint` are the upstream's.
pub fn annotate(mut tool: Tool, policy: Option<&ToolPolicy>) -> Tool {
    let class = policy.map(|p| p.class);
    let annotations = tool.annotations.get_or_insert_with(ToolAnnotations::new);
    annotations.read_only_hint = Some(class == Some(ReplayClass::ReadOnly));
    annotations.destructive_hint = Some(matches!(class, None | Some(ReplayClass::Irreversible)));
    annotations.idempotent_hint = Some(class == Some(ReplayClass::KeyedIdempotent));
    tool
}

/// `tool` as clients see it behind the gateway.
pub fn rewrite(mut tool: Tool, config: &ToolConfig, policy: Option<&ToolPolicy>) -> Tool {
    let mut schema = (*tool.input_schema).clone();
    let mut properties = schema
        .remove("properties")
        .and_then(|p| p.as_object().cloned())
        .unwrap_or_default();
    let mut required: Vec<Value> = schema
        .remove("required")
        .and_then(|r| r.as_array().cloned())
        .unwrap_or_default();
    if let Some(name) = &config.provider_key_argument {
        properties.remove(name);
        required.retain(|r| r.as_str() != Some(name));
    }
    if let Some(name) = &config.key_argument {
        properties.insert(
            name.clone(),
            json!({
                "type": "string",
                "minLength": config.key_argument_min_chars,
                "maxLength": crate::identity::PART_BYTES_MAX,
                "description": key_argument_help(config.key_argument_min_chars),
            }),
        );
        if !required.iter().any(|r| r.as_str() == Some(name)) {
            required.push(json!(name));
        }
    }
    schema.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        schema.insert("required".into(), Value::Array(required));
    }
    tool.input_schema = Arc::new(schema);
    let hints = tool
        .annotations
        .as_ref()
        .map(|a| ToolHints {
            read_only: a.read_only_hint,
            destructive: a.destructive_hint,
            idempotent: a.idempotent_hint,
            open_world: a.open_world_hint,
        })
        .unwrap_or_default();
    let line = match policy {
        Some(p) => format!("[effect ledger: {}]", describe(p, &hints)),
        None => "[effect ledger: no operator policy; calls are refused]".into(),
    };
    let description = match tool.description.as_deref() {
        Some(d) if !d.is_empty() => format!("{d}\n\n{line}"),
        _ => line,
    };
    tool.description = Some(Cow::Owned(description));
    annotate(tool, policy)
}

impl Gateway {
    /// A handler for `config`: loads the operator's policies and prepares a ledger client
    /// per tenant and a connection per upstream (made on first use).
    pub fn new(config: GatewayConfig) -> Result<Self, StartError> {
        let policies = PolicyFile::load(&config.policy_file)?;
        let tenants = config.front_end().connect()?;
        let upstreams: Vec<Arc<Upstream>> = config
            .upstreams
            .iter()
            .map(|u| Arc::new(Upstream::new(u.clone())))
            .collect();
        let upstream_of = |name: &str| {
            upstreams
                .iter()
                .find(|u| u.name() == name)
                .cloned()
                .expect("the configuration names known upstreams")
        };
        let lookups = config
            .tools
            .iter()
            .filter_map(|t| {
                let lookup = t.lookup.clone()?;
                Some((
                    t.name.clone(),
                    UpstreamLookup::new(upstream_of(&t.upstream), lookup),
                ))
            })
            .collect();
        check_policies(&config, &policies)?;
        Ok(Gateway {
            inner: Arc::new(Inner {
                config,
                tenants,
                policies,
                upstreams,
                lookups,
                routes: RwLock::new(HashMap::new()),
            }),
        })
    }
}

/// What the operator's policies and the gateway's configuration must agree on before the
/// gateway serves: a keyed tool passes its provider key on (the ledger lets it re-send an
/// unknown outcome with that key, and without it the upstream would see a new request);
/// no policy asks for a confirmation the gateway cannot give (the upstream asks its user
/// with `input_required` instead); a look-up tool is read-only.
pub fn check_policies(config: &GatewayConfig, policies: &PolicyFile) -> Result<(), StartError> {
    let unsafe_config = |m: String| Err(StartError::Unsafe(m));
    for tool in &config.tools {
        let name = tool.ledger_name();
        let mut governed = false;
        for tenant in &config.tenants {
            let Some(policy) = policies.policy(&tenant.name, &name) else {
                continue;
            };
            governed = true;
            let passes_key =
                tool.provider_key_argument.is_some() || tool.provider_key_meta.is_some();
            if policy.class == ReplayClass::KeyedIdempotent && !passes_key {
                return unsafe_config(format!(
                    "tool {:?} is keyed_idempotent for tenant {:?}, so an unknown outcome is \
                     sent again with its provider key, but the gateway passes no provider key \
                     on: set provider_key_argument or provider_key_meta",
                    tool.name, tenant.name
                ));
            }
            if policy.confirmation_required && policy.class != ReplayClass::ReadOnly {
                return unsafe_config(format!(
                    "the policy of tool {:?} for tenant {:?} requires the user's confirmation, \
                     which the gateway cannot give, so every call would be refused: let the \
                     upstream ask its user (input_required) and set confirmation_required = \
                     false",
                    tool.name, tenant.name
                ));
            }
            let Some(lookup) = &tool.lookup else {
                continue;
            };
            let Some(lookup_tool) = config.tool(&lookup.tool) else {
                return unsafe_config(format!(
                    "tool {:?} is looked up with {:?}, which has no [[tools]] entry: name it \
                     there, with a read_only policy, so that the gateway can check that a \
                     look-up changes nothing",
                    tool.name, lookup.tool
                ));
            };
            let mutating = policies
                .policy(&tenant.name, &lookup_tool.ledger_name())
                .is_none_or(|p| p.class != ReplayClass::ReadOnly);
            if mutating {
                return unsafe_config(format!(
                    "tool {:?} is looked up with {:?}, which is not read_only for tenant {:?}: \
                     a look-up must not change anything",
                    tool.name, lookup.tool, tenant.name
                ));
            }
        }
        if !governed {
            tracing::warn!(
                tool = %tool.name, policy = %name,
                "no tenant has a policy for this tool: its calls are refused"
            );
        }
    }
    Ok(())
}

fn no_tenant() -> ErrorData {
    ErrorData::invalid_request("no or unknown bearer token: the tenant is unknown", None)
}

impl Inner {
    /// The caller's tenant, or the error every request without one gets.
    fn authenticated(&self, context: &RequestContext<RoleServer>) -> Result<&Tenant, ErrorData> {
        self.tenant(context).ok_or_else(no_tenant)
    }

    fn tenant(&self, context: &RequestContext<RoleServer>) -> Option<&Tenant> {
        self.tenants
            .by_bearer(context.extensions.get::<http::request::Parts>())
    }

    fn upstream(&self, name: &str) -> Option<&Arc<Upstream>> {
        self.upstreams.iter().find(|u| u.name() == name)
    }

    fn primary(&self) -> &Arc<Upstream> {
        &self.upstreams[0]
    }

    async fn list(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tenant = self.authenticated(context)?;
        let mut tools = Vec::new();
        let mut routes = HashMap::new();
        let mut failures = Vec::new();
        for (i, upstream) in self.upstreams.iter().enumerate() {
            let listed = match upstream.list_tools().await {
                Ok(listed) => listed,
                Err(e) => {
                    tracing::warn!(upstream = upstream.name(), error = %e, "cannot list tools");
                    failures.push(e);
                    continue;
                }
            };
            for tool in listed {
                let name = tool.name.to_string();
                match self.config.tool(&name) {
                    Some(config) if config.upstream == upstream.name() => {
                        let policy = self.policies.policy(&tenant.name, &config.ledger_name());
                        let read_only = policy.is_some_and(|p| p.class == ReplayClass::ReadOnly);
                        tools.push(if read_only {
                            annotate(tool, policy)
                        } else {
                            rewrite(tool, config, policy)
                        });
                    }
                    Some(_) => continue,
                    // Routes are shared by every tenant, so an unlisted tool is routed
                    // whoever lists; whether it passes is this tenant's policy, checked
                    // here for the list and again at every call.
                    None if self.config.unlisted_tools == Unlisted::Pass => {
                        if self.passable(&tenant.name, upstream, &name) {
                            tools.push(tool)
                        }
                    }
                    None => continue,
                }
                routes.entry(name).or_insert(i);
            }
        }
        if failures.len() == self.upstreams.len() {
            return Err(to_mcp_error(failures.remove(0)));
        }
        *self.routes.write().unwrap_or_else(|p| p.into_inner()) = routes;
        Ok(ListToolsResult::with_all_items(tools))
    }

    /// Whether a tool no entry names may pass through unprotected for `tenant`: not when
    /// the ledger holds a policy for it (under its default ledger name, `upstream/name`)
    /// that is not read-only. Such a tool is meant to be protected; passed through, a
    /// retry of it would reach the upstream again.
    fn passable(&self, tenant: &str, upstream: &Upstream, name: &str) -> bool {
        let ledger_name = ToolName {
            provider: upstream.name().into(),
            name: name.into(),
        };
        self.policies
            .policy(tenant, &ledger_name)
            .is_none_or(|p| p.class == ReplayClass::ReadOnly)
    }

    /// The upstream of a tool no entry names, from the last listing (made now if the
    /// tool is not in it).
    async fn route(&self, name: &str, context: &RequestContext<RoleServer>) -> Option<usize> {
        let known = |inner: &Inner| {
            inner
                .routes
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(name)
                .copied()
        };
        if let Some(i) = known(self) {
            return Some(i);
        }
        self.list(context).await.ok()?;
        known(self)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tenant = self.authenticated(&context)?;
        let arguments_bytes = request.arguments.as_ref().map_or(0, |a| {
            serde_json::to_string(a).map_or(usize::MAX, |s| s.len())
        });
        if arguments_bytes > self.config.arguments_bytes_max {
            return Err(ErrorData::invalid_params(
                format!(
                    "arguments are {arguments_bytes} bytes, more than the limit of {}",
                    self.config.arguments_bytes_max
                ),
                None,
            ));
        }
        let Some(tool) = self.config.tool(&request.name) else {
            let unknown = || {
                ErrorData::invalid_params(
                    format!(
                        "unknown tool {:?}; tools/list names the tools",
                        request.name
                    ),
                    None,
                )
            };
            if self.config.unlisted_tools == Unlisted::Refuse {
                return Err(unknown());
            }
            let i = self
                .route(&request.name, &context)
                .await
                .ok_or_else(unknown)?;
            if !self.passable(&tenant.name, &self.upstreams[i], &request.name) {
                return Err(ErrorData::invalid_params(
                    format!(
                        "tool {:?} has a policy in the ledger that is not read_only, but no \
                         [[tools]] entry in the gateway's configuration: it is not passed \
                         through unprotected",
                        request.name
                    ),
                    None,
                ));
            }
            return pass(&self.upstreams[i], request, &context).await;
        };
        let upstream = self
            .upstream(&tool.upstream)
            .expect("the configuration names known upstreams");
        let policy = self
            .policies
            .policy(&tenant.name, &tool.ledger_name())
            .ok_or_else(|| {
                ErrorData::internal_error(
                    format!(
                        "no operator policy for {} (tenant {}); the tool stays off",
                        tool.ledger_name(),
                        tenant.name
                    ),
                    None,
                )
            })?;
        if policy.class == ReplayClass::ReadOnly {
            return pass(upstream, request, &context).await;
        }
        let headers = context
            .extensions
            .get::<http::request::Parts>()
            .map(|p| &p.headers);
        Protected {
            inner: self,
            tenant,
            tool,
            upstream,
            lookup: self
                .lookups
                .get(&tool.name)
                .map(|l| l as &dyn ledger_client::reconcile::ProviderAdapter),
            policy,
            headers,
            meta: request_meta(&context, request.meta.as_ref()),
        }
        .call(request)
        .await
    }
}

/// Passes a call to `upstream` untouched (but the protocol's own `_meta`, which the
/// gateway's connection sets).
async fn pass(
    upstream: &Arc<Upstream>,
    mut request: CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, ErrorData> {
    let kept = forwarded_meta(&request_meta(context, request.meta.take().as_ref()));
    if !kept.is_empty() {
        request.meta = Some(RequestMetaObject(MetaObject(kept)));
    }
    upstream.call_tool(request).await.map_err(to_mcp_error)
}

/// A result marked complete when it came unmarked (from an upstream of the 2025-11-25
/// era, or a receipt it gave): a 2026-07-28 client needs `resultType`, and rmcp removes
/// it for older clients.
fn complete(response: CallToolResponse) -> CallToolResponse {
    match response {
        CallToolResponse::Complete(mut result) => {
            result.result_type.get_or_insert(ResultType::COMPLETE);
            CallToolResponse::Complete(result)
        }
        other => other,
    }
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> McpServerConfig {
        McpServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_prompts()
                .build(),
        )
        .with_server_info(Implementation::new(
            "ledger-mcp-gateway",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_protocol_version(ProtocolVersion::V_2026_07_28)
        .with_instructions(
            "Tools that change the world run through the effect ledger: a retry of the same \
             effect never does it twice. Name each effect by _meta \
             dev.effect-ledger/effect-key (or workflow-id and turn-id), by the key argument \
             a tool's schema asks for, or by the conversation header the operator set.",
        )
    }

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
        self.inner.list(&context).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let answer = self.inner.call_tool(request, context).await.map(complete);
        ledger_mcp::metrics::count_call(metric_label(&self.inner.config, &name), &answer);
        if let Err(e) = &answer {
            tracing::info!(tool = %name, error = %e.message, "refused");
        }
        answer
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.inner.authenticated(&context)?;
        self.inner
            .primary()
            .forward(|s| async move { s.list_resources(request).await })
            .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.inner.authenticated(&context)?;
        self.inner
            .primary()
            .forward(|s| async move { s.list_resource_templates(request).await })
            .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.inner.authenticated(&context)?;
        self.inner
            .primary()
            .forward(|s| async move { s.read_resource_once(request).await })
            .await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.inner.authenticated(&context)?;
        self.inner
            .primary()
            .forward(|s| async move { s.list_prompts(request).await })
            .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.inner.authenticated(&context)?;
        self.inner
            .primary()
            .forward(|s| async move { s.get_prompt_once(request).await })
            .await
    }
}

/// The `tool` label a call is counted under: a configured tool's name, else `unlisted`.
/// Names a caller makes up (before authentication, too) must not each add a series that
/// the metrics endpoint then keeps for good.
fn metric_label<'a>(config: &'a GatewayConfig, name: &str) -> &'a str {
    config
        .tool(name)
        .map_or("unlisted", |tool| tool.name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_under_configured_tool_names_only() {
        let config = config("[[tools]]\nname = \"refund\"\nupstream = \"shop\"\n");
        assert_eq!(metric_label(&config, "refund"), "refund");
        for made_up in ["find_refunds", "", "x".repeat(300).as_str()] {
            assert_eq!(metric_label(&config, made_up), "unlisted", "{made_up:?}");
        }
    }

    const POLICIES: &str = r#"
        [[tenant]]
        name = "acme"
        [[tool]]
        tenant = "acme"
        tool = "shop/refund"
        class = "keyed_idempotent"
        [[tool]]
        tenant = "acme"
        tool = "shop/find_refunds"
        class = "read_only"
        [[tool]]
        tenant = "acme"
        tool = "shop/close_account"
        class = "irreversible"
    "#;

    fn config(tools: &str) -> GatewayConfig {
        let text = format!(
            r#"
            listen_addr = "127.0.0.1:0"
            instance = "gw"
            ledger_endpoints = ["127.0.0.1:7101"]
            policy_file = "p.toml"
            [[tenants]]
            name = "acme"
            agent_token = "agent-acme-token-01"
            ledger_api_key = "acme-ledger-key-0001"
            [[upstreams]]
            name = "shop"
            url = "http://127.0.0.1:1/mcp"
            {tools}
            "#
        );
        GatewayConfig::from_toml(&text, std::path::Path::new(".")).unwrap()
    }

    #[test]
    fn policies_that_would_let_an_effect_happen_twice_or_never_are_refused_at_start() {
        let policies = PolicyFile::from_toml(POLICIES).unwrap();
        let keyed_without_key = config("[[tools]]\nname = \"refund\"\nupstream = \"shop\"\n");
        let e = check_policies(&keyed_without_key, &policies).unwrap_err();
        assert!(e.to_string().contains("provider_key_argument"), "{e}");

        let confirmation = config("[[tools]]\nname = \"close_account\"\nupstream = \"shop\"\n");
        let e = check_policies(&confirmation, &policies).unwrap_err();
        assert!(e.to_string().contains("confirmation"), "{e}");

        // The refund tool, settled by looking it up with `lookup`.
        let refund_looked_up_with = |lookup: &str| {
            config(&format!(
                r#"
                [[tools]]
                name = "refund"
                upstream = "shop"
                provider_key_argument = "idempotency_key"
                lookup = {{ tool = "{lookup}", arguments = {{ idempotency_key = "{{provider_key}}" }}, found = "/refunds" }}
                "#
            ))
        };
        let looked_up_by_a_mutating_tool = refund_looked_up_with("refund");
        let e = check_policies(&looked_up_by_a_mutating_tool, &policies).unwrap_err();
        assert!(e.to_string().contains("read_only"), "{e}");

        // A look-up tool the configuration does not name cannot be checked: refused too.
        let looked_up_by_an_unnamed_tool = refund_looked_up_with("find_refunds");
        let e = check_policies(&looked_up_by_an_unnamed_tool, &policies).unwrap_err();
        assert!(e.to_string().contains("no [[tools]] entry"), "{e}");

        let fine = config(
            r#"
            [[tools]]
            name = "refund"
            upstream = "shop"
            provider_key_argument = "idempotency_key"
            lookup = { tool = "find_refunds", arguments = { idempotency_key = "{provider_key}" }, found = "/refunds" }
            [[tools]]
            name = "find_refunds"
            upstream = "shop"
            "#,
        );
        check_policies(&fine, &policies).unwrap();
    }

    /// With `unlisted_tools = "pass"`, a tool the configuration does not name passes
    /// through only when no tenant policy says it changes something: a tool the operator
    /// gave a mutating policy is meant to be protected, and passed through, a retry of it
    /// would reach the upstream again.
    #[test]
    fn an_unlisted_tool_with_a_mutating_policy_is_not_passed_through() {
        let dir = tempfile::tempdir().unwrap();
        let policy_file = dir.path().join("p.toml");
        std::fs::write(&policy_file, POLICIES).unwrap();
        let mut passing = config("");
        passing.unlisted_tools = Unlisted::Pass;
        passing.policy_file = policy_file;
        let gateway = Gateway::new(passing).unwrap();
        let inner = &gateway.inner;
        let shop = &inner.upstreams[0];
        assert!(!inner.passable("acme", shop, "refund"), "keyed_idempotent");
        assert!(
            !inner.passable("acme", shop, "close_account"),
            "irreversible"
        );
        assert!(inner.passable("acme", shop, "find_refunds"), "read_only");
        assert!(inner.passable("acme", shop, "get_order"), "no policy");
    }

    #[test]
    fn the_shipped_gateway_policies_pass_the_start_checks() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let policies = PolicyFile::load(&root.join("deploy/gateway/policies.toml")).unwrap();
        let shipped = config(
            r#"
            [[tools]]
            name = "refund"
            upstream = "shop"
            key_argument = "request_id"
            provider_key_argument = "idempotency_key"
            lookup = { tool = "find_refunds", arguments = { idempotency_key = "{provider_key}" }, found = "/refunds" }
            [[tools]]
            name = "create_ticket"
            upstream = "shop"
            provider_key_argument = "external_ref"
            lookup = { tool = "find_tickets", arguments = { external_ref = "{provider_key}" }, found = "/tickets" }
            [[tools]]
            name = "close_account"
            upstream = "shop"
            [[tools]]
            name = "find_refunds"
            upstream = "shop"
            [[tools]]
            name = "find_tickets"
            upstream = "shop"
            "#,
        );
        check_policies(&shipped, &policies).unwrap();
    }

    fn tool() -> Tool {
        let schema = json!({
            "type": "object",
            "properties": {
                "order_id": { "type": "string" },
                "amount_cents": { "type": "integer" },
                "idempotency_key": { "type": "string" },
            },
            "required": ["order_id", "amount_cents", "idempotency_key"],
        });
        Tool::new(
            "refund",
            "Refunds an order.",
            Arc::new(schema.as_object().cloned().unwrap()),
        )
    }

    #[test]
    fn a_protected_schema_asks_for_the_key_and_hides_the_provider_key() {
        let config: ToolConfig = toml::from_str(
            r#"
            name = "refund"
            upstream = "shop"
            key_argument = "request_id"
            provider_key_argument = "idempotency_key"
            "#,
        )
        .unwrap();
        let policy = ToolPolicy::for_class(ReplayClass::KeyedIdempotent);
        let rewritten = rewrite(tool(), &config, Some(&policy));
        let schema = Value::Object((*rewritten.input_schema).clone());
        assert_eq!(schema["properties"]["request_id"]["minLength"], 16);
        assert!(schema["properties"].get("idempotency_key").is_none());
        assert_eq!(
            schema["required"],
            json!(["order_id", "amount_cents", "request_id"])
        );
        let description = rewritten.description.unwrap();
        assert!(description.starts_with("Refunds an order."));
        assert!(description.contains("keyed_idempotent"), "{description}");
    }

    /// A tool's hints are the upstream's, an untrusted party: hosts that approve
    /// read-only tools without asking must see what the operator's policy says.
    #[test]
    fn served_annotations_say_what_the_policy_says_not_what_the_upstream_hints() {
        let config: ToolConfig =
            toml::from_str("name = \"close_account\"\nupstream = \"shop\"").unwrap();
        let mut hinted = tool();
        hinted.annotations = Some(ToolAnnotations::from_raw(
            Some("Close".into()),
            Some(true),
            Some(false),
            Some(true),
            Some(false),
        ));
        let protected = |policy: Option<&ToolPolicy>| rewrite(hinted.clone(), &config, policy);
        for (class, read_only, destructive, idempotent) in [
            (ReplayClass::Irreversible, false, true, false),
            (ReplayClass::KeyedIdempotent, false, false, true),
            (ReplayClass::UnkeyedCreate, false, false, false),
            (ReplayClass::LongRunningJob, false, false, false),
        ] {
            let policy = ToolPolicy::for_class(class);
            let a = protected(Some(&policy)).annotations.unwrap();
            assert_eq!(
                (a.read_only_hint, a.destructive_hint, a.idempotent_hint),
                (Some(read_only), Some(destructive), Some(idempotent)),
                "{class}"
            );
            assert_eq!(a.title.as_deref(), Some("Close"), "{class}");
            assert_eq!(a.open_world_hint, Some(false), "{class}");
        }
        let a = protected(None).annotations.unwrap();
        assert_eq!(
            (a.read_only_hint, a.destructive_hint),
            (Some(false), Some(true))
        );
        let mut unhinted = tool();
        unhinted.annotations = None;
        let read_only = ToolPolicy::for_class(ReplayClass::ReadOnly);
        let a = annotate(unhinted, Some(&read_only)).annotations.unwrap();
        assert_eq!(a.read_only_hint, Some(true));
        // The description still shows the upstream's hints, marked as not used.
        let irreversible = ToolPolicy::for_class(ReplayClass::Irreversible);
        let description = protected(Some(&irreversible)).description.unwrap();
        assert!(description.contains("readOnlyHint=true"), "{description}");
    }
}
