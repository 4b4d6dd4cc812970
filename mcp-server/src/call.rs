//! What a checked `tools/call` runs against: the instance's state (its configuration,
//! tenants, policies, providers and confirmations), the caller's tenant, and the call
//! itself with its effect's declaration. The handler (`server`) builds a [`Call`]; each
//! tool's effect (`effects`) runs it.

use rmcp::model::InputResponses;

use ledger_client::{EffectCall, PolicyFile};
use ledger_core::{Declaration, ToolPolicy};
use ledger_mcp::tenants::{Tenant, Tenants};

use crate::config::ServerConfig;
use crate::confirm::Confirmations;
use crate::providers::Providers;

pub(crate) struct Inner {
    pub config: ServerConfig,
    pub tenants: Tenants,
    pub policies: PolicyFile,
    pub providers: Providers,
    pub confirmations: Confirmations,
}

/// A checked call, ready to run its effect.
pub(crate) struct Call<'a> {
    pub server: &'a Inner,
    pub tenant: &'a Tenant,
    pub policy: &'a ToolPolicy,
    pub declaration: Declaration,
    pub request_state: Option<String>,
    pub input_responses: Option<InputResponses>,
    /// The runtime asked to replace the arguments of an effect that cannot have happened.
    pub amend: bool,
}

impl Call<'_> {
    /// The effect call, with the user's confirmation if any.
    pub fn effect(&self, confirmation: Option<String>) -> EffectCall {
        EffectCall {
            declaration: self.declaration.clone(),
            confirmation,
        }
    }
}
