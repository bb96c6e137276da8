//! `vidq bench api`: the API's throughput with many keep-alive clients, against a `vidq api`
//! child process on loopback.
//!
//! Confirm: presigned uploads are created and their bytes PUT to the in-process S3 first,
//! outside the timed part; then C clients confirm them all, each over its own keep-alive
//! connection. Status reads: the same C clients `GET /v1/videos/{id}` of a READY video for a
//! fixed time. Beside them, in the same round, pgbench runs the confirm transaction's own
//! statements ([`crate::db::bench::confirm_pgbench`]) at the API's pool size: the most
//! PostgreSQL does with them, with nothing of HTTP, S3 or the key lookup in the way.
//!
//! Confirms paced: with 64 clients each sending its next confirm as soon as the last is
//! answered, the mean latency is 64 over the rate (Little's law), whatever the server does.
//! So the last batch setting also confirms at a fixed offered rate, a share of the round's
//! pgbench ceiling (`--paced-share`), over the same connections: confirm i is due at
//! i / rate, and a confirm that finds its connection still busy at that moment counts its
//! latency from then, so the time it waited behind a slow answer is counted, not left out.
//!
//! The clients are hyper's bare HTTP/1.1 connections (no pool, no redirects, no
//! decompression), so as little as possible of the two cores goes to the load itself.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use bytes::Bytes;
use clap::Args;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;

use super::stats::{median, ms, percentile};
use super::{BenchS3, Scratch};
use crate::db;

/// `vidq bench api`.
#[derive(Debug, Args)]
pub struct ApiBenchArgs {
    /// Concurrent clients, each over one keep-alive connection.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Uploads confirmed in each round.
    #[arg(long, default_value_t = 6400)]
    pub confirms: usize,
    /// Seconds of status reads in each round.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Rounds; the table shows medians.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// READY videos the status reads spread over (client c reads video c mod N); 1: every
    /// client reads the same video.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub read_videos: u32,
    /// The API's database pool (`VIDQ_DB_POOL_SIZE`), also pgbench's client count.
    #[arg(long, default_value_t = 10)]
    pub pool: u32,
    /// Confirms each round runs once per value, each with a fresh API and database:
    /// `VIDQ_CONFIRM_BATCH_MAX`, the most confirms committed in one transaction. With 1 the
    /// API gets as many committers as pool connections, so each confirm commits on its own
    /// as it would without batches; otherwise the default committers. The status reads run
    /// against the last.
    #[arg(long, value_delimiter = ',', default_value = "1,64")]
    pub confirm_batch: Vec<u16>,
    /// Confirms at a fixed offered rate, this percentage of the round's pgbench ceiling,
    /// after the last `--confirm-batch` setting's (see the module's doc); 0 skips them.
    #[arg(long, value_name = "PERCENT", default_value_t = 50)]
    pub paced_share: u32,
    /// Seconds of paced confirms in each round.
    #[arg(long, default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub paced_seconds: u64,
    /// Runs the API from this `vidq` binary instead of this one (to compare two builds on
    /// one machine; the database is migrated by this one).
    #[arg(long, value_name = "PATH")]
    pub api_bin: Option<std::path::PathBuf>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: super::ServerArgs,
}

/// One round's numbers: the confirms once per batch setting, in `--confirm-batch` order.
struct Round {
    confirms: Vec<Rate>,
    /// The paced confirms, when they ran.
    paced: Option<Paced>,
    reads: Rate,
    ceiling: Result<f64, String>,
}

/// Requests per second and each request's latency.
struct Rate {
    per_s: f64,
    latencies: Vec<Duration>,
    /// How many the API took together, on average: confirms per transaction
    /// (`vidq_confirm_batch_size`), status reads per statement (`vidq_status_read_batch_size`);
    /// `None` from a build without the metric.
    mean_batch: Option<f64>,
}

/// Confirms at a fixed offered rate: what came of them, and the rate offered.
struct Paced {
    rate: Rate,
    offered: f64,
}

/// One keep-alive HTTP/1.1 connection.
struct Connection {
    sender: SendRequest<Full<Bytes>>,
    key: String,
}

impl Connection {
    async fn open(base: &str, key: &str) -> anyhow::Result<Self> {
        let addr = base.trim_start_matches("http://");
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(Self {
            sender,
            key: key.to_owned(),
        })
    }

    /// `n` connections, opened one after another.
    async fn open_many(base: &str, key: &str, n: usize) -> anyhow::Result<Vec<Self>> {
        let mut connections = Vec::with_capacity(n);
        for _ in 0..n {
            connections.push(Self::open(base, key).await?);
        }
        Ok(connections)
    }

    /// Confirms upload `id`, which must be new: answers the video.
    async fn confirm(&mut self, id: &str) -> anyhow::Result<Bytes> {
        let path = format!("/v1/uploads/{id}/confirm");
        let (status, body) = self.call(hyper::Method::POST, &path, None).await?;
        ensure!(status == 202, "confirm answered {status}");
        Ok(body)
    }

    /// Sends one request and reads the whole answer; returns its status and body.
    async fn call(
        &mut self,
        method: hyper::Method,
        path: &str,
        body: Option<&str>,
    ) -> anyhow::Result<(u16, Bytes)> {
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1")
            .header("authorization", format!("Bearer {}", self.key));
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        let request = request.body(Full::new(Bytes::from(body.unwrap_or("").to_owned())))?;
        self.sender.ready().await?;
        let answer = self.sender.send_request(request).await?;
        let status = answer.status().as_u16();
        let body = answer.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }
}

/// Creates `n` presigned uploads and PUTs 1 KiB to each; returns their ids.
async fn prepare_uploads(base: &str, key: &str, n: usize) -> anyhow::Result<Vec<String>> {
    let http = reqwest::Client::new();
    let body = Bytes::from(vec![7u8; 1024]);
    let mut ids = Vec::with_capacity(n);
    let mut pending = futures_util::stream::iter(0..n)
        .map(|_| {
            let (http, body) = (http.clone(), body.clone());
            async move {
                let created: serde_json::Value = http
                    .post(format!("{base}/v1/uploads"))
                    .bearer_auth(key)
                    .json(&serde_json::json!({
                        "filename": "bench.mp4", "content_type": "video/mp4", "size_bytes": 1024
                    }))
                    .send()
                    .await?
                    .error_for_status()?
                    .json()
                    .await?;
                let mut put = http.put(created["upload_url"].as_str().context("upload_url")?);
                for (name, value) in created["headers"].as_object().context("headers")? {
                    put = put.header(name, value.as_str().unwrap_or_default());
                }
                put.body(body).send().await?.error_for_status()?;
                anyhow::Ok(created["upload_id"].as_str().context("id")?.to_owned())
            }
        })
        .buffer_unordered(16);
    while let Some(id) = pending.next().await {
        ids.push(id?);
    }
    Ok(ids)
}

/// `clients` connections confirm `ids`; returns confirms/s and each confirm's latency, and
/// the video of the first.
async fn confirm_all(
    base: &str,
    key: &str,
    ids: Vec<String>,
    clients: usize,
) -> anyhow::Result<(f64, Vec<Duration>, String)> {
    let mut shares: Vec<Vec<String>> = vec![Vec::new(); clients];
    for (i, id) in ids.into_iter().enumerate() {
        shares[i % clients].push(id);
    }
    let connections = Connection::open_many(base, key, clients).await?;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (mut connection, share) in connections.into_iter().zip(shares) {
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(share.len());
            let mut first_video = None;
            for id in share {
                let at = Instant::now();
                let body = connection.confirm(&id).await?;
                latencies.push(at.elapsed());
                if first_video.is_none() {
                    let video: serde_json::Value = serde_json::from_slice(&body)?;
                    first_video = video["id"].as_str().map(str::to_owned);
                }
            }
            anyhow::Ok((latencies, first_video))
        });
    }
    let mut latencies = Vec::new();
    let mut video = None;
    while let Some(done) = tasks.join_next().await {
        let (mine, first) = done??;
        latencies.extend(mine);
        video = video.or(first);
    }
    let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
    Ok((
        rate,
        latencies,
        video.context("no confirm answered a video")?,
    ))
}

/// `clients` connections confirm `ids` at `offered` a second, confirm i due at i / offered
/// on connection i mod `clients`; returns the rate achieved and each confirm's latency from
/// the moment it was due, or from when it went if its connection was free then.
async fn confirm_paced(
    base: &str,
    key: &str,
    ids: Vec<String>,
    clients: usize,
    offered: f64,
) -> anyhow::Result<(f64, Vec<Duration>)> {
    let connections = Connection::open_many(base, key, clients).await?;
    let gap = Duration::from_secs_f64(1.0 / offered);
    let count = ids.len();
    let mut shares: Vec<Vec<(Duration, String)>> = vec![Vec::new(); clients];
    for (i, id) in ids.into_iter().enumerate() {
        shares[i % clients].push((gap.mul_f64(i as f64), id));
    }
    let started = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (mut connection, share) in connections.into_iter().zip(shares) {
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(share.len());
            let mut free_since = started;
            for (after, id) in share {
                let due = started + after;
                tokio::time::sleep_until(due).await;
                // A confirm that waited for its connection counts from when it was due. One
                // whose connection was free counts from when it went: the timer wakes up to
                // a millisecond late, which is the load generator's delay, not the API's.
                let from = if free_since > due {
                    due
                } else {
                    tokio::time::Instant::now()
                };
                connection.confirm(&id).await?;
                free_since = tokio::time::Instant::now();
                latencies.push(free_since - from);
            }
            anyhow::Ok(latencies)
        });
    }
    let mut latencies = Vec::with_capacity(count);
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done??);
    }
    Ok((
        latencies.len() as f64 / started.elapsed().as_secs_f64(),
        latencies,
    ))
}

/// The `n` videos the reads spread over, READY: `first` (the first confirm's), then others
/// of the round's confirms.
async fn read_videos(url: &str, first: &str, n: u32) -> anyhow::Result<Vec<String>> {
    let pool = db::connect(url, 1).await?;
    let mut conn = pool.get().await?;
    let mut videos = vec![first.to_owned()];
    if n > 1 {
        let others = db::bench::some_videos(&mut conn, i64::from(n)).await?;
        videos.extend(
            others
                .iter()
                .map(ToString::to_string)
                .filter(|v| v != first),
        );
        videos.truncate(n as usize);
        ensure!(
            videos.len() == n as usize,
            "--read-videos {n}: the round made only {} videos",
            videos.len()
        );
    }
    for video in &videos {
        make_ready(&mut conn, video).await?;
    }
    Ok(videos)
}

/// `clients` connections read `videos` for `seconds` (client c reads video c mod N);
/// returns reads/s and latencies.
async fn read_for(
    base: &str,
    key: &str,
    videos: &[String],
    clients: usize,
    seconds: u64,
) -> anyhow::Result<(f64, Vec<Duration>)> {
    let connections = Connection::open_many(base, key, clients).await?;
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for (c, mut connection) in connections.into_iter().enumerate() {
        let path = format!("/v1/videos/{}", videos[c % videos.len()]);
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < until {
                let at = Instant::now();
                let (status, body) = connection.call(hyper::Method::GET, &path, None).await?;
                latencies.push(at.elapsed());
                ensure!(status == 200, "read answered {status}");
                ensure!(
                    body.windows(7).any(|w| w == b"\"ready\""),
                    "the video is not ready"
                );
            }
            anyhow::Ok(latencies)
        });
    }
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done??);
    }
    Ok((
        latencies.len() as f64 / started.elapsed().as_secs_f64(),
        latencies,
    ))
}

/// The mean of one of the API's batch size histograms so far (`family`'s sum over its
/// count): confirms per transaction, status reads per statement.
async fn mean_batch(base: &str, family: &str) -> Option<f64> {
    let (sum, count) = batch_totals(base, family).await?;
    (count > 0.0).then(|| sum / count)
}

/// The sum and count of one of the API's batch size histograms so far; `None` from a build
/// without it.
async fn batch_totals(base: &str, family: &str) -> Option<(f64, f64)> {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let value = |name: &str| {
        text.lines().find_map(|line| {
            line.strip_prefix(name)?
                .strip_prefix(' ')?
                .parse::<f64>()
                .ok()
        })
    };
    Some((
        value(&format!("{family}_sum"))?,
        value(&format!("{family}_count"))?,
    ))
}

/// Marks `video` READY with outputs, as a finalize would (the objects need not exist for
/// the read: it presigns, it does not fetch).
async fn make_ready(conn: &mut diesel_async::AsyncPgConnection, video: &str) -> anyhow::Result<()> {
    let id: uuid::Uuid = video.parse()?;
    let base = format!("videos/{id}/r1/a1");
    let (hls, mp4, thumbnail) = (
        format!("{base}/hls/index.m3u8"),
        format!("{base}/video.mp4"),
        format!("{base}/thumb.jpg"),
    );
    db::videos::set_ready(
        conn,
        id,
        &db::videos::ReadyFacts {
            duration_ms: 10_080,
            width: 1280,
            height: 720,
            video_codec: "h264",
            audio_codec: Some("aac"),
            live_run: 1,
            live_attempt: 1,
            hls_key: &hls,
            mp4_key: &mp4,
            thumbnail_key: &thumbnail,
        },
    )
    .await?;
    Ok(())
}

/// confirms/s of pgbench running the confirm's statements at `clients`, or why not.
async fn ceiling(server: &str, confirms: usize, clients: u32) -> Result<f64, String> {
    let scratch = Scratch::create(server, "api_ceiling")
        .await
        .map_err(|e| format!("{e:#}"))?;
    let run = async {
        let pool = db::connect(&scratch.url, 1).await?;
        let (owner, _) = crate::app::users::create_user(&pool, "bench").await?;
        {
            let mut conn = pool.get().await?;
            db::bench::pending_contracts(&mut conn, owner.0, confirms as i64).await?;
            db::bench::checkpoint(&mut conn).await?;
        }
        drop(pool);
        let dir = tempfile::tempdir()?;
        let script = dir.path().join("confirm.sql");
        std::fs::write(&script, db::bench::confirm_pgbench())?;
        let per_client = confirms / clients as usize;
        let out = tokio::process::Command::new("pgbench")
            .args(["-n", "-M", "prepared", "-j", "2"])
            .arg(format!("-c{clients}"))
            .arg(format!("-t{per_client}"))
            .arg(format!("-Downer={}", owner.0))
            .arg("-f")
            .arg(&script)
            .arg(&scratch.url)
            .output()
            .await
            .context("running pgbench")?;
        let text = String::from_utf8_lossy(&out.stdout);
        let whole = format!("actually processed: {0}/{0}", per_client * clients as usize);
        ensure!(
            text.contains(&whole),
            "pgbench: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        );
        text.lines()
            .find_map(|l| l.strip_prefix("tps = "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
            .with_context(|| format!("no tps in pgbench's output: {text}"))
    };
    let result = run.await;
    scratch.drop_now().await;
    result.map_err(|e: anyhow::Error| format!("{e:#}"))
}

async fn round(args: &ApiBenchArgs) -> anyhow::Result<Round> {
    let ceiling = ceiling(&args.server.database_url, args.confirms, args.pool).await;
    let offered = match (&ceiling, args.paced_share) {
        (Ok(per_s), share) if share > 0 => Some(per_s * f64::from(share) / 100.0),
        _ => None,
    };
    let mut confirms = Vec::new();
    let mut last = None;
    for (i, &batch) in args.confirm_batch.iter().enumerate() {
        // The paced confirms and the reads run against the last setting, the API's default.
        let later = (i + 1 == args.confirm_batch.len()).then_some(offered);
        let scratch = Scratch::create(&args.server.database_url, "api").await?;
        // The scratch database goes whatever happened (the API child is gone by then).
        let measured = measure(args, &scratch, batch, later).await;
        scratch.drop_now().await;
        let measured = measured?;
        confirms.push(measured.confirms);
        last = measured.later.or(last);
    }
    let Later { paced, reads } = last.context("no status reads were measured")?;
    Ok(Round {
        confirms,
        paced,
        reads,
        ceiling,
    })
}

/// What [`measure`] found: the confirms, and after the last batch setting what follows them.
struct Measured {
    confirms: Rate,
    later: Option<Later>,
}

/// What follows the last batch setting's confirms: the paced confirms (without a rate to
/// offer, none) and the status reads.
struct Later {
    paced: Option<Paced>,
    reads: Rate,
}

/// The API's part of a round on `scratch`, with confirms committed in batches of at most
/// `batch`. With `later`, the paced confirms at the rate it names (if any) and the status
/// reads follow.
async fn measure(
    args: &ApiBenchArgs,
    scratch: &Scratch,
    batch: u16,
    later: Option<Option<f64>>,
) -> anyhow::Result<Measured> {
    let s3 = BenchS3::start().await?;
    let spool = tempfile::tempdir()?;
    let key = {
        let pool = db::connect(&scratch.url, 1).await?;
        let (_, key) = crate::app::users::create_user(&pool, "bench").await?;
        key.reveal().to_owned()
    };
    let committers = if batch == 1 {
        args.pool.to_string()
    } else {
        crate::config::DEFAULT_CONFIRM_COMMITTERS.to_string()
    };
    let (pool_size, batch) = (args.pool.to_string(), batch.to_string());
    let (mut child, base) = super::spawn_api(
        args.api_bin.as_deref(),
        scratch,
        &s3,
        spool.path(),
        &[
            ("VIDQ_DB_POOL_SIZE", pool_size.as_str()),
            ("VIDQ_CONFIRM_BATCH_MAX", batch.as_str()),
            ("VIDQ_CONFIRM_COMMITTERS", committers.as_str()),
        ],
    )
    .await?;
    let checkpoint = async || {
        let pool = db::connect(&scratch.url, 1).await?;
        let mut conn = pool.get().await?;
        db::bench::checkpoint(&mut conn).await?;
        anyhow::Ok(())
    };
    let measured = async {
        let ids = prepare_uploads(&base, &key, args.confirms).await?;
        checkpoint().await?;
        let (per_s, latencies, video) = confirm_all(&base, &key, ids, args.clients).await?;
        let confirms = Rate {
            per_s,
            latencies,
            mean_batch: mean_batch(&base, "vidq_confirm_batch_size").await,
        };
        let Some(offered) = later else {
            return anyhow::Ok(Measured {
                confirms,
                later: None,
            });
        };
        let paced = match offered {
            Some(offered) => {
                let count =
                    ((offered * args.paced_seconds as f64).ceil() as usize).max(args.clients);
                let ids = prepare_uploads(&base, &key, count).await?;
                checkpoint().await?;
                let before = batch_totals(&base, "vidq_confirm_batch_size").await;
                let (per_s, latencies) =
                    confirm_paced(&base, &key, ids, args.clients, offered).await?;
                let after = batch_totals(&base, "vidq_confirm_batch_size").await;
                let mean_batch = match (before, after) {
                    (Some((s0, c0)), Some((s1, c1))) if c1 > c0 => Some((s1 - s0) / (c1 - c0)),
                    _ => None,
                };
                Some(Paced {
                    rate: Rate {
                        per_s,
                        latencies,
                        mean_batch,
                    },
                    offered,
                })
            }
            None => None,
        };
        let videos = read_videos(&scratch.url, &video, args.read_videos).await?;
        let (per_s, latencies) = read_for(&base, &key, &videos, args.clients, args.seconds).await?;
        let reads = Rate {
            per_s,
            latencies,
            mean_batch: mean_batch(&base, "vidq_status_read_batch_size").await,
        };
        anyhow::Ok(Measured {
            confirms,
            later: Some(Later { paced, reads }),
        })
    }
    .await;
    let _ = child.kill().await;
    s3.stop().await;
    measured
}

/// Runs the benchmark and prints its table.
pub async fn run(args: ApiBenchArgs) -> anyhow::Result<()> {
    ensure!(
        args.clients > 0 && args.confirms >= args.clients,
        "need confirms >= clients > 0"
    );
    ensure!(
        !args.confirm_batch.is_empty() && !args.confirm_batch.contains(&0),
        "--confirm-batch takes sizes of 1 or more"
    );
    let paced_part = match args.paced_share {
        0 => String::new(),
        share => format!(
            "{} s of confirms paced at {share}% of the ceiling, ",
            args.paced_seconds
        ),
    };
    println!(
        "vidq bench api: {} keep-alive clients, {} confirms, {paced_part}{} s of status reads of {} \
         READY video(s) a round, API pool {}, confirm batches of at most {:?}, medians of {} \
         rounds",
        args.clients,
        args.confirms,
        args.seconds,
        args.read_videos,
        args.pool,
        args.confirm_batch,
        args.rounds
    );
    let mut rounds = Vec::new();
    for _ in 0..args.rounds.max(1) {
        rounds.push(round(&args).await.context("api round")?);
    }
    let at = |pick: &dyn Fn(&Round) -> &Rate, p: f64| {
        let each: Vec<f64> = rounds
            .iter()
            .map(|r| percentile(&pick(r).latencies, p).as_secs_f64())
            .collect();
        ms(Duration::from_secs_f64(median(&each)))
    };
    let ceilings: Vec<f64> = rounds
        .iter()
        .filter_map(|r| r.ceiling.as_ref().ok().copied())
        .collect();
    println!();
    println!(
        "{:<36} | {:>9} | {:>7} | {:>7} | {:>18} | per round",
        "", "per s", "p50 ms", "p99 ms", "pgbench ceiling"
    );
    let row = |label: &str, pick: &dyn Fn(&Round) -> &Rate, ceiling: &str| {
        let rates: Vec<f64> = rounds.iter().map(|r| pick(r).per_s).collect();
        let each = rates
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(" ");
        println!(
            "{label:<36} | {:>9.0} | {:>7} | {:>7} | {ceiling:>18} | {each}",
            median(&rates),
            at(pick, 50.0),
            at(pick, 99.0),
        );
    };
    for (i, batch) in args.confirm_batch.iter().enumerate() {
        let ceiling = if ceilings.is_empty() {
            let why = rounds
                .iter()
                .find_map(|r| r.ceiling.as_ref().err().cloned())
                .unwrap_or_default();
            format!("- ({why})")
        } else {
            let ratios: Vec<f64> = rounds
                .iter()
                .filter_map(|r| r.ceiling.as_ref().ok().map(|c| r.confirms[i].per_s / c))
                .collect();
            format!("{:.0} ({:.0}%)", median(&ceilings), 100.0 * median(&ratios))
        };
        row(
            &format!("POST /v1/uploads/{{id}}/confirm, ≤{batch}"),
            &|r| &r.confirms[i],
            &ceiling,
        );
    }
    if rounds.iter().all(|r| r.paced.is_some()) {
        fn paced(r: &Round) -> &Paced {
            r.paced.as_ref().expect("every round was paced")
        }
        let offered: Vec<f64> = rounds.iter().map(|r| paced(r).offered).collect();
        let batch = args.confirm_batch.last().expect("checked non-empty");
        row(
            &format!("confirm, ≤{batch}, paced"),
            &|r| &paced(r).rate,
            &format!("offered {:.0} ({}%)", median(&offered), args.paced_share),
        );
    } else if args.paced_share > 0 {
        println!("confirm, paced: not run (no pgbench ceiling to take a share of)");
    }
    row("GET /v1/videos/{id} (READY)", &|r| &r.reads, "");
    let batches: Vec<String> = args
        .confirm_batch
        .iter()
        .enumerate()
        .map(|(i, batch)| {
            let means: Vec<f64> = rounds
                .iter()
                .filter_map(|r| r.confirms[i].mean_batch)
                .collect();
            match means.is_empty() {
                true => format!("≤{batch}: -"),
                false => format!("≤{batch}: {:.1}", median(&means)),
            }
        })
        .collect();
    println!(
        "confirms per transaction, mean (the API's vidq_confirm_batch_size): {}",
        batches.join(", ")
    );
    let paced: Vec<f64> = rounds
        .iter()
        .filter_map(|r| r.paced.as_ref()?.rate.mean_batch)
        .collect();
    if !paced.is_empty() {
        println!(
            "confirms per transaction while paced, mean: {:.1}",
            median(&paced)
        );
    }
    let reads: Vec<f64> = rounds.iter().filter_map(|r| r.reads.mean_batch).collect();
    println!(
        "status reads per statement, mean (the API's vidq_status_read_batch_size): {}",
        match reads.is_empty() {
            true => "-".to_owned(),
            false => format!("{:.1}", median(&reads)),
        }
    );
    Ok(())
}
