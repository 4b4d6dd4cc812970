//! The operator's policy file applied to a real ledger: records copy the policy they were
//! declared under, a changed file applies to new effects, an older one can be restored,
//! and only the operator may apply one.

mod common;

use common::*;
use ledger_client::{ClientError, PolicyFile};
use ledger_core::Refusal;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_policy_file_applies_to_new_effects_and_an_old_one_can_be_restored() {
    let ledger = Ledger::start().await;
    let operator = ledger.client(OPERATOR_KEY);
    let tenant = ledger.client(TENANT_KEY);
    let runner = ledger.runner("server-a", 30_000);
    let original = PolicyFile::from_toml(POLICIES).unwrap();
    let changed = PolicyFile::from_toml(&POLICIES.replace(
        "tool = \"pay/refund\"\nclass = \"keyed_idempotent\"",
        "tool = \"pay/refund\"\nclass = \"keyed_idempotent\"\nobservations_max = 7",
    ))
    .unwrap();
    let mut budgets = Vec::new();
    for (i, file) in [None, Some(&changed), Some(&original)]
        .into_iter()
        .enumerate()
    {
        if let Some(file) = file {
            assert_eq!(file.apply(&operator).await.unwrap(), 7);
        }
        let c = call("pay/refund", &format!("p{i}"), "{}");
        runner.declare(&c.declaration, 1).await.unwrap();
        let record = tenant.get(c.declaration.key).await.unwrap().unwrap();
        budgets.push(record.policy.observations_max);
    }
    assert_eq!(budgets, vec![5, 7, 5]);
    // A tenant may not change policies.
    let error = original.apply(&tenant).await.unwrap_err();
    assert!(
        matches!(error, ClientError::Refused(Refusal::NotPermitted { .. })),
        "{error:?}"
    );
}
