//! Counting ledger operations per effect, from the nodes' own logs.
//!
//! Every ledger node opens a `ledger` span per command it receives, carrying the effect
//! key (`node/src/ledger_service.rs`). A tracing layer counts those spans per effect on
//! the run's thread (every simulated machine of a run runs on it), so the benchmark can
//! report ledger commands per effect without wrapping the client library: claims,
//! heartbeats, reports, reconciliation requests and observations, each time a node
//! received one (a transport retry counts again). Reads (`get`, used while waiting) open
//! no such span and are not counted.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::Subscriber;
use tracing_subscriber::filter::{DynFilterFn, EnvFilter};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

thread_local! {
    static COUNTS: RefCell<BTreeMap<String, u64>> = RefCell::default();
}

/// Forgets the counts of this thread.
pub fn reset() {
    COUNTS.with(|c| c.borrow_mut().clear());
}

/// The counts of this thread since the last reset, by effect key, and resets them.
pub fn take() -> BTreeMap<String, u64> {
    COUNTS.with(|c| std::mem::take(&mut *c.borrow_mut()))
}

/// Installs the counting layer beside the usual log output (`RUST_LOG`, errors only by
/// default) as the process's subscriber. Without it every count is zero.
pub fn install() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("error"));
    let only_ledger_spans = DynFilterFn::new(|metadata, _| is_ledger_span(metadata))
        .with_callsite_filter(|metadata| {
            if is_ledger_span(metadata) {
                tracing::subscriber::Interest::always()
            } else {
                tracing::subscriber::Interest::never()
            }
        });
    let _ = tracing_subscriber::registry()
        .with(OpCounter.with_filter(only_ledger_spans))
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(filter),
        )
        .try_init();
}

fn is_ledger_span(metadata: &tracing::Metadata<'_>) -> bool {
    metadata.is_span() && metadata.name() == "ledger"
}

struct OpCounter;

impl<S: Subscriber> Layer<S> for OpCounter {
    fn on_new_span(&self, attrs: &Attributes<'_>, _id: &Id, _ctx: Context<'_, S>) {
        let mut effect = EffectField(None);
        attrs.record(&mut effect);
        if let Some(key) = effect.0.filter(|k| !k.is_empty()) {
            COUNTS.with(|c| *c.borrow_mut().entry(key).or_default() += 1);
        }
    }
}

struct EffectField(Option<String>);

impl Visit for EffectField {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "effect" {
            self.0 = Some(format!("{value:?}"));
        }
    }
}
