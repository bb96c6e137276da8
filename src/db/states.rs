//! The domain's state and kind enums as `text` columns: a row reads a state straight into
//! its enum, and a spelling the enum does not know is an error at the boundary
//! ([`crate::domain::upload::UnknownState`]), never a default. On the way in, the schema's
//! CHECK constraints refuse what they do not list (`tests/it/schema.rs`); failure codes
//! have no CHECK, so reading is where an unknown one is caught.

use diesel::deserialize::{self, FromSql, Queryable};
use diesel::pg::{Pg, PgValue};
use diesel::serialize::{self, Output, ToSql};
use diesel::sql_types::Text;

use crate::domain::artifact::{ArtifactState, Axis};
use crate::domain::delivery::DeliveryStatus;
use crate::domain::failure::FailureCode;
use crate::domain::job::{JobKind, JobStatus, Outcome};
use crate::domain::recording::{EndReason, FileAxis, FileState, RecordingState};
use crate::domain::upload::{RejectReason, UploadState, UploadStore, UploadVia};
use crate::domain::video::VideoStatus;

/// Reads and writes each enum as its spelling.
macro_rules! text_columns {
    ($($state:ty),+ $(,)?) => {$(
        impl FromSql<Text, Pg> for $state {
            fn from_sql(bytes: PgValue<'_>) -> deserialize::Result<Self> {
                let spelled = <String as FromSql<Text, Pg>>::from_sql(bytes)?;
                Ok(spelled.parse::<$state>()?)
            }
        }

        impl ToSql<Text, Pg> for $state {
            fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> serialize::Result {
                <str as ToSql<Text, Pg>>::to_sql(self.as_str(), &mut out.reborrow())
            }
        }

        impl Queryable<Text, Pg> for $state {
            type Row = Self;

            fn build(row: Self) -> deserialize::Result<Self> {
                Ok(row)
            }
        }
    )+};
}

text_columns!(
    ArtifactState,
    Axis,
    DeliveryStatus,
    EndReason,
    FailureCode,
    FileAxis,
    FileState,
    JobKind,
    JobStatus,
    Outcome,
    RecordingState,
    RejectReason,
    UploadState,
    UploadStore,
    UploadVia,
    VideoStatus,
);
