//! The gateway's configuration: a TOML file the operator writes, checked at start.
//!
//! ```toml
//! listen_addr = "127.0.0.1:8500"
//! instance = "gw-a"                      # the holder name in every attempt it makes
//! namespace = "gateway"                  # effect keys are tenant/namespace/key
//! ledger_endpoints = ["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"]
//! policy_file = "policies.toml"          # the operator's tool policies (class, targets, ...)
//! conversation_header = "x-conversation-id"  # optional: derive keys from it
//!
//! [[tenants]]
//! name = "acme"
//! agent_token = "the bearer token acme's agents present"
//! ledger_api_key = "acme's key at the ledger"
//!
//! [[upstreams]]
//! name = "shop"
//! url = "http://127.0.0.1:8600/mcp"
//!
//! [[tools]]
//! name = "refund"                        # the upstream's tool, as clients call it
//! upstream = "shop"
//! ledger_tool = "shop/refund"            # its policy in policy_file (default upstream/name)
//! key_argument = "request_id"            # added to the schema as a required argument
//! provider_key_argument = "idempotency_key"  # the provider key, passed to the upstream
//! before_effect = { tool_error_pointer = "/error", tool_error_values = ["invalid_amount"] }
//! lookup = { tool = "find_refunds", arguments = { idempotency_key = "{provider_key}" }, found = "/refunds" }
//! ```
//!
//! The tool policies (replay class, target and volatile fields, processing bound,
//! visibility lag) live in the policy file shared with the ledger (`ledgerctl policy
//! apply`); this file says only how MCP calls map onto them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use ledger_core::ToolName;
use ledger_mcp::config::{self, FrontEnd, FrontEndConfig, FrontEndMut};
use ledger_mcp::tenants::{LedgerTls, TenantConfig};

pub use ledger_mcp::config::ConfigError;

/// What the gateway does with a tool that no `[[tools]]` entry names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unlisted {
    /// Hidden from `tools/list` and refused: a tool nobody classified may mutate.
    #[default]
    Refuse,
    /// Listed and forwarded untouched, without the ledger.
    Pass,
}

/// An upstream MCP server (Streamable HTTP).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The name tools refer to it by.
    pub name: String,
    /// Its MCP endpoint, `http://host:port/path`.
    pub url: String,
    /// Headers sent with every request to it (e.g. its own `Authorization`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Longest exchange of one request with it; a call unanswered by then has an unknown
    /// outcome.
    #[serde(default = "default_upstream_timeout_ms")]
    pub timeout_ms: u64,
    /// Most requests in progress to it at once.
    #[serde(default = "default_upstream_concurrency")]
    pub concurrency: usize,
}

/// When an upstream's failure proves that nothing took effect.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BeforeEffect {
    /// JSON-RPC error codes the upstream answers only before its tool acts. By default
    /// parse error (-32700) and method not found (-32601): the official SDKs answer them
    /// for a call they refuse before any tool runs, and a tool has no reason to raise
    /// them itself. Invalid params (-32602) is not in it: the Python SDK passes an
    /// `MCPError` a tool raises back unchanged as the JSON-RPC error, so a handler that
    /// wrote and then raised `INVALID_PARAMS` answers -32602 after acting (and the
    /// TypeScript SDK answers it for an unknown tool and a tampered `requestState`, both
    /// before any tool runs, which are then left unknown, not sent again). Nor are
    /// invalid request (-32600) and a missing client capability (-32021, MCP
    /// 2026-07-28): the SDKs also answer them from inside a running tool (the Python
    /// SDK's -32600 when a handler asks a question a stateless call cannot carry; a
    /// handler's own -32021 when it finds it must ask), which may have acted first. Add
    /// any of them for an upstream whose tools never act before they can fail so.
    #[serde(default = "default_before_effect_codes")]
    pub jsonrpc_codes: Vec<i32>,
    /// Every `isError` result is before effect (the upstream declares that its tool
    /// reports errors only when it did nothing).
    #[serde(default)]
    pub all_tool_errors: bool,
    /// A JSON pointer into an `isError` result's structured content ...
    #[serde(default)]
    pub tool_error_pointer: Option<String>,
    /// ... and the values there that mean "nothing was done".
    #[serde(default)]
    pub tool_error_values: Vec<Value>,
    /// A JSON pointer into a result's structured content (not an error) ...
    #[serde(default)]
    pub result_pointer: Option<String>,
    /// ... and the values there that mean the tool did nothing (a user who declined,
    /// say): such a result is not the effect, and the next call may do it.
    #[serde(default)]
    pub result_values: Vec<Value>,
}

impl Default for BeforeEffect {
    fn default() -> Self {
        BeforeEffect {
            jsonrpc_codes: default_before_effect_codes(),
            all_tool_errors: false,
            tool_error_pointer: None,
            tool_error_values: Vec::new(),
            result_pointer: None,
            result_values: Vec::new(),
        }
    }
}

/// How an effect is looked up with one of the upstream's read tools.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupConfig {
    /// The read tool, on the same upstream.
    pub tool: String,
    /// Its arguments; every string `{provider_key}` in them is replaced by the effect's
    /// provider key.
    pub arguments: Value,
    /// A JSON pointer into the result's structured content (or its text, read as JSON).
    pub found: String,
    /// With `equals`: found when the value at `found` equals it, not found when it is
    /// `null`; without: found when it is a non-empty array, not found when it is an empty
    /// one. Anything else (no value there at all, another value) proves nothing.
    #[serde(default)]
    pub equals: Option<Value>,
    /// A JSON pointer to what is kept as the receipt; by default the first element of a
    /// found array, or the whole structured content.
    #[serde(default)]
    pub receipt: Option<String>,
}

/// A protected (or read-only) upstream tool.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    /// Its name at the upstream, which is also the name clients call.
    pub name: String,
    /// The upstream that has it.
    pub upstream: String,
    /// Its policy's name in the policy file, `provider/name`; `upstream/name` by default.
    #[serde(default)]
    pub ledger_tool: Option<String>,
    /// An argument the gateway adds to the tool's input schema as required: a key the
    /// caller chooses once per intended effect and repeats on retries. Used when the
    /// request's `_meta` names no effect; a call that leaves it out is then refused, never
    /// derived.
    #[serde(default)]
    pub key_argument: Option<String>,
    /// Fewest characters (as JSON Schema's `minLength` counts them) of the key argument's
    /// value, in the schema and at every call. The key is the tenant's, shared by all its
    /// conversations for the tool's retention: a short value a model makes up
    /// (`refund-1`) would come round again in another conversation, and the same intent
    /// would be answered with the earlier effect's result. A shorter value is refused only
    /// for a new effect: one the ledger already holds under it (made before the minimum
    /// was set or raised) goes on under it, so that its retries replay instead of being
    /// refused into a new value and sent again.
    #[serde(default = "default_key_argument_min_chars")]
    pub key_argument_min_chars: usize,
    /// Pass the key argument on to the upstream (it is stripped by default).
    #[serde(default)]
    pub forward_key_argument: bool,
    /// Derive the key from the tenant, the conversation (and turn) headers and the
    /// policy's target fields when nothing else names the effect (a tool without a key
    /// argument).
    #[serde(default = "yes")]
    pub derive_key: bool,
    /// The argument the provider key is passed in, for the upstream to hand to its
    /// provider as the idempotency key (removed from the schema clients see).
    #[serde(default)]
    pub provider_key_argument: Option<String>,
    /// The upstream request's `_meta` field the provider key is passed in. An upstream
    /// that also takes the key as an argument needs `provider_key_argument` set as well:
    /// a caller's own value in that argument would otherwise reach it (and, where the
    /// argument wins, name another effect at the provider than the one looked up).
    #[serde(default)]
    pub provider_key_meta: Option<String>,
    /// Which upstream failures prove that nothing took effect.
    #[serde(default)]
    pub before_effect: BeforeEffect,
    /// How to settle an unknown outcome; without it, unknown outcomes wait for an
    /// operator.
    #[serde(default)]
    pub lookup: Option<LookupConfig>,
}

impl ToolConfig {
    /// The tool's name in the ledger's policies.
    pub fn ledger_name(&self) -> ToolName {
        let full = self
            .ledger_tool
            .clone()
            .unwrap_or_else(|| format!("{}/{}", self.upstream, self.name));
        let (provider, name) = full.split_once('/').unwrap_or(("", &full));
        ToolName {
            provider: provider.into(),
            name: name.into(),
        }
    }
}

/// A gateway instance's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Where to listen (port 0 picks one; the bound address is printed).
    pub listen_addr: SocketAddr,
    /// This instance's name: the holder of every attempt it makes.
    pub instance: String,
    /// The namespace of its effect keys.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Ledger nodes, `host:port`.
    pub ledger_endpoints: Vec<String>,
    /// TLS towards the ledger; plaintext when absent.
    #[serde(default)]
    pub ledger_tls: Option<LedgerTls>,
    /// The operator's tool policy file.
    pub policy_file: PathBuf,
    /// The tenants served.
    pub tenants: Vec<TenantConfig>,
    /// The upstream MCP servers.
    pub upstreams: Vec<UpstreamConfig>,
    /// The tools the gateway knows.
    #[serde(default)]
    pub tools: Vec<ToolConfig>,
    /// What happens to the tools not listed.
    #[serde(default)]
    pub unlisted_tools: Unlisted,
    /// The request header that names the conversation, for derived keys.
    #[serde(default)]
    pub conversation_header: Option<String>,
    /// The request header that names the turn within it, for derived keys; without it a
    /// conversation has one effect per tool and target.
    #[serde(default)]
    pub turn_header: Option<String>,
    /// Largest tool arguments accepted, as JSON bytes.
    #[serde(default = "default_arguments_bytes_max")]
    pub arguments_bytes_max: usize,
    /// Lease of each attempt; heartbeats extend it while a call to the upstream runs.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// How long a call waits for another attempt of its effect to end.
    #[serde(default = "default_wait_in_flight_ms")]
    pub wait_in_flight_ms: u64,
    /// `Host` values accepted (DNS-rebinding protection); loopback names when empty.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Where the Prometheus endpoint (`GET /metrics`) listens; none when absent.
    #[serde(default)]
    pub metrics_listen_addr: Option<SocketAddr>,
}

fn yes() -> bool {
    true
}

fn default_namespace() -> String {
    "gateway".into()
}

fn default_upstream_timeout_ms() -> u64 {
    30_000
}

fn default_upstream_concurrency() -> usize {
    64
}

fn default_before_effect_codes() -> Vec<i32> {
    vec![-32700, -32601]
}

fn default_key_argument_min_chars() -> usize {
    16
}

fn default_arguments_bytes_max() -> usize {
    16 * 1024
}

fn default_lease_ms() -> u64 {
    30_000
}

fn default_wait_in_flight_ms() -> u64 {
    5_000
}

fn is_pointer(p: &str) -> bool {
    p.is_empty() || p.starts_with('/')
}

impl GatewayConfig {
    /// Parses and checks a configuration; relative paths are taken from `dir`.
    pub fn from_toml(text: &str, dir: &Path) -> Result<Self, ConfigError> {
        config::from_toml(text, dir)
    }

    /// Loads the file at `path`, with the listen address and instance name overridden
    /// when given.
    pub fn load(
        path: &Path,
        listen: Option<SocketAddr>,
        instance: Option<String>,
    ) -> Result<Self, ConfigError> {
        config::load(path, listen, instance)
    }

    /// The configured tool called `name`.
    pub fn tool(&self, name: &str) -> Option<&ToolConfig> {
        self.tools.iter().find(|t| t.name == name)
    }

    fn validate_upstreams_and_tools(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        if self.upstreams.is_empty() {
            return invalid("at least one [[upstreams]] entry is required".into());
        }
        for (i, u) in self.upstreams.iter().enumerate() {
            if self.upstreams[..i].iter().any(|o| o.name == u.name) {
                return invalid(format!("two upstreams are called {:?}", u.name));
            }
            if !u.url.starts_with("http://") {
                return invalid(format!(
                    "upstream {:?}: url must be http://host:port/path (a local service or \
                     sidecar), not {:?}",
                    u.name, u.url
                ));
            }
            if u.timeout_ms == 0 || u.concurrency == 0 {
                return invalid(format!(
                    "upstream {:?}: timeout_ms and concurrency must be positive",
                    u.name
                ));
            }
            for name in u.headers.keys() {
                if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    return invalid(format!("upstream {:?}: bad header name {name:?}", u.name));
                }
            }
        }
        for header in [&self.conversation_header, &self.turn_header]
            .into_iter()
            .flatten()
        {
            if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                return invalid(format!("{header:?} is not a header name"));
            }
        }
        for (i, t) in self.tools.iter().enumerate() {
            self.validate_tool(t)?;
            if self.tools[..i].iter().any(|o| o.name == t.name) {
                return invalid(format!("two [[tools]] entries are called {:?}", t.name));
            }
            let ledger = t.ledger_name();
            if let Some(o) = self.tools[..i].iter().find(|o| o.ledger_name() == ledger) {
                return invalid(format!(
                    "tools {:?} and {:?} are both the ledger tool {ledger}: their effects \
                     would share keys, so a call of one could be answered with the other's \
                     result; give each its own ledger_tool",
                    o.name, t.name
                ));
            }
        }
        Ok(())
    }

    fn validate_tool(&self, t: &ToolConfig) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(format!("tool {:?}: {m}", t.name)));
        if !self.upstreams.iter().any(|u| u.name == t.upstream) {
            return invalid(format!("no upstream is called {:?}", t.upstream));
        }
        let ledger = t.ledger_name();
        if ledger.provider.is_empty() || ledger.name.is_empty() {
            return invalid("ledger_tool must be provider/name".into());
        }
        if t.key_argument.is_some() && t.key_argument == t.provider_key_argument {
            return invalid("key_argument and provider_key_argument must differ".into());
        }
        let max = crate::identity::PART_BYTES_MAX;
        if !(1..=max).contains(&t.key_argument_min_chars) {
            return invalid(format!("key_argument_min_chars must be 1 to {max}"));
        }
        let pointers = t
            .before_effect
            .tool_error_pointer
            .iter()
            .chain(&t.before_effect.result_pointer)
            .chain(
                t.lookup
                    .iter()
                    .flat_map(|l| std::iter::once(&l.found).chain(l.receipt.as_ref())),
            );
        for p in pointers {
            if !is_pointer(p) {
                return invalid(format!("{p:?} is not a JSON pointer (it starts with /)"));
            }
        }
        if let Some(l) = &t.lookup {
            if !l.arguments.is_object() {
                return invalid("lookup.arguments must be a table".into());
            }
            if !l.arguments.to_string().contains("{provider_key}") {
                return invalid(
                    "lookup.arguments must use {provider_key}: a look-up finds the effect by \
                     the key the gateway passed on"
                        .into(),
                );
            }
            if t.provider_key_argument.is_none() && t.provider_key_meta.is_none() {
                return invalid(
                    "a lookup needs the provider key passed on (provider_key_argument or \
                     provider_key_meta)"
                        .into(),
                );
            }
        }
        Ok(())
    }
}

impl FrontEndConfig for GatewayConfig {
    fn front_end(&self) -> FrontEnd<'_> {
        FrontEnd {
            instance: &self.instance,
            namespace: &self.namespace,
            lease_ms: self.lease_ms,
            ledger_endpoints: &self.ledger_endpoints,
            ledger_tls: self.ledger_tls.as_ref(),
            tenants: &self.tenants,
        }
    }

    fn front_end_mut(&mut self) -> FrontEndMut<'_> {
        FrontEndMut {
            listen_addr: &mut self.listen_addr,
            instance: &mut self.instance,
            policy_file: &mut self.policy_file,
            ledger_tls: self.ledger_tls.as_mut(),
        }
    }

    fn check_own(&self) -> Result<(), ConfigError> {
        self.validate_upstreams_and_tools()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const MINIMAL: &str = r#"
        listen_addr = "127.0.0.1:0"
        instance = "gw-a"
        ledger_endpoints = ["127.0.0.1:7101"]
        policy_file = "policies.toml"
        conversation_header = "x-conversation-id"
        [[tenants]]
        name = "acme"
        agent_token = "agent-acme-token-01"
        ledger_api_key = "acme-ledger-key-0001"
        [[upstreams]]
        name = "shop"
        url = "http://127.0.0.1:8600/mcp"
        [[tools]]
        name = "refund"
        upstream = "shop"
        key_argument = "request_id"
        provider_key_argument = "idempotency_key"
        before_effect = { tool_error_pointer = "/error", tool_error_values = ["invalid_amount"] }
        lookup = { tool = "find_refunds", arguments = { idempotency_key = "{provider_key}" }, found = "/refunds" }
    "#;

    #[test]
    fn a_config_gets_defaults_and_names_the_ledger_tool() {
        let c = GatewayConfig::from_toml(MINIMAL, Path::new("/etc/gw")).unwrap();
        assert_eq!(c.namespace, "gateway");
        assert_eq!(c.policy_file, PathBuf::from("/etc/gw/policies.toml"));
        assert_eq!(c.unlisted_tools, Unlisted::Refuse);
        let refund = c.tool("refund").unwrap();
        assert_eq!(refund.ledger_name().to_string(), "shop/refund");
        assert!(refund.derive_key);
        assert_eq!(refund.before_effect.jsonrpc_codes, [-32700, -32601]);
        assert_eq!(refund.key_argument_min_chars, 16);
        assert_eq!(c.upstreams[0].timeout_ms, 30_000);
    }

    #[test]
    fn configs_that_cannot_work_are_refused_with_the_reason() {
        for (bad, says) in [
            (
                MINIMAL.replace("upstream = \"shop\"", "upstream = \"nope\""),
                "no upstream",
            ),
            (
                MINIMAL.replace("http://127.0.0.1:8600/mcp", "127.0.0.1:8600"),
                "url must be",
            ),
            (
                MINIMAL.replace("found = \"/refunds\"", "found = \"refunds\""),
                "JSON pointer",
            ),
            (
                MINIMAL.replace("\"{provider_key}\"", "\"fixed\""),
                "{provider_key}",
            ),
            (
                MINIMAL.replace("provider_key_argument = \"idempotency_key\"", ""),
                "provider key passed on",
            ),
            (
                MINIMAL.replace(
                    "key_argument = \"request_id\"",
                    "key_argument = \"idempotency_key\"",
                ),
                "must differ",
            ),
            (format!("{MINIMAL}\nsurprise = 1"), "surprise"),
            (
                format!("{MINIMAL}\n[[tools]]\nname = \"refund\"\nupstream = \"shop\"\n"),
                "two [[tools]]",
            ),
            (
                format!(
                    "{MINIMAL}\n[[tools]]\nname = \"refund_v2\"\nupstream = \"shop\"\n\
                     ledger_tool = \"shop/refund\"\n"
                ),
                "\"refund\" and \"refund_v2\" are both the ledger tool shop/refund",
            ),
            (
                MINIMAL.replace(
                    "key_argument = \"request_id\"",
                    "key_argument = \"request_id\"\nkey_argument_min_chars = 0",
                ),
                "key_argument_min_chars",
            ),
        ] {
            let e = GatewayConfig::from_toml(&bad, Path::new(".")).unwrap_err();
            assert!(e.to_string().contains(says), "{e} should say {says}");
        }
    }
}
