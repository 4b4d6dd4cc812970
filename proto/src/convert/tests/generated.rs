//! Generated inputs: arbitrary enum numbers, arbitrary field contents, and encoded
//! messages with random bytes changed, none of which may make a conversion panic.

use ledger_core::{
    Authority, Caller, ClaimOutcome, Declaration, EffectKey, EffectRecord, EffectState, ToolRef,
};
use proptest::prelude::*;
use prost::Message;

use super::via_wire;
use crate::convert::fixtures::*;
use crate::convert::values::effect_state_from_i32;
use crate::convert::{IntoCommand, WireError};
use crate::pb;

/// `bytes` with each `(position, value)` edit applied (positions wrap around).
fn mutate(mut bytes: Vec<u8>, edits: &[(usize, u8)], keep: usize) -> Vec<u8> {
    if bytes.is_empty() {
        return bytes;
    }
    let len = bytes.len();
    for (at, value) in edits {
        bytes[at % len] = *value;
    }
    bytes.truncate(len - keep % len.min(8));
    bytes
}

fn declaration_strategy() -> impl Strategy<Value = Declaration> {
    let text = ".{0,12}";
    (
        (text, text, text),
        (text, text, text),
        (text, any::<u64>()),
        (text, text, text),
    )
        .prop_map(
            |(k, t, (principal, generation), (workflow, target, intent))| Declaration {
                key: EffectKey::new(k.0, k.1, k.2),
                workflow_id: workflow,
                tool: ToolRef {
                    provider: t.0,
                    name: t.1,
                    contract_version: t.2,
                },
                authority: Authority {
                    principal,
                    policy_generation: generation,
                },
                target,
                intent_json: intent,
            },
        )
}

proptest! {
    #[test]
    fn any_enum_number_reads_as_a_state_or_an_error(value in any::<i32>()) {
        match effect_state_from_i32(value, "state") {
            Ok(state) => prop_assert_eq!(EffectState::ALL[value as usize - 1], state),
            Err(e) => prop_assert_eq!(
                e,
                WireError::BadEnum { field: "state".into(), value }
            ),
        }
    }

    #[test]
    fn any_declaration_round_trips(declaration in declaration_strategy(), slots in 1u32..) {
        let request = pb::DeclareRequest::new("c", declaration.clone(), slots);
        let command = via_wire(&request).into_command(Caller::Operator).unwrap();
        let expected = ledger_core::CommandBody::Declare { declaration, slots };
        prop_assert_eq!(command.body, expected);
    }

    #[test]
    fn mutated_records_never_panic(
        edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        keep in any::<usize>(),
    ) {
        let bytes = pb::EffectRecord::from(full_record()).encode_to_vec();
        if let Ok(record) = pb::EffectRecord::decode(mutate(bytes, &edits, keep).as_slice()) {
            let _ = EffectRecord::try_from(record);
        }
    }

    #[test]
    fn mutated_amends_never_panic(
        edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        keep in any::<usize>(),
    ) {
        let bytes = pb::AmendRequest::new("c", declaration()).encode_to_vec();
        if let Ok(request) = pb::AmendRequest::decode(mutate(bytes, &edits, keep).as_slice()) {
            let _ = request.into_command(Caller::Operator);
        }
        let response = pb::AmendResponse::try_from(ledger_core::Outcome::Amended {
            previous_hash: hash(1),
            intent_hash: hash(2),
            changed: true,
        })
        .expect("an amended outcome is an amend response");
        let bytes = response.encode_to_vec();
        if let Ok(response) = pb::AmendResponse::decode(mutate(bytes, &edits, keep).as_slice()) {
            let _ = ledger_core::Outcome::try_from(response);
        }
    }

    #[test]
    fn mutated_claims_never_panic(
        edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        keep in any::<usize>(),
        pick in any::<prop::sample::Index>(),
    ) {
        let outcomes = claim_outcomes();
        let outcome = pick.get(&outcomes).clone();
        let bytes = pb::ClaimResponse::from(outcome).encode_to_vec();
        if let Ok(response) = pb::ClaimResponse::decode(mutate(bytes, &edits, keep).as_slice()) {
            let _ = ClaimOutcome::try_from(response);
        }
        let request = pb::ClaimRequest::new("c", declaration(), "h", Some(1), None);
        let bytes = request.encode_to_vec();
        if let Ok(request) = pb::ClaimRequest::decode(mutate(bytes, &edits, keep).as_slice()) {
            let _ = request.into_command(Caller::Operator);
        }
    }
}
