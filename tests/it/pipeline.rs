//! One encoding attempt end to end against the real S3 protocol and the artifact ledger.

use tokio_util::sync::CancellationToken;
use vidq::pipeline::{AttemptPlan, Pipeline};

use crate::support::app::TestApp;
use crate::support::clips;
use crate::support::pipeline::{pipeline, upload_clip};

/// [`pipeline`], reaching S3 through a fault proxy the test controls.
async fn behind_s3_faults(
    app: &TestApp,
    work_root: &std::path::Path,
) -> (Pipeline, crate::support::s3_faults::S3Faults) {
    let s3 = crate::support::s3_faults::S3Faults::start(&app.s3.as_ref().unwrap().endpoint()).await;
    let mut body = pipeline(app, work_root);
    body.storage = app.storage_at(&s3.endpoint()).await;
    (body, s3)
}

/// The plan of the attempt that now holds `video`'s job (the attempt's ledger writes are
/// fenced on its claim).
async fn claimed(app: &TestApp, video: vidq::domain::ids::VideoId) -> AttemptPlan {
    let claim = crate::support::queue::claim(app, "node", 60.0)
        .await
        .unwrap();
    assert_eq!(claim.video, video);
    claim.plan()
}

#[tokio::test]
async fn an_attempt_puts_a_playable_rendition_under_its_own_prefix() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = upload_clip(&app, &key, &clips::small()).await;
    let video_id = crate::support::queue::video_id(&video);
    let work = tempfile::tempdir().unwrap();
    // The second attempt: the first claim's lease runs out unused.
    let first = crate::support::queue::claim(&app, "first", 30.0)
        .await
        .unwrap();
    crate::support::queue::expire_lease(&app, &first).await;
    let plan = claimed(&app, video_id).await;
    assert_eq!(plan.attempt, 2);
    let output = pipeline(&app, work.path())
        .run(&plan, &CancellationToken::new())
        .await
        .unwrap()
        .ready()
        .unwrap();
    let prefix = format!("videos/{video_id}/r1/a2/");
    assert_eq!(output.keys.hls, format!("{prefix}hls/index.m3u8"));
    assert_eq!(output.media.width, 320);

    // Every object the playlist references, and its init segment, is in S3.
    let playlist = String::from_utf8(
        app.storage
            .get_bytes(&output.keys.hls)
            .await
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    let mut total = 0.0;
    for line in playlist.lines() {
        if let Some(d) = line.strip_prefix("#EXTINF:") {
            total += d.trim_end_matches(',').parse::<f64>().unwrap();
        } else if let Some(uri) = line.strip_prefix("#EXT-X-MAP:URI=") {
            let object = format!("{prefix}hls/{}", uri.trim_matches('"'));
            assert!(
                app.storage.head(&object).await.unwrap().is_some(),
                "{object}"
            );
        } else if !line.starts_with('#') && !line.is_empty() {
            let object = format!("{prefix}hls/{line}");
            assert!(
                app.storage.head(&object).await.unwrap().is_some(),
                "{object}"
            );
        }
    }
    let source = output.media.duration_ms as f64 / 1000.0;
    assert!(
        (total - source).abs() <= 4.0,
        "playlist {total} s vs source {source} s"
    );

    let mp4 = app
        .storage
        .get_bytes(&output.keys.mp4)
        .await
        .unwrap()
        .unwrap();
    assert!(crate::support::mp4::moov_before_mdat(&mp4));
    let thumb = work.path().join("thumb-check.jpg");
    std::fs::write(
        &thumb,
        app.storage
            .get_bytes(&output.keys.thumbnail)
            .await
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    let (w, _) = crate::support::media::probe_image(&thumb).await;
    assert!(w <= 640);

    // The ledger: every object uploaded with the size S3 holds, the playlist confirmed last.
    let mut conn = app.pool.get().await.unwrap();
    let rows = vidq::db::artifacts::of_attempt(&mut conn, video_id, 1, 2)
        .await
        .unwrap();
    assert_eq!(
        rows.len(),
        1 + 2 + 1 + 1 + 1,
        "init, 2 segments, mp4, thumbnail, playlist"
    );
    for row in &rows {
        assert_eq!(row.state, "uploaded", "{}", row.object_key);
        let head = app.storage.head(&row.object_key).await.unwrap().unwrap();
        assert_eq!(head.size, row.size_bytes, "{}", row.object_key);
    }
    let playlist_row = rows.iter().find(|r| r.axis == "playlist").unwrap();
    let last_other = rows
        .iter()
        .filter(|r| r.axis != "playlist")
        .filter_map(|r| r.uploaded_at)
        .max()
        .unwrap();
    assert!(
        playlist_row.uploaded_at.unwrap() > last_other,
        "the playlist goes up last"
    );

    assert_eq!(
        std::fs::read_dir(work.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name() != "thumb-check.jpg")
            .count(),
        0,
        "scratch removed"
    );
}

#[tokio::test]
async fn a_hostile_original_fails_permanently_and_writes_nothing() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let dir = tempfile::tempdir().unwrap();
    let hostile = dir.path().join("x.mp4");
    std::fs::write(
        &hostile,
        "#EXTM3U\n#EXTINF:1,\n/etc/hostname\n#EXT-X-ENDLIST\n",
    )
    .unwrap();
    let video = upload_clip(&app, &key, &hostile).await;
    let video_id = crate::support::queue::video_id(&video);
    let plan = claimed(&app, video_id).await;
    let err = pipeline(&app, dir.path())
        .run(&plan, &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(err.code, "invalid_media");
    assert!(err.is_permanent());
    assert!(
        app.storage
            .list_prefix(&format!("videos/{video_id}/"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM video_artifacts").await,
        0
    );
}

#[tokio::test]
async fn large_files_go_up_as_multipart_and_come_back_whole() {
    let app = TestApp::spawn().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.bin");
    let size = vidq::adapters::storage::MULTIPART_THRESHOLD as usize + 3 * 1024 * 1024 + 17;
    let bytes: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(&path, &bytes).unwrap();
    let sent = app
        .storage
        .put_file("tests/big.bin", &path, "application/octet-stream")
        .await
        .unwrap();
    assert_eq!(sent, size as u64);
    assert_eq!(
        app.storage
            .head("tests/big.bin")
            .await
            .unwrap()
            .unwrap()
            .size,
        size as i64
    );
    let back = dir.path().join("back.bin");
    assert_eq!(
        app.storage
            .download_to_file("tests/big.bin", &back)
            .await
            .unwrap(),
        Some(size as u64)
    );
    assert!(
        std::fs::read(&back).unwrap() == bytes,
        "the bytes round-trip"
    );
}

#[tokio::test]
async fn a_ladder_puts_every_rendition_up_and_the_master_playlist_last() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = upload_clip(&app, &key, &clips::small()).await;
    let video_id = crate::support::queue::video_id(&video);
    let work = tempfile::tempdir().unwrap();
    let mut pipeline = pipeline(&app, work.path());
    pipeline.media.ladder = vec![240, 120];
    let plan = claimed(&app, video_id).await;
    let output = pipeline
        .run(&plan, &CancellationToken::new())
        .await
        .unwrap()
        .ready()
        .unwrap();
    let hls = format!("videos/{video_id}/r1/a1/hls/");
    let master = String::from_utf8(
        app.storage
            .get_bytes(&output.keys.hls)
            .await
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    let variants: Vec<&str> = master
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    assert_eq!(variants, vec!["v0/index.m3u8", "v1/index.m3u8"]);
    for variant in variants {
        let prefix = format!("{hls}{}", variant.trim_end_matches("index.m3u8"));
        let media = String::from_utf8(
            app.storage
                .get_bytes(&format!("{hls}{variant}"))
                .await
                .unwrap()
                .unwrap(),
        )
        .unwrap();
        for line in media.lines() {
            let object = if let Some(uri) = line.strip_prefix("#EXT-X-MAP:URI=") {
                format!("{prefix}{}", uri.trim_matches('"'))
            } else if !line.starts_with('#') && !line.is_empty() {
                format!("{prefix}{line}")
            } else {
                continue;
            };
            assert!(
                app.storage.head(&object).await.unwrap().is_some(),
                "{object}"
            );
        }
    }
    let mut conn = app.pool.get().await.unwrap();
    let rows = vidq::db::artifacts::of_attempt(&mut conn, video_id, 1, 1)
        .await
        .unwrap();
    assert_eq!(
        rows.len(),
        2 * (1 + 2 + 1) + 1 + 1 + 1,
        "per rendition init, 2 segments, playlist; mp4, thumbnail, master"
    );
    assert!(rows.iter().all(|r| r.state == "uploaded"));
    let master_row = rows
        .iter()
        .find(|r| r.object_key == output.keys.hls)
        .unwrap();
    let last_other = rows
        .iter()
        .filter(|r| r.object_key != output.keys.hls)
        .filter_map(|r| r.uploaded_at)
        .max()
        .unwrap();
    assert!(
        master_row.uploaded_at.unwrap() > last_other,
        "the master playlist goes up last"
    );
}

#[tokio::test]
async fn an_attempt_waits_through_a_short_s3_outage_and_gives_up_on_a_long_one() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = upload_clip(&app, &key, &clips::small()).await;
    let video_id = crate::support::queue::video_id(&video);
    let work = tempfile::tempdir().unwrap();
    let (mut body, s3) = behind_s3_faults(&app, work.path()).await;

    // Down for longer than the wait: the attempt fails retryably, as storage's fault.
    body.waits.storage = std::time::Duration::from_secs(2);
    s3.set_down(true);
    let plan = claimed(&app, video_id).await;
    let error = body
        .run(&plan, &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(error.code, "storage_error", "{error:?}");
    assert_eq!(
        error.class,
        vidq::domain::media::FailureClass::Retryable,
        "{error:?}"
    );

    // Down for a moment inside the wait: the same attempt reads the original once S3 is
    // back and goes on to its outputs.
    body.waits.storage = std::time::Duration::from_secs(60);
    let back = tokio::spawn({
        let s3_up = std::sync::Arc::new(s3);
        let s3 = s3_up.clone();
        async move {
            // The outage's length is the scenario: shorter than the attempt's wait.
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            s3.set_down(false);
            s3_up
        }
    });
    let output = body
        .run(&plan, &CancellationToken::new())
        .await
        .unwrap()
        .ready()
        .unwrap();
    assert!(
        back.await.unwrap().puts_seen() > 0,
        "the outputs went through S3"
    );
    assert!(
        output
            .keys
            .hls
            .starts_with(&format!("videos/{video_id}/r1/a1/"))
    );
}

/// I7: no transaction is open while FFmpeg or an S3 transfer runs. A watcher reads
/// `pg_stat_activity` every 20 ms for the whole of an attempt (a 2 s S3 outage waited out,
/// the download, ffprobe, the encode, the output uploads and their ledger rows): no session
/// of the test's database is ever idle inside a transaction.
#[tokio::test]
async fn no_transaction_is_open_while_an_attempt_runs_ffmpeg_or_transfers() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = upload_clip(&app, &key, &clips::small()).await;
    let video_id = crate::support::queue::video_id(&video);
    let work = tempfile::tempdir().unwrap();
    let (body, s3) = behind_s3_faults(&app, work.path()).await;
    let plan = claimed(&app, video_id).await;

    let database = vidq::db::pool::database_name(&app.db.url).unwrap();
    let mut watcher_conn = vidq::db::pool::dedicated(&app.db.url).await.unwrap();
    let stop = CancellationToken::new();
    let watcher = tokio::spawn({
        let stop = stop.clone();
        async move {
            #[derive(diesel::QueryableByName)]
            struct Open {
                #[diesel(sql_type = diesel::sql_types::BigInt)]
                n: i64,
            }
            let (mut samples, mut worst) = (0u32, 0i64);
            while !stop.is_cancelled() {
                let open: Open = diesel_async::RunQueryDsl::get_result(
                    // Idle in a transaction for longer than a loaded round trip: a
                    // transaction held across an FFmpeg run or a transfer (the 2 s outage
                    // below) sits there for seconds, while the gap between a short
                    // transaction's statements, which the 20 ms sampler caught once when the
                    // whole suite shared two cores, is not what this test is about.
                    diesel::sql_query(
                        "SELECT count(*) AS n FROM pg_stat_activity
                          WHERE datname = $1 AND state LIKE 'idle in transaction%'
                            AND now() - state_change > interval '250 milliseconds'",
                    )
                    .bind::<diesel::sql_types::Text, _>(&database),
                    &mut watcher_conn,
                )
                .await
                .unwrap();
                samples += 1;
                worst = worst.max(open.n);
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            (samples, worst)
        }
    });
    s3.set_down(true);
    let back = tokio::spawn(async move {
        // A 2 s outage the attempt waits out while the watcher samples (the scenario).
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        s3.set_down(false);
        s3
    });
    let output = body
        .run(&plan, &CancellationToken::new())
        .await
        .unwrap()
        .ready()
        .unwrap();
    stop.cancel();
    let (samples, worst) = watcher.await.unwrap();
    assert!(
        back.await.unwrap().puts_seen() > 0,
        "the outputs went through S3"
    );
    assert!(output.keys.hls.starts_with(&format!("videos/{video_id}/")));
    assert!(
        samples >= 50,
        "the attempt was watched throughout: {samples} samples"
    );
    assert_eq!(
        worst, 0,
        "a session sat idle inside a transaction during the attempt"
    );
}

#[tokio::test]
async fn a_multipart_upload_left_by_a_killed_attempt_is_aborted_by_the_next() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = upload_clip(&app, &key, &clips::small()).await;
    let video_id = crate::support::queue::video_id(&video);
    let work = tempfile::tempdir().unwrap();
    // Attempt 1 began its MP4's multipart upload and was killed: its lease runs out.
    let first = crate::support::queue::claim(&app, "killed", 30.0)
        .await
        .unwrap();
    let left = vidq::domain::keys::attempt_object(video_id, 1, 1, "video.mp4");
    app.storage
        .create_multipart(&left, "video/mp4")
        .await
        .unwrap();
    crate::support::queue::expire_lease(&app, &first).await;
    assert_eq!(app.storage.list_multiparts("").await.unwrap().len(), 1);

    let plan = claimed(&app, video_id).await;
    assert_eq!(plan.attempt, 2);
    pipeline(&app, work.path())
        .run(&plan, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        app.storage.list_multiparts("").await.unwrap(),
        vec![],
        "no multipart upload is left open"
    );
}
