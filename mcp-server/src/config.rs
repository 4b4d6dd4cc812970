//! The tool server's configuration: a TOML file, with the per-instance values
//! overridable by flags so that several instances share one file.
//!
//! ```toml
//! listen_addr = "127.0.0.1:8401"
//! instance = "mcp-a"                     # the holder name in every attempt it makes
//! namespace = "mcp"                      # effect keys are tenant/namespace/key
//! ledger_endpoints = ["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"]
//! policy_file = "policies.toml"          # the operator's tool policies (relative to this file)
//! provider_addr = "127.0.0.1:8400"       # the (fake) providers
//! request_state_key = "at least 32 bytes, the same on every instance"
//!
//! [[tenants]]
//! name = "acme"
//! agent_token = "the bearer token acme's agents present"
//! ledger_api_key = "acme's key at the ledger"
//!
//! [ledger_tls]                           # optional: reach the ledger over TLS
//! ca_cert_file = "tls/ca.pem"            # the CA that signed the nodes' certificates
//! client_cert_file = "tls/client.pem"    # optional, for nodes that require one
//! client_key_file = "tls/client.key"
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use ledger_mcp::config::{self, FrontEnd, FrontEndConfig, FrontEndMut};

pub use ledger_mcp::config::ConfigError;
pub use ledger_mcp::tenants::{LedgerTls, TenantConfig};

/// A tool server instance's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Where to listen (port 0 picks one; the bound address is printed).
    pub listen_addr: SocketAddr,
    /// This instance's name: the holder of every attempt it makes.
    pub instance: String,
    /// The namespace of its effect keys.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Ledger nodes, `host:port`.
    pub ledger_endpoints: Vec<String>,
    /// The operator's tool policy file.
    pub policy_file: PathBuf,
    /// The providers, `host:port`.
    pub provider_addr: String,
    /// The key that seals `input_required` request state; the same on every instance, so
    /// any instance can take the re-sent request.
    pub request_state_key: String,
    /// Largest tool arguments accepted, as JSON bytes.
    #[serde(default = "default_arguments_bytes_max")]
    pub arguments_bytes_max: usize,
    /// Lease of each attempt; heartbeats extend it every third while a dispatch runs, and
    /// if this instance dies mid-dispatch the effect turns unknown when it runs out.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// How long a call waits for another attempt of its effect to end.
    #[serde(default = "default_wait_in_flight_ms")]
    pub wait_in_flight_ms: u64,
    /// Longest exchange with a provider.
    #[serde(default = "default_provider_timeout_ms")]
    pub provider_timeout_ms: u64,
    /// `Host` values accepted (DNS-rebinding protection); loopback names when empty.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Where the Prometheus endpoint (`GET /metrics`, plain HTTP) listens; none when
    /// absent.
    #[serde(default)]
    pub metrics_listen_addr: Option<SocketAddr>,
    /// The tenants served.
    pub tenants: Vec<TenantConfig>,
    /// TLS towards the ledger; plaintext when absent.
    #[serde(default)]
    pub ledger_tls: Option<LedgerTls>,
}

fn default_namespace() -> String {
    "mcp".into()
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

fn default_provider_timeout_ms() -> u64 {
    5_000
}

impl ServerConfig {
    /// Parses and checks a configuration; relative paths are taken from `dir`.
    pub fn from_toml(text: &str, dir: &Path) -> Result<Self, ConfigError> {
        config::from_toml(text, dir)
    }

    /// Loads the configuration file at `path` and applies what the command line
    /// overrides: the listen address and the instance name.
    pub fn load(
        path: &Path,
        listen: Option<SocketAddr>,
        instance: Option<String>,
    ) -> Result<Self, ConfigError> {
        config::load(path, listen, instance)
    }
}

impl FrontEndConfig for ServerConfig {
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
        if self.request_state_key.len() < 32 {
            return Err(ConfigError::Invalid(
                "request_state_key must be at least 32 bytes".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        listen_addr = "127.0.0.1:0"
        instance = "mcp-a"
        ledger_endpoints = ["127.0.0.1:7101"]
        policy_file = "policies.toml"
        provider_addr = "127.0.0.1:8400"
        request_state_key = "0123456789abcdef0123456789abcdef"
        [[tenants]]
        name = "acme"
        agent_token = "agent-acme-token-01"
        ledger_api_key = "acme-ledger-key-0001"
    "#;

    #[test]
    fn a_minimal_config_gets_defaults_and_resolves_the_policy_path() {
        let c = ServerConfig::from_toml(MINIMAL, Path::new("/etc/mcp")).unwrap();
        assert_eq!(c.namespace, "mcp");
        assert_eq!(c.policy_file, PathBuf::from("/etc/mcp/policies.toml"));
        assert_eq!(c.arguments_bytes_max, 16 * 1024);
        assert!(c.ledger_tls.is_none());
    }

    #[test]
    fn ledger_tls_paths_are_taken_from_the_config_folder() {
        let text = format!("{MINIMAL}\n[ledger_tls]\nca_cert_file = \"tls/ca.pem\"\n");
        let c = ServerConfig::from_toml(&text, Path::new("/etc/mcp")).unwrap();
        let tls = c.ledger_tls.unwrap();
        assert_eq!(tls.ca_cert_file, PathBuf::from("/etc/mcp/tls/ca.pem"));
        let half = format!("{text}client_cert_file = \"c.pem\"\n");
        assert!(ServerConfig::from_toml(&half, Path::new(".")).is_err());
    }

    #[test]
    fn unsafe_configs_are_refused() {
        for bad in [
            MINIMAL.replace("0123456789abcdef0123456789abcdef", "short"),
            MINIMAL.replace("agent-acme-token-01", "short"),
            MINIMAL.replace(r#"["127.0.0.1:7101"]"#, "[]"),
            format!("{MINIMAL}\nsurprise = 1"),
        ] {
            assert!(
                ServerConfig::from_toml(&bad, Path::new(".")).is_err(),
                "{bad}"
            );
        }
    }
}
