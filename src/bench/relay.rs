//! `vidq bench relay`: how soon a committed event reaches a webhook receiver, and how many
//! deliveries one relay process sustains.
//!
//! Latency: a receiver on loopback, one relay, one event committed every `1/rate` seconds by
//! the same statement finalize uses; each event is timed from its commit returning to its
//! arrival at the receiver. The same measurement is repeated with LISTEN/NOTIFY off (the
//! relay only polls, every 500 ms), which is how polling relays behave.
//!
//! Throughput: a backlog of events already committed, drained by one relay to the webhook
//! receiver and, separately, to NATS JetStream (each publish waits for the stream's ack).
//! Rounds are repeated and the median is reported.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use anyhow::Context;
use chrono::Utc;
use clap::Args;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::Scratch;
use super::stats::{median, ms, percentile};
use crate::db;
use crate::domain::event::Event;
use crate::domain::ids::{UploadId, UserId, VideoId, WebhookId};
use crate::domain::signature::WebhookSecret;
use crate::relay::Relay;
use crate::roles::relay::RelayArgs;
use crate::sync::Locked;

/// `vidq bench relay`.
#[derive(Debug, Args)]
pub struct RelayBenchArgs {
    /// Events timed for commit-to-delivery latency.
    #[arg(long, default_value_t = 1000)]
    pub events: usize,
    /// Events committed per second during the latency test.
    #[arg(long, default_value_t = 100)]
    pub rate: u32,
    /// Events in each throughput round.
    #[arg(long, default_value_t = 20_000)]
    pub backlog: i64,
    /// Throughput rounds per sink (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// NATS server for the JetStream throughput; `none` skips it.
    #[arg(long = "nats-url", default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,
    /// Sends in flight per relay.
    #[arg(long, default_value_t = 64)]
    pub concurrency: u32,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: super::ServerArgs,
}

/// What the receiver saw.
#[derive(Default)]
struct Seen {
    arrivals: Mutex<HashMap<String, Instant>>,
    count: AtomicUsize,
    target: AtomicUsize,
    reached: Notify,
}

async fn receive(seen: web::Data<Seen>, request: HttpRequest) -> HttpResponse {
    if let Some(id) = request
        .headers()
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
    {
        seen.arrivals
            .locked()
            .entry(id.to_owned())
            .or_insert_with(Instant::now);
    }
    if seen.count.fetch_add(1, Ordering::SeqCst) + 1 >= seen.target.load(Ordering::SeqCst) {
        seen.reached.notify_one();
    }
    HttpResponse::NoContent().finish()
}

/// Runs the benchmark and prints its report.
pub async fn run(args: RelayBenchArgs) -> anyhow::Result<()> {
    let scratch = Scratch::create(&args.server.database_url, "relay").await?;
    let result = measure(&args, &scratch.url).await;
    scratch.drop_now().await;
    result
}

async fn measure(args: &RelayBenchArgs, url: &str) -> anyhow::Result<()> {
    let pool = db::connect(url, 4).await?;
    let (owner, _) = crate::app::users::create_user(&pool, "bench").await?;
    let seen = web::Data::new(Seen::default());
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let receiver_url = format!("http://{}/hooks", listener.local_addr()?);
    let server = {
        let seen = seen.clone();
        HttpServer::new(move || {
            App::new()
                .app_data(seen.clone())
                .route("/hooks", web::post().to(receive))
        })
        .listen(listener)?
        .workers(1)
        .disable_signals()
        .run()
    };
    let server_handle = server.handle();
    tokio::spawn(server);
    let endpoint = WebhookId::new();
    {
        let mut conn = pool.get().await?;
        db::webhooks::insert(
            &mut conn,
            endpoint,
            owner,
            &receiver_url,
            None,
            WebhookSecret::generate().expose(),
        )
        .await?;
    }
    let mut relay_args = bench_relay_args(args);

    println!(
        "commit -> first delivery to a local webhook receiver, {} events at {}/s",
        args.events, args.rate
    );
    println!(
        "{:<28} {:>9} {:>9} {:>9} {:>9}",
        "relay wakes on", "p50 ms", "p95 ms", "p99 ms", "max ms"
    );
    for (label, listen) in [("NOTIFY (+500 ms poll)", true), ("500 ms poll only", false)] {
        let samples = latency(args, url, &relay_args, listen, owner, &seen).await?;
        println!(
            "{label:<28} {:>9} {:>9} {:>9} {:>9}",
            ms(percentile(&samples, 50.0)),
            ms(percentile(&samples, 95.0)),
            ms(percentile(&samples, 99.0)),
            ms(percentile(&samples, 100.0)),
        );
    }

    println!(
        "\nsustained deliveries per relay process ({} events a round, median of {} rounds)",
        args.backlog, args.rounds
    );
    let mut rates = Vec::new();
    for _ in 0..args.rounds {
        rates.push(drain_webhooks(args, url, &relay_args, owner, &seen).await?);
    }
    println!(
        "{:<28} {:>12.0} deliveries/s  (rounds: {})",
        "webhook (loopback)",
        median(&rates),
        list(&rates)
    );
    server_handle.stop(false).await;

    if args.nats_url != "none" {
        {
            let mut conn = pool.get().await?;
            db::webhooks::delete(&mut conn, owner, endpoint).await?;
        }
        let stream = format!("VIDQBENCH_{}", std::process::id());
        relay_args.nats_url = Some(args.nats_url.clone());
        relay_args.nats_stream = stream.clone();
        relay_args.nats_subject_prefix = format!("vidqbench{}", std::process::id());
        let mut rates = Vec::new();
        for _ in 0..args.rounds {
            rates.push(drain_nats(args, url, &relay_args, owner).await?);
        }
        println!(
            "{:<28} {:>12.0} deliveries/s  (rounds: {})",
            "NATS JetStream (acked)",
            median(&rates),
            list(&rates)
        );
        if let Ok(client) = async_nats::connect(&args.nats_url).await {
            let _ = async_nats::jetstream::new(client)
                .delete_stream(&stream)
                .await;
        }
    }
    Ok(())
}

fn bench_relay_args(args: &RelayBenchArgs) -> RelayArgs {
    RelayArgs {
        relay_id: Some("bench".into()),
        relay_poll_ms: 500,
        relay_lease_secs: 60,
        concurrency: args.concurrency,
        batch: 256,
        webhook_timeout_ms: 15_000,
        schedule: crate::domain::retry::RetrySchedule::default(),
        retention_hours: 168,
        nats_url: None,
        nats_subject_prefix: "vidq".into(),
        nats_stream: "VIDQ".into(),
        webhooks: crate::config::WebhookArgs {
            allow_private: true,
        },
    }
}

async fn start(
    url: &str,
    args: &RelayArgs,
    listen: bool,
) -> anyhow::Result<(CancellationToken, tokio::task::JoinHandle<()>)> {
    let mut relay: Relay = crate::roles::relay::build(url, args).await?;
    if !listen {
        relay.listen_url = None;
    }
    let stop = CancellationToken::new();
    let handle = tokio::spawn(Arc::new(relay).run(stop.clone()));
    Ok((stop, handle))
}

async fn latency(
    args: &RelayBenchArgs,
    url: &str,
    relay_args: &RelayArgs,
    listen: bool,
    owner: UserId,
    seen: &Seen,
) -> anyhow::Result<Vec<Duration>> {
    seen.arrivals.locked().clear();
    seen.count.store(0, Ordering::SeqCst);
    seen.target.store(args.events, Ordering::SeqCst);
    let (stop, handle) = start(url, relay_args, listen).await?;
    let conn = db::pool::dedicated(url)
        .await
        .context("connecting the producer")?;
    let mut committed = Vec::with_capacity(args.events);
    let mut tick =
        tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(args.rate.max(1))));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for _ in 0..args.events {
        tick.tick().await;
        let event = Event::video_accepted(VideoId::new(), UploadId::new(), Utc::now());
        db::deliveries::outbox::insert(&conn, owner, &event).await?;
        committed.push((event.id.to_string(), Instant::now()));
    }
    let reached = seen.reached.notified();
    if seen.count.load(Ordering::SeqCst) < args.events {
        tokio::time::timeout(Duration::from_secs(60), reached)
            .await
            .context("not every event reached the receiver within 60 s")?;
    }
    stop.cancel();
    handle.await?;
    let arrivals = seen.arrivals.locked();
    Ok(committed
        .iter()
        .filter_map(|(id, at)| {
            arrivals
                .get(id)
                .map(|arrived| arrived.saturating_duration_since(*at))
        })
        .collect())
}

async fn drain_webhooks(
    args: &RelayBenchArgs,
    url: &str,
    relay_args: &RelayArgs,
    owner: UserId,
    seen: &Seen,
) -> anyhow::Result<f64> {
    seen.count.store(0, Ordering::SeqCst);
    seen.target.store(args.backlog as usize, Ordering::SeqCst);
    seed(url, owner, args.backlog).await?;
    let reached = seen.reached.notified();
    let started = Instant::now();
    let (stop, handle) = start(url, relay_args, true).await?;
    tokio::time::timeout(Duration::from_secs(600), reached)
        .await
        .context("the backlog did not drain within 10 minutes")?;
    let rate = args.backlog as f64 / started.elapsed().as_secs_f64();
    stop.cancel();
    handle.await?;
    Ok(rate)
}

async fn drain_nats(
    args: &RelayBenchArgs,
    url: &str,
    relay_args: &RelayArgs,
    owner: UserId,
) -> anyhow::Result<f64> {
    seed(url, owner, args.backlog).await?;
    let pool = db::connect(url, 1).await?;
    let started = Instant::now();
    let (stop, handle) = start(url, relay_args, true).await?;
    loop {
        let mut conn = pool.get().await?;
        if db::deliveries::pending_count(&mut conn).await? == 0 {
            break;
        }
        drop(conn);
        tokio::time::sleep(Duration::from_millis(20)).await;
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "the backlog did not drain within 10 minutes"
        );
    }
    let rate = args.backlog as f64 / started.elapsed().as_secs_f64();
    stop.cancel();
    handle.await?;
    Ok(rate)
}

async fn seed(url: &str, owner: UserId, n: i64) -> anyhow::Result<()> {
    let pool = db::connect(url, 1).await?;
    let mut conn = pool.get().await?;
    db::synthetic::events(&mut conn, owner, n).await?;
    Ok(())
}

fn list(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| format!("{v:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}
