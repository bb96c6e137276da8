//! The dashboard's pages, rendered on the server from templates compiled into the binary
//! (askama; `templates/`): the login form, the page, and the panels the page's script
//! fetches again every 2 s. Numbers are turned into words here ("3 s", "2 min"), so the
//! templates only place them.

use askama::Template;

use crate::app::operators::Overview;
use crate::db::operator_view as view;
use crate::domain::job::{JobKind, JobStatus};
use crate::domain::video::VideoStatus;

/// The login form.
#[derive(Template)]
#[template(path = "login.html", config = "src/http/admin/askama.toml")]
pub struct LoginPage {
    /// Why the last try failed.
    pub message: Option<&'static str>,
}

/// The page around the panels.
#[derive(Template)]
#[template(path = "dashboard.html", config = "src/http/admin/askama.toml")]
pub struct DashboardPage {
    /// Who is logged in.
    pub subject: String,
    /// This session's CSRF token.
    pub csrf: String,
    /// The first rendering of the panels.
    pub panels: String,
}

/// Every panel, from one [`Overview`].
#[derive(Template)]
#[template(path = "panels.html", config = "src/http/admin/askama.toml")]
pub struct Panels {
    csrf: String,
    queue: Vec<view::StatusCount>,
    oldest_pending: String,
    outbox_pending: i64,
    outbox_oldest: String,
    sweep: Vec<SweepLine>,
    breakers: Vec<(String, String)>,
    chart: String,
    nodes: Vec<NodeLine>,
    running: Vec<RunningLine>,
    attention: Vec<JobRow>,
    recent: Vec<JobRow>,
    endpoints: Vec<EndpointLine>,
    recordings: Vec<RecordingLine>,
}

struct SweepLine {
    axis: String,
    pending: i64,
    retrying: i64,
    oldest: String,
}

struct NodeLine {
    role: String,
    node_id: String,
    seen: String,
    up: String,
    slots: i32,
    holding: String,
    detail: String,
    /// Not seen for three report intervals: probably gone.
    stale: bool,
}

struct RunningLine {
    job_id: i64,
    video_id: String,
    kind: String,
    run: i32,
    attempt: i32,
    node_id: String,
    running: String,
    lease_left: String,
    expired: bool,
}

struct JobRow {
    job_id: i64,
    video_id: String,
    owner: String,
    kind: String,
    status: String,
    video_status: String,
    run: i32,
    attempts: i32,
    error_code: String,
    error_message: String,
    enqueued: String,
    retryable: bool,
    cancellable: bool,
}

struct EndpointLine {
    owner: String,
    url: String,
    pending: i64,
    oldest: String,
    lag: String,
    retrying: i64,
    given_up: i64,
    disabled: Option<String>,
}

struct RecordingLine {
    id: String,
    owner: String,
    state: String,
    node_id: String,
    segments: i64,
    uploaded: i64,
    idle: String,
}

/// A duration in words: `850 ms`, `12 s`, `4 min`, `3 h`, `2 d`.
pub fn age(secs: f64) -> String {
    let secs = secs.max(0.0);
    if secs < 1.0 {
        format!("{} ms", (secs * 1000.0).round())
    } else if secs < 120.0 {
        format!("{} s", secs.round())
    } else if secs < 7200.0 {
        format!("{} min", (secs / 60.0).round())
    } else if secs < 172_800.0 {
        format!("{} h", (secs / 3600.0).round())
    } else {
        format!("{} d", (secs / 86_400.0).round())
    }
}

fn age_or_dash(secs: Option<f64>) -> String {
    secs.map_or_else(|| "—".to_owned(), age)
}

/// A Retry or Cancel button: a form that posts with this session's CSRF token.
fn job_button(job_id: &i64, action: &str, csrf: &str) -> String {
    let label = if action == "retry" { "Retry" } else { "Cancel" };
    format!(
        "<form method=\"post\" action=\"/admin/jobs/{job_id}/{action}\" class=\"inline\" \
         data-job-action><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <button type=\"submit\" value=\"{action}\">{label}</button></form>"
    )
}

/// A job's kind as the dashboard names it: a part with its number (`chunk 3`), a split
/// video's own job with its parts done (`stitch, 4/14 parts`).
fn kind_shown(kind: JobKind, part: Option<i32>, parts: Option<(i64, i64)>) -> String {
    match (part, parts) {
        (Some(part), _) => format!("{kind} {part}"),
        (None, Some((done, total))) => format!("{kind}, {done}/{total} parts"),
        (None, None) => kind.to_string(),
    }
}

impl JobRow {
    fn from(line: view::JobLine) -> Self {
        let status = line.status;
        // Retry and cancel act on a whole video, through its own job, never on a part.
        let whole = line.part.is_none();
        let retryable = whole
            && (status == JobStatus::Dead
                || (status == JobStatus::Completed && line.video_status == VideoStatus::Failed));
        let cancellable = whole && matches!(status, JobStatus::Pending | JobStatus::Processing);
        Self {
            job_id: line.job_id,
            video_id: line.video_id.to_string(),
            owner: line.owner,
            kind: kind_shown(line.kind, line.part, line.parts_done.zip(line.parts)),
            status: line.status.to_string(),
            video_status: line.video_status.to_string(),
            run: line.run,
            attempts: line.attempts,
            error_code: line.error_code.map(|c| c.to_string()).unwrap_or_default(),
            error_message: line.error_message.unwrap_or_default(),
            enqueued: format!(
                "{} ago",
                age((chrono::Utc::now() - line.enqueued_at).as_seconds_f64())
            ),
            retryable,
            cancellable,
        }
    }
}

/// The time-to-READY chart: p50 and p99 per 5-minute slice as two lines of an inline SVG.
fn chart(slices: &[view::ReadySlice]) -> String {
    const W: f64 = 600.0;
    const H: f64 = 120.0;
    const LEFT: f64 = 44.0;
    let top = slices
        .iter()
        .filter_map(|s| s.p99_secs)
        .fold(0.0_f64, f64::max)
        .max(1.0);
    // The last slice (now) sits inside the frame, where its dot stays whole.
    const RIGHT: f64 = 8.0;
    let step = (W - LEFT - RIGHT) / (slices.len().max(2) - 1) as f64;
    let points = |pick: fn(&view::ReadySlice) -> Option<f64>| -> Vec<(f64, f64)> {
        slices
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                pick(s).map(|v| (LEFT + i as f64 * step, H - v / top * (H - 10.0)))
            })
            .collect()
    };
    // A line through the slices that had READY videos, and a dot on each (one slice alone
    // draws no line).
    let line = |pick: fn(&view::ReadySlice) -> Option<f64>, class: &str| {
        let at = points(pick);
        let path: Vec<String> = at.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let dots: String = at
            .iter()
            .map(|(x, y)| {
                format!("<circle class=\"{class}\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"2.5\"/>")
            })
            .collect();
        format!(
            "<polyline class=\"{class}\" points=\"{}\"/>{dots}",
            path.join(" ")
        )
    };
    let total: i64 = slices.iter().map(|s| s.ready).sum();
    format!(
        "<svg class=\"chart\" viewBox=\"0 0 {W} {h}\" role=\"img\" aria-label=\"time to READY\">\
         <line x1=\"{LEFT}\" y1=\"{H}\" x2=\"{W}\" y2=\"{H}\"/><line x1=\"{LEFT}\" y1=\"10\" x2=\"{W}\" y2=\"10\"/>\
         <text x=\"0\" y=\"14\">{top}</text><text x=\"0\" y=\"{H}\">0</text>\
         <text x=\"{LEFT}\" y=\"{label}\">−60 min</text><text x=\"{end}\" y=\"{label}\">now · {total} READY</text>\
         {p99}{p50}</svg>",
        h = H + 16.0,
        top = age(top),
        label = H + 14.0,
        end = W - 110.0,
        p99 = line(|s| s.p99_secs, "p99"),
        p50 = line(|s| s.p50_secs, "p50"),
    )
}

impl Panels {
    /// The panels of `overview`, with buttons carrying `csrf`.
    pub fn new(overview: Overview, csrf: &str) -> Self {
        let breakers = overview
            .nodes
            .iter()
            .filter(|n| n.role == "sweeper" && n.seen_secs < 60.0)
            .map(|n| {
                let state = n.detail["breaker"].as_str().unwrap_or("unknown").to_owned();
                (n.node_id.clone(), state)
            })
            .collect();
        Self {
            csrf: csrf.to_owned(),
            queue: overview.queue,
            oldest_pending: age_or_dash(overview.oldest_pending_secs),
            outbox_pending: overview.outbox.pending,
            outbox_oldest: age_or_dash(overview.outbox.oldest_secs),
            sweep: overview.sweep.into_iter().map(SweepLine::from).collect(),
            breakers,
            chart: chart(&overview.ready),
            nodes: overview.nodes.into_iter().map(NodeLine::from).collect(),
            running: overview
                .running
                .into_iter()
                .map(RunningLine::from)
                .collect(),
            attention: overview.attention.into_iter().map(JobRow::from).collect(),
            recent: overview.recent.into_iter().map(JobRow::from).collect(),
            endpoints: overview
                .endpoints
                .into_iter()
                .map(EndpointLine::from)
                .collect(),
            recordings: overview
                .recordings
                .into_iter()
                .map(RecordingLine::from)
                .collect(),
        }
    }
}

impl From<view::SweepBacklog> for SweepLine {
    fn from(s: view::SweepBacklog) -> Self {
        Self {
            axis: s.axis,
            pending: s.pending,
            retrying: s.retrying,
            oldest: age_or_dash(s.oldest_secs),
        }
    }
}

impl From<view::NodeReport> for NodeLine {
    fn from(n: view::NodeReport) -> Self {
        Self {
            stale: n.seen_secs > 15.0,
            seen: format!("{} ago", age(n.seen_secs)),
            up: age(n.up_secs),
            detail: describe_detail(&n.detail),
            holding: n.holding.unwrap_or_default(),
            role: n.role,
            node_id: n.node_id,
            slots: n.slots,
        }
    }
}

impl From<view::RunningAttempt> for RunningLine {
    fn from(r: view::RunningAttempt) -> Self {
        Self {
            job_id: r.job_id,
            video_id: r.video_id.to_string(),
            kind: kind_shown(r.kind, r.part, None),
            run: r.run,
            attempt: r.attempt,
            node_id: r.node_id,
            running: age(r.running_secs),
            lease_left: if r.lease_left_secs < 0.0 {
                format!("expired {} ago", age(-r.lease_left_secs))
            } else {
                age(r.lease_left_secs)
            },
            expired: r.lease_left_secs < 0.0,
        }
    }
}

impl From<view::EndpointHealth> for EndpointLine {
    fn from(e: view::EndpointHealth) -> Self {
        Self {
            owner: e.owner,
            url: e.url,
            pending: e.pending,
            oldest: age_or_dash(e.oldest_pending_secs),
            lag: age_or_dash(e.lag_p50_secs),
            retrying: e.retrying,
            given_up: e.given_up_last_day,
            disabled: e.disabled_at.map(|at| {
                format!(
                    "{} ({} ago)",
                    e.disabled_reason.unwrap_or_default(),
                    age((chrono::Utc::now() - at).as_seconds_f64())
                )
            }),
        }
    }
}

impl From<view::OpenRecording> for RecordingLine {
    fn from(r: view::OpenRecording) -> Self {
        Self {
            id: r.id.to_string(),
            owner: r.owner,
            state: r.state.to_string(),
            node_id: r.node_id,
            segments: r.segments,
            uploaded: r.uploaded,
            idle: age_or_dash(r.idle_secs),
        }
    }
}

/// A node's own report as `key: value` pairs.
fn describe_detail(detail: &serde_json::Value) -> String {
    match detail.as_object() {
        Some(fields) => fields
            .iter()
            .filter(|(key, _)| key.as_str() != "status" || fields.len() == 1)
            .map(|(key, value)| match value {
                serde_json::Value::String(text) => format!("{key}: {text}"),
                other => format!("{key}: {other}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_videos_jobs_name_their_part_and_progress() {
        assert_eq!(kind_shown(JobKind::Chunk, Some(3), None), "chunk 3");
        assert_eq!(
            kind_shown(JobKind::Stitch, None, Some((4, 14))),
            "stitch, 4/14 parts"
        );
        assert_eq!(kind_shown(JobKind::Encode, None, None), "encode");
    }

    #[test]
    fn ages_read_as_words_at_every_scale() {
        assert_eq!(age(0.25), "250 ms");
        assert_eq!(age(12.4), "12 s");
        assert_eq!(age(600.0), "10 min");
        assert_eq!(age(3.0 * 3600.0), "3 h");
        assert_eq!(age(3.0 * 86_400.0), "3 d");
        assert_eq!(age(-5.0), "0 ms");
    }

    #[test]
    fn the_job_button_posts_the_sessions_csrf_token_to_the_jobs_action() {
        let html = job_button(&42, "retry", "abc123");
        assert!(html.contains("action=\"/admin/jobs/42/retry\""), "{html}");
        assert!(html.contains("name=\"csrf\" value=\"abc123\""), "{html}");
        assert!(html.contains(">Retry</button>"), "{html}");
    }

    #[test]
    fn a_node_report_is_shown_as_its_fields() {
        let detail = serde_json::json!({ "status": "ok", "breaker": "open", "in_queue": 3 });
        assert_eq!(describe_detail(&detail), "breaker: open, in_queue: 3");
    }
}
