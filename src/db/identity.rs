//! Which database this is, as the bucket's deployment marker records it: the server
//! cluster's system identifier (`pg_control_system()`, fixed when the cluster was made) and
//! the database's name. A copy restored into another cluster has another identifier.

use diesel::sql_types::Text;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// The database's identity.
#[derive(Debug, Clone, PartialEq, Eq, diesel::QueryableByName)]
pub struct DatabaseIdentity {
    /// `pg_control_system().system_identifier`, in decimal.
    #[diesel(sql_type = Text)]
    pub system_identifier: String,
    /// `current_database()`.
    #[diesel(sql_type = Text)]
    pub database: String,
}

/// Reads it. `pg_control_system()` needs a superuser or the `pg_monitor` role; a user
/// without either (some managed services) gets [`UNREADABLE`] as the identifier, so the
/// marker tells deployments apart by database name only (logged once at WARN by the caller).
pub async fn identity(conn: &mut AsyncPgConnection) -> diesel::QueryResult<DatabaseIdentity> {
    let full = diesel::sql_query(
        "SELECT system_identifier::text AS system_identifier, current_database()::text AS database
           FROM pg_control_system()",
    )
    .get_result(conn)
    .await;
    match full {
        Err(diesel::result::Error::DatabaseError(_, info))
            if info.message().starts_with("permission denied") =>
        {
            diesel::sql_query(format!(
                "SELECT '{UNREADABLE}'::text AS system_identifier, current_database()::text AS database"
            ))
            .get_result(conn)
            .await
        }
        other => other,
    }
}

/// The identifier of a cluster whose `pg_control_system()` this user may not read.
pub const UNREADABLE: &str = "unreadable";
