//! Statements for a dedicated session (one connection outside the pool whose state matters):
//! LISTEN, session advisory locks, session settings, and a liveness ping.

use diesel::QueryResult;
use diesel::sql_types::BigInt;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// `SELECT 1`: the server answers on this connection.
pub async fn ping(conn: &mut AsyncPgConnection) -> QueryResult<()> {
    diesel::sql_query("SELECT 1").execute(conn).await.map(drop)
}

/// Starts receiving NOTIFYs on `channel` (a fixed identifier of vidq's, never user input).
pub async fn listen(conn: &mut AsyncPgConnection, channel: &str) -> QueryResult<()> {
    diesel::sql_query(format!("LISTEN {channel}"))
        .execute(conn)
        .await
        .map(drop)
}

/// Stops receiving NOTIFYs on `channel`.
pub async fn unlisten(conn: &mut AsyncPgConnection, channel: &str) -> QueryResult<()> {
    diesel::sql_query(format!("UNLISTEN {channel}"))
        .execute(conn)
        .await
        .map(drop)
}

/// Waits for the session advisory lock `key` and takes it.
pub async fn advisory_lock(conn: &mut AsyncPgConnection, key: i64) -> QueryResult<()> {
    diesel::sql_query("SELECT pg_advisory_lock($1)")
        .bind::<BigInt, _>(key)
        .execute(conn)
        .await
        .map(drop)
}

/// Releases the session advisory lock `key`.
pub async fn advisory_unlock(conn: &mut AsyncPgConnection, key: i64) -> QueryResult<()> {
    diesel::sql_query("SELECT pg_advisory_unlock($1)")
        .bind::<BigInt, _>(key)
        .execute(conn)
        .await
        .map(drop)
}

/// Prepares a session whose waits are meant to be long and silent: no server-wide timeout
/// may end them, and the server must notice a client host that vanished (its keepalives,
/// and while queued the connection check), or a lock would stay with a dead session for
/// hours.
pub async fn allow_long_waits(conn: &mut AsyncPgConnection) -> QueryResult<()> {
    diesel::sql_query("SET statement_timeout = 0")
        .execute(conn)
        .await?;
    diesel::sql_query("SET lock_timeout = 0")
        .execute(conn)
        .await?;
    // Settings older servers do not know (idle_session_timeout 14+, transaction_timeout 17+,
    // client_connection_check_interval 14+) or managed services pin.
    for setting in [
        "SET idle_session_timeout = 0",
        "SET transaction_timeout = 0",
        "SET client_connection_check_interval = '2s'",
        "SET tcp_keepalives_idle = 30",
        "SET tcp_keepalives_interval = 10",
        "SET tcp_keepalives_count = 3",
    ] {
        if let Err(error) = diesel::sql_query(setting).execute(conn).await {
            tracing::debug!(%error, setting, "session setting not applied");
        }
    }
    Ok(())
}

/// Takes the session advisory lock `key` if it is free; `false` if another session holds it.
pub async fn try_advisory_lock(conn: &mut AsyncPgConnection, key: i64) -> QueryResult<bool> {
    #[derive(diesel::QueryableByName)]
    struct Taken {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        taken: bool,
    }
    let taken: Taken = diesel::sql_query("SELECT pg_try_advisory_lock($1) AS taken")
        .bind::<BigInt, _>(key)
        .get_result(conn)
        .await?;
    Ok(taken.taken)
}
