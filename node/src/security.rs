//! What a node trusts and presents, in one handle: the credentials (cluster secret, API
//! keys) and, on the real network, the TLS material. Every service and connection reads
//! it at each use, so [`Security::reload`] (the binary calls it at SIGHUP) takes effect
//! for the next call and the next connection without a restart.
//!
//! Whether TLS is on is fixed at start: a reload that would switch it on or off is
//! refused, since peers and clients would have to switch at the same instant.

use crate::config::NodeConfig;
use crate::credentials::{Credentials, SharedCredentials};

#[cfg(not(madsim))]
use std::sync::Arc;

#[cfg(not(madsim))]
use crate::tls::NodeTls;

/// The node's credentials and TLS material in force.
#[derive(Clone)]
pub struct Security {
    credentials: SharedCredentials,
    #[cfg(not(madsim))]
    tls: Option<Arc<NodeTls>>,
}

impl Security {
    /// The security of `config`. Under the simulator a `[tls]` table is refused: the
    /// simulated network has no TLS.
    pub fn new(config: &NodeConfig) -> Result<Self, String> {
        let credentials = Credentials::from_config(config).map_err(|e| e.to_string())?;
        tracing::info!(api_keys = credentials.key_count(), "credentials loaded");
        #[cfg(not(madsim))]
        let tls = match &config.tls {
            Some(settings) => Some(Arc::new(
                NodeTls::load(settings).map_err(|e| format!("tls: {e}"))?,
            )),
            None => None,
        };
        #[cfg(madsim)]
        if config.tls.is_some() {
            return Err("tls: not available in the simulation".into());
        }
        Ok(Security {
            credentials: SharedCredentials::new(credentials),
            #[cfg(not(madsim))]
            tls,
        })
    }

    /// The credentials now in force.
    pub fn credentials(&self) -> std::sync::Arc<Credentials> {
        self.credentials.current()
    }

    /// The TLS material, when TLS is on.
    #[cfg(not(madsim))]
    pub fn tls(&self) -> Option<&Arc<NodeTls>> {
        self.tls.as_ref()
    }

    /// Whether the listener speaks TLS (and the Raft service requires a client
    /// certificate).
    pub fn tls_enabled(&self) -> bool {
        #[cfg(not(madsim))]
        let enabled = self.tls.is_some();
        #[cfg(madsim)]
        let enabled = false;
        enabled
    }

    /// Puts the secrets and certificates of `config` in force. Nothing changes unless
    /// all of it is valid; the error says what was wrong. Settings other than secrets
    /// and certificates take effect at the next start.
    pub fn reload(&self, config: &NodeConfig) -> Result<(), String> {
        if config.tls.is_some() != self.tls_enabled() {
            return Err("turning TLS on or off needs a restart of every node".into());
        }
        let credentials = Credentials::from_config(config).map_err(|e| e.to_string())?;
        #[cfg(not(madsim))]
        if let (Some(tls), Some(settings)) = (&self.tls, &config.tls) {
            let summary = tls.reload(settings).map_err(|e| format!("tls: {e}"))?;
            tracing::info!("TLS reloaded: {summary}");
        }
        tracing::info!(api_keys = credentials.key_count(), "credentials reloaded");
        self.credentials.replace(credentials);
        Ok(())
    }
}
