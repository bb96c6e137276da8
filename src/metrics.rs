//! Prometheus metrics: the process-wide histograms and counters the hot paths record into,
//! and [`Exposition`], the registry one scrape of `/metrics` is rendered from.
//!
//! Every role's `/metrics` is built afresh per scrape: the long-lived families below are
//! registered into it together with gauges read from what the role knows at that moment (its
//! counters, or for the API a few counts from the database). The crate's registry and text
//! encoder do the exposition, so names, escaping and the format are the crate's, not ours.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::core::Collector;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry,
    TextEncoder,
};

/// Buckets for waits measured in milliseconds to seconds (claims, HTTP, deliveries).
const FAST_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Buckets for work measured in seconds to an hour (encodes, time to READY).
const SLOW_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

fn histogram(name: &str, help: &str, buckets: &[f64]) -> Histogram {
    Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))
        .expect("a valid histogram")
}

fn histogram_vec(name: &str, help: &str, labels: &[&str], buckets: &[f64]) -> HistogramVec {
    HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        labels,
    )
    .expect("a valid histogram")
}

fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("a valid counter")
}

/// HTTP requests the API answered, by route pattern, method and status.
pub static HTTP_REQUESTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "vidq_http_requests_total",
        "HTTP requests answered, by route pattern, method and status.",
        &["route", "method", "status"],
    )
});

/// How long the API took to answer, by route pattern and method.
pub static HTTP_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    histogram_vec(
        "vidq_http_request_duration_seconds",
        "Time from a request's head to its response's head, by route pattern and method.",
        &["route", "method"],
        FAST_BUCKETS,
    )
});

/// How long one claim statement took (found a job or not).
pub static CLAIM_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "vidq_worker_claim_duration_seconds",
        "Time one claim statement took, from asking for a connection to its answer.",
        FAST_BUCKETS,
    )
});

/// How long an attempt's work took, by job kind and how it ended.
pub static ATTEMPT_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    histogram_vec(
        "vidq_worker_attempt_duration_seconds",
        "Time an attempt's work took (download, probe, encode, upload), by job kind and outcome.",
        &["kind", "outcome"],
        SLOW_BUCKETS,
    )
});

/// From the job's enqueueing (the confirm) to READY.
pub static TIME_TO_READY_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "vidq_time_to_ready_seconds",
        "Time from a job's enqueueing (the upload's confirm) to its video's READY commit.",
        SLOW_BUCKETS,
    )
});

/// Lease renewals that failed or timed out (not the ones that found the claim gone).
pub static HEARTBEAT_FAILURES: LazyLock<IntCounter> = LazyLock::new(|| {
    IntCounter::new(
        "vidq_worker_heartbeat_failures_total",
        "Lease renewals that failed or timed out; a whole lease of them loses the claim.",
    )
    .expect("a valid counter")
});

/// Split videos sent to the whole encode after their parts began, by reason
/// (`crate::domain::split::Fallback::label`).
pub static SPLIT_FALLBACKS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "vidq_worker_split_fallbacks_total",
        "Split videos encoded again as one job: a chunk or the stitch failed its checks, or a part failed where the whole encode might not.",
        &["reason"],
    )
});

/// Live files that arrived whole and were lost: the database stayed away past
/// `VIDQ_LIVE_DB_PATIENCE_SECS`, so their rows could not be written.
pub static LIVE_FILES_LOST: LazyLock<IntCounter> = LazyLock::new(|| {
    IntCounter::new(
        "vidq_live_files_lost_total",
        "Live files (segments, init segments) answered 503 because the database stayed away past VIDQ_LIVE_DB_PATIENCE_SECS.",
    )
    .expect("a valid counter")
});

/// Bytes read from the bodies of uploads through vidq (tus `POST`/`PATCH`, single `PUT`),
/// kept or not: against the bytes of the files, what resumes and retries cost.
pub static UPLOAD_BODY_BYTES: LazyLock<IntCounter> = LazyLock::new(|| {
    IntCounter::new(
        "vidq_upload_body_bytes_total",
        "Bytes read from upload bodies (tus POST/PATCH, single PUT), whether kept or not.",
    )
    .expect("a valid counter")
});

/// Claims found gone (by a heartbeat, or by a fence at the attempt's end).
pub static CLAIMS_LOST: LazyLock<IntCounterVec> = LazyLock::new(|| {
    let family = counter_vec(
        "vidq_worker_claims_lost_total",
        "Claims this process found gone (ClaimLost), by where it noticed.",
        &["at"],
    );
    // Both rows from the start, so a dashboard sees a zero rather than no series.
    for at in ["heartbeat", "finalize"] {
        family.with_label_values(&[at]);
    }
    family
});

/// Deliveries the relay finished a try of, by sink and outcome.
pub static DELIVERIES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "vidq_relay_deliveries_total",
        "Delivery tries, by sink (webhook, nats) and outcome (delivered, retry, exhausted, discarded, gone).",
        &["sink", "outcome"],
    )
});

/// From an event's commit to its delivery.
pub static DELIVERY_LAG_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    histogram_vec(
        "vidq_relay_delivery_lag_seconds",
        "Time from an event's commit to its delivery being acknowledged, by sink.",
        &["sink"],
        FAST_BUCKETS,
    )
});

/// How many confirms each of the API's confirm transactions committed together.
pub static CONFIRM_BATCH_SIZE: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "vidq_confirm_batch_size",
        "Confirms committed together in one transaction (1 on a quiet node; more while PostgreSQL is the bottleneck).",
        &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1000.0],
    )
});

/// How many status reads each of the API's status read statements answered together.
pub static STATUS_READ_BATCH_SIZE: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "vidq_status_read_batch_size",
        "Status reads (GET /v1/videos/{id}) answered by one statement (1 on a quiet node; more while reads queue for the database).",
        &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0],
    )
});

/// How many READY finalizes each of a worker's finalize transactions committed together.
pub static FINALIZE_BATCH_SIZE: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "vidq_finalize_batch_size",
        "READY finalizes of one worker committed together in one transaction (only batches of 2 or more; a finalize alone is not counted).",
        &[2.0, 4.0, 8.0, 16.0, 32.0, 64.0],
    )
});

/// Records a duration into a histogram.
pub fn observe(histogram: &Histogram, took: Duration) {
    histogram.observe(took.as_secs_f64());
}

/// One scrape's registry: add families, then [`Exposition::render`] them.
pub struct Exposition {
    registry: Registry,
}

impl Default for Exposition {
    fn default() -> Self {
        Self::new()
    }
}

impl Exposition {
    /// An empty registry.
    pub fn new() -> Self {
        Self {
            registry: Registry::new(),
        }
    }

    /// Adds a long-lived family (one of the statics above, or a role's own).
    pub fn family(&self, collector: &(impl Collector + Clone + 'static)) -> &Self {
        // Registering the same family twice in one scrape is a programming error worth
        // seeing in tests, not a reason to fail the scrape.
        if let Err(error) = self.registry.register(Box::new(collector.clone())) {
            tracing::debug!(%error, "metric family registered twice");
        }
        self
    }

    /// The outbox's backlog (undelivered events, and the age of the oldest in seconds) as
    /// two gauges: a relay's health listener and the API's `/metrics` show the same two.
    pub fn outbox_backlog(&self, pending: i64, oldest_secs: Option<f64>) -> &Self {
        self.gauge(
            "vidq_outbox_backlog",
            "Events not yet delivered: unrouted outbox rows plus deliveries waiting or in flight.",
            pending as f64,
        )
        .gauge(
            "vidq_outbox_oldest_pending_seconds",
            "Seconds since the oldest undelivered event committed (0: none waits).",
            oldest_secs.unwrap_or(0.0),
        )
    }

    /// A gauge with no labels.
    pub fn gauge(&self, name: &str, help: &str, value: f64) -> &Self {
        let gauge = prometheus::Gauge::new(name, help).expect("a valid gauge");
        gauge.set(value);
        self.family(&gauge)
    }

    /// A gauge with one label, one row per `(label value, value)`.
    pub fn gauge_by<'a>(
        &self,
        name: &str,
        help: &str,
        label: &str,
        rows: impl IntoIterator<Item = (&'a str, f64)>,
    ) -> &Self {
        let family =
            prometheus::GaugeVec::new(Opts::new(name, help), &[label]).expect("a valid gauge");
        for (value_of_label, value) in rows {
            family.with_label_values(&[value_of_label]).set(value);
        }
        self.family(&family)
    }

    /// A counter with no labels, at `value` (counted by the role itself).
    pub fn counter(&self, name: &str, help: &str, value: u64) -> &Self {
        let counter = IntCounter::new(name, help).expect("a valid counter");
        counter.inc_by(value);
        self.family(&counter)
    }

    /// A counter with one label, one row per `(label value, value)`.
    pub fn counter_by<'a>(
        &self,
        name: &str,
        help: &str,
        label: &str,
        rows: impl IntoIterator<Item = (&'a str, u64)>,
    ) -> &Self {
        let family = counter_vec(name, help, &[label]);
        for (value_of_label, value) in rows {
            family.with_label_values(&[value_of_label]).inc_by(value);
        }
        self.family(&family)
    }

    /// Prometheus' text format of everything added.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        if let Err(error) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::warn!(%error, "could not encode the metrics");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

/// The content type of [`Exposition::render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exposition_renders_counters_gauges_and_histograms_in_the_text_format() {
        let hist = histogram("vidq_test_seconds", "A test histogram.", FAST_BUCKETS);
        hist.observe(0.003);
        let exposition = Exposition::new();
        exposition
            .gauge("vidq_test_gauge", "A gauge.", 2.5)
            .counter_by(
                "vidq_test_total",
                "A counter.",
                "outcome",
                [("ok", 3), ("bad", 1)],
            )
            .family(&hist);
        let text = exposition.render();
        assert!(
            text.contains("# TYPE vidq_test_gauge gauge\nvidq_test_gauge 2.5\n"),
            "{text}"
        );
        assert!(
            text.contains("vidq_test_total{outcome=\"ok\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("vidq_test_total{outcome=\"bad\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("vidq_test_seconds_bucket{le=\"0.005\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("vidq_test_seconds_bucket{le=\"0.0025\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("vidq_test_seconds_count 1\n"), "{text}");
    }
}
