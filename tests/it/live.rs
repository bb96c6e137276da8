//! Live ingest with a real encoder: FFmpeg's `hls` muxer PUTs fMP4 HLS to a recording's
//! ingest URL (and shuts its side of each connection as soon as a file is sent); every init
//! and segment is spooled whole and registered in the recording's file ledger, the
//! playlist's durations and its ENDLIST are read; names that could leave the recording's
//! directory and files after the cutoff are refused.

use futures_util::StreamExt;
use reqwest::StatusCode;
use serde_json::Value;

use crate::support::app::{TestApp, assert_error};
use crate::support::live::{create_recording, playlist_text, push, recording_status, uploaded};

/// Files of `recording` matching `filter`.
async fn rows(app: &TestApp, recording: &str, filter: &str) -> i64 {
    app.count(&format!(
        "SELECT count(*) AS n FROM recording_files WHERE recording_id = '{recording}' AND {filter}"
    ))
    .await
}

#[tokio::test]
async fn an_ffmpeg_hls_push_lands_every_file_in_the_recordings_ledger_and_its_endlist_ends_it() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let recording = create_recording(&app, &key).await;
    assert_eq!(recording["state"], "waiting");
    let id = recording["id"].as_str().unwrap().to_owned();
    let ingest = recording["ingest_url"].as_str().unwrap().to_owned();
    assert!(ingest.contains("/v1/live/ingest/vidq_") && ingest.ends_with('/'));
    assert!(
        !ingest.starts_with(&app.base),
        "the ingest listener has a port of its own"
    );

    // 6 s with a keyframe every second, cut into 2 s fMP4 segments, PUT as FFmpeg does.
    push(&ingest).await;

    // FFmpeg exits once it has sent its last files, not once vidq has registered them.
    crate::support::wait::wait_for_count(
        &app,
        &format!(
            "SELECT count(*) AS n FROM recording_files f JOIN recordings r ON r.id = f.recording_id
              WHERE r.id = '{id}' AND r.state = 'ending'"
        ),
        4,
        std::time::Duration::from_secs(10),
    )
    .await;
    let status = recording_status(&app, &key, &id).await;
    assert_eq!(status["state"], "ending", "{status}");
    assert_eq!(status["end_reason"], "endlist");
    assert!(
        status.get("ingest_url").is_none(),
        "the stream key is shown once"
    );
    let segments = status["segments"]["received"].as_i64().unwrap();
    assert_eq!(segments, 3, "{status}");
    assert_eq!(
        rows(&app, &id, "axis = 'init' AND state = 'pending'").await,
        1
    );
    assert_eq!(
        rows(
            &app,
            &id,
            "axis = 'segment' AND state = 'pending' AND duration_ms BETWEEN 1000 AND 2500"
        )
        .await,
        3
    );
    // The playlist's durations add up to the clip.
    let total = app
        .count(&format!(
            "SELECT COALESCE(sum(duration_ms), 0)::bigint AS n FROM recording_files
              WHERE recording_id = '{id}' AND axis = 'segment'"
        ))
        .await;
    assert!((5_800..=6_200).contains(&total), "{total} ms");
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM recordings WHERE id = '{id}' AND final_sequence = 2"
        ))
        .await,
        1
    );
    // The spool holds each file whole, as the ledger says: one version per file, the one
    // its row names.
    let dir = app.spool.path().join("live").join(&id);
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    for name in &names {
        let size = std::fs::metadata(dir.join(name)).unwrap().len() as i64;
        let path = format!("live/{id}/{name}");
        assert_eq!(
            rows(
                &app,
                &id,
                &format!("spool_path = '{path}' AND size_bytes = {size}")
            )
            .await,
            1,
            "{name}"
        );
    }

    // Nothing is in S3 yet: the playlist lists nothing a player could not decode.
    let playback = recording["playback_url"].as_str().unwrap().to_owned();
    let closed = app.http.get(&playback).send().await.unwrap();
    assert_eq!(closed.status(), StatusCode::OK);
    let closed = closed.text().await.unwrap();
    assert!(
        closed.starts_with("#EXTM3U") && !closed.contains("#EXTINF") && !closed.contains("ENDLIST"),
        "{closed}"
    );
    let forged = app
        .http
        .get(playback.replace("token=", "token=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);

    // This node's sweeper lands every file at its key with the ledger's size (CAS), woken
    // by the NOTIFY each registration sends, and empties the spool.
    app.start_sweeper(
        app.storage.clone(),
        crate::support::sweeper::woken_sweeper(),
    )
    .await;
    crate::support::wait::wait_for_count(
        &app,
        &format!(
            "SELECT count(*) AS n FROM recording_files
              WHERE recording_id = '{id}' AND state = 'uploaded'"
        ),
        4,
        std::time::Duration::from_secs(20),
    )
    .await;
    let mut listed = app
        .storage
        .list_with_sizes(&format!("live/{id}/"))
        .await
        .unwrap();
    listed.sort_by(|a, b| a.key.cmp(&b.key));
    let keys: Vec<&str> = listed.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(
        keys,
        vec![
            format!("live/{id}/init.mp4"),
            format!("live/{id}/seg_000000.m4s"),
            format!("live/{id}/seg_000001.m4s"),
            format!("live/{id}/seg_000002.m4s"),
        ]
    );
    for object in &listed {
        assert_eq!(
            app.count(&format!(
                "SELECT count(*) AS n FROM recording_files
                  WHERE object_key = '{}' AND size_bytes = {}",
                object.key, object.size
            ))
            .await,
            1,
            "{} has the ledger's size",
            object.key
        );
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "the spool is emptied"
    );
    let status = recording_status(&app, &key, &id).await;
    assert_eq!(status["segments"]["uploaded"], 3);
    assert_eq!(status["init_uploaded"], true);

    // A player reads the whole broadcast from the playlist, which now ends.
    let text = app
        .http
        .get(&playback)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text.matches("#EXTINF").count(), 3, "{text}");
    assert!(
        text.contains("#EXT-X-MAP:URI=") && text.ends_with("#EXT-X-ENDLIST\n"),
        "{text}"
    );
    let seconds = crate::support::playback::played_seconds(&playback).await;
    assert!((seconds - 6.0).abs() < 0.5, "{seconds} s");

    // The ledger and the bucket agree, `live/` included; strays there are orphans, a lost
    // segment is missing.
    use crate::support::reconcile::{expect, reconcile};
    expect(&reconcile(&app, &["--grace-secs", "0"]).await, 0);
    let stray = format!("live/{id}/stray.m4s");
    let gone = format!("live/{}/seg_000000.m4s", uuid::Uuid::now_v7());
    for key in [&stray, &gone] {
        app.storage
            .put_bytes(key, vec![0u8; 5], "video/iso.segment")
            .await
            .unwrap();
    }
    let report = expect(&reconcile(&app, &["--grace-secs", "0"]).await, 1);
    assert!(
        report.contains(&format!("orphan {stray} no file of the recording owns it")),
        "{report}"
    );
    assert!(
        report.contains(&format!("orphan {gone} recording")),
        "{report}"
    );
    expect(&reconcile(&app, &["--grace-secs", "0", "--fix"]).await, 0);
    app.storage
        .delete(&format!("live/{id}/seg_000001.m4s"))
        .await
        .unwrap();
    let report = expect(&reconcile(&app, &["--grace-secs", "0"]).await, 1);
    assert!(
        report.contains(&format!("missing live/{id}/seg_000001.m4s")),
        "{report}"
    );
}

#[tokio::test]
async fn names_that_could_leave_the_recording_a_wrong_key_and_files_after_the_cutoff_are_refused() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let recording = create_recording(&app, &key).await;
    let id = recording["id"].as_str().unwrap().to_owned();
    let ingest = recording["ingest_url"].as_str().unwrap().to_owned();
    let put = |url: String| app.http.put(url).body(vec![1u8; 100]).send();

    for bad in ["..%2Fsecret.mp4", ".hidden.mp4", "a%20b.m4s"] {
        let r = put(format!("{ingest}{bad}")).await.unwrap();
        assert_error(r, StatusCode::BAD_REQUEST, "bad_file_name").await;
    }
    let r = put(format!("{ingest}seg.ts")).await.unwrap();
    assert_error(r, StatusCode::BAD_REQUEST, "bad_file_name").await;
    let base = &ingest[..ingest.find("/v1/").unwrap()];
    let r = put(format!("{base}/v1/live/ingest/vidq_wrong/index0.m4s"))
        .await
        .unwrap();
    assert_error(r, StatusCode::NOT_FOUND, "not_found").await;
    // A wrong key stops the reading of a body that would never end: 404 at once, and no
    // incoming file stays behind.
    let endless =
        futures_util::stream::once(async { Ok::<_, std::io::Error>(vec![0u8; 256 * 1024]) })
            .chain(futures_util::stream::pending());
    let r = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        app.http
            .put(format!("{base}/v1/live/ingest/vidq_wrong/index9.m4s"))
            .body(reqwest::Body::wrap_stream(endless))
            .send(),
    )
    .await
    .expect("answered without waiting for the body")
    .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let incoming = app
        .spool
        .path()
        .join(app.ctx.ingest.as_ref().unwrap().incoming.relative());
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    // The process's incoming directory holds its lock file, and no request's file.
    while std::fs::read_dir(&incoming).unwrap().count() > 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "an incoming file stayed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let r = put(format!("{ingest}../../../tmp/x.mp4")).await.unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());
    assert!(
        !app.spool.path().join("live").join(&id).exists()
            || std::fs::read_dir(app.spool.path().join("live").join(&id))
                .unwrap()
                .count()
                == 0,
        "nothing written"
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM recording_files").await,
        0
    );

    // A file sent again replaces the pending one: the row and the spool name the new bytes.
    assert_eq!(
        put(format!("{ingest}index0.m4s")).await.unwrap().status(),
        StatusCode::CREATED
    );
    let again = app
        .http
        .put(format!("{ingest}index0.m4s"))
        .body(vec![2u8; 50])
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::CREATED);
    let dir = app.spool.path().join("live").join(&id);
    let kept: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(std::fs::read(&kept[0]).unwrap(), vec![2u8; 50]);
    assert_eq!(
        app.count("SELECT count(*) AS n FROM recording_files WHERE size_bytes = 50")
            .await,
        1
    );

    // A segment in time counts; after the explicit end and its cutoff, one is excluded.
    let r = app
        .post(&key, &format!("/v1/live/{id}/end"), &serde_json::json!({}))
        .await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let ended: Value = r.json().await.unwrap();
    assert_eq!(ended["state"], "ending");
    assert_eq!(ended["end_reason"], "ended_by_client");
    app.count(&format!(
        "WITH x AS (UPDATE recordings SET cutoff_at = now() - interval '1 second'
                     WHERE id = '{id}' RETURNING 1) SELECT count(*) AS n FROM x"
    ))
    .await;
    let r = put(format!("{ingest}index1.m4s")).await.unwrap();
    assert_error(r, StatusCode::CONFLICT, "excluded").await;
    let status = recording_status(&app, &key, &id).await;
    assert_eq!(status["segments"]["received"], 2);
    assert_eq!(status["segments"]["excluded"], 1);
    assert!(
        !app.spool
            .path()
            .join("live")
            .join(&id)
            .join("seg_000001.m4s")
            .exists()
    );
    // A stranger sees nothing.
    let mallory = app.create_user("mallory").await;
    assert_error(
        app.get(&mallory, &format!("/v1/live/{id}")).await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
}

/// The seed's cases (2) and (6): a playback segment whose PUT fails stops the playlist
/// before it until the sweeper lands it; an init that is not confirmed keeps playback
/// closed while the segments upload, and its recovery releases all of them at once.
#[tokio::test]
async fn a_failed_segment_stops_the_playlist_before_it_and_a_missing_init_keeps_it_closed() {
    for failing in ["seg_000001.m4s", "init.mp4"] {
        let app = TestApp::spawn().await;
        let key = app.create_user("alice").await;
        let recording = create_recording(&app, &key).await;
        let id = recording["id"].as_str().unwrap().to_owned();
        let playback = recording["playback_url"].as_str().unwrap().to_owned();
        let store = vidq::bench::sweeper::FaultStore::new(app.storage.clone());
        let failing_key = format!("live/{id}/{failing}");
        store.fail_puts_of(&failing_key);
        let mut settings = crate::support::sweeper::woken_sweeper();
        // Rows backing off are tried again at the next round: rounds come often here.
        settings.interval = std::time::Duration::from_millis(100);
        settings.backoff = vidq::domain::sweep::Backoff {
            base: std::time::Duration::from_millis(50),
            cap: std::time::Duration::from_millis(200),
        };
        app.start_sweeper(store.clone(), settings).await;
        push(recording["ingest_url"].as_str().unwrap()).await;
        uploaded(&app, &id, 3).await;
        // Its tries keep failing on the row meanwhile.
        crate::support::wait::wait_for_count(
            &app,
            &format!("SELECT count(*) AS n FROM recording_files WHERE object_key = '{failing_key}' AND tries >= 2"),
            1,
            std::time::Duration::from_secs(20),
        )
        .await;
        let text = playlist_text(&app, &playback).await;
        let listed = text.matches("#EXTINF").count();
        if failing == "init.mp4" {
            assert_eq!(listed, 0, "no init, nothing playable: {text}");
        } else {
            assert_eq!(listed, 1, "the playlist stops before segment 1: {text}");
        }
        assert!(!text.contains("ENDLIST"), "{text}");

        store.heal(&failing_key);
        uploaded(&app, &id, 4).await;
        let text = playlist_text(&app, &playback).await;
        assert_eq!(text.matches("#EXTINF").count(), 3, "{failing}: {text}");
        assert!(text.ends_with("#EXT-X-ENDLIST\n"), "{text}");
    }
}

#[tokio::test]
async fn a_recording_with_nothing_arriving_ends_as_idle_and_is_final_after_its_cutoff() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let recording = create_recording(&app, &key).await;
    let id = recording["id"].as_str().unwrap().to_owned();
    let ingest = recording["ingest_url"].as_str().unwrap().to_owned();
    let put = |name: &str| {
        app.http
            .put(format!("{ingest}{name}"))
            .body(vec![1u8; 10])
            .send()
    };
    assert_eq!(
        put("index0.m4s").await.unwrap().status(),
        StatusCode::CREATED
    );
    let status = recording_status(&app, &key, &id).await;
    assert_eq!(status["state"], "live");
    // The encoder went quiet an hour ago.
    app.count(&format!(
        "WITH x AS (UPDATE recordings SET last_ingest_at = now() - interval '1 hour'
                     WHERE id = '{id}' RETURNING 1) SELECT count(*) AS n FROM x"
    ))
    .await;
    let mut settings = crate::support::sweeper::woken_sweeper();
    settings.interval = std::time::Duration::from_millis(100);
    settings.live_grace = std::time::Duration::ZERO;
    app.start_sweeper(app.storage.clone(), settings).await;
    // Final past its cutoff, and with no init it can never play: it fails instead of
    // becoming a video.
    crate::support::wait::wait_for_count(
        &app,
        &format!("SELECT count(*) AS n FROM recordings WHERE id = '{id}' AND state = 'failed'"),
        1,
        std::time::Duration::from_secs(20),
    )
    .await;
    let status = recording_status(&app, &key, &id).await;
    assert_eq!(status["end_reason"], "idle");
    assert_eq!(status["state"], "failed");
    assert!(status["video_id"].is_null(), "{status}");
    let r = put("index1.m4s").await.unwrap();
    assert_error(r, StatusCode::CONFLICT, "excluded").await;
}

#[tokio::test]
async fn a_segment_no_playlist_named_is_excluded_at_the_cutoff_and_the_playlist_ends() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let recording = create_recording(&app, &key).await;
    let id = recording["id"].as_str().unwrap().to_owned();
    let ingest = recording["ingest_url"].as_str().unwrap().to_owned();
    let playback = recording["playback_url"].as_str().unwrap().to_owned();
    let put = |name: &str, body: Vec<u8>| app.http.put(format!("{ingest}{name}")).body(body).send();
    for name in ["init.mp4", "index0.m4s", "index1.m4s"] {
        assert_eq!(
            put(name, vec![1u8; 10]).await.unwrap().status(),
            StatusCode::CREATED
        );
    }
    // The encoder named segment 0 only, then went away.
    let playlist = "#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4.0,\nindex0.m4s\n";
    assert_eq!(
        put("index.m3u8", playlist.into()).await.unwrap().status(),
        StatusCode::NO_CONTENT
    );
    let r = app
        .post(&key, &format!("/v1/live/{id}/end"), &serde_json::json!({}))
        .await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);

    let mut settings = crate::support::sweeper::woken_sweeper();
    settings.interval = std::time::Duration::from_millis(100);
    settings.live_grace = std::time::Duration::ZERO;
    app.count(&format!(
        "WITH x AS (UPDATE recordings SET cutoff_at = now() - interval '1 second'
                     WHERE id = '{id}' RETURNING 1) SELECT count(*) AS n FROM x"
    ))
    .await;
    app.start_sweeper(app.storage.clone(), settings).await;
    crate::support::wait::wait_for_count(
        &app,
        &format!("SELECT count(*) AS n FROM recordings WHERE id = '{id}' AND state = 'ended'"),
        1,
        std::time::Duration::from_secs(20),
    )
    .await;
    assert_eq!(
        rows(&app, &id, "sequence = 1 AND state = 'excluded'").await,
        1,
        "segment 1 had no duration"
    );
    uploaded(&app, &id, 2).await;
    let text = playlist_text(&app, &playback).await;
    assert_eq!(text.matches("#EXTINF").count(), 1, "{text}");
    assert!(text.ends_with("#EXT-X-ENDLIST\n"), "{text}");
}
