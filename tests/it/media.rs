//! The hardened probe and the encode, with real FFmpeg on clips the tests make.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use vidq::adapters::ffmpeg::{MediaConfig, encode, probe};
use vidq::domain::media::{FailureClass, MediaLimits};

use crate::support::clips;
use crate::support::media::{probe_image, processes_mentioning, video_stream};

fn config() -> MediaConfig {
    MediaConfig::default()
}

async fn probe_code(config: &MediaConfig, path: &Path) -> &'static str {
    probe::probe(config, path, &CancellationToken::new())
        .await
        .unwrap_err()
        .code
        .as_str()
}

#[tokio::test]
async fn probe_reads_the_facts_of_a_good_clip() {
    let info = probe::probe(&config(), &clips::small(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!((info.width, info.height), (320, 240));
    assert!(
        (info.duration_ms - 6000).abs() <= 100,
        "{}",
        info.duration_ms
    );
    assert_eq!(info.video_codec, "h264");
    assert_eq!(info.audio_codec.as_deref(), Some("aac"));
    assert!((info.fps - 25.0).abs() < 0.01);
}

#[tokio::test]
async fn text_zero_byte_and_truncated_files_are_invalid_media() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.mp4");
    std::fs::write(&text, "this is not a video\n").unwrap();
    let empty = dir.path().join("empty.mp4");
    std::fs::write(&empty, "").unwrap();
    for path in [text, empty, clips::truncated()] {
        let err = probe::probe(&config(), &path, &CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(err.code, "invalid_media", "{path:?}: {err}");
        assert_eq!(err.class, FailureClass::Permanent);
        assert!(
            !err.message.contains(&*dir.path().to_string_lossy()),
            "no paths leak: {}",
            err.message
        );
    }
}

#[tokio::test]
async fn an_audio_only_file_has_no_video_stream() {
    assert_eq!(
        probe_code(&config(), &clips::audio_only()).await,
        "no_video_stream"
    );
}

#[tokio::test]
async fn clips_over_the_duration_or_dimension_limits_are_refused() {
    let mut short = config();
    short.limits = MediaLimits {
        max_duration_ms: 5_000,
        ..MediaLimits::default()
    };
    assert_eq!(probe_code(&short, &clips::small()).await, "too_long");
    let mut small = config();
    small.limits = MediaLimits {
        max_width: 160,
        max_height: 120,
        ..MediaLimits::default()
    };
    assert_eq!(
        probe_code(&small, &clips::small()).await,
        "too_large_dimensions"
    );
}

/// A named pipe that records whether anyone opened it: opening a FIFO for writing blocks
/// until a reader opens it, so a writer thread that returns proves a read was attempted.
struct Tripwire {
    path: PathBuf,
    opened: std::sync::Arc<std::sync::atomic::AtomicBool>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl Tripwire {
    fn new(path: PathBuf) -> Self {
        let status = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success());
        let opened = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = opened.clone();
        let fifo = path.clone();
        let writer = std::thread::spawn(move || {
            if std::fs::OpenOptions::new().write(true).open(&fifo).is_ok() {
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        });
        Self {
            path,
            opened,
            writer: Some(writer),
        }
    }

    /// Whether anything opened the file; releases the writer thread either way.
    fn was_opened(mut self) -> bool {
        // An open by a reader would already have released the writer thread; nothing marks
        // that none came, so the thread gets a moment to record one.
        std::thread::sleep(Duration::from_millis(100));
        let opened = self.opened.load(std::sync::atomic::Ordering::SeqCst);
        // Open it ourselves, non-blocking (O_NONBLOCK on Linux), so a writer still blocked in
        // open() returns; this open comes after the flag was read, so it is not counted.
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(0o4000)
            .open(&self.path);
        self.writer.take().unwrap().join().unwrap();
        opened
    }
}

#[tokio::test]
async fn an_hls_playlist_or_concat_script_named_mp4_is_refused_without_reading_what_it_points_at() {
    let dir = tempfile::tempdir().unwrap();
    let scripts = [
        (
            "playlist.mp4",
            "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n{target}\n#EXT-X-ENDLIST\n",
        ),
        ("concat.mp4", "ffconcat version 1.0\nfile '{target}'\n"),
    ];
    for (name, script) in scripts {
        let target = dir.path().join(format!("{name}.secret.mp4"));
        let wire = Tripwire::new(target.clone());
        let hostile = dir.path().join(name);
        std::fs::write(
            &hostile,
            script.replace("{target}", &target.to_string_lossy()),
        )
        .unwrap();

        let err = probe::probe(&config(), &hostile, &CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(err.code, "invalid_media", "{name}: {err}");
        assert!(err.is_permanent());
        // The encoder is hardened the same way, should it ever be handed such a file.
        let info = probe::probe(&config(), &clips::small(), &CancellationToken::new())
            .await
            .unwrap();
        let out = dir.path().join(format!("{name}.out"));
        assert!(
            encode::encode(
                &config(),
                &info,
                None,
                &hostile,
                &out,
                &CancellationToken::new()
            )
            .await
            .is_err()
        );
        assert!(
            !wire.was_opened(),
            "{name}: the file it points at was opened"
        );
    }
}

#[tokio::test]
async fn the_allow_list_is_what_stops_the_playlist() {
    // Without the demuxer allow-list FFmpeg would follow the playlist: the same file the test
    // above refuses, probed by a plain ffprobe that guesses the format from the content, opens
    // what it names. So the test above tests the hardening, not an accident of the file's shape.
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("secret.mp4");
    let wire = Tripwire::new(target.clone());
    let hostile = dir.path().join("playlist.mp4");
    std::fs::write(
        &hostile,
        format!(
            "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n{}\n#EXT-X-ENDLIST\n",
            target.display()
        ),
    )
    .unwrap();
    let _ = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::process::Command::new("ffprobe")
            .args(["-v", "quiet", "-protocol_whitelist", "file"])
            .arg(&hostile)
            .kill_on_drop(true)
            .output(),
    )
    .await;
    assert!(
        wire.was_opened(),
        "an unhardened ffprobe opens the file the playlist names"
    );
}

#[tokio::test]
async fn encode_writes_hls_fmp4_an_mp4_with_moov_first_and_a_thumbnail() {
    let dir = tempfile::tempdir().unwrap();
    let files = encode_clip(&config(), &clips::small(), dir.path()).await;
    assert_eq!(files.renditions.len(), 1);
    assert_eq!(files.renditions[0].segments.len(), 2, "6 s in 4 s segments");
    let playlist = std::fs::read_to_string(&files.playlist).unwrap();
    for line in [
        "#EXT-X-PLAYLIST-TYPE:VOD",
        "#EXT-X-INDEPENDENT-SEGMENTS",
        "#EXT-X-MAP:URI=\"init.mp4\"",
        "#EXT-X-ENDLIST",
    ] {
        assert!(playlist.contains(line), "{line} missing:\n{playlist}");
    }
    let mp4 = std::fs::read(&files.mp4).unwrap();
    assert!(
        crate::support::mp4::moov_before_mdat(&mp4),
        "faststart: moov precedes mdat"
    );
    let thumb = probe_image(&files.thumbnail).await;
    assert_eq!(thumb, (320, 240), "small sources are not upscaled");
}

/// Probes, times and encodes `clip` into `out` as a worker would; panics on a refusal.
async fn encode_clip(config: &MediaConfig, clip: &Path, out: &Path) -> encode::EncodedFiles {
    let cancel = CancellationToken::new();
    let info = probe::probe(config, clip, &cancel).await.unwrap();
    std::fs::create_dir_all(out).unwrap();
    let timeline = encode::measured_timeline(config, clip, out, &cancel)
        .await
        .unwrap();
    assert!(timeline.is_some(), "{} has a timeline", clip.display());
    encode::encode(config, &info, timeline.as_ref(), clip, out, &cancel)
        .await
        .unwrap()
}

#[tokio::test]
async fn large_sources_are_scaled_to_720p_and_thumbnails_to_640_wide() {
    let dir = tempfile::tempdir().unwrap();
    let clip = clips::video(2, 1920, 1080);
    let files = encode_clip(&config(), &clip, dir.path()).await;
    let stream = video_stream(&files.mp4).await;
    assert_eq!(
        (stream["width"].as_i64(), stream["height"].as_i64()),
        (Some(1280), Some(720))
    );
    assert_eq!(stream["profile"], "High");
    assert_eq!(stream["pix_fmt"], "yuv420p");
    assert_eq!(probe_image(&files.thumbnail).await, (640, 360));
}

#[tokio::test]
async fn an_encode_over_its_time_limit_is_killed_and_leaves_nothing_running() {
    let dir = tempfile::tempdir().unwrap();
    let clip = clips::video(2, 1920, 1080);
    let info = probe::probe(&config(), &clip, &CancellationToken::new())
        .await
        .unwrap();
    let mut hurried = config();
    hurried.call_timeout = Duration::from_millis(150);
    let err = encode::encode(
        &hurried,
        &info,
        None,
        &clip,
        dir.path(),
        &CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, "encode_timeout");
    assert_eq!(err.class, FailureClass::Retryable);
    let marker = dir.path().to_string_lossy().into_owned();
    assert!(
        processes_mentioning(&marker).is_empty(),
        "no ffmpeg left running on {marker}"
    );
}

#[tokio::test]
async fn a_cancelled_encode_is_killed_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let clip = clips::video(2, 1920, 1080);
    let info = probe::probe(&config(), &clip, &CancellationToken::new())
        .await
        .unwrap();
    let cancel = CancellationToken::new();
    let stopper = cancel.clone();
    let cancelled_at = tokio::spawn(async move {
        // The cancel comes mid-encode, as a stop would.
        tokio::time::sleep(Duration::from_millis(100)).await;
        stopper.cancel();
        std::time::Instant::now()
    });
    let err = encode::encode(&config(), &info, None, &clip, dir.path(), &cancel)
        .await
        .unwrap_err();
    let returned_at = std::time::Instant::now();
    assert_eq!(err.code, "cancelled");
    // Timed from the cancel, not from the start: an encode that only noticed the cancel when
    // it finished would fail here.
    let after_cancel = returned_at - cancelled_at.await.unwrap();
    assert!(after_cancel < Duration::from_secs(1), "{after_cancel:?}");
    assert!(processes_mentioning(&dir.path().to_string_lossy()).is_empty());
}

#[tokio::test]
async fn a_missing_ffmpeg_is_said_plainly_and_is_retryable() {
    let mut broken = config();
    broken.ffprobe = "/nonexistent/ffprobe".into();
    let err = probe::probe(&broken, &clips::small(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(err.code, "ffmpeg_missing");
    assert!(err.message.contains("not found"), "{}", err.message);
    assert_eq!(err.class, FailureClass::Retryable);
}

#[tokio::test]
async fn a_ladder_encodes_one_rendition_per_rung_under_a_master_playlist() {
    let dir = tempfile::tempdir().unwrap();
    let ladder = MediaConfig {
        ladder: vec![120, 240, 480],
        ..config()
    };
    let files = encode_clip(&ladder, &clips::small(), dir.path()).await;
    let sizes: Vec<(String, i32, i32)> = files
        .renditions
        .iter()
        .map(|r| (r.prefix.clone(), r.width, r.height))
        .collect();
    assert_eq!(
        sizes,
        vec![("v0/".to_owned(), 320, 240), ("v1/".to_owned(), 160, 120)],
        "largest first; the 480 rung is above the source and skipped"
    );
    let master = std::fs::read_to_string(&files.playlist).unwrap();
    assert_eq!(master.matches("#EXT-X-STREAM-INF:").count(), 2, "{master}");
    assert!(
        master.contains("RESOLUTION=320x240") && master.contains("RESOLUTION=160x120"),
        "{master}"
    );
    assert!(
        master.contains("\nv0/index.m3u8\n") && master.contains("\nv1/index.m3u8\n"),
        "{master}"
    );
    for rendition in &files.renditions {
        let media = std::fs::read_to_string(&rendition.playlist).unwrap();
        assert!(media.contains("#EXT-X-MAP:URI=\"init.mp4\""), "{media}");
        assert_eq!(rendition.segments.len(), 2);
    }
    let mp4 = video_stream(&files.mp4).await;
    assert_eq!(
        (mp4["width"].as_i64(), mp4["height"].as_i64()),
        (Some(320), Some(240)),
        "the MP4 is the top rung"
    );
}

#[tokio::test]
async fn a_source_smaller_than_every_rung_gets_one_rendition_at_its_own_size() {
    let big_ladder = MediaConfig {
        ladder: vec![1080, 720],
        ..config()
    };
    let info = probe::probe(&big_ladder, &clips::small(), &CancellationToken::new())
        .await
        .unwrap();
    let rungs = encode::rungs(&big_ladder, &info);
    assert_eq!(rungs.len(), 1);
    assert_eq!(
        (
            rungs[0].short_side,
            rungs[0].prefix.as_str(),
            rungs[0].with_mp4
        ),
        (240, "", true)
    );
}
