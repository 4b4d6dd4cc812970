//! The tenants an MCP front end serves: who a request acts for (its bearer token) and the
//! ledger client that tenant's effects run through.
//!
//! Both the example tool server and the gateway read the same `[[tenants]]` and
//! `[ledger_tls]` configuration sections and authenticate the same way, so a host sees one
//! set of rules whichever of the two protects its tools.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use subtle::ConstantTimeEq;

use ledger_client::{
    ClientError, EffectRunner, LedgerClient, OverloadPolicy, RetryPolicy, RunOptions, TlsOptions,
};

/// A tenant served, as configured.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// The tenant id at the ledger.
    pub name: String,
    /// The bearer token its agents present on every request.
    pub agent_token: String,
    /// The tenant's API key at the ledger.
    pub ledger_api_key: String,
}

/// TLS towards the ledger's nodes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerTls {
    /// The CA (PEM) that signed the nodes' certificates.
    pub ca_cert_file: PathBuf,
    /// A client certificate (PEM) presented to the nodes.
    #[serde(default)]
    pub client_cert_file: Option<PathBuf>,
    /// Its private key (PEM).
    #[serde(default)]
    pub client_key_file: Option<PathBuf>,
    /// The name the nodes' certificates are checked against instead of each endpoint's
    /// host.
    #[serde(default)]
    pub domain_name: Option<String>,
}

impl LedgerTls {
    /// Takes relative paths from `dir` (the configuration file's folder).
    pub fn resolve(&mut self, dir: &Path) {
        for path in [
            Some(&mut self.ca_cert_file),
            self.client_cert_file.as_mut(),
            self.client_key_file.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            if path.is_relative() {
                *path = dir.join(&*path);
            }
        }
    }

    /// What is wrong with it, if anything.
    pub fn check(&self) -> Result<(), String> {
        if self.client_cert_file.is_some() != self.client_key_file.is_some() {
            return Err("ledger_tls: client_cert_file and client_key_file go together".into());
        }
        Ok(())
    }

    /// The client's TLS options: the files read now.
    pub fn options(&self) -> Result<TlsOptions, ClientError> {
        let mut tls = TlsOptions::from_files(
            &self.ca_cert_file,
            self.client_cert_file.as_deref(),
            self.client_key_file.as_deref(),
        )?;
        tls.domain_name = self.domain_name.clone();
        Ok(tls)
    }
}

/// What is wrong with a list of tenants, if anything: none, a short token, or two
/// tenants sharing one.
pub fn check_tenants(tenants: &[TenantConfig]) -> Result<(), String> {
    if tenants.is_empty() {
        return Err("at least one tenant is required".into());
    }
    for (i, t) in tenants.iter().enumerate() {
        if t.name.is_empty() {
            return Err("a tenant's name must not be empty".into());
        }
        if t.agent_token.len() < 16 {
            return Err("agent tokens must be at least 16 bytes".into());
        }
        if tenants[..i].iter().any(|o| o.agent_token == t.agent_token) {
            return Err("two tenants share an agent token".into());
        }
    }
    Ok(())
}

/// A tenant served: its name and the runner its effects go through.
pub struct Tenant {
    /// The tenant id at the ledger.
    pub name: String,
    token: String,
    /// Runs its effects, as this instance.
    pub runner: EffectRunner,
}

/// The tenants of one instance.
pub struct Tenants(Vec<Tenant>);

impl Tenants {
    /// A ledger client for each tenant of `configs`, at `endpoints`, whose attempts this
    /// instance (`instance`) holds with `options`.
    pub fn connect(
        configs: &[TenantConfig],
        endpoints: &[String],
        tls: Option<&LedgerTls>,
        instance: &str,
        options: RunOptions,
    ) -> Result<Self, ClientError> {
        let tls = tls.map(LedgerTls::options).transpose()?;
        let tenants = configs
            .iter()
            .map(|t| {
                let ledger = LedgerClient::with_tls(
                    endpoints.to_vec(),
                    &t.ledger_api_key,
                    RetryPolicy::default(),
                    OverloadPolicy::default(),
                    tls.clone(),
                )?;
                Ok(Tenant {
                    name: t.name.clone(),
                    token: t.agent_token.clone(),
                    runner: EffectRunner::new(ledger, instance.to_owned())
                        .with_options(options.clone()),
                })
            })
            .collect::<Result<_, ClientError>>()?;
        Ok(Tenants(tenants))
    }

    /// The tenant whose agent token the request's `Authorization: Bearer` header carries,
    /// compared in constant time.
    pub fn by_bearer(&self, parts: Option<&http::request::Parts>) -> Option<&Tenant> {
        let header = parts?
            .headers
            .get(http::header::AUTHORIZATION)?
            .to_str()
            .ok()?;
        let token = header.strip_prefix("Bearer ")?;
        self.0
            .iter()
            .find(|t| bool::from(t.token.as_bytes().ct_eq(token.as_bytes())))
    }

    /// Every tenant, in configuration order.
    pub fn iter(&self) -> impl Iterator<Item = &Tenant> {
        self.0.iter()
    }
}
