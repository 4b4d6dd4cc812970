//! Authentication: a bearer API key names the caller, a tenant or the operator. The keys
//! are the node's current [`Credentials`](crate::credentials::Credentials), replaced at
//! SIGHUP.
//!
//! The node authenticates; the state machine authorises (a tenant may act only on its own
//! effects, only the operator may configure or decide), so the rule is applied identically
//! on every replica whichever node accepted the call.

use ledger_core::Caller;

use crate::error::NodeError;
use crate::security::Security;

/// The API keys a node accepts.
#[derive(Clone)]
pub struct Authenticator {
    security: Security,
}

impl Authenticator {
    /// The keys `security` holds at each call.
    pub fn new(security: Security) -> Self {
        Authenticator { security }
    }

    /// The caller a request's `authorization: Bearer <key>` names.
    pub fn caller<T>(&self, request: &tonic::Request<T>) -> Result<Caller, NodeError> {
        let header = request
            .metadata()
            .get("authorization")
            .ok_or_else(|| NodeError::Unauthenticated("no authorization header".into()))?;
        let token = header
            .to_str()
            .ok()
            .and_then(|h| h.strip_prefix("Bearer "))
            .ok_or_else(|| NodeError::Unauthenticated("expected `Bearer <api key>`".into()))?;
        self.security
            .credentials()
            .caller(token)
            .ok_or_else(|| NodeError::Unauthenticated("unknown api key".into()))
    }

    /// The caller, who must be the operator.
    pub fn operator<T>(&self, request: &tonic::Request<T>) -> Result<(), NodeError> {
        self.operator_for(request, "the admin service")
    }

    /// The caller, who must be the operator to use `what`; a tenant key is refused
    /// (`PERMISSION_DENIED`) with a message naming `what` and the key it needs.
    pub fn operator_for<T>(
        &self,
        request: &tonic::Request<T>,
        what: &str,
    ) -> Result<(), NodeError> {
        match self.caller(request)? {
            Caller::Operator => Ok(()),
            Caller::Tenant(t) => Err(NodeError::PermissionDenied(format!(
                "tenant {t} may not use {what}: it needs the operator key"
            ))),
        }
    }
}

/// Refuses a call without a known API key on the request's headers, before its body is
/// read: a caller without a key cannot make the node buffer a message of up to the
/// ledger service's limit first. (Each call authenticates again, for its caller.)
#[derive(Clone)]
pub struct KeyCheck(Authenticator);

impl KeyCheck {
    /// The check of the keys `auth` holds at each call.
    pub fn new(auth: Authenticator) -> Self {
        KeyCheck(auth)
    }
}

impl tonic::service::Interceptor for KeyCheck {
    fn call(&mut self, request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        match self.0.caller(&request) {
            Ok(_) => Ok(request),
            Err(e) => Err(e.into()),
        }
    }
}
