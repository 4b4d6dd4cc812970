//! A refund whose answers get lost, replayed against the core state machine alone.
//!
//! `cargo run -p ledger-core --example lost_answer`

use ledger_core::*;

fn main() {
    let mut ledger = Ledger::new();
    let mut now_ms = 1_700_000_000_000;
    let operator = |id: &str, body| Command {
        command_id: id.into(),
        caller: Caller::Operator,
        body,
    };
    ledger.apply(
        &operator(
            "setup-1",
            CommandBody::PutTenant {
                tenant: "acme".into(),
                settings: TenantSettings::default(),
            },
        ),
        now_ms,
    );
    ledger.apply(
        &operator(
            "setup-2",
            CommandBody::PutToolPolicy {
                tenant: "acme".into(),
                tool: ToolName {
                    provider: "pay".into(),
                    name: "refund".into(),
                },
                policy: ToolPolicy::for_class(ReplayClass::KeyedIdempotent),
            },
        ),
        now_ms,
    );

    let refund = Declaration {
        key: EffectKey::new("acme", "support-bot", "wf-981/turn-4/refund"),
        workflow_id: "wf-981".into(),
        tool: ToolRef {
            provider: "pay".into(),
            name: "refund".into(),
            contract_version: "2026-07".into(),
        },
        authority: Authority {
            principal: "user:42".into(),
            policy_generation: 3,
        },
        target: "order:o-1".into(),
        intent_json: r#"{"order": "o-1", "amount": 500, "currency": "EUR"}"#.into(),
    };
    let claim = |id: &str, holder: &str, decl: &Declaration| Command {
        command_id: id.into(),
        caller: Caller::Tenant("acme".into()),
        body: CommandBody::Claim {
            declaration: decl.clone(),
            holder: holder.into(),
            lease_ms: None,
            confirmation: None,
        },
    };

    let first = ledger.apply(&claim("srv-a/claim-1", "server-a", &refund), now_ms);
    println!("server-a claims the refund:         {first:?}");
    println!("  ... the answer is lost; server-a retries with the same command id");
    now_ms += 200;
    let retried = ledger.apply(&claim("srv-a/claim-1", "server-a", &refund), now_ms);
    println!("server-a retries:                   {retried:?}");
    assert_eq!(first, retried, "a lost answer never yields a second grant");

    let Outcome::Claim(ClaimOutcome::Proceed(grant)) = retried else {
        unreachable!("a new effect is granted")
    };
    println!(
        "  ... server-a sends the refund with idempotency key {}",
        grant.provider_key
    );
    now_ms += 300;
    let reported = ledger.apply(
        &Command {
            command_id: "srv-a/report-1".into(),
            caller: Caller::Tenant("acme".into()),
            body: CommandBody::Report {
                key: refund.key.clone(),
                fencing_token: grant.fencing_token,
                report: Report::Committed {
                    receipt: r#"{"refund_id":"re_123"}"#.into(),
                },
            },
        },
        now_ms,
    );
    println!("server-a reports the provider's answer: {reported:?}");

    println!("  ... the agent never saw the answer and retries through server-b");
    now_ms += 5_000;
    let replay = ledger.apply(&claim("srv-b/claim-1", "server-b", &refund), now_ms);
    println!("server-b claims the same effect:    {replay:?}");
    assert!(matches!(
        replay,
        Outcome::Claim(ClaimOutcome::Replay { .. })
    ));

    let mut repaired = refund.clone();
    repaired.intent_json = r#"{"order": "o-1", "amount": 5000, "currency": "EUR"}"#.into();
    let conflict = ledger.apply(&claim("srv-b/claim-2", "server-b", &repaired), now_ms);
    println!("a model repair changes the amount:  {conflict:?}");
    assert!(matches!(
        conflict,
        Outcome::Claim(ClaimOutcome::Conflict(_))
    ));
    println!("one refund was sent; the retry replayed its receipt; the changed intent was refused");
}
