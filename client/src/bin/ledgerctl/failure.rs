//! Why a command failed, said so that the operator knows what to do next.
//!
//! Every client error passes through [`Failure::from_client`], which adds the hint the
//! error calls for: check the endpoints when no node answered, use the operator key when
//! a node refused the caller, retry later when the cluster is overloaded.

use std::fmt;

use ledger_client::ClientError;
use ledger_core::Refusal;

/// A failed command: what went wrong, and what to do about it.
#[derive(Debug)]
pub struct Failure {
    message: String,
    hint: Option<&'static str>,
}

const NO_ENDPOINT: &str = "is the cluster running? check --endpoints or $LEDGER_ENDPOINTS";
const OPERATOR_KEY: &str =
    "this command needs an operator key: pass it with --api-key or $LEDGER_API_KEY";
const UNKNOWN_KEY: &str = "the nodes do not know this API key: check --api-key or $LEDGER_API_KEY";
const OTHER_TENANT: &str =
    "a tenant key reaches only its own tenant's effects: use that tenant's key or the operator key";

impl Failure {
    /// A failure with a message and no hint.
    pub fn new(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            hint: None,
        }
    }

    /// A failure with a hint.
    pub fn hinted(message: impl Into<String>, hint: &'static str) -> Self {
        Failure {
            message: message.into(),
            hint: Some(hint),
        }
    }

    /// No endpoint was given.
    pub fn no_endpoints() -> Self {
        Failure::hinted(
            "no endpoints given",
            "pass --endpoints HOST:PORT,... or set $LEDGER_ENDPOINTS",
        )
    }

    /// No API key was given.
    pub fn no_api_key() -> Self {
        Failure::hinted(
            "no API key given",
            "pass --api-key-file FILE (or set $LEDGER_API_KEY_FILE), or --api-key KEY (or \
             $LEDGER_API_KEY); the operator key for cluster commands",
        )
    }

    /// A client error, with the hint it calls for; `what` names the call.
    pub fn from_client(what: &str, e: ClientError) -> Self {
        let message = format!("{what}: {e}");
        let hint = match &e {
            ClientError::Unavailable { .. } => {
                return Failure::hinted(format!("{what}: no endpoint answered ({e})"), NO_ENDPOINT)
            }
            ClientError::Refused(Refusal::NotPermitted { .. }) => Some(OPERATOR_KEY),
            ClientError::Refused(Refusal::WrongTenant { .. }) => Some(OTHER_TENANT),
            ClientError::Status { code, .. } => match code {
                tonic::Code::PermissionDenied => {
                    return Failure::hinted(
                        format!("{what}: permission denied ({e})"),
                        OPERATOR_KEY,
                    )
                }
                tonic::Code::Unauthenticated => Some(UNKNOWN_KEY),
                tonic::Code::Unavailable | tonic::Code::DeadlineExceeded => Some(NO_ENDPOINT),
                _ => None,
            },
            ClientError::Overloaded { .. } => {
                Some("the cluster is turning calls away: run the command again later")
            }
            _ => None,
        };
        Failure { message, hint }
    }

    /// [`Failure::from_client`] for a command sent with `command_id`: when the error
    /// leaves open whether the ledger applied it (no answer, overloaded after a try that
    /// got none), the message names the id, so that the command can be sent again with
    /// it (`--command-id`) and is applied at most once.
    pub fn from_command(what: &str, command_id: &str, e: ClientError) -> Self {
        let maybe_applied = match &e {
            ClientError::Unavailable { .. } | ClientError::Overloaded { .. } => true,
            ClientError::Status { code, .. } => matches!(
                code,
                tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Unknown
            ),
            _ => false,
        };
        let mut failure = Failure::from_client(what, e);
        if maybe_applied {
            failure.message.push_str(&format!(
                "\n  it may have been applied: run it again with --command-id {command_id}, \
                 which the ledger applies at most once"
            ));
        }
        failure
    }

    /// Whether a node refused the caller's key, which no amount of waiting changes.
    pub fn refused_key(e: &ClientError) -> bool {
        match e {
            ClientError::Refused(Refusal::NotPermitted { .. }) => true,
            ClientError::Status { code, .. } => matches!(
                code,
                tonic::Code::PermissionDenied | tonic::Code::Unauthenticated
            ),
            _ => false,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)?;
        if let Some(hint) = self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

/// What a command's result is, beyond its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done.
    Success,
    /// Done, and what was compared differs (`policy diff`).
    Different,
}

/// The result of one command.
pub type CliResult = Result<Exit, Failure>;
