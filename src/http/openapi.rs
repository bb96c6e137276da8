//! The OpenAPI 3.1 document of the HTTP API, generated from the handlers' `#[utoipa::path]`
//! attributes and the request/response types, served at `GET /openapi.json`.
//!
//! The few facts a type cannot carry are filled in here: the security schemes, the shared
//! error answers, the trailing-slash alias of the tus collection, that a `checksum` needs
//! `"via": "vidq"`, and the upload size limit this server was started with. The tus
//! request headers, which the handlers read from the raw request, are in [`tus`].

use std::sync::OnceLock;

use actix_web::{HttpResponse, web};
use serde_json::Value;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, Object, ObjectBuilder, OpenApi as Document, Ref, RefOr, schema::Type,
};
use utoipa::{Modify, OpenApi};

use super::routes;
use crate::app::AppContext;

pub mod tus;

/// The security scheme of every route that takes an API key.
pub const API_KEY: &str = "api_key";
/// The security scheme of the HLS playlists: the signed token of their URL.
pub const PLAYBACK_TOKEN: &str = "playback_token";

/// The document: every route of [`routes::configure`], with its answers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "vidq",
        description = "Video uploads (presigned S3, tus 1.0.0, a single PUT), encoding \
            status, live recordings, HLS playback, the event feed and webhooks. Every `/v1` \
            route takes `Authorization: Bearer <API key>` except the HLS playlists, which \
            the playback token in their URL authorizes. Errors are \
            `{\"error\": {\"code\", \"message\"}}`."
    ),
    paths(
        routes::health::healthz,
        routes::health::readyz,
        routes::metrics::metrics,
        openapi_json,
        routes::uploads::create,
        routes::uploads::status,
        routes::uploads::put_content,
        routes::uploads::confirm,
        routes::tus::options,
        routes::tus::create,
        routes::tus::options_upload,
        routes::tus::head,
        routes::tus::patch,
        routes::tus::terminate,
        routes::tus::overridden,
        routes::live::create,
        routes::live::get,
        routes::live::end,
        routes::live::playlist,
        routes::videos::list,
        routes::videos::get,
        routes::videos::delete,
        routes::playback::top_playlist,
        routes::playback::rendition_playlist,
        routes::events::list,
        routes::webhooks::create,
        routes::webhooks::list,
        routes::webhooks::get,
        routes::webhooks::delete,
        routes::webhooks::rotate_secret,
        routes::webhooks::resend,
        routes::webhooks::deliveries,
    ),
    components(schemas(super::error::Body, routes::tus::OverriddenMethod), responses(
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        RequestTimeout,
        Conflict,
        Gone,
        PreconditionFailed,
        TooLarge,
        UnsupportedMediaType,
        MisdirectedRequest,
        Unprocessable,
        Locked,
        TooManyRequests,
        ChecksumMismatch,
        Unavailable,
        InsufficientStorage,
        tus::Discovery,
    )),
    modifiers(&SecuritySchemes, &TusCollectionAlias, &DistinctHeadOperations),
    tags(
        (name = "health", description = "Liveness and readiness, without credentials."),
        (name = "uploads", description = "Upload contracts: presigned S3 PUTs or one PUT to vidq."),
        (name = "tus", description = "Resumable uploads, tus 1.0.0 (creation, \
            creation-with-upload, termination, checksum, expiration)."),
        (name = "live", description = "Live recordings an HLS encoder PUTs to the ingest listener."),
        (name = "videos", description = "Videos and their HLS playback."),
        (name = "events", description = "The event feed, in commit order."),
        (name = "webhooks", description = "Webhook endpoints and their delivery log."),
    )
)]
pub struct ApiDoc;

/// `GET /openapi.json`: this document, with this server's upload limit.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "health",
    operation_id = "openapi",
    responses((status = 200, description = "The OpenAPI 3.1 document.", body = Object)),
)]
pub async fn openapi_json(ctx: web::Data<AppContext>) -> HttpResponse {
    HttpResponse::Ok().json(document(ctx.upload.max_upload_bytes))
}

/// The document as JSON, with `max_upload_bytes` as the bound of every declared size.
pub fn document(max_upload_bytes: u64) -> Value {
    static BASE: OnceLock<Value> = OnceLock::new();
    let mut doc = BASE
        .get_or_init(|| {
            let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the document serializes");
            checksum_needs_vidq(&mut doc);
            doc
        })
        .clone();
    bound_upload_sizes(&mut doc, max_upload_bytes);
    doc
}

/// A `checksum` only goes with `"via": "vidq"` (vidq checks the bytes it receives; a
/// presigned PUT never passes through it), which a field's type cannot say.
fn checksum_needs_vidq(doc: &mut Value) {
    if let Some(request) = doc.pointer_mut("/components/schemas/CreateUploadRequest") {
        request["if"] = serde_json::json!({
            "properties": { "checksum": { "type": "string" } },
            "required": ["checksum"],
        });
        request["then"] = serde_json::json!({
            "properties": { "via": { "const": crate::domain::upload::UploadVia::Vidq.as_str() } },
            "required": ["via"],
        });
    }
}

/// The upload limit is configuration (`VIDQ_MAX_UPLOAD_BYTES`), not a type: a size over it
/// is answered 413, so the document says so where a size is declared.
fn bound_upload_sizes(doc: &mut Value, max: u64) {
    if let Some(size) =
        doc.pointer_mut("/components/schemas/CreateUploadRequest/properties/size_bytes")
    {
        size["maximum"] = max.into();
    }
    for path in [
        "/paths/~1v1~1tus/post/parameters",
        "/paths/~1v1~1tus~1/post/parameters",
    ] {
        let parameters = doc.pointer_mut(path).and_then(Value::as_array_mut);
        for parameter in parameters.into_iter().flatten() {
            if parameter["name"] == tus::UPLOAD_LENGTH {
                parameter["schema"]["pattern"] = tus::upload_length_pattern(max).into();
            }
        }
    }
}

/// Declares the error answers the paths refer to by name: each is the [`super::error::Body`]
/// JSON with a sentence on when it comes, and the codes it carries.
macro_rules! error_responses {
    ($( $(#[$doc:meta])* $name:ident => $description:literal, )+) => {
        $(
            $(#[$doc])*
            pub struct $name;

            impl<'s> utoipa::ToResponse<'s> for $name {
                fn response() -> (&'s str, RefOr<Response>) {
                    (stringify!($name), error_response($description).into())
                }
            }
        )+
    };
}

error_responses! {
    /// 400.
    BadRequest => "`bad_request` (a malformed body, query, header or field, said in the \
        message), or another 400 code of the route.",
    /// 401.
    Unauthorized => "`unauthorized`: no API key, or not a valid one.",
    /// 403.
    Forbidden => "`invalid_token`: the playback token is missing, expired or not for this \
        resource.",
    /// 404.
    NotFound => "`not_found`: no such resource, or not the caller's (the same answer, so ids \
        cannot be probed).",
    /// 408.
    RequestTimeout => "`request_timeout`: the request body stopped arriving.",
    /// 409.
    Conflict => "The resource's state does not allow this now; the code says which.",
    /// 410.
    Gone => "`upload_gone`: the upload's bytes are gone (expired, terminated, or a lost spool).",
    /// 412.
    PreconditionFailed => "`unsupported_version`: `Tus-Resumable` is not `1.0.0`; \
        `Tus-Version` lists what the server speaks.",
    /// 413.
    TooLarge => "`too_large`: the body, or a declared size, is over the limit.",
    /// 415.
    UnsupportedMediaType => "`unsupported_media_type`: the body's media type, or a video \
        type vidq does not encode.",
    /// 421.
    MisdirectedRequest => "`wrong_node`: another vidq node holds this upload's spool.",
    /// 422.
    Unprocessable => "The request is well formed but refused; the code says why.",
    /// 423.
    Locked => "`upload_busy`: another request is writing this upload; retry after \
        `Retry-After`.",
    /// 429.
    TooManyRequests => "`too_many_connections` or `too_many_resends` (retry after \
        `Retry-After`); `too_many_open_uploads` or `too_many_open_recordings` (the key holds \
        as many unfinished uploads or open recordings as its cap allows: finish some first).",
    /// 460.
    ChecksumMismatch => "`checksum_mismatch`: the bytes do not match `Upload-Checksum` (tus) \
        or the contract's `checksum` (the single PUT); nothing was kept.",
    /// 503.
    Unavailable => "A dependency (database, object storage, the spool) is unavailable, or \
        the route is not enabled on this node; retry.",
    /// 507.
    InsufficientStorage => "`insufficient_storage`: the node's spool disk is full. Nothing \
        of this request past what was already counted was kept (a tus upload resumes from the \
        offset `HEAD` reports); retry later, as the node lands what it holds and frees space.",
}

/// The answers of every API-key route besides its own: `400` (two `Authorization` headers,
/// a malformed query or `Host`), `401`, `429` (the connection cap) and `503` (the database).
pub struct KeyErrors;

impl utoipa::IntoResponses for KeyErrors {
    fn responses() -> std::collections::BTreeMap<String, RefOr<Response>> {
        [
            ("400", "BadRequest"),
            ("401", "Unauthorized"),
            ("429", "TooManyRequests"),
            ("503", "Unavailable"),
        ]
        .into_iter()
        .map(|(status, name)| (status.to_owned(), RefOr::Ref(Ref::from_response_name(name))))
        .collect()
    }
}

/// The answers of a request whose bytes go to an upload's spool (`app::ingest::receive`,
/// a tus `PATCH` or the single `PUT`) besides its own: no such upload, a stalled body, a
/// conflict with the upload's state, offset or size, the upload gone, bytes past its length,
/// another node's spool, another request writing it, a full spool disk.
pub struct ReceiveErrors;

impl utoipa::IntoResponses for ReceiveErrors {
    fn responses() -> std::collections::BTreeMap<String, RefOr<Response>> {
        [
            ("404", "NotFound"),
            ("408", "RequestTimeout"),
            ("409", "Conflict"),
            ("410", "Gone"),
            ("413", "TooLarge"),
            ("421", "MisdirectedRequest"),
            ("423", "Locked"),
            ("507", "InsufficientStorage"),
        ]
        .into_iter()
        .map(|(status, name)| (status.to_owned(), RefOr::Ref(Ref::from_response_name(name))))
        .collect()
    }
}

/// An error answer: the JSON error body, and `Retry-After` when the client should wait.
fn error_response(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(0)),
                )
                .description(Some("Seconds to wait before trying again, where given."))
                .build(),
        )
        .build()
}

/// Gives a domain enum spelled by `as_str` a schema: a named string schema whose values
/// are its spellings, so the document cannot list a state the code does not have.
macro_rules! spelled_schemas {
    ($( $ty:path => $description:literal, )+) => {
        $(
            impl utoipa::PartialSchema for $ty {
                fn schema() -> RefOr<utoipa::openapi::schema::Schema> {
                    let mut schema = one_of(<$ty>::ALL.iter().map(|v| v.as_str()));
                    schema.description = Some($description.to_owned());
                    RefOr::T(schema.into())
                }
            }

            impl utoipa::ToSchema for $ty {}
        )+
    };
}

spelled_schemas! {
    crate::domain::upload::UploadState => "Where an upload contract is in its life.",
    crate::domain::upload::UploadVia => "How an upload's bytes reach S3.",
    crate::domain::video::VideoStatus => "Where a video is.",
    crate::domain::recording::RecordingState => "Where a live recording is in its life.",
    crate::domain::recording::EndReason => "Why a live recording ended.",
    crate::domain::delivery::DeliveryStatus => "Where one delivery of an event is.",
    crate::domain::event::EventType => "What happened to a video.",
}

/// A request body of raw bytes (any bytes, none included): the schema of a file's content.
pub struct Bytes;

impl utoipa::PartialSchema for Bytes {
    fn schema() -> RefOr<utoipa::openapi::schema::Schema> {
        RefOr::T(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                    utoipa::openapi::KnownFormat::Binary,
                )))
                .into(),
        )
    }
}

impl utoipa::ToSchema for Bytes {}

/// A string schema that takes only `values` (a fixed set: states, kinds, constants).
pub(crate) fn one_of(values: impl IntoIterator<Item = &'static str>) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values))
        .build()
}

/// `api_key`: `Authorization: Bearer <key>` (`vidq user create` prints one);
/// `playback_token`: the `token` query parameter of a playlist URL vidq handed out.
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, doc: &mut Document) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            API_KEY,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An API key from `vidq user create`."))
                    .build(),
            ),
        );
        components.add_security_scheme(
            PLAYBACK_TOKEN,
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
                "token",
                "The signed, expiring token in the `hls_url` or `playback_url` vidq handed out.",
            ))),
        );
    }
}

/// The tus collection answers at `/v1/tus` and `/v1/tus/` (clients differ in how they join
/// the endpoint and the path): the alias is documented as a copy with its own operation ids.
struct TusCollectionAlias;

impl Modify for TusCollectionAlias {
    fn modify(&self, doc: &mut Document) {
        let Some(mut alias) = doc.paths.paths.get("/v1/tus").cloned() else {
            return;
        };
        for operation in [&mut alias.options, &mut alias.post].into_iter().flatten() {
            if let Some(id) = &mut operation.operation_id {
                id.push_str("_slash");
            }
        }
        doc.paths.paths.insert("/v1/tus/".to_owned(), alias);
    }
}

/// `/healthz` and `/readyz` answer GET and HEAD with one handler; operation ids must be
/// unique, so the HEAD one gets a suffix.
struct DistinctHeadOperations;

impl Modify for DistinctHeadOperations {
    fn modify(&self, doc: &mut Document) {
        for item in doc.paths.paths.values_mut() {
            let get_id = item.get.as_ref().and_then(|op| op.operation_id.clone());
            if let Some(head) = &mut item.head
                && head.operation_id.is_some()
                && head.operation_id == get_id
            {
                head.operation_id = get_id.map(|id| format!("{id}_head"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_is_openapi_3_1_and_bounds_sizes_by_the_limit() {
        let doc = document(1234);
        assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
        assert_eq!(
            doc.pointer("/components/schemas/CreateUploadRequest/properties/size_bytes/maximum"),
            Some(&Value::from(1234))
        );
    }
}
