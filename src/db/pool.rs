//! The connection pool (bb8 over diesel-async) and database URL handling.

use std::time::Duration;

use diesel_async::AsyncPgConnection;
use diesel_async::pooled_connection::AsyncDieselConnectionManager;

use super::{ConnectError, DbError};

/// A pool of async PostgreSQL connections.
pub type DbPool = bb8::Pool<AsyncDieselConnectionManager<AsyncPgConnection>>;

/// A connection checked out of [`DbPool`]; derefs to `AsyncPgConnection`.
pub type DbConn<'a> = bb8::PooledConnection<'a, AsyncDieselConnectionManager<AsyncPgConnection>>;

/// Builds a pool of at most `max_size` connections and checks that one can be opened, so a
/// wrong URL or a stopped database fails at start-up with its cause, not on the first request.
pub async fn connect(url: &str, max_size: u32) -> Result<DbPool, DbError> {
    let pool = unchecked(url, max_size)?;
    drop(pool.get().await.map_err(ConnectError::Pool)?);
    Ok(pool)
}

/// Like [`connect`] without opening a connection first: for a second pool of a process
/// whose first pool already proved the URL works (a worker's heartbeat pool).
pub fn unchecked(url: &str, max_size: u32) -> Result<DbPool, DbError> {
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new(with_default_user(url)?);
    Ok(bb8::Pool::builder()
        .max_size(max_size)
        .connection_timeout(Duration::from_secs(10))
        // No `SELECT 1` before every checkout: that doubled the round trips of a claim. A
        // connection that broke is noticed by the query that hits it and dropped on return.
        .test_on_check_out(false)
        .build_unchecked(manager))
}

/// One connection outside any pool, for a session that must stay the same: a LISTEN, a
/// session advisory lock, a transaction held open on purpose.
pub async fn dedicated(url: &str) -> Result<AsyncPgConnection, DbError> {
    use diesel_async::AsyncConnection;
    AsyncPgConnection::establish(&with_default_user(url)?)
        .await
        .map_err(|err| ConnectError::Establish(err).into())
}

/// libpq (and so psql) connects as the OS user when a URL names none; tokio-postgres
/// refuses such URLs. Filling in the same default keeps `postgres://localhost/vidq` working
/// for a newcomer exactly as it does in psql.
pub fn with_default_user(url: &str) -> Result<String, DbError> {
    let mut parsed = url::Url::parse(url).map_err(ConnectError::Url)?;
    if !matches!(parsed.scheme(), "postgres" | "postgresql") {
        return Err(ConnectError::Scheme.into());
    }
    if parsed.username().is_empty() {
        let user = std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .unwrap_or_else(|_| "postgres".to_owned());
        parsed
            .set_username(&user)
            .map_err(|()| ConnectError::User)?;
    }
    Ok(parsed.into())
}

/// The URL of another database on the same server (for creating `vidq dev`'s database and
/// the tests' per-test databases).
pub fn with_database(url: &str, database: &str) -> Result<String, DbError> {
    let mut parsed = url::Url::parse(&with_default_user(url)?).map_err(ConnectError::Url)?;
    parsed.set_path(database);
    Ok(parsed.into())
}

/// The database name a URL points at.
pub fn database_name(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    let name = parsed.path().trim_start_matches('/');
    (!name.is_empty()).then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_without_a_user_get_the_os_user() {
        let filled = with_default_user("postgres://localhost/vidq").unwrap();
        assert!(!url::Url::parse(&filled).unwrap().username().is_empty());
        assert_eq!(
            with_default_user("postgres://app@db/vidq").unwrap(),
            "postgres://app@db/vidq"
        );
        assert!(with_default_user("mysql://x/y").is_err());
    }

    #[test]
    fn a_connect_error_keeps_its_cause() {
        let err = with_default_user("not a url").unwrap_err();
        let connect = std::error::Error::source(&err).expect("the connect error");
        let cause = connect.source().expect("the parser's own error");
        assert!(cause.downcast_ref::<url::ParseError>().is_some(), "{cause}");
        assert!(matches!(
            with_default_user("mysql://x/y"),
            Err(DbError::Connect(ConnectError::Scheme))
        ));
    }

    #[test]
    fn database_can_be_swapped_and_read() {
        let other = with_database("postgres://a@h:5432/vidq?sslmode=disable", "vidq_t1").unwrap();
        assert_eq!(other, "postgres://a@h:5432/vidq_t1?sslmode=disable");
        assert_eq!(database_name(&other).as_deref(), Some("vidq_t1"));
    }
}
