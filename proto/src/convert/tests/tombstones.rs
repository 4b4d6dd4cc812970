//! Collected effects and tenant settings on the wire: expired answers and tombstones
//! round-trip, malformed ones are typed errors naming the field, and settings a sender
//! leaves out read as their defaults, never as a zero quota.

use ledger_core::{ClaimOutcome, ExpiredEffect, ReconcileOutcome, TenantSettings, Tombstone};
use proptest::prelude::*;
use prost::Message;

use super::via_wire;
use crate::convert::fixtures::*;
use crate::convert::tombstone::Found;
use crate::convert::WireError;
use crate::pb;

fn bad_length(field: &str, len: usize) -> WireError {
    WireError::BadLength {
        field: field.into(),
        len,
        expected: 32,
    }
}

#[test]
fn expired_effects_and_tombstones_round_trip() {
    for committed in [true, false] {
        let expired = expired_effect(committed);
        let wire = pb::ExpiredEffect::from(expired.clone());
        assert_eq!(ExpiredEffect::try_from(via_wire(&wire)), Ok(expired));
    }
    let wire = pb::Tombstone::from(tombstone());
    assert_eq!(Tombstone::try_from(via_wire(&wire)), Ok(tombstone()));
    let found = Found::Tombstone(tombstone());
    let wire = pb::GetResponse::from(found.clone());
    assert_eq!(Found::try_from(via_wire(&wire)), Ok(found));
    let found = Found::Record(Box::new(full_record()));
    let wire = pb::GetResponse::from(found.clone());
    assert_eq!(Found::try_from(via_wire(&wire)), Ok(found));
}

#[test]
fn tenant_settings_round_trip_and_absent_ones_are_defaults() {
    let settings = TenantSettings {
        command_retention_ms: 1,
        tombstone_retention_ms: u64::MAX,
        live_records_max: 0,
        stored_bytes_max: 3,
    };
    let wire = pb::TenantSettings::from(settings.clone());
    assert_eq!(TenantSettings::from(via_wire(&wire)), settings);
    // A sender that predates the quotas sends only the command retention.
    let old = pb::TenantSettings {
        command_retention_ms: 5,
        ..Default::default()
    };
    assert_eq!(
        TenantSettings::from(via_wire(&old)),
        TenantSettings {
            command_retention_ms: 5,
            ..TenantSettings::default()
        }
    );
}

/// A change to an expired answer on the wire.
type Edit = fn(&mut pb::ExpiredEffect);

#[test]
fn malformed_expired_answers_are_refused() {
    let cases: Vec<(Edit, WireError)> = vec![
        (|e| e.key = None, WireError::Missing("expired.key".into())),
        (
            |e| e.intent_hash.truncate(31),
            bad_length("expired.intent_hash", 31),
        ),
        (
            |e| e.receipt_digest = Some(vec![7; 33]),
            bad_length("expired.receipt_digest", 33),
        ),
        (
            |e| e.receipt_digest = Some(Vec::new()),
            bad_length("expired.receipt_digest", 0),
        ),
        (
            |e| e.final_state = 0,
            WireError::BadEnum {
                field: "expired.final_state".into(),
                value: 0,
            },
        ),
        (
            |e| e.final_state = i32::MAX,
            WireError::BadEnum {
                field: "expired.final_state".into(),
                value: i32::MAX,
            },
        ),
    ];
    for (edit, expected) in cases {
        let mut wire = pb::ExpiredEffect::from(expired_effect(true));
        edit(&mut wire);
        let claim = pb::ClaimResponse {
            outcome: Some(pb::claim_response::Outcome::Expired(wire.clone())),
        };
        assert_eq!(ClaimOutcome::try_from(claim), Err(expected.clone()));
        let reconcile = pb::BeginReconcileResponse {
            outcome: Some(pb::begin_reconcile_response::Outcome::Expired(wire)),
        };
        assert_eq!(ReconcileOutcome::try_from(reconcile), Err(expected));
    }
}

#[test]
fn malformed_tombstones_and_empty_gets_are_refused() {
    let mut wire = pb::Tombstone::from(tombstone());
    wire.intent_hash = vec![1; 64];
    let get = pb::GetResponse {
        record: None,
        tombstone: Some(wire),
    };
    assert_eq!(
        Found::try_from(get),
        Err(bad_length("tombstone.intent_hash", 64))
    );
    let keyless = pb::Tombstone {
        key: None,
        ..tombstone().into()
    };
    assert_eq!(
        Tombstone::try_from(keyless),
        Err(WireError::Missing("key".into()))
    );
    assert_eq!(
        Found::try_from(pb::GetResponse::default()),
        Err(WireError::Missing("record".into()))
    );
}

proptest! {
    #[test]
    fn mutated_tombstones_never_panic(
        edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>(),
    ) {
        let mut bytes = pb::GetResponse::from(tombstone()).encode_to_vec();
        let len = bytes.len();
        for (at, value) in &edits {
            bytes[at % len] = *value;
        }
        bytes.truncate(len - cut % 8);
        if let Ok(response) = pb::GetResponse::decode(bytes.as_slice()) {
            let _ = Found::try_from(response);
        }
    }

    #[test]
    fn any_digest_length_but_32_is_an_error(len in 0usize..100) {
        let wire = pb::ExpiredEffect {
            receipt_digest: Some(vec![0; len]),
            ..expired_effect(true).into()
        };
        let read = ExpiredEffect::try_from(wire);
        if len == 32 {
            prop_assert!(read.is_ok());
        } else {
            prop_assert_eq!(read, Err(bad_length("receipt_digest", len)));
        }
    }
}
