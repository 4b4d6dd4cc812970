//! What the ledger keeps of a committed call, and what a replay answers from it.
//!
//! The receipt is the upstream's own answer (its `CallToolResult`, or the task it
//! started), as JSON, so a retry of a committed effect gets the result the first call
//! got. An answer larger than the ledger keeps is reduced: its structured content alone,
//! or else a note with its size and digest.

use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, CreateTaskResult};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use ledger_core::limits::RECEIPT_BYTES_MAX;

/// The text of a result's text content blocks, joined.
pub fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The receipt kept for a committed result.
pub fn receipt_of(result: &CallToolResult) -> String {
    let full = serde_json::to_string(result).unwrap_or_default();
    if full.len() <= RECEIPT_BYTES_MAX {
        return full;
    }
    if let Some(structured) = &result.structured_content {
        let reduced = serde_json::to_string(&CallToolResult::structured(structured.clone()))
            .unwrap_or_default();
        if reduced.len() <= RECEIPT_BYTES_MAX {
            return reduced;
        }
    }
    let digest = ledger_core::intent::hex(&Sha256::digest(full.as_bytes()));
    let note = json!({
        "receipt_reduced": true,
        "result_bytes": full.len(),
        "result_sha256": digest,
    });
    let mut kept = CallToolResult::structured(note.clone());
    kept.content = vec![ContentBlock::text(format!(
        "the upstream's result ({} bytes) is larger than the ledger keeps; its SHA-256 is \
         {digest}",
        full.len()
    ))];
    serde_json::to_string(&kept).unwrap_or_default()
}

/// The receipt kept for a task the upstream started.
pub fn receipt_of_task(task: &CreateTaskResult) -> String {
    serde_json::to_string(task).unwrap_or_default()
}

/// The answer a stored receipt gives: the result or task it holds; a receipt that is
/// neither (written by something else) as structured content.
pub fn answer_from(receipt: &str) -> CallToolResponse {
    let value: Value = serde_json::from_str(receipt).unwrap_or(Value::String(receipt.into()));
    if value.get("task").is_some() {
        if let Ok(task) = serde_json::from_value::<CreateTaskResult>(value.clone()) {
            return CallToolResponse::Task(task);
        }
    }
    match serde_json::from_value::<CallToolResult>(value.clone()) {
        Ok(result) => CallToolResponse::Complete(result),
        Err(_) => CallToolResponse::Complete(CallToolResult::structured(value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_gives_back_the_result_it_was_made_of() {
        let mut result = CallToolResult::structured(json!({ "refund": { "id": "re_1" } }));
        result.content = vec![ContentBlock::text("refunded")];
        match answer_from(&receipt_of(&result)) {
            CallToolResponse::Complete(back) => assert_eq!(back, result),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_oversized_result_is_reduced_to_what_fits() {
        let big = "x".repeat(RECEIPT_BYTES_MAX);
        let mut result = CallToolResult::structured(json!({ "id": "T-1" }));
        result.content = vec![ContentBlock::text(big.clone())];
        let receipt = receipt_of(&result);
        assert!(receipt.len() <= RECEIPT_BYTES_MAX);
        assert!(receipt.contains("T-1") && !receipt.contains(&big));

        let huge = CallToolResult::structured(json!({ "blob": big }));
        let receipt = receipt_of(&huge);
        assert!(receipt.len() <= RECEIPT_BYTES_MAX);
        assert!(receipt.contains("result_sha256"));
    }

    #[test]
    fn a_foreign_receipt_is_answered_as_structured_content() {
        match answer_from("plain text") {
            CallToolResponse::Complete(r) => {
                assert_eq!(r.structured_content, Some(json!("plain text")))
            }
            other => panic!("{other:?}"),
        }
    }
}
