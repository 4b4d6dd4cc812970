//! What the example server's and the gateway's configurations share: the part that says
//! where the ledger is and whom the instance serves, its checks, how a file is read (relative
//! paths taken from its folder) and which values the command line overrides.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use ledger_client::{ClientError, RunOptions};

use crate::tenants::{check_tenants, LedgerTls, TenantConfig, Tenants};

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The text is not a configuration.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// The fields every front end's configuration has.
pub struct FrontEnd<'a> {
    /// The holder name of every attempt the instance makes.
    pub instance: &'a str,
    /// The namespace of its effect keys.
    pub namespace: &'a str,
    /// The lease of each attempt.
    pub lease_ms: u64,
    /// Ledger nodes, `host:port`.
    pub ledger_endpoints: &'a [String],
    /// TLS towards the ledger.
    pub ledger_tls: Option<&'a LedgerTls>,
    /// The tenants served.
    pub tenants: &'a [TenantConfig],
}

/// The fields of a front end's configuration that loading changes.
pub struct FrontEndMut<'a> {
    /// Where to listen (the command line may override it).
    pub listen_addr: &'a mut SocketAddr,
    /// The instance's name (the command line may override it).
    pub instance: &'a mut String,
    /// The operator's tool policy file (taken from the configuration's folder).
    pub policy_file: &'a mut PathBuf,
    /// TLS towards the ledger (its files taken from the configuration's folder).
    pub ledger_tls: Option<&'a mut LedgerTls>,
}

impl FrontEnd<'_> {
    fn check(&self) -> Result<(), ConfigError> {
        let invalid = |m: &str| Err(ConfigError::Invalid(m.into()));
        if self.instance.is_empty() || self.namespace.is_empty() {
            return invalid("instance and namespace must not be empty");
        }
        if self.lease_ms < 30 {
            return invalid("lease_ms must be at least 30");
        }
        if self.ledger_endpoints.is_empty() {
            return invalid("ledger_endpoints must name at least one node");
        }
        if let Some(tls) = self.ledger_tls {
            tls.check().map_err(ConfigError::Invalid)?;
        }
        check_tenants(self.tenants).map_err(ConfigError::Invalid)
    }

    /// A ledger client for each tenant, whose attempts this instance holds.
    pub fn connect(&self) -> Result<Tenants, ClientError> {
        Tenants::connect(
            self.tenants,
            self.ledger_endpoints,
            self.ledger_tls,
            self.instance,
            RunOptions {
                lease_ms: self.lease_ms,
                ..RunOptions::default()
            },
        )
    }
}

/// A front end's configuration file.
pub trait FrontEndConfig: DeserializeOwned {
    /// The shared fields.
    fn front_end(&self) -> FrontEnd<'_>;
    /// The shared fields loading changes.
    fn front_end_mut(&mut self) -> FrontEndMut<'_>;
    /// The checks of the fields only this front end has.
    fn check_own(&self) -> Result<(), ConfigError>;
}

fn check<C: FrontEndConfig>(config: &C) -> Result<(), ConfigError> {
    config.front_end().check()?;
    config.check_own()
}

/// Parses and checks a configuration; relative paths are taken from `dir`.
pub fn from_toml<C: FrontEndConfig>(text: &str, dir: &Path) -> Result<C, ConfigError> {
    let mut config: C = toml::from_str(text).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let paths = config.front_end_mut();
    if paths.policy_file.is_relative() {
        *paths.policy_file = dir.join(&*paths.policy_file);
    }
    if let Some(tls) = paths.ledger_tls {
        tls.resolve(dir);
    }
    check(&config)?;
    Ok(config)
}

/// Loads the configuration file at `path` and applies what the command line overrides:
/// the listen address and the instance name.
pub fn load<C: FrontEndConfig>(
    path: &Path,
    listen: Option<SocketAddr>,
    instance: Option<String>,
) -> Result<C, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    let mut config: C = from_toml(&text, path.parent().unwrap_or(Path::new(".")))?;
    let overridden = config.front_end_mut();
    if let Some(listen) = listen {
        *overridden.listen_addr = listen;
    }
    if let Some(instance) = instance {
        *overridden.instance = instance;
    }
    check(&config)?;
    Ok(config)
}
