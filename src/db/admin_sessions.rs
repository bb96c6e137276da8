//! Dashboard logins: a row per session, found by the SHA-256 of the cookie's token.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::schema::admin_sessions;

/// A live session: who opened it and the CSRF token its forms carry.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = admin_sessions)]
pub struct AdminSession {
    /// SHA-256 of the secret that opened it.
    pub credential_hash: Vec<u8>,
    /// `token` (the operator token) or `user:<name>` (an operator's API key).
    pub subject: String,
    /// Echoed by every form of this session.
    pub csrf: String,
    /// When it stops opening the dashboard.
    pub expires_at: DateTime<Utc>,
}

/// Opens a session; also deletes the expired ones, so the table stays small.
pub async fn open(
    conn: &mut AsyncPgConnection,
    token_hash: &[u8],
    credential_hash: &[u8],
    subject: &str,
    csrf: &str,
    expires_at: DateTime<Utc>,
) -> QueryResult<()> {
    diesel::delete(admin_sessions::table.filter(admin_sessions::expires_at.lt(diesel::dsl::now)))
        .execute(conn)
        .await?;
    diesel::insert_into(admin_sessions::table)
        .values((
            admin_sessions::token_hash.eq(token_hash),
            admin_sessions::credential_hash.eq(credential_hash),
            admin_sessions::subject.eq(subject),
            admin_sessions::csrf.eq(csrf),
            admin_sessions::expires_at.eq(expires_at),
        ))
        .execute(conn)
        .await
        .map(drop)
}

/// The unexpired session with this token hash.
pub async fn find(
    conn: &mut AsyncPgConnection,
    token_hash: &[u8],
) -> QueryResult<Option<AdminSession>> {
    admin_sessions::table
        .filter(admin_sessions::token_hash.eq(token_hash))
        .filter(admin_sessions::expires_at.gt(diesel::dsl::now))
        .select(AdminSession::as_select())
        .first(conn)
        .await
        .optional()
}

/// Ends a session (logout).
pub async fn close(conn: &mut AsyncPgConnection, token_hash: &[u8]) -> QueryResult<usize> {
    diesel::delete(admin_sessions::table.filter(admin_sessions::token_hash.eq(token_hash)))
        .execute(conn)
        .await
}
