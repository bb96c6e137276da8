//! The typed ids as SQL values: each binds, compares and reads back as a `uuid` column, so
//! the query functions take and return `VideoId`, `UploadId`, ... down to the statement and a
//! video id cannot be bound where an upload id belongs. Each impl hands the inner `Uuid` to
//! diesel's own, so the wire format is exactly a `uuid`'s.

use diesel::deserialize::{self, FromSql, Queryable};
use diesel::expression::AsExpression;
use diesel::pg::{Pg, PgValue};
use diesel::serialize::{self, Output, ToSql};
use diesel::sql_types::{Nullable, Uuid as SqlUuid};
use uuid::Uuid;

use crate::domain::ids::{
    ClaimToken, EventId, RecordingId, RequestToken, UploadId, UserId, VideoId, WebhookId,
};

macro_rules! uuid_column {
    ($($id:ty),+ $(,)?) => {$(
        impl ToSql<SqlUuid, Pg> for $id {
            fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> serialize::Result {
                <Uuid as ToSql<SqlUuid, Pg>>::to_sql(&self.0, out)
            }
        }

        impl ToSql<Nullable<SqlUuid>, Pg> for $id {
            fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> serialize::Result {
                <Uuid as ToSql<SqlUuid, Pg>>::to_sql(&self.0, out)
            }
        }

        impl FromSql<SqlUuid, Pg> for $id {
            fn from_sql(bytes: PgValue<'_>) -> deserialize::Result<Self> {
                <Uuid as FromSql<SqlUuid, Pg>>::from_sql(bytes).map(Self)
            }
        }

        impl Queryable<SqlUuid, Pg> for $id {
            type Row = Self;
            fn build(row: Self) -> deserialize::Result<Self> {
                Ok(row)
            }
        }

        impl AsExpression<SqlUuid> for $id {
            type Expression = <Uuid as AsExpression<SqlUuid>>::Expression;
            fn as_expression(self) -> Self::Expression {
                <Uuid as AsExpression<SqlUuid>>::as_expression(self.0)
            }
        }

        impl AsExpression<SqlUuid> for &$id {
            type Expression = <Uuid as AsExpression<SqlUuid>>::Expression;
            fn as_expression(self) -> Self::Expression {
                <Uuid as AsExpression<SqlUuid>>::as_expression(self.0)
            }
        }

        impl AsExpression<Nullable<SqlUuid>> for $id {
            type Expression = <Uuid as AsExpression<Nullable<SqlUuid>>>::Expression;
            fn as_expression(self) -> Self::Expression {
                <Uuid as AsExpression<Nullable<SqlUuid>>>::as_expression(self.0)
            }
        }

        impl AsExpression<Nullable<SqlUuid>> for &$id {
            type Expression = <Uuid as AsExpression<Nullable<SqlUuid>>>::Expression;
            fn as_expression(self) -> Self::Expression {
                <Uuid as AsExpression<Nullable<SqlUuid>>>::as_expression(self.0)
            }
        }
    )+};
}

uuid_column!(
    ClaimToken,
    EventId,
    RecordingId,
    RequestToken,
    UploadId,
    UserId,
    VideoId,
    WebhookId,
);
