//! The benchmark's output: a markdown table (per strategy, then per fault point and
//! strategy, then why the ledger left effects unresolved), and the same numbers per fault
//! point, provider and strategy as CSV and JSON.

use std::fmt::Write as _;

use serde_json::json;

use super::metrics::{by_point, by_point_and_provider, by_strategy, EffectResult, Summary};

/// How a report was produced, printed with it.
#[derive(Debug, Clone)]
pub struct Provenance {
    /// The seeds.
    pub seeds: Vec<u64>,
    /// The command that reproduces it.
    pub command: String,
    /// The machine it ran on.
    pub machine: String,
    /// Wall-clock time it took (s).
    pub wall_s: f64,
}

fn row(summary: &Summary) -> String {
    format!(
        "{} | {} | {} | {} | {} | {} ({}) | {} | {} / {} | {} / {} | {:.0} | {:.1} | {:.0}",
        summary.effects,
        summary.extra_applications,
        summary.effects_with_extras,
        summary.missing,
        summary.false_dedup,
        summary.unresolved,
        summary.escalated,
        summary.needless_escalations,
        summary.latency_p50_ms,
        summary.latency_p99_ms,
        summary.unknown_p50_ms,
        summary.unknown_p99_ms,
        summary.unknown_total_ms as f64 / 1_000.0,
        summary.ledger_ops_per_effect,
        summary.ledger_bytes_per_effect,
    )
}

const COLUMNS: &str = "effects | extra applications | effects with extras | missing | \
                       false dedup | unresolved (escalated) | needless escalations | \
                       latency p50 / p99 ms | time unknown p50 / p99 ms | \
                       time unknown total s | ledger ops / effect | ledger bytes / effect";

/// The markdown separator row for a table of `columns` columns.
fn separator(columns: usize) -> String {
    format!("|{}", "---|".repeat(columns))
}

/// What the columns mean, printed above the tables.
const SEMANTICS: &str = "Per declared effect, judged by the providers' state. A declared \
     effect is what the user wants: one per intent, one per recipient of a message to \
     several (each judged on its own), and a model repair (one parameter changed in the \
     same step) is the same effect as the intent it repairs, whereas an intended new \
     effect (the agent says so with a new key or sequence number) is another. *Extra \
     applications* are applications beyond one per declared effect (retry-induced \
     duplicates, or a repair applied beside the original); *missing* never happened (the \
     agent knows it failed, or does not know); *false dedup* never happened although the \
     agent was told \"done\" or was refused as a duplicate (a legitimate new effect \
     suppressed); *unresolved* means the agent ends without knowing whether it happened \
     (escalated to a person, under the ledger); a *needless escalation* is one where the \
     provider's state was final when the agent was told and its look-up could have told \
     it (refund, ticket, append; wire before its horizon). Latency is simulated time from \
     the agent's first call to its final answer; it includes waiting out leases and \
     provider horizons. *Time unknown* runs from the agent's first ambiguous answer (a \
     timeout, a lost or unknown answer, a restart with a call in doubt) to its final \
     answer: percentiles over the effects that met one, and the total over all; an \
     effect left unresolved stays unknown beyond it. Ledger ops are the commands the \
     nodes received for the effect; ledger bytes are its records at the end of the run, \
     as a snapshot encodes them.";

/// The markdown report.
pub fn markdown(results: &[EffectResult], provenance: &Provenance) -> String {
    let mut out = String::new();
    let seeds = &provenance.seeds;
    let _ = writeln!(out, "# Effect-safety benchmark\n");
    let _ = writeln!(
        out,
        "{} seeds ({}..={}), {} effects per strategy; ground truth is the providers' state.  ",
        seeds.len(),
        seeds.first().copied().unwrap_or(0),
        seeds.last().copied().unwrap_or(0),
        results.len() / super::strategies_in(results).max(1),
    );
    let _ = writeln!(out, "Command: `{}`  ", provenance.command);
    let _ = writeln!(
        out,
        "Machine: {}; wall time {:.0} s.\n",
        provenance.machine, provenance.wall_s
    );
    let _ = writeln!(out, "{SEMANTICS}\n");
    let _ = writeln!(out, "## All fault points\n");
    let _ = writeln!(out, "| strategy | {COLUMNS} |");
    let _ = writeln!(out, "{}", separator(13));
    for (strategy, summary) in by_strategy(results) {
        let _ = writeln!(out, "| {} | {} |", strategy.name(), row(&summary));
    }
    let _ = writeln!(out, "\n## By fault point\n");
    let _ = writeln!(out, "| fault point | strategy | {COLUMNS} |");
    let _ = writeln!(out, "{}", separator(14));
    for ((point, strategy), summary) in by_point(results) {
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            point.name(),
            strategy.name(),
            row(&summary)
        );
    }
    let _ = writeln!(out, "\n## Why effects stayed unresolved under the ledger\n");
    let _ = writeln!(out, "| strategy | fault point | reason | effects |");
    let _ = writeln!(out, "|---|---|---|---|");
    for ((point, strategy), summary) in by_point(results) {
        if !strategy.uses_ledger() {
            continue;
        }
        for (reason, count) in &summary.unresolved_reasons {
            let _ = writeln!(
                out,
                "| {} | {} | {reason} | {count} |",
                strategy.name(),
                point.name()
            );
        }
    }
    out
}

fn fields(summary: &Summary) -> serde_json::Value {
    json!({
        "effects": summary.effects,
        "extra_applications": summary.extra_applications,
        "effects_with_extras": summary.effects_with_extras,
        "missing": summary.missing,
        "false_dedup": summary.false_dedup,
        "unresolved": summary.unresolved,
        "escalated": summary.escalated,
        "needless_escalations": summary.needless_escalations,
        "latency_p50_ms": summary.latency_p50_ms,
        "latency_p99_ms": summary.latency_p99_ms,
        "unknown_effects": summary.unknown_effects,
        "unknown_p50_ms": summary.unknown_p50_ms,
        "unknown_p99_ms": summary.unknown_p99_ms,
        "unknown_total_ms": summary.unknown_total_ms,
        "ledger_ops_per_effect": summary.ledger_ops_per_effect,
        "ledger_bytes_per_effect": summary.ledger_bytes_per_effect,
        "unresolved_reasons": summary.unresolved_reasons,
    })
}

/// Every row: per fault point, provider and strategy; per fault point and strategy
/// (provider `all`); per strategy (fault point and provider `all`).
fn rows(results: &[EffectResult]) -> Vec<(String, String, String, Summary)> {
    let mut rows = Vec::new();
    for (strategy, s) in by_strategy(results) {
        rows.push(("all".into(), "all".into(), strategy.name().into(), s));
    }
    for ((point, strategy), s) in by_point(results) {
        rows.push((point.name().into(), "all".into(), strategy.name().into(), s));
    }
    for ((point, kind, strategy), s) in by_point_and_provider(results) {
        let names = (
            point.name().into(),
            kind.name().into(),
            strategy.name().into(),
        );
        rows.push((names.0, names.1, names.2, s));
    }
    rows
}

/// The rows as JSON, with the provenance.
pub fn json(results: &[EffectResult], provenance: &Provenance) -> String {
    let rows: Vec<serde_json::Value> = rows(results)
        .into_iter()
        .map(|(point, provider, strategy, s)| {
            let mut value = fields(&s);
            value["fault_point"] = json!(point);
            value["provider"] = json!(provider);
            value["strategy"] = json!(strategy);
            value
        })
        .collect();
    let document = json!({
        "seeds": provenance.seeds,
        "command": provenance.command,
        "machine": provenance.machine,
        "rows": rows,
    });
    serde_json::to_string_pretty(&document).expect("JSON of plain values")
}

/// The rows as CSV.
pub fn csv(results: &[EffectResult]) -> String {
    let mut out = String::from(
        "fault_point,provider,strategy,effects,extra_applications,effects_with_extras,\
         missing,false_dedup,unresolved,escalated,needless_escalations,latency_p50_ms,\
         latency_p99_ms,unknown_effects,unknown_p50_ms,unknown_p99_ms,unknown_total_ms,\
         ledger_ops_per_effect,ledger_bytes_per_effect\n",
    );
    for (point, provider, strategy, s) in rows(results) {
        let _ = writeln!(
            out,
            "{point},{provider},{strategy},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.2},{:.1}",
            s.effects,
            s.extra_applications,
            s.effects_with_extras,
            s.missing,
            s.false_dedup,
            s.unresolved,
            s.escalated,
            s.needless_escalations,
            s.latency_p50_ms,
            s.latency_p99_ms,
            s.unknown_effects,
            s.unknown_p50_ms,
            s.unknown_p99_ms,
            s.unknown_total_ms,
            s.ledger_ops_per_effect,
            s.ledger_bytes_per_effect
        );
    }
    out
}
