//! Every refusal survives the trip through a status, and through the HTTP/2 headers a
//! status is sent as, with its documented code.

use ledger_core::Refusal;
use tonic::codegen::http::HeaderMap;
use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

use super::*;
use crate::convert::fixtures::refusals;
use crate::convert::{OutcomeError, WireError};
use crate::pb;

/// Which variant a refusal is; the exhaustive match makes a new variant fail to compile
/// here until the fixtures cover it.
fn variant(refusal: &Refusal) -> usize {
    match refusal {
        Refusal::InvalidField(_) => 0,
        Refusal::InvalidIntent(_) => 1,
        Refusal::UnknownTenant(_) => 2,
        Refusal::WrongTenant { .. } => 3,
        Refusal::NotPermitted { .. } => 4,
        Refusal::UnknownTool(_) => 5,
        Refusal::ReadOnlyTool(_) => 6,
        Refusal::InvalidPolicy(_) => 7,
        Refusal::UnknownEffect(_) => 8,
        Refusal::Conflict(_) => 9,
        Refusal::StaleToken { .. } => 10,
        Refusal::LeaseExpired { .. } => 11,
        Refusal::WrongAttemptKind(_) => 12,
        Refusal::AlreadyFinal { .. } => 13,
        Refusal::ProofRequired => 14,
        Refusal::ConfirmationRequired => 15,
        Refusal::NotEscalated => 16,
        Refusal::CommandIdReused(_) => 17,
        Refusal::AmendNotAllowed { .. } => 18,
        Refusal::TooManyAmendments { .. } => 19,
        Refusal::Expired(_) => 20,
        Refusal::QuotaExceeded { .. } => 21,
        Refusal::DeclarationTooLarge { .. } => 22,
        Refusal::EscalationChanged { .. } => 23,
    }
}

#[test]
fn fixtures_cover_every_refusal() {
    let mut seen: Vec<usize> = refusals().iter().map(|(r, _)| variant(r)).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen, (0..24).collect::<Vec<_>>());
}

#[test]
fn every_refusal_survives_a_status_with_its_code() {
    for (refusal, code) in refusals() {
        let status = refusal_to_status(&refusal);
        assert_eq!(status.code(), code, "{refusal:?}");
        assert_eq!(status.message(), refusal.to_string());
        assert_eq!(status_to_refusal(&status), Some(refusal));
    }
}

#[test]
fn every_refusal_survives_the_headers() {
    for (refusal, code) in refusals() {
        let mut headers = HeaderMap::new();
        refusal_to_status(&refusal)
            .add_header(&mut headers)
            .expect("status encodes as headers");
        let status = Status::from_header_map(&headers).expect("headers hold a status");
        assert_eq!(status.code(), code);
        assert_eq!(status.message(), refusal.to_string());
        assert_eq!(status_to_refusal(&status), Some(refusal));
    }
}

/// A conflict between two intents with many members names as many as fit in a few KiB,
/// then how many more differ; a small one is sent whole (`every_refusal_survives_...`).
#[test]
fn a_conflict_naming_many_members_is_sent_bounded() {
    let plain: Vec<String> = (0..5_000).map(|i| format!("member_{i:05}")).collect();
    // Names JSON writes six times as long (`\u0001`).
    let escaped: Vec<String> = (0..5_000)
        .map(|i| format!("{}{i}", "\u{1}".repeat(20)))
        .collect();
    for names in [plain, escaped] {
        conflict_sent_bounded(names);
    }
}

fn conflict_sent_bounded(names: Vec<String>) {
    let refusal = Refusal::Conflict(ledger_core::IntentConflict {
        stored_hash: ledger_core::IntentHash([1; 32]),
        offered_hash: ledger_core::IntentHash([2; 32]),
        differing_fields: names.clone(),
    });
    let mut headers = HeaderMap::new();
    refusal_to_status(&refusal)
        .add_header(&mut headers)
        .expect("status encodes as headers");
    let header_bytes: usize = headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum();
    assert!(header_bytes < 8 << 10, "{header_bytes} bytes of headers");
    let status = Status::from_header_map(&headers).expect("headers hold a status");
    assert_eq!(status.code(), Code::Aborted);
    let Some(Refusal::Conflict(sent)) = status_to_refusal(&status) else {
        panic!("no conflict in {status:?}");
    };
    let (last, named) = sent.differing_fields.split_last().expect("some names");
    assert!(named.len() > 20, "{} names", named.len());
    assert_eq!(named, &names[..named.len()]);
    assert_eq!(last, &format!("({} more)", names.len() - named.len()));
}

#[test]
fn refusal_metadata_is_the_documented_json() {
    let refusal = Refusal::StaleToken {
        offered: 5,
        latest: Some(6),
    };
    let status = refusal_to_status(&refusal);
    let value = status.metadata().get_bin(REFUSAL_METADATA_KEY).unwrap();
    assert_eq!(
        value.to_bytes().unwrap().as_ref(),
        br#"{"StaleToken":{"offered":5,"latest":6}}"#
    );
}

#[test]
fn statuses_without_a_readable_refusal_carry_none() {
    assert_eq!(status_to_refusal(&Status::unavailable("no leader")), None);
    let mut garbled = Status::failed_precondition("stale");
    garbled.metadata_mut().insert_bin(
        REFUSAL_METADATA_KEY,
        MetadataValue::from_bytes(b"{not json"),
    );
    assert_eq!(status_to_refusal(&garbled), None);
    let mut unknown = Status::failed_precondition("new kind");
    unknown.metadata_mut().insert_bin(
        REFUSAL_METADATA_KEY,
        MetadataValue::from_bytes(br#"{"FromTheFuture":1}"#),
    );
    assert_eq!(status_to_refusal(&unknown), None);
}

#[test]
fn wire_errors_are_invalid_argument() {
    let error = WireError::Missing("declaration.key".into());
    let status = wire_error_to_status(&error);
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("declaration.key is missing"));
    assert_eq!(status_to_refusal(&status), None);
    assert_eq!(Status::from(error).code(), Code::InvalidArgument);
}

#[test]
fn outcomes_become_responses_or_statuses() {
    let response: pb::HeartbeatResponse =
        outcome_to_response(ledger_core::Outcome::LeaseExtended { lease_until_ms: 7 }).unwrap();
    assert_eq!(response.lease_until_ms, 7);
    let refused = ledger_core::Outcome::Refused(Refusal::ProofRequired);
    let status = outcome_to_response::<pb::ReportResponse>(refused).unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(status_to_refusal(&status), Some(Refusal::ProofRequired));
    let wrong = ledger_core::Outcome::Configured;
    let status = outcome_to_response::<pb::ClaimResponse>(wrong).unwrap_err();
    assert_eq!(status.code(), Code::Internal);
    let mismatch = OutcomeError::Mismatch {
        rpc: "claim",
        got: "configured",
    };
    assert_eq!(Status::from(mismatch).code(), Code::Internal);
}

#[test]
fn a_status_survives_the_trip_through_a_batch_item() {
    for (refusal, code) in refusals() {
        let sent = refusal_to_status(&refusal);
        let back = item_error_to_status(status_to_item_error(&sent));
        assert_eq!(back.code(), code);
        assert_eq!(back.message(), sent.message());
        assert_eq!(status_to_refusal(&back), Some(refusal));
        assert!(back.metadata().get(RETRY_AFTER_MS_METADATA).is_none());
    }
    let mut overloaded = Status::resource_exhausted("busy");
    overloaded
        .metadata_mut()
        .insert(RETRY_AFTER_MS_METADATA, MetadataValue::from_static("250"));
    let item = status_to_item_error(&overloaded);
    assert_eq!(item.retry_after_ms, Some(250));
    assert!(item.refusal.is_empty());
    let back = item_error_to_status(item);
    assert_eq!(back.code(), Code::ResourceExhausted);
    assert_eq!(status_to_refusal(&back), None);
    let hint = back.metadata().get(RETRY_AFTER_MS_METADATA).unwrap();
    assert_eq!(hint.to_str().unwrap(), "250");
    let unavailable = item_error_to_status(status_to_item_error(&Status::unavailable("gone")));
    assert_eq!(unavailable.code(), Code::Unavailable);
    assert_eq!(unavailable.message(), "gone");
}
