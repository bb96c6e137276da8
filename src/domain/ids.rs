//! Typed identifiers, so a video id can never be passed where an upload id is expected.
//!
//! Public ids are UUIDv7: unique without coordination and ordered by creation time, which
//! makes "newest first" an index scan on the primary key.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A fresh, time-ordered id.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }
    };
}

uuid_id!(
    /// An uploader (API-key holder).
    UserId
);
uuid_id!(
    /// One upload contract: a server-chosen object key the client PUTs to.
    UploadId
);
uuid_id!(
    /// A video made from a confirmed upload.
    VideoId
);
uuid_id!(
    /// An outbox event; the same id goes out on every delivery try.
    EventId
);
uuid_id!(
    /// A webhook endpoint an uploader registered.
    WebhookId
);
uuid_id!(
    /// A live recording (one broadcast), and the stream key's slot for it.
    RecordingId
);
uuid_id!(
    /// A claim's fencing token (of a job's attempt, or of a delivery's try): minted by each
    /// claim, and every write that ends what was claimed must match it.
    ClaimToken
);
uuid_id!(
    /// One tus request's hold on an upload of the `s3` store (its lease on the row), minted
    /// per request.
    RequestToken
);
