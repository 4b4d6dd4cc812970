//! What an MCP front end measures, through the `metrics` facade: tool calls by tool and
//! result, the effects they ran by outcome, confirmations asked and answered, and (from
//! `ledger-client`) the reconciliations the runner made. `ledger-mcp-server` and
//! `ledger-mcp-gateway` serve them for Prometheus at `metrics_listen_addr`.

use ledger_client::{EffectOutcome, RunError};
use metrics::Unit;
use rmcp::model::{CallToolResponse, ErrorData};

/// `tools/call` requests answered, by `tool` and `result`: `ok`, `tool_error` (an
/// `isError` result: not committed, declined, refused), `input_required`, `task`, or
/// `invalid` (a JSON-RPC error: bad arguments, no identity, ledger unreachable).
pub const TOOL_CALLS_TOTAL: &str = "mcp_tool_calls_total";
/// Effects run, by how the run ended (`done`, `replayed`, `unknown`, `escalated`, ...).
pub const EFFECTS_TOTAL: &str = "mcp_effects_total";
/// Confirmations of irreversible calls, by `step`: `asked`, `confirmed`, `declined`.
pub const CONFIRMATIONS_TOTAL: &str = "mcp_confirmations_total";

const COUNTERS: [(&str, &str); 4] = [
    (
        TOOL_CALLS_TOTAL,
        "tools/call requests answered, by tool and result",
    ),
    (EFFECTS_TOTAL, "effects run, by how the run ended"),
    (
        CONFIRMATIONS_TOTAL,
        "confirmations of irreversible calls: asked, confirmed, declined",
    ),
    (
        ledger_client::reconcile::RECONCILIATIONS_TOTAL,
        "reconciliations with the provider, by how they ended",
    ),
];

/// Describes the counters to the installed recorder.
pub fn describe() {
    for (name, help) in COUNTERS {
        metrics::describe_counter!(name, Unit::Count, help);
    }
}

/// Counts one answered `tools/call`.
pub fn count_call(tool: &str, answer: &Result<CallToolResponse, ErrorData>) {
    let result = match answer {
        Ok(CallToolResponse::Complete(r)) if r.is_error == Some(true) => "tool_error",
        Ok(CallToolResponse::Complete(_)) => "ok",
        Ok(CallToolResponse::InputRequired(_)) => "input_required",
        Ok(CallToolResponse::Task(_)) => "task",
        // A kind of answer a later protocol revision adds.
        Ok(_) => "other",
        Err(_) => "invalid",
    };
    metrics::counter!(TOOL_CALLS_TOTAL, "tool" => tool.to_owned(), "result" => result).increment(1);
}

/// Counts one effect run.
pub fn count_effect(result: &Result<EffectOutcome, RunError>) {
    let outcome = match result {
        Ok(EffectOutcome::Done { .. }) => "done",
        Ok(EffectOutcome::Replayed { .. }) => "replayed",
        Ok(EffectOutcome::FailedBeforeEffect { .. }) => "failed_before_effect",
        Ok(EffectOutcome::Unknown { .. }) => "unknown",
        Ok(EffectOutcome::InFlight { .. }) => "in_flight",
        Ok(EffectOutcome::NeedsReconcile(_)) => "needs_reconcile",
        Ok(EffectOutcome::HorizonPassed(_)) => "horizon_passed",
        Ok(EffectOutcome::Conflict(_)) => "conflict",
        Ok(EffectOutcome::Escalated { .. }) => "escalated",
        Ok(EffectOutcome::Expired(_)) => "expired",
        Err(_) => "error",
    };
    metrics::counter!(EFFECTS_TOTAL, "outcome" => outcome).increment(1);
}

/// Counts one step of a confirmation.
pub fn count_confirmation(step: &'static str) {
    metrics::counter!(CONFIRMATIONS_TOTAL, "step" => step).increment(1);
}

#[cfg(test)]
mod tests {
    use metrics_exporter_prometheus::PrometheusBuilder;
    use rmcp::model::CallToolResult;

    use super::*;

    /// Each kind of answer and of effect outcome lands in its own series.
    #[test]
    fn calls_effects_and_confirmations_are_counted_by_kind() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            count_call("refund", &Ok(CallToolResult::success(vec![]).into()));
            count_call("refund", &Ok(CallToolResult::error(vec![]).into()));
            count_call("refund", &Err(ErrorData::invalid_params("no _meta", None)));
            count_effect(&Ok(EffectOutcome::Replayed {
                receipt: "r".into(),
            }));
            count_effect(&Ok(EffectOutcome::Unknown {
                reason: "timeout".into(),
            }));
            count_confirmation("asked");
            count_confirmation("asked");
        });
        let page = handle.render();
        for line in [
            r#"mcp_tool_calls_total{tool="refund",result="ok"} 1"#,
            r#"mcp_tool_calls_total{tool="refund",result="tool_error"} 1"#,
            r#"mcp_tool_calls_total{tool="refund",result="invalid"} 1"#,
            r#"mcp_effects_total{outcome="replayed"} 1"#,
            r#"mcp_effects_total{outcome="unknown"} 1"#,
            r#"mcp_confirmations_total{step="asked"} 2"#,
        ] {
            assert!(page.contains(line), "{line} in:\n{page}");
        }
    }
}
