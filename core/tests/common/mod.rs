//! A small harness over the ledger for tests: one registered tenant (`acme`, plus `globex`
//! to test isolation), one tool per replay class, a clock, and fresh command ids.

#![allow(dead_code)]

use ledger_core::*;

pub mod retention;

pub const TENANT: &str = "acme";
pub const OTHER_TENANT: &str = "globex";

/// Tools by replay class, as `provider/name`.
pub const REFUND: (&str, &str) = ("pay", "refund");
pub const TICKET: (&str, &str) = ("desk", "create_ticket");
pub const MESSAGE: (&str, &str) = ("mail", "send_message");
pub const DEPLOY: (&str, &str) = ("ci", "start_deploy");
pub const ORDER: (&str, &str) = ("shop", "get_order");

pub const LEASE_MS: u64 = 1_000;
pub const HORIZON_MS: u64 = 60_000;
pub const RETENTION_MS: u64 = 3_600_000;
/// The providers' declared processing bound and search-visibility lag: a look-up proves
/// absence `PROCESSING_MS + VISIBILITY_LAG_MS` after the latest dispatch lease ends.
pub const PROCESSING_MS: u64 = 5_000;
pub const VISIBILITY_LAG_MS: u64 = 2_000;

pub struct Harness {
    pub ledger: Ledger,
    pub now: u64,
    seq: u64,
}

pub fn policy(class: ReplayClass) -> ToolPolicy {
    ToolPolicy {
        lease_ms: LEASE_MS,
        lease_ms_max: 10 * LEASE_MS,
        provider_horizon_ms: if matches!(
            class,
            ReplayClass::KeyedIdempotent | ReplayClass::Irreversible
        ) {
            HORIZON_MS
        } else {
            0
        },
        retention_ms: RETENTION_MS,
        dispatch_attempts_max: 3,
        observations_max: 3,
        confirmation_required: class == ReplayClass::Irreversible,
        volatile_fields: vec!["/request_id".into()],
        processing_ms_max: Some(PROCESSING_MS),
        visibility_lag_ms: VISIBILITY_LAG_MS,
        retry_window_ms: RETENTION_MS,
        ..ToolPolicy::for_class(class)
    }
}

impl Harness {
    pub fn new() -> Self {
        let mut h = Harness {
            ledger: Ledger::new(),
            now: 1_000_000,
            seq: 0,
        };
        for tenant in [TENANT, OTHER_TENANT] {
            h.operator(CommandBody::PutTenant {
                tenant: tenant.into(),
                settings: TenantSettings {
                    command_retention_ms: RETENTION_MS,
                    ..TenantSettings::default()
                },
            });
            for (tool, class) in [
                (REFUND, ReplayClass::KeyedIdempotent),
                (TICKET, ReplayClass::UnkeyedCreate),
                (MESSAGE, ReplayClass::Irreversible),
                (DEPLOY, ReplayClass::LongRunningJob),
                (ORDER, ReplayClass::ReadOnly),
            ] {
                h.put_policy(tenant, tool, policy(class));
            }
        }
        h
    }

    /// Stores `policy` for `tool` (`provider/name`) of `tenant`, as the operator.
    pub fn put_policy(&mut self, tenant: &str, tool: (&str, &str), policy: ToolPolicy) {
        let out = self.operator(CommandBody::PutToolPolicy {
            tenant: tenant.into(),
            tool: ToolName {
                provider: tool.0.into(),
                name: tool.1.into(),
            },
            policy,
        });
        assert_eq!(out, Outcome::Configured);
    }

    pub fn next_id(&mut self) -> String {
        self.seq += 1;
        format!("cmd-{}", self.seq)
    }

    /// Applies `body` as `caller` under a fresh command id.
    pub fn run(&mut self, caller: Caller, body: CommandBody) -> Outcome {
        let command = Command {
            command_id: self.next_id(),
            caller,
            body,
        };
        self.apply(&command)
    }

    pub fn apply(&mut self, command: &Command) -> Outcome {
        self.ledger.apply(command, self.now)
    }

    pub fn tenant(&mut self, body: CommandBody) -> Outcome {
        self.run(Caller::Tenant(TENANT.into()), body)
    }

    pub fn operator(&mut self, body: CommandBody) -> Outcome {
        self.run(Caller::Operator, body)
    }

    pub fn advance(&mut self, ms: u64) {
        self.now += ms;
    }

    /// Moves the clock to when a look-up that finds nothing proves `decl` absent (no
    /// earlier dispatch can still land); panics if its policy declares no bound.
    pub fn advance_until_absence_provable(&mut self, decl: &Declaration) {
        let at_ms = self
            .record(decl)
            .absence_provable_at_ms()
            .expect("the policy declares a processing bound");
        self.now = self.now.max(at_ms);
    }

    pub fn claim_as(
        &mut self,
        decl: &Declaration,
        holder: &str,
        confirmation: Option<&str>,
    ) -> Outcome {
        self.tenant(CommandBody::Claim {
            declaration: decl.clone(),
            holder: holder.into(),
            lease_ms: None,
            confirmation: confirmation.map(Into::into),
        })
    }

    pub fn claim(&mut self, decl: &Declaration) -> Outcome {
        let confirmation = (decl.tool.name == MESSAGE.1).then_some("user said yes");
        self.claim_as(decl, "server-a", confirmation)
    }

    /// Claims and expects a grant.
    pub fn proceed(&mut self, decl: &Declaration) -> Grant {
        match self.claim(decl) {
            Outcome::Claim(ClaimOutcome::Proceed(grant)) => grant,
            other => panic!("expected proceed, got {other:?}"),
        }
    }

    pub fn report(&mut self, decl: &Declaration, token: u64, report: Report) -> Outcome {
        self.tenant(CommandBody::Report {
            key: decl.key.clone(),
            fencing_token: token,
            report,
        })
    }

    pub fn commit(&mut self, decl: &Declaration, token: u64, receipt: &str) -> Outcome {
        self.report(
            decl,
            token,
            Report::Committed {
                receipt: receipt.into(),
            },
        )
    }

    pub fn unknown(&mut self, decl: &Declaration, token: u64) -> Outcome {
        self.report(
            decl,
            token,
            Report::Unknown {
                reason: "timeout after send".into(),
            },
        )
    }

    pub fn begin_reconcile(&mut self, decl: &Declaration) -> Outcome {
        self.tenant(CommandBody::BeginReconcile {
            key: decl.key.clone(),
            holder: "reconciler".into(),
            lease_ms: None,
        })
    }

    pub fn reconcile_grant(&mut self, decl: &Declaration) -> Grant {
        match self.begin_reconcile(decl) {
            Outcome::Reconcile(ReconcileOutcome::Observe(grant)) => grant,
            other => panic!("expected observe, got {other:?}"),
        }
    }

    pub fn observe(
        &mut self,
        decl: &Declaration,
        token: u64,
        result: ObservationResult,
    ) -> Outcome {
        self.tenant(CommandBody::Observe {
            key: decl.key.clone(),
            fencing_token: token,
            result,
            detail: "looked up by provider key".into(),
        })
    }

    pub fn expire(&mut self) -> Outcome {
        self.operator(CommandBody::ExpireLeases { limit: 100 })
    }

    pub fn record(&self, decl: &Declaration) -> EffectRecord {
        self.ledger.get(&decl.key).expect("record exists")
    }

    pub fn state(&self, decl: &Declaration) -> EffectState {
        self.record(decl).state
    }
}

pub fn decl(tool: (&str, &str), key: &str, intent: &str) -> Declaration {
    Declaration {
        key: EffectKey::new(TENANT, "agent-runtime", key),
        workflow_id: "wf-1".into(),
        tool: ToolRef {
            provider: tool.0.into(),
            name: tool.1.into(),
            contract_version: "v1".into(),
        },
        authority: Authority {
            principal: "user:42".into(),
            policy_generation: 1,
        },
        target: format!("{}:{}", tool.0, key),
        intent_json: intent.into(),
    }
}

pub fn refund(key: &str) -> Declaration {
    decl(
        REFUND,
        key,
        r#"{"order":"o-1","amount":500,"currency":"EUR"}"#,
    )
}

pub fn ticket(key: &str) -> Declaration {
    decl(TICKET, key, r#"{"title":"printer on fire","queue":"it"}"#)
}

pub fn message(key: &str) -> Declaration {
    decl(MESSAGE, key, r#"{"to":"alice","body":"hello"}"#)
}

pub fn deploy(key: &str) -> Declaration {
    decl(DEPLOY, key, r#"{"service":"api","version":"1.2.3"}"#)
}
