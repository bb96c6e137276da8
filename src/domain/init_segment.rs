//! What a live broadcast's fMP4 initialization segment says about its video: whether it has
//! a video track at all, and whether FFmpeg here decodes that track's codec. A broadcast
//! without one is refused at its init segment instead of failing three encode attempts
//! after it has ended.

/// Video sample entries vidq's FFmpeg decodes (H.264, HEVC, AV1, VP8, VP9, MPEG-4 Part 2).
const DECODABLE: &[&[u8; 4]] = &[
    b"avc1", b"avc3", b"hvc1", b"hev1", b"av01", b"vp08", b"vp09", b"mp4v",
];

/// Why an init segment cannot start a video.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoVideo {
    /// No `moov`, or boxes that do not parse.
    #[error("the init segment is not an fMP4 initialization segment")]
    NotAnInit,
    /// Tracks, but none of them video (an audio-only broadcast).
    #[error("the broadcast has no video track")]
    NoVideoTrack,
    /// A video track in a codec FFmpeg here does not decode (or an encrypted one).
    #[error("the broadcast's video codec `{0}` cannot be decoded")]
    Undecodable(String),
}

/// The codec (sample entry) of the first decodable video track of `init`.
pub fn video_codec(init: &[u8]) -> Result<String, NoVideo> {
    let moov = child(init, b"moov").ok_or(NoVideo::NotAnInit)?;
    let mut undecodable = None;
    for trak in children(moov, b"trak") {
        let Some(mdia) = child(trak, b"mdia") else {
            continue;
        };
        // hdlr: version/flags (4), pre_defined (4), handler_type (4).
        let handler = child(mdia, b"hdlr").and_then(|h| h.get(8..12));
        if handler != Some(b"vide".as_slice()) {
            continue;
        }
        // stsd: version/flags (4), entry count (4), then entries (size, type, ...).
        let entry = child(mdia, b"minf")
            .and_then(|m| child(m, b"stbl"))
            .and_then(|s| child(s, b"stsd"))
            .and_then(|s| s.get(12..16));
        let Some(codec) = entry else {
            return Err(NoVideo::NotAnInit);
        };
        if DECODABLE.iter().any(|d| d.as_slice() == codec) {
            return Ok(String::from_utf8_lossy(codec).into_owned());
        }
        undecodable = Some(String::from_utf8_lossy(codec).into_owned());
    }
    Err(undecodable.map_or(NoVideo::NoVideoTrack, NoVideo::Undecodable))
}

/// The body of the first box of `kind` directly inside `within`.
fn child<'a>(within: &'a [u8], kind: &'a [u8; 4]) -> Option<&'a [u8]> {
    children(within, kind).next()
}

/// The bodies of every box of `kind` directly inside `within` (a box that runs past its
/// parent ends the walk).
fn children<'a>(within: &'a [u8], kind: &'a [u8; 4]) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        while at + 8 <= within.len() {
            let size = u32::from_be_bytes(within[at..at + 4].try_into().ok()?) as usize;
            let name = &within[at + 4..at + 8];
            let (header, size) = match size {
                0 => (8, within.len() - at),
                1 => {
                    let large = within.get(at + 8..at + 16)?;
                    (16, u64::from_be_bytes(large.try_into().ok()?) as usize)
                }
                n => (8, n),
            };
            if size < header || at + size > within.len() {
                return None;
            }
            let body = &within[at + header..at + size];
            at += size;
            if name == kind {
                return Some(body);
            }
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bx(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut out = ((body.len() + 8) as u32).to_be_bytes().to_vec();
        out.extend_from_slice(kind);
        out.extend_from_slice(body);
        out
    }

    fn track(handler: &[u8; 4], entry: &[u8; 4]) -> Vec<u8> {
        let hdlr = bx(b"hdlr", &[&[0u8; 8][..], handler, &[0u8; 12]].concat());
        let stsd = bx(
            b"stsd",
            &[&[0u8, 0, 0, 0, 0, 0, 0, 1][..], &bx(entry, &[0; 8])].concat(),
        );
        let minf = bx(b"minf", &bx(b"stbl", &stsd));
        bx(b"trak", &bx(b"mdia", &[hdlr, minf].concat()))
    }

    #[test]
    fn finds_the_video_track_and_names_what_is_missing() {
        let ftyp = bx(b"ftyp", b"isom\0\0\0\0");
        let av = [
            ftyp.clone(),
            bx(
                b"moov",
                &[track(b"soun", b"mp4a"), track(b"vide", b"avc1")].concat(),
            ),
        ]
        .concat();
        assert_eq!(video_codec(&av).unwrap(), "avc1");
        let audio = [ftyp.clone(), bx(b"moov", &track(b"soun", b"mp4a"))].concat();
        assert_eq!(video_codec(&audio), Err(NoVideo::NoVideoTrack));
        let odd = [ftyp.clone(), bx(b"moov", &track(b"vide", b"encv"))].concat();
        assert_eq!(video_codec(&odd), Err(NoVideo::Undecodable("encv".into())));
        assert_eq!(video_codec(&ftyp), Err(NoVideo::NotAnInit));
        assert_eq!(video_codec(b"#EXTM3U\n"), Err(NoVideo::NotAnInit));
    }
}
