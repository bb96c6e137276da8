//! One round of the benchmark: for each batch setting a fresh database and API child, its
//! confirms, and after the last setting the paced confirms and the status reads.

use std::time::Duration;

use anyhow::{Context, ensure};

use super::ApiBenchArgs;
use super::ceiling::ceiling;
use super::load::{confirm_all, confirm_paced, prepare_uploads, read_for};
use super::scrape::{batch_totals, mean_batch};
use crate::bench::{BenchS3, Scratch};
use crate::db;
use crate::domain::ids::VideoId;

/// One round's numbers: the confirms once per batch setting, in `--confirm-batch` order.
pub(super) struct Round {
    pub(super) confirms: Vec<Rate>,
    /// The paced confirms, when they ran.
    pub(super) paced: Option<Paced>,
    /// Status reads spread over `--read-videos` READY videos.
    pub(super) reads: Rate,
    /// Status reads of one READY video by every client (a hot row).
    pub(super) hot_reads: Rate,
    pub(super) ceiling: Result<f64, String>,
}

/// Requests per second and each request's latency.
pub(super) struct Rate {
    pub(super) per_s: f64,
    pub(super) latencies: Vec<Duration>,
    /// How many the API took together, on average: confirms per transaction
    /// (`vidq_confirm_batch_size`), status reads per statement (`vidq_status_read_batch_size`);
    /// `None` from a build without the metric.
    pub(super) mean_batch: Option<f64>,
}

/// Confirms at a fixed offered rate: what came of them, and the rate offered.
pub(super) struct Paced {
    pub(super) rate: Rate,
    pub(super) offered: f64,
}

/// One round: the pgbench ceiling, then the API once per `--confirm-batch` setting.
pub(super) async fn round(args: &ApiBenchArgs) -> anyhow::Result<Round> {
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
    let Later {
        paced,
        reads,
        hot_reads,
    } = last.context("no status reads were measured")?;
    Ok(Round {
        confirms,
        paced,
        reads,
        hot_reads,
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
    hot_reads: Rate,
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
    // The bench user holds every upload of a run open at once before confirming them, far
    // past a user's default cap of unfinished uploads (the cap is not what is measured): the
    // highest cap the setting takes.
    let open_uploads = "1000000";
    let (mut child, base) = crate::bench::spawn_api(
        args.api_bin.as_deref(),
        scratch,
        &s3,
        spool.path(),
        &[
            ("VIDQ_DB_POOL_SIZE", pool_size.as_str()),
            ("VIDQ_CONFIRM_BATCH_MAX", batch.as_str()),
            ("VIDQ_CONFIRM_COMMITTERS", committers.as_str()),
            ("VIDQ_MAX_OPEN_UPLOADS_PER_USER", open_uploads),
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
        let reads = reads_of(&base, &key, &videos, args).await?;
        // The same reads of one video only: every client on one hot row.
        let hot_reads = reads_of(&base, &key, &videos[..1], args).await?;
        anyhow::Ok(Measured {
            confirms,
            later: Some(Later {
                paced,
                reads,
                hot_reads,
            }),
        })
    }
    .await;
    let _ = child.kill().await;
    s3.stop().await;
    measured
}

/// `--seconds` of status reads by every client over `videos` (client c reads video c mod
/// N), and how many reads the API took per statement meanwhile.
async fn reads_of(
    base: &str,
    key: &str,
    videos: &[String],
    args: &ApiBenchArgs,
) -> anyhow::Result<Rate> {
    let family = "vidq_status_read_batch_size";
    let before = batch_totals(base, family).await;
    let (per_s, latencies) = read_for(base, key, videos, args.clients, args.seconds).await?;
    let after = batch_totals(base, family).await;
    let mean_batch = match (before, after) {
        (Some((s0, c0)), Some((s1, c1))) if c1 > c0 => Some((s1 - s0) / (c1 - c0)),
        (None, Some((s1, c1))) if c1 > 0.0 => Some(s1 / c1),
        _ => None,
    };
    Ok(Rate {
        per_s,
        latencies,
        mean_batch,
    })
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

/// Marks `video` READY with outputs, as a finalize would (the objects need not exist for
/// the read: it presigns, it does not fetch).
async fn make_ready(conn: &mut diesel_async::AsyncPgConnection, video: &str) -> anyhow::Result<()> {
    let id: VideoId = video.parse()?;
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
