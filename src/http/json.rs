//! The JSON body extractor every route that reads a body uses.
//!
//! actix's `web::Json` answers every failure the same way and its messages name Rust types
//! ("expected struct CreateUploadRequest"). This one reads the body itself so that each
//! failure has its own status and code (too large: 413, wrong media type: 415, stalled:
//! 408, malformed: 400) and the message is a plain sentence naming the field at fault.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{FromRequest, HttpRequest, mime};
use futures_util::StreamExt;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use super::limits::BodyIdle;

/// Largest JSON body the API reads (requests are small; uploads go straight to S3).
pub const JSON_LIMIT: usize = 64 * 1024;

/// A request body parsed as JSON into `T`.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T> JsonBody<T> {
    /// The parsed body.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> std::ops::Deref for JsonBody<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: DeserializeOwned + 'static> FromRequest for JsonBody<T> {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let checked = check_head(req);
        let mut payload = payload.take();
        Box::pin(async move {
            checked?;
            let mut body = Vec::new();
            while let Some(chunk) = payload.next().await {
                let chunk = chunk.map_err(|err| {
                    if BodyIdle::is(&err) {
                        ApiError::request_timeout()
                    } else {
                        ApiError::bad_request("the request body could not be read")
                    }
                })?;
                if body.len() + chunk.len() > JSON_LIMIT {
                    return Err(too_large());
                }
                body.extend_from_slice(&chunk);
            }
            serde_json::from_slice(&body)
                .map(JsonBody)
                .map_err(|err| ApiError::bad_request(describe(&err, &body)))
        })
    }
}

/// Refuses from the head alone what must not be read: another media type, or a declared
/// length over the limit.
fn check_head(req: &HttpRequest) -> Result<(), ApiError> {
    let is_json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<mime::Mime>().ok())
        .is_some_and(|m| {
            m.type_() == mime::APPLICATION
                && (m.subtype() == mime::JSON || m.suffix() == Some(mime::JSON))
        });
    if !is_json {
        return Err(ApiError::unsupported_media_type(
            "send the body as JSON with `Content-Type: application/json`",
        ));
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > JSON_LIMIT as u64) {
        return Err(too_large());
    }
    Ok(())
}

fn too_large() -> ApiError {
    ApiError::too_large(format!(
        "the JSON body is larger than {} KiB",
        JSON_LIMIT / 1024
    ))
}

/// A sentence for the client: where the JSON is broken, which field is missing or of the
/// wrong kind. serde's own text names Rust types (`expected struct X`, `expected i64`).
pub fn describe(err: &serde_json::Error, body: &[u8]) -> String {
    use serde_json::error::Category;
    let (line, column) = (err.line(), err.column());
    match err.classify() {
        Category::Syntax | Category::Eof | Category::Io => {
            format!("the body is not valid JSON (line {line}, column {column})")
        }
        // serde reads a struct from an array too (fields by position): say what is meant.
        Category::Data if body.trim_ascii_start().first() != Some(&b'{') => {
            "the body must be a JSON object".to_owned()
        }
        Category::Data => {
            let text = err.to_string();
            if let Some(field) = between(&text, "missing field `", "`") {
                return format!("the field `{field}` is required");
            }
            let expected = text
                .split_once(", expected ")
                .map(|(_, rest)| rest.split(" at line ").next().unwrap_or(rest))
                .unwrap_or("");
            if expected.starts_with("struct ") || expected == "a map" {
                return "the body must be a JSON object".to_owned();
            }
            let kind = plain_kind(expected);
            match key_before(body, line, column) {
                Some(field) => format!("the field `{field}` must be {kind}"),
                None => format!("a value must be {kind} (line {line}, column {column})"),
            }
        }
    }
}

/// The text between `start` and the next `end`.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let rest = &text[text.find(start)? + start.len()..];
    Some(&rest[..rest.find(end)?])
}

/// serde's name of an expected kind, said for a JSON client.
fn plain_kind(expected: &str) -> &'static str {
    match expected {
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number",
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number of at least 0",
        "f32" | "f64" => "a number",
        "a boolean" => "true or false",
        "a string" | "a borrowed string" => "a string",
        "a sequence" => "a list",
        _ if expected.starts_with("a sequence") || expected.starts_with("an array") => "a list",
        _ => "of another kind",
    }
}

/// The last object key before the position serde reported (1-based line and column): the
/// field whose value was refused. Strings are skipped whole, so a value that contains
/// `"x":` does not count as a key.
fn key_before(body: &[u8], line: usize, column: usize) -> Option<String> {
    let mut offset = 0;
    for _ in 1..line {
        offset += body.get(offset..)?.iter().position(|b| *b == b'\n')? + 1;
    }
    let end = (offset + column).min(body.len());
    let prefix = &body[..end];
    let mut last_key = None;
    let mut i = 0;
    while i < prefix.len() {
        if prefix[i] != b'"' {
            i += 1;
            continue;
        }
        let start = i + 1;
        let mut j = start;
        while j < prefix.len() && prefix[j] != b'"' {
            j += if prefix[j] == b'\\' { 2 } else { 1 };
        }
        let after = prefix
            .get(j + 1..)
            .and_then(|rest| rest.iter().find(|b| !b.is_ascii_whitespace()));
        if after == Some(&b':') {
            last_key = std::str::from_utf8(&prefix[start..j.min(prefix.len())]).ok();
        }
        i = j + 1;
    }
    last_key.map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Upload {
        filename: String,
        size_bytes: i64,
        tags: Option<Vec<String>>,
    }

    fn message(body: &str) -> String {
        let err = serde_json::from_str::<Upload>(body).unwrap_err();
        describe(&err, body.as_bytes())
    }

    #[test]
    fn messages_name_the_field_and_never_a_rust_type() {
        assert_eq!(
            message(r#"{"filename": "a\":", "size_bytes": "12"}"#),
            "the field `size_bytes` must be a whole number"
        );
        assert_eq!(
            message("{\n\"size_bytes\": 1,\n\"filename\": 7}"),
            "the field `filename` must be a string"
        );
        assert_eq!(
            message(r#"{"filename": "a", "size_bytes": 1, "tags": "x"}"#),
            "the field `tags` must be a list"
        );
        assert_eq!(
            message(r#"{"filename": "a"}"#),
            "the field `size_bytes` is required"
        );
        assert_eq!(message("[1, 2]"), "the body must be a JSON object");
        assert_eq!(
            message(r#"{"filename": "#),
            "the body is not valid JSON (line 1, column 13)"
        );
    }
}
