//! Tenants: their settings and tool policies, kept in [`Table::Tenants`] one
//! configuration per tenant, and the commands that change them.
//!
//! Every command of a tenant reads its configuration, often several times (the tool's
//! policy, the quotas, how long to remember the command id), and a configuration holds
//! every tool policy of the tenant. The configuration decoded last is kept with the stored
//! bytes it was decoded from and handed out again while the stored bytes are the same, so
//! it can never be stale, whatever changed the store.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::key::validate_tenant;
use crate::keycode;
use crate::ledger::Ledger;
use crate::outcome::{Outcome, Refusal};
use crate::policy::{ReplayClass, TenantSettings, ToolName, ToolPolicy, ToolRef};
use crate::store::{decode_value, Store, StoreExt, Table};

/// A tenant's settings and tool policies.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TenantConfig {
    /// Settings.
    pub settings: TenantSettings,
    /// Policy per tool.
    pub tools: BTreeMap<ToolName, ToolPolicy>,
}

/// The tenant configuration decoded last, with the stored bytes it was decoded from.
#[derive(Default)]
pub(crate) struct TenantMemo(Mutex<Option<(Vec<u8>, Arc<TenantConfig>)>>);

/// A copy of a ledger starts with an empty memo.
impl Clone for TenantMemo {
    fn clone(&self) -> Self {
        TenantMemo::default()
    }
}

/// The memo is not part of a ledger's state: two ledgers are equal whatever they decoded.
impl PartialEq for TenantMemo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for TenantMemo {}

impl std::fmt::Debug for TenantMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TenantMemo")
    }
}

impl<S: Store> Ledger<S> {
    pub(crate) fn put_tenant(&mut self, tenant: &str, settings: &TenantSettings) -> Outcome {
        if let Err(e) = validate_tenant(tenant) {
            return e.into();
        }
        let mut config = self.tenant(tenant).unwrap_or_default();
        config.settings = settings.clone();
        self.store
            .save(Table::Tenants, keycode::string(tenant), &config);
        Outcome::Configured
    }

    pub(crate) fn put_tool_policy(
        &mut self,
        tenant: &str,
        tool: &ToolName,
        policy: &ToolPolicy,
    ) -> Outcome {
        let Some(mut config) = self.tenant(tenant) else {
            return Refusal::UnknownTenant(tenant.to_owned()).into();
        };
        let valid = crate::key::validate_name("tool.provider", &tool.provider)
            .and_then(|()| crate::key::validate_name("tool.name", &tool.name));
        if let Err(e) = valid {
            return e.into();
        }
        if let Err(e) = policy.validate() {
            return Refusal::InvalidPolicy(e).into();
        }
        config.tools.insert(tool.clone(), policy.clone());
        self.store
            .save(Table::Tenants, keycode::string(tenant), &config);
        Outcome::Configured
    }

    /// The policy for a new effect of `tool`; read-only tools have no effects.
    pub(crate) fn policy_for(&self, tenant: &str, tool: &ToolRef) -> Result<ToolPolicy, Refusal> {
        let name = tool.tool_name();
        let policy = self
            .tenant_config(tenant)
            .and_then(|t| t.tools.get(&name).cloned())
            .ok_or_else(|| Refusal::UnknownTool(name.clone()))?;
        if policy.class == ReplayClass::ReadOnly {
            return Err(Refusal::ReadOnlyTool(name));
        }
        Ok(policy)
    }

    /// A tenant's configuration.
    pub fn tenant(&self, tenant: &str) -> Option<TenantConfig> {
        self.tenant_config(tenant).map(Arc::unwrap_or_clone)
    }

    /// A tenant's configuration, shared with the memo: decoded only when its stored bytes
    /// differ from the configuration decoded last.
    pub(crate) fn tenant_config(&self, tenant: &str) -> Option<Arc<TenantConfig>> {
        let key = keycode::string(tenant);
        let bytes = self.store.get(Table::Tenants, &key)?;
        let mut memo = self.tenant_memo.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, config)) = memo.as_ref() {
            if *seen == bytes {
                return Some(config.clone());
            }
        }
        let Some(config) = decode_value::<TenantConfig>(&bytes) else {
            self.store.corrupt(Table::Tenants, &key, "tenant");
            return None;
        };
        let config = Arc::new(config);
        *memo = Some((bytes, config.clone()));
        Some(config)
    }

    /// Whether `tenant` is registered, without decoding its configuration (every command
    /// asks, and a tenant's configuration holds all of its tool policies). A stored
    /// configuration that does not decode still counts as registered here; the damage is
    /// found where a setting is first read (`remember`, `policy_for`), which latches the
    /// store's fault.
    pub(crate) fn has_tenant(&self, tenant: &str) -> bool {
        self.store
            .get(Table::Tenants, &keycode::string(tenant))
            .is_some()
    }

    /// All tenants in order.
    pub fn tenants(&self) -> Vec<(String, TenantConfig)> {
        let mut out = Vec::new();
        self.store
            .walk(Table::Tenants, Vec::new(), None, |key, value| {
                let name = keycode::Reader::new(key).string();
                match (name, decode_value(value)) {
                    (Some(name), Some(config)) => out.push((name, config)),
                    _ => self.store.corrupt(Table::Tenants, key, "tenant"),
                }
                true
            });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Caller, Command, CommandBody};
    use crate::store::encode_value;

    fn operator(ledger: &mut Ledger, id: &str, body: CommandBody) -> Outcome {
        let command = Command {
            command_id: id.into(),
            caller: Caller::Operator,
            body,
        };
        ledger.apply(&command, 1_000)
    }

    fn tool(name: &str) -> ToolName {
        ToolName {
            provider: "pay".into(),
            name: name.into(),
        }
    }

    /// The memo never hands out a configuration the store no longer holds, whether a
    /// command or anything else changed the stored bytes.
    #[test]
    fn a_changed_configuration_is_read_again() {
        let mut ledger = Ledger::new();
        let put_tenant = CommandBody::PutTenant {
            tenant: "acme".into(),
            settings: TenantSettings::default(),
        };
        assert_eq!(
            operator(&mut ledger, "c-1", put_tenant),
            Outcome::Configured
        );
        let refund = ToolRef {
            provider: "pay".into(),
            name: "refund".into(),
            contract_version: "v1".into(),
        };
        assert_eq!(
            ledger.policy_for("acme", &refund),
            Err(Refusal::UnknownTool(tool("refund")))
        );
        let put_policy = CommandBody::PutToolPolicy {
            tenant: "acme".into(),
            tool: tool("refund"),
            policy: ToolPolicy::for_class(ReplayClass::KeyedIdempotent),
        };
        assert_eq!(
            operator(&mut ledger, "c-2", put_policy),
            Outcome::Configured
        );
        assert_eq!(
            ledger.policy_for("acme", &refund).map(|p| p.class),
            Ok(ReplayClass::KeyedIdempotent)
        );

        let mut changed = ledger.tenant("acme").expect("registered");
        changed.settings.command_retention_ms += 1;
        changed.tools.clear();
        ledger.store_mut().put(
            Table::Tenants,
            keycode::string("acme"),
            encode_value(&changed),
        );
        assert_eq!(ledger.tenant("acme"), Some(changed));
        assert_eq!(
            ledger.policy_for("acme", &refund),
            Err(Refusal::UnknownTool(tool("refund")))
        );
        ledger
            .store_mut()
            .delete(Table::Tenants, &keycode::string("acme"));
        assert_eq!(ledger.tenant("acme"), None);
    }
}
