//! Prometheus metrics (issue 15 §2), on `prometheus-client`'s registry (one per server, no
//! global recorder), rendered in the text exposition format for `GET /metrics` (`scrape.rs`,
//! which says who may read them).
//!
//! Families (each per replica: sum them across replicas in queries):
//! - `assent_pending_approvals{risk_tier}` — approvals waiting for a person, counted in the
//!   store at scrape time (so every replica tells the same, and a restart loses nothing);
//! - `assent_verdicts_total{verdict, outcome}` — gated calls by the gatekeeper's verdict
//!   (`allow`, `confirm`, `deny`) and what became of them (`allowed`, `granted`, `held`,
//!   `joined`, `denied`);
//! - `assent_verdict_duration_seconds` — a proposal's verdict and its durable record;
//! - `assent_decisions_total{outcome}` and `assent_time_to_decision_seconds{outcome}` —
//!   approvals settled (`approved`, `rejected`, `expired`, `cancelled`) and how long after
//!   they were raised;
//! - `assent_store_commit_duration_seconds` — each store commit (one per group commit);
//! - `assent_long_poll_waiters` — requests waiting in a long-poll now;
//! - `assent_webhook_deliveries_total{result}` (`delivered`, `failed`) and
//!   `assent_webhook_dead_letters_total`;
//! - `assent_token_redemptions_total{result}` — `redeemed` or the refusal's code in lower case
//!   (`token_used`, `token_mismatch`, …).

use assent_store::ApprovalRecord;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;

/// One label set: `(name, value)` pairs.
type Labels = Vec<(&'static str, String)>;

/// Buckets (seconds) of the fast histograms: verdicts and commits, 100 µs … 2.5 s.
const FAST: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
];
/// Buckets (seconds) of time to decision: 1 s … 1 day.
const HUMAN: [f64; 10] = [
    1.0, 2.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0,
];

/// The server's metric families and the registry that renders them.
pub struct Metrics {
    registry: Registry,
    pending: Family<Labels, Gauge>,
    verdicts: Family<Labels, Counter>,
    verdict_seconds: Histogram,
    decisions: Family<Labels, Counter>,
    decision_seconds: Family<Labels, Histogram>,
    commit_seconds: Histogram,
    waiters: Gauge,
    deliveries: Family<Labels, Counter>,
    dead_letters: Counter,
    redemptions: Family<Labels, Counter>,
    rendering: std::sync::Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every family registered, all at zero.
    pub fn new() -> Self {
        let mut m = Metrics {
            registry: Registry::with_prefix("assent"),
            pending: Family::default(),
            verdicts: Family::default(),
            verdict_seconds: Histogram::new(FAST),
            decisions: Family::default(),
            decision_seconds: Family::new_with_constructor(|| Histogram::new(HUMAN)),
            commit_seconds: Histogram::new(FAST),
            waiters: Gauge::default(),
            deliveries: Family::default(),
            dead_letters: Counter::default(),
            redemptions: Family::default(),
            rendering: std::sync::Mutex::new(()),
        };
        m.register();
        m
    }

    fn register(&mut self) {
        let r = &mut self.registry;
        r.register(
            "pending_approvals",
            "Approvals waiting for a person, by risk tier",
            self.pending.clone(),
        );
        r.register(
            "verdicts",
            "Gated calls by verdict and outcome",
            self.verdicts.clone(),
        );
        r.register_with_unit(
            "verdict_duration",
            "Time to a proposal's verdict and its durable record",
            prometheus_client::registry::Unit::Seconds,
            self.verdict_seconds.clone(),
        );
        r.register(
            "decisions",
            "Approvals settled, by outcome",
            self.decisions.clone(),
        );
        r.register_with_unit(
            "time_to_decision",
            "Time from an approval's request to its decision, by outcome",
            prometheus_client::registry::Unit::Seconds,
            self.decision_seconds.clone(),
        );
        r.register_with_unit(
            "store_commit_duration",
            "Duration of each store commit (one per group commit)",
            prometheus_client::registry::Unit::Seconds,
            self.commit_seconds.clone(),
        );
        r.register(
            "long_poll_waiters",
            "Requests waiting in a long-poll",
            self.waiters.clone(),
        );
        r.register(
            "webhook_deliveries",
            "Webhook delivery attempts by result",
            self.deliveries.clone(),
        );
        r.register(
            "webhook_dead_letters",
            "Webhook events given up on after their last attempt",
            self.dead_letters.clone(),
        );
        r.register(
            "token_redemptions",
            "Token redemptions by result",
            self.redemptions.clone(),
        );
    }

    /// A gated call's `verdict` (`allow`, `confirm`, `deny`) and `outcome`, reached in
    /// `took`.
    pub fn verdict(&self, verdict: &str, outcome: &str, took: Duration) {
        self.verdicts
            .get_or_create(&vec![
                ("verdict", verdict.to_string()),
                ("outcome", outcome.to_string()),
            ])
            .inc();
        self.verdict_seconds.observe(took.as_secs_f64());
    }

    /// Approval `a` was settled (its status is the outcome; a pending one is not counted).
    pub fn decided(&self, a: &ApprovalRecord) {
        if a.status == assent_core::approval::ApprovalStatus::Pending {
            return;
        }
        let outcome = vec![("outcome", a.status.as_str().to_string())];
        self.decisions.get_or_create(&outcome).inc();
        let at = a.decided_at.unwrap_or_else(crate::now_ms);
        let secs = at.saturating_sub(a.requested_at).max(0) as f64 / 1000.0;
        self.decision_seconds.get_or_create(&outcome).observe(secs);
    }

    /// A store commit took `took`.
    pub fn commit(&self, took: Duration) {
        self.commit_seconds.observe(took.as_secs_f64());
    }

    /// A webhook delivery attempt ended: delivered or not; `dead` when it was the last.
    pub fn delivery(&self, delivered: bool, dead: bool) {
        let result = if delivered { "delivered" } else { "failed" };
        self.deliveries
            .get_or_create(&vec![("result", result.to_string())])
            .inc();
        if dead {
            self.dead_letters.inc();
        }
    }

    /// A redemption ended with `result` (`redeemed`, or the refusal's code).
    pub fn redemption(&self, result: &str) {
        self.redemptions
            .get_or_create(&vec![("result", result.to_ascii_lowercase())])
            .inc();
    }

    /// The text exposition with the gauges read now: `pending` per tier (every tier listed,
    /// 0 when none waits) and `waiting`. One render at a time, so two scrapes never see each
    /// other's half-set gauges.
    pub fn render(&self, pending: &[(String, i64)], waiting: usize) -> String {
        let _one = self.rendering.lock().unwrap_or_else(|p| p.into_inner());
        self.pending.clear();
        for tier in ["R0", "R1", "R2", "R3", "R4"] {
            self.pending
                .get_or_create(&vec![("risk_tier", tier.to_string())])
                .set(0);
        }
        for (tier, n) in pending {
            self.pending
                .get_or_create(&vec![("risk_tier", tier.clone())])
                .set(*n);
        }
        self.waiters.set(waiting.min(i64::MAX as usize) as i64);
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Has the store report each commit's duration to `metrics`.
pub fn observe_store(store: &assent_store::Store, metrics: &Arc<Metrics>) {
    let m = metrics.clone();
    store.observe_commits(Box::new(move |d| m.commit(d)));
}
