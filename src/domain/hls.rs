//! The HLS playlists vidq writes, read and rewritten for serving: every URI a playlist names
//! (the `EXT-X-MAP` init segment, media segments, a master's variant playlists) is relative to
//! the playlist, and a private bucket answers a relative fetch with 403, so the playlist is
//! handed out with each URI replaced by one that works (a presigned URL, or a vidq URL with a
//! token). Pure text in, text out.

/// A URI a playlist names, relative to the playlist's own directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reference<'a> {
    /// An object next to the playlist (`init.mp4`, `seg_00000.m4s`): a plain file name.
    Object(&'a str),
    /// A master playlist's variant: the rendition `v0` for the line `v0/index.m3u8`.
    Variant(&'a str),
}

/// A playlist that names something vidq does not write. vidq wrote every playlist it serves,
/// so this is a bug or a tampered object, never the client's doing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlaylistError {
    /// A URI that is not a plain name under the playlist (a path, `..`, a scheme...).
    #[error("the playlist names {0:?}, which is not a file next to it")]
    Unsafe(String),
    /// A tag with a URI that is neither an init segment nor a variant.
    #[error("the playlist has a tag with a URI vidq does not write: {0:?}")]
    UnknownTag(String),
    /// A variant in a playlist that is not a master.
    #[error("a variant playlist names another playlist")]
    NestedVariant,
    /// Bytes that are not UTF-8 text.
    #[error("the stored playlist is not UTF-8 text")]
    NotText,
}

/// The name of each media playlist under its rendition's directory in a ladder.
pub const VARIANT_PLAYLIST: &str = "index.m3u8";

/// Whether `name` is a rendition name vidq writes (`v0`, `v1`...; letters, digits, `_`,
/// `-`). Checked before a name from a URL becomes part of an object key.
pub fn is_rendition_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 16
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn is_file_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Every URI in `playlist`, in order. `variants_allowed` is true for the top playlist only: a
/// media playlist that names a playlist would send the player somewhere vidq does not serve.
pub fn references(
    playlist: &str,
    variants_allowed: bool,
) -> Result<Vec<Reference<'_>>, PlaylistError> {
    let mut out = Vec::new();
    rewrite(playlist, variants_allowed, |r| {
        out.push(r);
        String::new()
    })?;
    Ok(out)
}

/// `playlist` with every URI replaced by `resolve`'s answer for it; everything else (tags,
/// durations, line order) kept as written.
pub fn rewrite<'a>(
    playlist: &'a str,
    variants_allowed: bool,
    mut resolve: impl FnMut(Reference<'a>) -> String,
) -> Result<String, PlaylistError> {
    let mut out = String::with_capacity(playlist.len() * 4);
    let mut next_is_variant = false;
    for line in playlist.lines() {
        let trimmed = line.trim();
        if let Some(tag) = trimmed.strip_prefix('#') {
            if tag.starts_with("EXT-X-STREAM-INF") {
                if !variants_allowed {
                    return Err(PlaylistError::NestedVariant);
                }
                next_is_variant = true;
                out.push_str(trimmed);
            } else if let Some((before, uri, after)) = uri_attribute(trimmed) {
                if !tag.starts_with("EXT-X-MAP:") {
                    return Err(PlaylistError::UnknownTag(
                        tag.split(':').next().unwrap_or_default().to_owned(),
                    ));
                }
                if !is_file_name(uri) {
                    return Err(PlaylistError::Unsafe(uri.to_owned()));
                }
                out.push_str(before);
                out.push_str(&resolve(Reference::Object(uri)));
                out.push_str(after);
            } else {
                out.push_str(trimmed);
            }
        } else if trimmed.is_empty() {
            continue;
        } else if std::mem::take(&mut next_is_variant) {
            let rendition = trimmed
                .strip_suffix(VARIANT_PLAYLIST)
                .and_then(|dir| dir.strip_suffix('/'))
                .filter(|r| is_rendition_name(r))
                .ok_or_else(|| PlaylistError::Unsafe(trimmed.to_owned()))?;
            out.push_str(&resolve(Reference::Variant(rendition)));
        } else {
            if !is_file_name(trimmed) {
                return Err(PlaylistError::Unsafe(trimmed.to_owned()));
            }
            out.push_str(&resolve(Reference::Object(trimmed)));
        }
        out.push('\n');
    }
    Ok(out)
}

/// Splits a tag line around the value of its `URI="..."` attribute.
fn uri_attribute(line: &str) -> Option<(&str, &str, &str)> {
    let start = line.find("URI=\"")? + "URI=\"".len();
    let len = line[start..].find('"')?;
    Some((
        &line[..start],
        &line[start..start + len],
        &line[start + len..],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEDIA: &str = "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:4\n#EXT-X-PLAYLIST-TYPE:VOD\n\
        #EXT-X-MAP:URI=\"init.mp4\"\n#EXTINF:4.000000,\nseg_00000.m4s\n#EXTINF:2.000000,\nseg_00001.m4s\n#EXT-X-ENDLIST\n";
    const MASTER: &str = "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-INDEPENDENT-SEGMENTS\n\
        #EXT-X-STREAM-INF:BANDWIDTH=9,AVERAGE-BANDWIDTH=9,RESOLUTION=320x240\nv0/index.m3u8\n\
        #EXT-X-STREAM-INF:BANDWIDTH=5,AVERAGE-BANDWIDTH=5,RESOLUTION=160x120\nv1/index.m3u8\n";

    #[test]
    fn a_media_playlist_names_its_init_and_segments() {
        assert_eq!(
            references(MEDIA, false).unwrap(),
            vec![
                Reference::Object("init.mp4"),
                Reference::Object("seg_00000.m4s"),
                Reference::Object("seg_00001.m4s"),
            ]
        );
        let rewritten = rewrite(MEDIA, false, |r| match r {
            Reference::Object(name) => format!("https://s3/{name}?sig=1&x=2"),
            Reference::Variant(_) => unreachable!(),
        })
        .unwrap();
        assert!(rewritten.contains("#EXT-X-MAP:URI=\"https://s3/init.mp4?sig=1&x=2\"\n"));
        assert!(rewritten.contains("#EXTINF:2.000000,\nhttps://s3/seg_00001.m4s?sig=1&x=2\n"));
        assert!(rewritten.ends_with("#EXT-X-ENDLIST\n"));
    }

    #[test]
    fn a_master_names_its_variants_by_rendition() {
        let rewritten = rewrite(MASTER, true, |r| match r {
            Reference::Variant(name) => format!("hls/{name}.m3u8?token=t"),
            Reference::Object(_) => unreachable!(),
        })
        .unwrap();
        assert!(rewritten.contains("RESOLUTION=160x120\nhls/v1.m3u8?token=t\n"));
        assert_eq!(references(MASTER, false), Err(PlaylistError::NestedVariant));
    }

    #[test]
    fn uris_that_leave_the_playlist_directory_are_refused() {
        for bad in [
            "../a1/seg.m4s",
            "/etc/passwd",
            "http://x/seg.m4s",
            ".hidden",
        ] {
            let text = format!("#EXTM3U\n#EXTINF:4,\n{bad}\n");
            assert!(references(&text, false).is_err(), "{bad}");
        }
        let map = "#EXTM3U\n#EXT-X-MAP:URI=\"../init.mp4\"\n";
        assert!(references(map, false).is_err());
        let key = "#EXTM3U\n#EXT-X-KEY:METHOD=AES-128,URI=\"key.bin\"\n";
        assert!(matches!(
            references(key, false),
            Err(PlaylistError::UnknownTag(_))
        ));
        let variant = "#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1\n../v0/index.m3u8\n";
        assert!(references(variant, true).is_err());
    }
}
