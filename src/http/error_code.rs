//! Every stable error code an answer may carry, each with its HTTP status and a sentence
//! saying when it is answered. Codes are part of the API contract and never change meaning;
//! the OpenAPI document lists them as the values of `error.code`.

use actix_web::http::StatusCode;

macro_rules! error_codes {
    ($($variant:ident = $code:literal, $status:literal, $sentence:literal;)+) => {
        /// A stable error code.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum ErrorCode {
            $(
                #[doc = $sentence]
                $variant,
            )+
        }

        impl ErrorCode {
            /// Every code, in the order the API documents them.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// The code as clients read it in `error.code`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $code,)+
                }
            }

            /// The status an answer with this code carries.
            pub fn status(self) -> StatusCode {
                let status = match self {
                    $(Self::$variant => $status,)+
                };
                StatusCode::from_u16(status).expect("a valid status code")
            }

            /// When the code is answered.
            pub fn sentence(self) -> &'static str {
                match self {
                    $(Self::$variant => $sentence,)+
                }
            }
        }
    };
}

error_codes! {
    BadRequest = "bad_request", 400, "The request is malformed: a field, a header or the body.";
    Unauthorized = "unauthorized", 401, "No valid API key was sent.";
    NotFound = "not_found", 404, "No such resource, or not the caller's (the same answer for both).";
    RequestTimeout = "request_timeout", 408, "The request body stopped arriving.";
    UnsupportedVersion = "unsupported_version", 412, "A tus request of another protocol version.";
    OriginNotAllowed = "origin_not_allowed", 403, "A browser page from an origin not allowed to call the API.";
    Excluded = "excluded", 409, "A live file after its recording's cutoff: not part of it.";
    FileLanded = "file_landed", 409, "A live file already stored in S3 under its name.";
    EmptyFile = "empty_file", 400, "A live file without bytes.";
    NoVideoStream = "no_video_stream", 422, "A broadcast whose stream holds no decodable video.";
    TooLarge = "too_large", 413, "More bytes than the limit or than the upload declared.";
    UnsupportedMediaType = "unsupported_media_type", 415, "A content type vidq does not take, or not the upload's.";
    TooManyConnections = "too_many_connections", 429, "The client's address holds the most connections it may.";
    MethodNotAllowed = "method_not_allowed", 405, "The path does not take this method.";
    HeadersTooLarge = "headers_too_large", 431, "The request headers are too large.";
    Internal = "internal", 500, "An internal error; its cause is in the server's log.";
    UploadIncomplete = "upload_incomplete", 409, "The upload's object is not (all) in storage yet.";
    SizeMismatch = "size_mismatch", 409, "The stored object's size is not the declared size.";
    UploadClosed = "upload_closed", 409, "The upload is no longer open (expired, rejected).";
    IngestDisabled = "ingest_disabled", 503, "This node takes no uploads or live files through vidq.";
    PresignedUpload = "presigned_upload", 409, "A presigned upload, sent to vidq's own upload routes.";
    WrongNode = "wrong_node", 421, "An upload on another node's spool.";
    UploadBusy = "upload_busy", 423, "Another request is sending bytes of this upload.";
    UploadGone = "upload_gone", 410, "The upload expired, was terminated, or its bytes are lost.";
    UploadComplete = "upload_complete", 409, "Every byte of the upload has arrived.";
    UploadTooFragmented = "upload_too_fragmented", 409, "The upload used up its S3 part numbers.";
    BadFileName = "bad_file_name", 400, "A live file name vidq does not take.";
    WrongUploadMethod = "wrong_upload_method", 409, "A resumable request on a single-PUT upload, or the other way round.";
    SpoolBusy = "spool_busy", 503, "The node's spool takes no more writers now.";
    OffsetMismatch = "offset_mismatch", 409, "A tus PATCH whose offset is not the upload's.";
    ChecksumMismatch = "checksum_mismatch", 460, "The bytes do not have the checksum the request named (460: the tus checksum extension's status).";
    BodyInterrupted = "body_interrupted", 400, "The request body was cut off.";
    SpoolUnavailable = "spool_unavailable", 503, "The node's spool cannot be written now.";
    InsufficientStorage = "insufficient_storage", 507, "The node's spool disk is full.";
    InvalidWebhookUrl = "invalid_webhook_url", 422, "A webhook URL vidq does not send to.";
    InvalidEventTypes = "invalid_event_types", 400, "An event type vidq does not have.";
    EndpointDisabled = "endpoint_disabled", 409, "The webhook endpoint was disabled.";
    EventTypeNotSubscribed = "event_type_not_subscribed", 422, "The endpoint does not take this event's type.";
    TooManyResends = "too_many_resends", 429, "Over the resends an endpoint may have in a minute.";
    TooManyOpenUploads = "too_many_open_uploads", 429, "The user has the most open uploads it may.";
    TooManyOpenRecordings = "too_many_open_recordings", 429, "The user has the most open recordings it may.";
    Conflict = "conflict", 409, "The name is taken.";
    InvalidToken = "invalid_token", 403, "A playback URL without a valid token.";
    Unavailable = "unavailable", 503, "The database is out of reach for a moment.";
    StorageUnavailable = "storage_unavailable", 503, "Object storage is out of reach for a moment.";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_spelled_once_and_carries_an_error_status() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()), "{} twice", code.as_str());
            assert!(
                code.status().is_client_error() || code.status().is_server_error(),
                "{code:?}"
            );
            assert!(code.sentence().ends_with('.'), "{code:?}");
        }
        assert_eq!(ErrorCode::ChecksumMismatch.status().as_u16(), 460);
    }
}
