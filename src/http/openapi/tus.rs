//! The tus request headers, as OpenAPI header parameters: the handlers read them from the
//! raw request, so their schemas are stated here, from the same constants the parsers use.
//!
//! Byte counts are strings of digits on the wire (no sign, no exponent: `tus::parse_bytes`),
//! so they are declared as such, bounded by a pattern.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::{ObjectBuilder, RefOr, Required, schema::Type};
use utoipa::{IntoParams, ToResponse};

use crate::domain::{tus, upload::ACCEPTED_CONTENT_TYPES};

/// The name of the creation header that declares the size.
pub const UPLOAD_LENGTH: &str = "Upload-Length";

/// Digits (leading zeros allowed, as the parser takes them) of a number from 1 to `max`.
pub fn upload_length_pattern(max: u64) -> String {
    format!("^0*(?:{})$", decimal_range(1, max.max(1)).join("|"))
}

/// Patterns of the decimal numbers from `low` to `high` (without leading zeros), one per run
/// of equal length whose digits vary independently: 1-5368709120 becomes `[1-9]`,
/// `[1-9][0-9]`, ... `5368709120`-style pieces.
fn decimal_range(low: u64, high: u64) -> Vec<String> {
    // Split [low, high] where a piece's digits stop varying freely: at low with its last k
    // digits set to 9, and at high+1 with its last k digits set to 0, minus one.
    let mut stops = vec![high];
    for k in 1..=20u32 {
        let Some(unit) = 10u64.checked_pow(k) else {
            break;
        };
        if let Some(nines) = (low - low % unit).checked_add(unit - 1)
            && nines < high
        {
            stops.push(nines);
        }
        if let Some(next) = high.checked_add(1) {
            let zeros = next - next % unit;
            if zeros > low && zeros - 1 <= high {
                stops.push(zeros - 1);
            }
        }
    }
    stops.sort_unstable();
    stops.dedup();
    let mut start = low;
    let mut pieces = Vec::new();
    for stop in stops {
        pieces.push(piece(start, stop));
        start = stop.saturating_add(1);
    }
    pieces
}

/// The pattern of `start..=stop`, two numbers of one length whose differing digits run
/// from `start`'s to `stop`'s independently.
fn piece(start: u64, stop: u64) -> String {
    let (a, b) = (start.to_string(), stop.to_string());
    let mut pattern = String::new();
    let mut free = 0;
    for (x, y) in a.chars().zip(b.chars()) {
        if x == y {
            pattern.push(x);
        } else if x == '0' && y == '9' {
            free += 1;
        } else {
            pattern.push_str(&format!("[{x}-{y}]"));
        }
    }
    match free {
        0 => {}
        1 => pattern.push_str("[0-9]"),
        n => pattern.push_str(&format!("[0-9]{{{n}}}")),
    }
    pattern
}

/// A base64 digest of `len` bytes with canonical padding (the decoder refuses others).
fn digest_pattern(algorithm: &str, len: usize) -> String {
    let chars = (len * 8).div_ceil(6);
    let padding = "=".repeat((4 - chars % 4) % 4);
    // The last character carries bits past the digest, which must be zero.
    let last = match len % 3 {
        1 => "[AQgw]",
        2 => "[AEIMQUYcgkosw048]",
        _ => "[A-Za-z0-9+/]",
    };
    format!("{algorithm} [A-Za-z0-9+/]{{{}}}{last}{padding}", chars - 1)
}

fn header(name: &str, required: bool, description: &str, schema: ObjectBuilder) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Header)
        .required(if required {
            Required::True
        } else {
            Required::False
        })
        .description(Some(description))
        .schema(Some(schema.build()))
        .build()
}

fn tus_resumable() -> Parameter {
    header(
        "Tus-Resumable",
        true,
        "The protocol version; another answers 412.",
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some([tus::VERSION])),
    )
}

fn upload_checksum() -> Parameter {
    // The empty alternative: an empty header asks for no check, as the handler reads it.
    let pattern = format!(
        "^(?:|{}|{})$",
        digest_pattern("sha1", 20),
        digest_pattern("sha256", 32)
    );
    header(
        "Upload-Checksum",
        false,
        "`<algorithm> <base64 digest>` of this request's bytes (`Tus-Checksum-Algorithm`); \
         a mismatch answers 460 and keeps nothing. An empty value asks for no check.",
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(pattern)),
    )
}

/// The `204` answer to `OPTIONS` (discovery): what the server speaks.
pub struct Discovery;

impl<'s> ToResponse<'s> for Discovery {
    fn response() -> (&'s str, RefOr<Response>) {
        let header = |description: &str, ty: Type| {
            HeaderBuilder::new()
                .schema(ObjectBuilder::new().schema_type(ty))
                .description(Some(description))
                .build()
        };
        let answer = ResponseBuilder::new()
            .description("What the server speaks.")
            .header("Tus-Resumable", header("`1.0.0`.", Type::String))
            .header(
                "Tus-Version",
                header("`1.0.0`: the only version spoken.", Type::String),
            )
            .header(
                "Tus-Extension",
                header("The extensions supported.", Type::String),
            )
            .header(
                "Tus-Max-Size",
                header(
                    "The largest `Upload-Length` taken, in bytes.",
                    Type::Integer,
                ),
            )
            .header(
                "Tus-Checksum-Algorithm",
                header("`sha1,sha256`.", Type::String),
            )
            .build();
        ("TusDiscovery", answer.into())
    }
}

/// `Tus-Resumable` alone (HEAD, DELETE).
pub struct VersionHeader;

impl IntoParams for VersionHeader {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![tus_resumable()]
    }
}

/// The headers of a creation (`POST`).
pub struct CreationHeaders;

impl IntoParams for CreationHeaders {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        // `filetype` must name a video type vidq encodes: the pattern lists their base64.
        let types = ACCEPTED_CONTENT_TYPES
            .iter()
            .map(|t| STANDARD.encode(t).replace('+', "\\+"))
            .collect::<Vec<_>>()
            .join("|");
        vec![
            tus_resumable(),
            header(
                UPLOAD_LENGTH,
                true,
                "The file's size in bytes, at least 1 and at most `Tus-Max-Size` (over it: \
                 413); `Upload-Defer-Length` is not supported.",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(upload_length_pattern(u64::MAX))),
            ),
            header(
                "Upload-Metadata",
                true,
                "Comma-separated `key base64value` pairs. `filetype` is required and must be \
                 a video type vidq encodes (`video/mp4`...); `filename` labels the upload; \
                 other keys are ignored. The pattern states the least a client sends.",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(format!("^filetype (?:{types})$"))),
            ),
            upload_checksum(),
        ]
    }
}

/// The headers of a `PATCH`.
pub struct PatchHeaders;

impl IntoParams for PatchHeaders {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![
            tus_resumable(),
            header(
                "Upload-Offset",
                true,
                "Where these bytes start: the offset vidq holds (`HEAD`), else 409.",
                // Up to 19 digits: every offset an upload can reach, and no overflow.
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some("^0*[0-9]{1,19}$")),
            ),
            upload_checksum(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `n` matches one of `pieces` (a tiny matcher for the three forms `piece` writes).
    fn matches(pieces: &[String], n: u64) -> bool {
        let text = n.to_string();
        pieces.iter().any(|p| {
            let mut rest = p.as_str();
            let mut digits = text.chars();
            while !rest.is_empty() {
                let Some(d) = digits.next() else { return false };
                if let Some(tail) = rest.strip_prefix("[0-9]{") {
                    let (count, after) = tail.split_once('}').unwrap();
                    let count: usize = count.parse().unwrap();
                    if !d.is_ascii_digit() || digits.clone().take(count - 1).count() != count - 1 {
                        return false;
                    }
                    digits.nth(count - 2);
                    rest = after;
                } else if let Some(tail) = rest.strip_prefix('[') {
                    let (range, after) = tail.split_once(']').unwrap();
                    let (lo, hi) = range.split_once('-').unwrap();
                    if !(lo..=hi).contains(&d.to_string().as_str()) {
                        return false;
                    }
                    rest = after;
                } else {
                    if !rest.starts_with(d) {
                        return false;
                    }
                    rest = &rest[1..];
                }
            }
            digits.next().is_none()
        })
    }

    #[test]
    fn a_decimal_range_pattern_takes_exactly_its_numbers() {
        for (low, high) in [
            (1, 1),
            (1, 9),
            (1, 10),
            (1, 999),
            (1, 1000),
            (7, 4321),
            (1, 5000),
        ] {
            let pieces = decimal_range(low, high);
            for n in 0..=6000 {
                assert_eq!(
                    matches(&pieces, n),
                    (low..=high).contains(&n),
                    "{n} in {pieces:?}"
                );
            }
        }
        let gib5 = decimal_range(1, 5 << 30);
        for n in [1, 9, 10, 999_999_999, 5_368_709_119, 5_368_709_120] {
            assert!(matches(&gib5, n), "{n}");
        }
        for n in [
            0,
            5_368_709_121,
            5_400_000_000,
            9_999_999_999,
            10_000_000_000,
        ] {
            assert!(!matches(&gib5, n), "{n}");
        }
        assert!(!decimal_range(1, u64::MAX).is_empty());
    }

    #[test]
    fn digest_patterns_fit_the_encoded_digests() {
        assert_eq!(
            digest_pattern("sha1", 20),
            "sha1 [A-Za-z0-9+/]{26}[AEIMQUYcgkosw048]="
        );
        let sha256 = STANDARD.encode([0xffu8; 32]);
        assert_eq!(sha256.len(), 44);
        assert!(sha256.ends_with("8="));
    }
}
