//! `vidq bench live --protocol hls|rtmp`: how soon a live segment is visible in the playlist
//! vidq serves, how many concurrent broadcasts one API process holds before that latency's
//! p99 passes a second, and what the API process costs meanwhile. A real `vidq api` process
//! (its ingest listener spooling to `--spool-dir`, its RTMP listener on a port of its own)
//! and a real `vidq sweeper` of the same node land the files in the in-process S3; for each
//! step of `--streams`, that many FFmpeg processes push one clip in real time (`-re`, stream
//! copy) at once: with `hls`, as fMP4 HLS PUTs of 4 s segments; with `rtmp`, as FLV to the
//! RTMP listener, whose FFmpeg child per stream makes 2 s segments. The bench polls every
//! stream's playlist every `--poll-ms`. A segment's latency is from the moment its encoder
//! finished it (by the pushing FFmpeg's own `-progress` clock: its last report still short
//! of the segment's end, so never later than the true moment) to the first poll whose
//! playlist lists it; both bounds err upward, by at most a report period and a poll
//! interval. A negative latency fails the run: it would be a fault in the method. The p99
//! from the segment's arrival (its ledger row's `received_at`, written once the file is
//! whole and fsynced) is reported beside it, vidq's own share. The API's CPU is its own and
//! its children's (the RTMP streams' FFmpeg) over the step, as a share of one core;
//! its RSS and its children's PSS (shared libraries counted once) are sampled at every poll,
//! the peaks reported.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use chrono::{DateTime, Utc};
use clap::Args;

use super::encoder_clock::{self, EncoderClock};
use super::stats::{median, percentile};
use super::{BenchS3, Scratch};
use crate::domain::ids::RecordingId;
use crate::sync::Locked;

/// `vidq bench live`.
#[derive(Debug, Args)]
pub struct LiveBenchArgs {
    /// How the encoders send: `hls` (HTTP PUT of fMP4 HLS, 4 s segments) or `rtmp` (FLV to the
    /// RTMP listener, 2 s segments).
    #[arg(long, default_value = "hls", value_parser = ["hls", "rtmp"])]
    pub protocol: String,
    /// Concurrent broadcasts of each step; the bench stops after the first step whose p99
    /// passes 1 s.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32")]
    pub streams: Vec<u32>,
    /// Length of each broadcast in seconds.
    #[arg(long, default_value_t = 24)]
    pub seconds: u32,
    /// Rounds of each step (the medians of the rounds' figures are reported).
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
    /// How often each stream's playlist is read, in milliseconds.
    #[arg(long = "poll-ms", default_value_t = 100)]
    pub poll_ms: u64,
    /// Where the API spools (emptied before and after).
    #[arg(long = "spool-dir", default_value = "target/bench-live-spool")]
    pub spool_dir: PathBuf,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: super::ServerArgs,
}

/// Runs the benchmark.
pub async fn run(args: LiveBenchArgs) -> anyhow::Result<()> {
    ensure!(
        !args.streams.is_empty() && args.seconds >= 8,
        "give at least one step and 8 s or more"
    );
    let scratch = Scratch::create(&args.server.database_url, "live").await?;
    let result = measure(&args, &scratch).await;
    scratch.drop_now().await;
    let _ = std::fs::remove_dir_all(&args.spool_dir);
    result
}

/// One step's result.
struct Step {
    streams: u32,
    segments: usize,
    p50: Duration,
    p99: Duration,
    max: Duration,
    /// p99 from the segment's arrival at the API (vidq's own share of the latency).
    p99_from_arrival: Duration,
    missing: usize,
    /// The API process and its children, in cores (1.0: one core busy all along).
    cpu: f64,
    /// Peak RSS of the API process, and PSS of its children together, in MiB.
    rss_mib: (f64, f64),
}

impl LiveBenchArgs {
    fn rtmp(&self) -> bool {
        self.protocol == "rtmp"
    }

    /// Segment length the step's recordings get.
    fn segment_secs(&self) -> u32 {
        if self.rtmp() { 2 } else { 4 }
    }
}

async fn measure(args: &LiveBenchArgs, scratch: &Scratch) -> anyhow::Result<()> {
    let s3 = BenchS3::start().await?;
    let pool = crate::db::connect(&scratch.url, 2).await?;
    let (_, key) = crate::app::users::create_user(&pool, "bench").await?;
    let _ = std::fs::remove_dir_all(&args.spool_dir);
    std::fs::create_dir_all(&args.spool_dir)?;
    let spool = std::fs::canonicalize(&args.spool_dir)?;
    let clips = tempfile::tempdir()?;
    let clip = make_clip(clips.path(), args.seconds).await?;
    let (http, ingest, rtmp) = (
        super::free_port()?,
        super::free_port()?,
        super::free_port()?,
    );
    let mut api = child("api", scratch, &s3, &spool)?
        .arg("--no-migrate")
        .env("VIDQ_HTTP_ADDR", format!("127.0.0.1:{http}"))
        .env("VIDQ_INGEST_ADDR", format!("127.0.0.1:{ingest}"))
        .env("VIDQ_RTMP_ADDR", format!("127.0.0.1:{rtmp}"))
        .env("VIDQ_LIVE_GRACE_SECS", "2")
        // Each step opens recordings before the last step's have settled: the bench's one
        // user holds more at once than the default per-user cap.
        .env("VIDQ_MAX_OPEN_RECORDINGS_PER_USER", "100000")
        .spawn()
        .context("starting vidq api")?;
    let mut sweeper = child("sweeper", scratch, &s3, &spool)?
        .spawn()
        .context("starting vidq sweeper")?;
    let base = format!("http://127.0.0.1:{http}");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(256)
        .build()?;
    super::wait_healthy(&base, Duration::from_secs(30), Some(&mut api))
        .await
        .context("vidq api did not start")?;
    println!(
        "vidq bench live --protocol {}: {} s broadcasts of {} s segments (FFmpeg -re, stream copy), playlists read every {} ms\n",
        args.protocol,
        args.seconds,
        args.segment_secs(),
        args.poll_ms
    );
    println!(
        "| streams | segments a round | p50 | p99 | max | p99 of each round | p99 from arrival | not seen | API CPU (with its children) | API RSS / children's PSS |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let api_pid = api.id().context("the API process's pid")?;
    let mut held = 0;
    let mut steps = Vec::new();
    for &streams in &args.streams {
        let mut rounds = Vec::new();
        for _ in 0..args.rounds.max(1) {
            let target = Target {
                base: &base,
                key: key.reveal(),
                clip: &clip,
                api_pid,
            };
            rounds.push(one_step(&client, &target, streams, args, &pool).await?);
        }
        let med = |f: fn(&Step) -> Duration| {
            Duration::from_secs_f64(median(
                &rounds
                    .iter()
                    .map(|r| f(r).as_secs_f64())
                    .collect::<Vec<_>>(),
            ))
        };
        let step = Step {
            streams,
            segments: rounds[0].segments,
            p50: med(|r| r.p50),
            p99: med(|r| r.p99),
            max: med(|r| r.max),
            p99_from_arrival: med(|r| r.p99_from_arrival),
            missing: rounds.iter().map(|r| r.missing).sum(),
            cpu: median(&rounds.iter().map(|r| r.cpu).collect::<Vec<_>>()),
            rss_mib: (
                median(&rounds.iter().map(|r| r.rss_mib.0).collect::<Vec<_>>()),
                median(&rounds.iter().map(|r| r.rss_mib.1).collect::<Vec<_>>()),
            ),
        };
        let each: Vec<String> = rounds
            .iter()
            .map(|r| r.p99.as_millis().to_string())
            .collect();
        println!(
            "| {} | {} | {} ms | {} ms | {} ms | {} | {} ms | {} | {:.0}% of a core | {:.0} / {:.0} MiB |",
            step.streams,
            step.segments,
            step.p50.as_millis(),
            step.p99.as_millis(),
            step.max.as_millis(),
            each.join(" / "),
            step.p99_from_arrival.as_millis(),
            step.missing,
            step.cpu * 100.0,
            step.rss_mib.0,
            step.rss_mib.1,
        );
        let within = step.p99 <= Duration::from_secs(1) && step.missing == 0;
        steps.push(step);
        if !within {
            break;
        }
        held = streams;
    }
    println!(
        "\none API process held {held} concurrent streams with the encoder -> playlist p99 (median of {} rounds) at or under 1 s{}",
        args.rounds.max(1),
        if steps.last().is_some_and(|s| s.streams == held) {
            " (the largest step tried)"
        } else {
            ""
        }
    );
    let _ = api.kill().await;
    let _ = sweeper.kill().await;
    s3.stop().await;
    Ok(())
}

/// Where a step's broadcasts go.
struct Target<'a> {
    base: &'a str,
    key: &'a str,
    clip: &'a Path,
    api_pid: u32,
}

/// `streams` broadcasts at once; the latency of every segment of every one.
async fn one_step(
    client: &reqwest::Client,
    target: &Target<'_>,
    streams: u32,
    args: &LiveBenchArgs,
    pool: &crate::db::DbPool,
) -> anyhow::Result<Step> {
    let mut recordings = Vec::new();
    for _ in 0..streams {
        let created: serde_json::Value = client
            .post(format!("{}/v1/live", target.base))
            .bearer_auth(target.key)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let text = |field: &str| {
            created[field]
                .as_str()
                .map(str::to_owned)
                .with_context(|| field.to_owned())
        };
        let push_to = if args.rtmp() {
            format!("{}/{}", text("rtmp_url")?, text("stream_key")?)
        } else {
            format!("{}index.m3u8", text("ingest_url")?)
        };
        recordings.push((
            text("id")?.parse::<RecordingId>()?,
            push_to,
            text("playback_url")?,
        ));
    }
    let cpu_before = cpu_ticks(target.api_pid);
    let started = Instant::now();
    let (mut pushers, mut clocks) = (Vec::new(), Vec::new());
    for (_, push_to, _) in &recordings {
        let mut command = tokio::process::Command::new("ffmpeg");
        command
            .args(["-nostdin", "-v", "error", "-re", "-i"])
            .arg(target.clip)
            .args(["-c", "copy"]);
        if args.rtmp() {
            command.args(["-f", "flv"]);
        } else {
            command.args(["-f", "hls", "-hls_segment_type", "fmp4"]);
            command.args(["-hls_time", "4", "-method", "PUT"]);
        }
        let mut pusher = command
            .args(encoder_clock::ffmpeg_args())
            .arg(push_to)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting ffmpeg (is it installed?)")?;
        let progress = pusher.stdout.take().context("ffmpeg's stdout")?;
        clocks.push(tokio::spawn(EncoderClock::read(progress)));
        pushers.push(pusher);
    }
    let peak = std::sync::Arc::new(std::sync::Mutex::new((0.0, 0.0)));
    let sampling = tokio::spawn(sample_rss(
        target.api_pid,
        Duration::from_millis(args.poll_ms),
        peak.clone(),
    ));
    let deadline = Instant::now() + Duration::from_secs(u64::from(args.seconds) + 30);
    let mut watchers = tokio::task::JoinSet::new();
    for (id, _, playback) in &recordings {
        let (client, playback, id) = (client.clone(), playback.clone(), *id);
        let poll = Duration::from_millis(args.poll_ms);
        watchers.spawn(async move {
            let seen = watch(&client, &playback, poll, deadline).await;
            (id, seen)
        });
    }
    for mut pusher in pushers {
        let status = pusher.wait().await?;
        ensure!(status.success(), "an ffmpeg push failed ({status})");
    }
    // Each segment: when a poll first listed it, and when its encoder had finished it.
    let mut seen_at: HashMap<(RecordingId, i32), (DateTime<Utc>, DateTime<Utc>)> = HashMap::new();
    let mut encoder_of = HashMap::new();
    for ((id, _, _), clock) in recordings.iter().zip(clocks) {
        encoder_of.insert(*id, clock.await?);
    }
    while let Some(joined) = watchers.join_next().await {
        let (id, (seen, ends)) = joined?;
        for (n, (at, end)) in seen.into_iter().zip(ends).enumerate() {
            let finished = encoder_of[&id].short_of(end).with_context(|| {
                format!("the encoder's first report came after segment {n}'s end ({end} s)")
            })?;
            seen_at.insert((id, n as i32), (at, finished));
        }
    }
    sampling.abort();
    let rss_mib = *peak.locked();
    // The RTMP streams' FFmpeg children have ended with their connections and been reaped,
    // so their time is in the API's children's count.
    let cpu =
        (cpu_ticks(target.api_pid) - cpu_before) / CLOCK_TICKS / started.elapsed().as_secs_f64();
    let arrivals = arrivals(pool, &recordings.iter().map(|r| r.0).collect::<Vec<_>>()).await?;
    let (mut latencies, mut from_arrival) = (Vec::new(), Vec::new());
    let mut missing = 0;
    for arrival in &arrivals {
        let key = (arrival.recording_id, arrival.sequence);
        let Some(&(seen, finished)) = seen_at.get(&key) else {
            missing += 1;
            continue;
        };
        // Not clamped: a playlist listing a segment before its encoder finished it, or
        // before it arrived, is a fault in how the bench measures.
        let delta = |from: DateTime<Utc>, what: &str| {
            (seen - from).to_std().with_context(|| {
                format!("segment {key:?} was listed {} before {what}", from - seen)
            })
        };
        latencies.push(delta(finished, "its encoder finished it")?);
        from_arrival.push(delta(arrival.received_at, "it arrived")?);
    }
    Ok(Step {
        streams,
        segments: latencies.len(),
        p50: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        max: latencies.iter().max().copied().unwrap_or_default(),
        p99_from_arrival: percentile(&from_arrival, 99.0),
        missing,
        cpu,
        rss_mib,
    })
}

/// Linux's `USER_HZ`: the unit of the CPU times in `/proc/{pid}/stat` (100 on every
/// mainstream kernel configuration).
const CLOCK_TICKS: f64 = 100.0;

/// CPU time of `pid` and of all its children, in ticks: its own and its reaped children's
/// (`utime + stime + cutime + cstime`), and that of the children not reaped yet (running, or
/// exited a moment ago), whose time is not in its count until it waits for them.
fn cpu_ticks(pid: u32) -> f64 {
    let unreaped: f64 = children_of(pid)
        .into_iter()
        .map(|child| stat_ticks(child, 11..13))
        .sum();
    stat_ticks(pid, 11..15) + unreaped
}

/// The sum of `/proc/{pid}/stat`'s fields `range`, counted from the state (field 3) as 0:
/// 11..13 is `utime, stime`, 11..15 adds `cutime, cstime`.
fn stat_ticks(pid: u32, range: std::ops::Range<usize>) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // After the command name, which may hold spaces.
    let rest = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields.get(range).map_or(0.0, |f| {
        f.iter().filter_map(|v| v.parse::<f64>().ok()).sum()
    })
}

/// Samples the RSS of `pid` and the PSS of its children together every `every`, until aborted,
/// keeping the peaks (MiB) in `peak`.
async fn sample_rss(pid: u32, every: Duration, peak: std::sync::Arc<std::sync::Mutex<(f64, f64)>>) {
    loop {
        let own = super::stats::proc_kib(Some(pid), "VmRSS").unwrap_or(0.0) / 1024.0;
        let children: f64 = children_of(pid)
            .into_iter()
            .filter_map(pss_kib)
            .sum::<f64>()
            / 1024.0;
        {
            let mut peak = peak.locked();
            *peak = (peak.0.max(own), peak.1.max(children));
        }
        tokio::time::sleep(every).await;
    }
}

/// The proportional set size of `pid` in KiB: its own pages, and its share of the pages it
/// shares (FFmpeg's libraries are mapped once for all the children, which RSS would count
/// once per child).
fn pss_kib(pid: u32) -> Option<f64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    rollup
        .lines()
        .find_map(|line| line.strip_prefix("Pss:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The pids of `pid`'s children.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Polls one playlist until it is final (`#EXT-X-ENDLIST`, once the recording has settled)
/// or `deadline`: when each segment first appeared, in number order, and the media time each
/// ends at (from the last poll). Not until a count of segments: a segmenter may cut one more,
/// short, at the end, which would then never be looked for.
async fn watch(
    client: &reqwest::Client,
    playback: &str,
    poll: Duration,
    deadline: Instant,
) -> (Vec<DateTime<Utc>>, Vec<f64>) {
    let (mut seen, mut ends) = (Vec::new(), Vec::new());
    let mut ended = false;
    while !ended && Instant::now() < deadline {
        if let Ok(response) = client.get(playback).send().await
            && let Ok(text) = response.text().await
        {
            let now = Utc::now();
            ends = encoder_clock::segment_ends(&text);
            ended = text.contains("#EXT-X-ENDLIST");
            while seen.len() < ends.len() {
                seen.push(now);
            }
        }
        tokio::time::sleep(poll).await;
    }
    (seen, ends)
}

/// When each segment of `recordings` arrived (kept ones only).
async fn arrivals(
    pool: &crate::db::DbPool,
    recordings: &[RecordingId],
) -> anyhow::Result<Vec<crate::db::bench::SegmentArrival>> {
    let mut conn = pool.get().await?;
    Ok(crate::db::bench::segment_arrivals(&mut conn, recordings).await?)
}

/// `vidq ROLE` on the scratch database, the bench S3 and the spool, as node `bench`.
fn child(
    role: &str,
    scratch: &Scratch,
    s3: &BenchS3,
    spool: &Path,
) -> anyhow::Result<tokio::process::Command> {
    super::role_command(None, role, scratch, s3, spool)
}

/// A clip whose keyframes fall every 2 s, so stream-copied 4 s segments are all 4 s.
async fn make_clip(dir: &Path, seconds: u32) -> anyhow::Result<PathBuf> {
    let path = dir.join("live.mp4");
    super::test_clip(&path, "640x360", 25, seconds, 50).await?;
    Ok(path)
}
