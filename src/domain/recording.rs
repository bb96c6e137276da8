//! Live recordings (docs/live.md): the states of a recording and of each of
//! its files, the names an HLS encoder PUTs (FFmpeg's `hls` muxer with fMP4 segments:
//! `init.mp4`, `index0.m4s`, `index1.m4s`..., `index.m3u8`), what vidq reads of the
//! playlists it PUTs, and the object keys of the files.

use super::ids::RecordingId;

/// The RTMP application encoders connect to: the server URL ends in `/live`.
pub const RTMP_APP_NAME: &str = "live";

spelled_states! {
    /// Where a recording is in its life.
    pub enum RecordingState {
        /// Created; nothing ingested yet.
        Waiting = "waiting",
        /// Files are arriving.
        Live = "live",
        /// Ended (ENDLIST, an explicit end, or idle); files before the cutoff still count.
        Ending = "ending",
        /// Past the cutoff: what it holds is final.
        Ended = "ended",
        /// It became a playable video.
        Ready = "ready",
        /// It could not become one.
        Failed = "failed",
    }
}

spelled_states! {
    /// What a recording file is.
    pub enum FileAxis {
        /// The fMP4 initialization segment (codec setup); nothing plays without it.
        Init = "init",
        /// One media segment.
        Segment = "segment",
        /// The whole recording joined into one MP4, as builds before `repackage_writes_its_original`
        /// registered it here. Today a repackage attempt puts its original under its own
        /// attempt prefix in the artifact ledger; rows of this axis that landed stay
        /// reconciled, and the migration forgot those that never did.
        Original = "original",
    }
}

spelled_states! {
    /// A recording file's ledger state.
    pub enum FileState {
        /// On the spool, owed to S3.
        Pending = "pending",
        /// S3 holds it with the recorded size (CAS).
        Uploaded = "uploaded",
        /// Arrived after the cutoff or numbered past the final playlist: never PUT.
        Excluded = "excluded",
        /// Refused at the file boundary.
        Rejected = "rejected",
    }
}

spelled_states! {
    /// Why a recording ended.
    pub enum EndReason {
        /// The encoder's playlist said `#EXT-X-ENDLIST`.
        Endlist = "endlist",
        /// `POST /v1/live/{id}/end`.
        EndedByClient = "ended_by_client",
        /// Nothing arrived for `VIDQ_LIVE_IDLE_SECS`.
        Idle = "idle",
        /// Created and never streamed to for `VIDQ_LIVE_WAITING_TTL_SECS`.
        Expired = "expired",
        /// The broadcast had no video vidq can decode (no video track, or an unknown codec):
        /// refused at publish or at its init segment, and failed at once.
        NoVideoStream = "no_video_stream",
    }
}

/// A file name an encoder PUT, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IngestName {
    /// The initialization segment.
    Init,
    /// Media segment number `n`.
    Segment(u32),
    /// A playlist (read for durations and the end; not stored as a file).
    Playlist,
}

/// A name vidq does not take.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BadName {
    /// Empty, too long, or with characters that could leave the recording's directory.
    #[error("file names are 1-100 letters, digits, '.', '_' or '-' and cannot start with '.'")]
    Unsafe,
    /// Not an fMP4 init or segment, nor a playlist.
    #[error(
        "only fMP4 HLS is taken: an init segment (*.mp4), numbered media segments (*N.m4s) and playlists (*.m3u8)"
    )]
    NotFmp4Hls,
}

/// Classifies a name from the ingest URL. Only plain names are taken: no `/`, no `..`,
/// nothing that could name a file outside the recording's spool directory.
pub fn classify(name: &str) -> Result<IngestName, BadName> {
    let safe = (1..=100).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !safe {
        return Err(BadName::Unsafe);
    }
    if name.ends_with(".m3u8") {
        return Ok(IngestName::Playlist);
    }
    if name.ends_with(".mp4") {
        return Ok(IngestName::Init);
    }
    if let Some(stem) = name.strip_suffix(".m4s") {
        let digits = stem.len() - stem.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 && digits <= 9 {
            let number = stem[stem.len() - digits..]
                .parse()
                .map_err(|_| BadName::NotFmp4Hls)?;
            return Ok(IngestName::Segment(number));
        }
    }
    Err(BadName::NotFmp4Hls)
}

/// What vidq reads of an ingested media playlist.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IngestPlaylist {
    /// Segment numbers it lists, with their `#EXTINF` durations in milliseconds.
    pub segments: Vec<(u32, u32)>,
    /// It carries `#EXT-X-ENDLIST`: the broadcast is over.
    pub ended: bool,
    /// Its `#EXT-X-MEDIA-SEQUENCE`: the number of the first segment it lists (FFmpeg's
    /// `-start_number`, 0 by default).
    pub media_sequence: Option<u32>,
    /// Its `#EXT-X-TARGETDURATION` in seconds: the longest segment the encoder means to send.
    pub target_duration: Option<u32>,
}

/// Reads a media playlist as an encoder sends it. Lines that name files vidq does not take
/// are ignored (they were refused when PUT); a master playlist lists no segments.
pub fn parse_playlist(text: &str) -> IngestPlaylist {
    let mut playlist = IngestPlaylist::default();
    let mut duration: Option<u32> = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("#EXTINF:") {
            let seconds = rest.split(',').next().unwrap_or_default().trim();
            duration = seconds
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0 && *s < 86_400.0)
                .map(|s| (s * 1000.0).round() as u32);
        } else if line == "#EXT-X-ENDLIST" {
            playlist.ended = true;
        } else if let Some(n) = line.strip_prefix("#EXT-X-MEDIA-SEQUENCE:") {
            playlist.media_sequence = n.trim().parse().ok().filter(|n| *n <= i32::MAX as u32);
        } else if let Some(n) = line.strip_prefix("#EXT-X-TARGETDURATION:") {
            playlist.target_duration = n.trim().parse().ok().filter(|n| (1..=86_400).contains(n));
        } else if !line.is_empty() && !line.starts_with('#') {
            let name = line.rsplit('/').next().unwrap_or(line);
            if let (Ok(IngestName::Segment(n)), Some(ms)) = (classify(name), duration.take()) {
                playlist.segments.push((n, ms));
            }
        }
    }
    playlist
}

/// The object key of a recording file.
pub fn object_key(recording: RecordingId, name: &IngestName) -> Option<String> {
    match name {
        IngestName::Init => Some(format!("live/{recording}/init.mp4")),
        IngestName::Segment(n) => Some(format!("live/{recording}/seg_{n:06}.m4s")),
        IngestName::Playlist => None,
    }
}

/// The prefix every object of a recording's files lives under (`live/{recording}/`); a
/// repackage job reads the recording from there.
pub fn files_prefix(recording: RecordingId) -> String {
    format!("live/{recording}/")
}

/// The spool path (relative to the root) of one received version of a recording file:
/// each PUT gets a name of its own (`version`), so a row's path and size always describe
/// the same bytes, whatever order two PUTs of one file finish in.
pub fn spool_path(
    recording: RecordingId,
    name: &IngestName,
    version: uuid::Uuid,
) -> Option<String> {
    match name {
        IngestName::Init => Some(format!("live/{recording}/init.{version}.mp4")),
        IngestName::Segment(n) => Some(format!("live/{recording}/seg_{n:06}.{version}.m4s")),
        IngestName::Playlist => None,
    }
}

/// A segment as the live playlist sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveSegment {
    /// Its number.
    pub sequence: u32,
    /// From the encoder's playlist, once it named the segment.
    pub duration_ms: Option<u32>,
    /// S3 holds it.
    pub uploaded: bool,
}

/// How many segments, from number `first` on (the encoder's first, see
/// [`IngestPlaylist::media_sequence`]), a player may be given: the contiguous run that S3
/// holds and whose durations are known. A segment still on its way stops the run, so the
/// playlist never skips one (it moves on once that one lands). Segments numbered below
/// `first` are not part of the broadcast's run.
pub fn playable_prefix(segments: &[LiveSegment], first: u32) -> usize {
    let mut sorted: Vec<&LiveSegment> = segments.iter().filter(|s| s.sequence >= first).collect();
    sorted.sort_by_key(|s| s.sequence);
    sorted
        .iter()
        .enumerate()
        .take_while(|(i, s)| {
            s.sequence as u64 == first as u64 + *i as u64 && s.uploaded && s.duration_ms.is_some()
        })
        .count()
}

/// The target duration a live playlist announces before the encoder has said its own:
/// nothing is listed then (a segment's duration comes from the same playlist).
pub const DEFAULT_TARGET_DURATION: u32 = 4;

/// An HLS EVENT playlist of `segments` (duration in ms, URL, whether it follows a gap in
/// the numbering) after `init` (its URL); a segment after a gap gets
/// `#EXT-X-DISCONTINUITY`; with `ended`, `#EXT-X-ENDLIST`. `target` is the encoder's
/// `#EXT-X-TARGETDURATION`, repeated as it is: a player may not see it change while it
/// reloads (RFC 8216, 6.2.1), so it is not worked out from the segments listed so far.
/// Without an init there is nothing a player could decode: the playlist lists nothing yet.
pub fn render_live_playlist(
    init: Option<&str>,
    target: Option<u32>,
    segments: &[(u32, String, bool)],
    ended: bool,
) -> String {
    let target = target.unwrap_or(DEFAULT_TARGET_DURATION).max(1);
    let mut out = format!(
        "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-PLAYLIST-TYPE:EVENT\n#EXT-X-TARGETDURATION:{target}\n\
         #EXT-X-MEDIA-SEQUENCE:0\n#EXT-X-INDEPENDENT-SEGMENTS\n"
    );
    if let Some(init) = init {
        out.push_str(&format!("#EXT-X-MAP:URI=\"{init}\"\n"));
        for (ms, url, after_gap) in segments {
            if *after_gap {
                out.push_str("#EXT-X-DISCONTINUITY\n");
            }
            out.push_str(&format!("#EXTINF:{}.{:03},\n{url}\n", ms / 1000, ms % 1000));
        }
        if ended {
            out.push_str("#EXT-X-ENDLIST\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ffmpeg_names_are_classified_and_anything_that_could_leave_the_directory_is_refused() {
        assert_eq!(classify("init.mp4"), Ok(IngestName::Init));
        assert_eq!(classify("index0.m4s"), Ok(IngestName::Segment(0)));
        assert_eq!(classify("stream_17.m4s"), Ok(IngestName::Segment(17)));
        assert_eq!(classify("index.m3u8"), Ok(IngestName::Playlist));
        for bad in [
            "",
            "../init.mp4",
            "a/b.m4s",
            ".hidden.mp4",
            "x%2F.mp4",
            "a b.m4s",
        ] {
            assert_eq!(classify(bad), Err(BadName::Unsafe), "{bad:?}");
        }
        for other in ["seg.ts", "index.m4s", "notes.txt", "index1234567890.m4s"] {
            assert_eq!(classify(other), Err(BadName::NotFmp4Hls), "{other:?}");
        }
    }

    #[test]
    fn a_playlist_gives_segment_numbers_durations_and_the_end() {
        let text = "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:4\n\
                    #EXT-X-MEDIA-SEQUENCE:0\n#EXT-X-MAP:URI=\"init.mp4\"\n\
                    #EXTINF:4.000000,\nindex0.m4s\n#EXTINF:3.960,\nindex1.m4s\n";
        let live = parse_playlist(text);
        assert_eq!(live.segments, vec![(0, 4000), (1, 3960)]);
        assert!(!live.ended);
        assert_eq!(
            (live.media_sequence, live.target_duration),
            (Some(0), Some(4))
        );
        let later = parse_playlist("#EXT-X-TARGETDURATION:2\n#EXT-X-MEDIA-SEQUENCE:100\n");
        assert_eq!(
            (later.media_sequence, later.target_duration),
            (Some(100), Some(2))
        );
        let nonsense = parse_playlist("#EXT-X-TARGETDURATION:0\n#EXT-X-MEDIA-SEQUENCE:-1\n");
        assert_eq!(
            (nonsense.media_sequence, nonsense.target_duration),
            (None, None)
        );
        let ended = parse_playlist(&format!("{text}#EXTINF:1.5,\nindex2.m4s\n#EXT-X-ENDLIST\n"));
        assert_eq!(ended.segments.last(), Some(&(2, 1500)));
        assert!(ended.ended);
        assert_eq!(
            parse_playlist("garbage\n#EXTINF:x,\nindex3.m4s").segments,
            vec![]
        );
    }

    #[test]
    fn the_playable_prefix_stops_at_the_first_segment_not_in_s3_or_without_a_duration() {
        let seg = |sequence, uploaded, ms: Option<u32>| LiveSegment {
            sequence,
            duration_ms: ms,
            uploaded,
        };
        assert_eq!(playable_prefix(&[], 0), 0);
        let all = [
            seg(1, true, Some(4000)),
            seg(0, true, Some(4000)),
            seg(2, true, Some(2000)),
        ];
        assert_eq!(playable_prefix(&all, 0), 3);
        assert_eq!(
            playable_prefix(
                &[
                    seg(0, true, Some(1)),
                    seg(1, false, Some(1)),
                    seg(2, true, Some(1))
                ],
                0
            ),
            1
        );
        assert_eq!(
            playable_prefix(&[seg(0, true, Some(1)), seg(2, true, Some(1))], 0),
            1,
            "a gap"
        );
        assert_eq!(
            playable_prefix(&[seg(0, true, None)], 0),
            0,
            "no duration yet"
        );
        assert_eq!(
            playable_prefix(&[seg(1, true, Some(1))], 0),
            0,
            "segment 0 missing"
        );
        let from_100 = [
            seg(101, true, Some(1)),
            seg(100, true, Some(1)),
            seg(7, true, Some(1)),
        ];
        assert_eq!(playable_prefix(&from_100, 100), 2, "-start_number 100");
        assert_eq!(playable_prefix(&from_100, 0), 0);
    }

    #[test]
    fn a_live_playlist_lists_nothing_before_its_init_and_ends_with_endlist() {
        let closed = render_live_playlist(None, None, &[(4000, "s0".into(), false)], true);
        assert!(
            !closed.contains("EXTINF") && !closed.contains("ENDLIST") && !closed.contains("MAP")
        );
        let open = render_live_playlist(
            Some("i"),
            Some(2),
            &[(4000, "s0".into(), false), (3960, "s1".into(), false)],
            false,
        );
        assert!(open.contains("#EXT-X-MAP:URI=\"i\"\n#EXTINF:4.000,\ns0\n#EXTINF:3.960,\ns1\n"));
        let gapped = render_live_playlist(
            Some("i"),
            None,
            &[(4000, "s2".into(), false), (4000, "s5".into(), true)],
            true,
        );
        assert!(
            gapped.ends_with("s2\n#EXT-X-DISCONTINUITY\n#EXTINF:4.000,\ns5\n#EXT-X-ENDLIST\n"),
            "{gapped}"
        );
        assert!(
            open.contains("#EXT-X-TARGETDURATION:2\n"),
            "the encoder's target, not the longest segment's"
        );
        assert!(gapped.contains("#EXT-X-TARGETDURATION:4\n"));
        assert!(!open.contains("ENDLIST"));
        assert!(render_live_playlist(Some("i"), Some(1), &[], true).ends_with("#EXT-X-ENDLIST\n"));
    }

    #[test]
    fn keys_and_spool_paths_are_fixed_by_the_recording_and_the_number() {
        let id = RecordingId(uuid::Uuid::nil());
        assert_eq!(
            object_key(id, &IngestName::Segment(7)).unwrap(),
            "live/00000000-0000-0000-0000-000000000000/seg_000007.m4s"
        );
        assert!(object_key(id, &IngestName::Playlist).is_none());
        let path = spool_path(id, &IngestName::Init, uuid::Uuid::nil()).unwrap();
        assert!(crate::domain::sweep::relative_spool_path(&path).is_ok());
    }
}
