//! The secrets a node checks its callers against: the cluster secret and the API keys.
//!
//! Only SHA-256 digests are kept for the API keys, whether the configuration gave a key
//! in the clear, in a file or as its digest; a presented key is hashed and compared with
//! every digest in constant time, so neither the configuration nor the time a refusal
//! takes tells a caller how close its guess was. The set is replaced whole when the
//! configuration is read again (SIGHUP): a key taken out stops working at once, calls in
//! progress keep the set they started with.

use std::sync::{Arc, RwLock};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use ledger_core::Caller;

use crate::config::{ConfigError, NodeConfig};

/// One configuration's secrets.
pub struct Credentials {
    cluster_secret: String,
    /// The cluster secret's digest, then those of the previous secrets still accepted.
    accepted_secret_digests: Vec<[u8; 32]>,
    keys: Vec<([u8; 32], Caller)>,
}

impl Credentials {
    /// The secrets of `config` (whose secret files [`NodeConfig::load`] has read). Keys
    /// given in the clear are logged as a warning: their digest is enough.
    pub fn from_config(config: &NodeConfig) -> Result<Self, ConfigError> {
        let mut keys = Vec::with_capacity(config.api_keys.len());
        for key in &config.api_keys {
            if key.key.is_some() {
                tracing::warn!(
                    "{} is written in the configuration in the clear; give its SHA-256 as \
                     key_sha256 instead (printf %s \"$KEY\" | sha256sum)",
                    key.describe()
                );
            }
            keys.push((key.digest()?, key.caller()));
        }
        Ok(Credentials {
            accepted_secret_digests: std::iter::once(&config.cluster_secret)
                .chain(&config.previous_cluster_secrets)
                .map(|s| digest(s))
                .collect(),
            cluster_secret: config.cluster_secret.clone(),
            keys,
        })
    }

    /// Whom the API key `presented` authenticates, compared with every known digest in
    /// constant time.
    pub fn caller(&self, presented: &str) -> Option<Caller> {
        let presented = digest(presented);
        let mut found = None;
        for (known, caller) in &self.keys {
            if bool::from(known.ct_eq(&presented)) && found.is_none() {
                found = Some(caller);
            }
        }
        found.cloned()
    }

    /// Whether `offered` is the cluster secret or a previous one still accepted (compared
    /// with each in constant time).
    pub fn is_cluster_secret(&self, offered: &str) -> bool {
        let offered = digest(offered);
        self.accepted_secret_digests
            .iter()
            .fold(false, |known, d| known | bool::from(d.ct_eq(&offered)))
    }

    /// The cluster secret, sent with every call to a peer.
    pub fn cluster_secret(&self) -> &str {
        &self.cluster_secret
    }

    /// How many API keys are known.
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }
}

fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

/// The node's current [`Credentials`], shared by every service and replaced whole.
#[derive(Clone)]
pub struct SharedCredentials {
    current: Arc<RwLock<Arc<Credentials>>>,
}

impl SharedCredentials {
    /// Shares `credentials`.
    pub fn new(credentials: Credentials) -> Self {
        SharedCredentials {
            current: Arc::new(RwLock::new(Arc::new(credentials))),
        }
    }

    /// The credentials now in force.
    pub fn current(&self) -> Arc<Credentials> {
        self.current.read().expect("credentials lock").clone()
    }

    /// Puts `credentials` in force for every later call.
    pub fn replace(&self, credentials: Credentials) {
        *self.current.write().expect("credentials lock") = Arc::new(credentials);
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn config(keys: &str) -> NodeConfig {
        let text = format!(
            "node_id = 1\nlisten_addr = \"127.0.0.1:1\"\ndata_dir = \"/tmp/x\"\n\
             cluster_secret = \"0123456789abcdef\"\n{keys}"
        );
        NodeConfig::from_toml(&text, Path::new("x.toml")).unwrap()
    }

    #[test]
    fn a_hashed_key_authenticates_and_a_wrong_one_does_not() {
        let hex = ledger_core::intent::hex(&Sha256::digest(b"tenant-key-hashed-01"));
        let c = Credentials::from_config(&config(&format!(
            "[[api_keys]]\nkey_sha256 = \"{hex}\"\ntenant = \"acme\"\n\
             [[api_keys]]\nkey = \"operator-key-plain-01\"\noperator = true\n"
        )))
        .unwrap();
        assert_eq!(
            c.caller("tenant-key-hashed-01"),
            Some(Caller::Tenant("acme".into()))
        );
        assert_eq!(c.caller("operator-key-plain-01"), Some(Caller::Operator));
        assert_eq!(c.caller("tenant-key-hashed-02"), None);
        assert_eq!(c.caller(&hex), None);
        assert!(c.is_cluster_secret("0123456789abcdef"));
        assert!(!c.is_cluster_secret("0123456789abcdeg"));
    }

    #[test]
    fn a_previous_cluster_secret_is_accepted_but_never_sent() {
        let c = Credentials::from_config(&config(
            "previous_cluster_secrets = [\"the-old-secret-0001\"]\n",
        ))
        .unwrap();
        assert!(c.is_cluster_secret("0123456789abcdef"));
        assert!(c.is_cluster_secret("the-old-secret-0001"));
        assert!(!c.is_cluster_secret("the-old-secret-0002"));
        assert_eq!(c.cluster_secret(), "0123456789abcdef");
    }

    #[test]
    fn a_replaced_set_drops_the_keys_it_no_longer_has() {
        let shared = SharedCredentials::new(
            Credentials::from_config(&config(
                "[[api_keys]]\nkey = \"tenant-key-removed-1\"\ntenant = \"acme\"\n",
            ))
            .unwrap(),
        );
        assert!(shared.current().caller("tenant-key-removed-1").is_some());
        shared.replace(Credentials::from_config(&config("")).unwrap());
        assert!(shared.current().caller("tenant-key-removed-1").is_none());
    }
}
