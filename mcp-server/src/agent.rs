//! An MCP client as an agent runtime uses this server: stateless (protocol 2026-07-28,
//! `server/discover` instead of a session), a bearer token for its tenant, and the
//! effect's identity in every call's `_meta`. A retry is the same call (same `_meta`,
//! same arguments) sent again, to whichever instance.
//!
//! It reaches the servers through a Unix socket (normally the lossy [`proxy`](crate::proxy)),
//! with rmcp's Unix-socket HTTP client.

use std::path::Path;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ErrorData, Implementation, JsonObject, ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RequestContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, UnixSocketHttpClient};
use rmcp::{ClientHandler, RoleClient};
use serde_json::{json, Value};

/// The agent's answer to the server's questions (elicitations): confirm or decline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Agent {
    /// Whether the user confirms irreversible calls.
    pub confirms: bool,
}

/// A connection to one server instance.
pub type Session = RunningService<RoleClient, Agent>;

impl ClientHandler for Agent {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("ledger-example-agent", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2026_07_28)
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(confirmation(self.confirms))
    }
}

/// The elicitation result a user gives to "send it?".
pub fn confirmation(confirms: bool) -> ElicitResult {
    ElicitResult::new(ElicitationAction::Accept).with_content(json!({ "confirm": confirms }))
}

/// Why a connection failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot reach {host}: {message}")]
pub struct ConnectError {
    /// The instance.
    pub host: String,
    /// Why.
    pub message: String,
}

/// Connects to the instance named `host` through the proxy at `socket`, as the tenant
/// whose agent token is `token`.
pub async fn connect(
    socket: &Path,
    host: &str,
    token: &str,
    agent: Agent,
) -> Result<Session, ConnectError> {
    let uri = format!("http://{host}/mcp");
    let client = UnixSocketHttpClient::new(&socket.to_string_lossy(), &uri);
    let config = StreamableHttpClientTransportConfig::with_uri(uri).auth_header(token);
    let transport = StreamableHttpClientTransport::with_client(client, config);
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    agent
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .map_err(|e| ConnectError {
            host: host.to_owned(),
            message: e.to_string(),
        })
}

/// A `tools/call` of `tool` with `arguments`, and `meta` (a JSON object) as `_meta`.
pub fn call(tool: &str, arguments: Value, meta: Value) -> CallToolRequestParams {
    let object = |v: Value| match v {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(object(arguments));
    params.meta = Some(RequestMetaObject(rmcp::model::MetaObject(object(meta))));
    params
}

/// The `_meta` of a call in turn `turn` of workflow `workflow`.
pub fn turn_meta(workflow: &str, turn: &str) -> Value {
    json!({
        crate::meta::WORKFLOW_ID: workflow,
        crate::meta::TURN_ID: turn,
    })
}
