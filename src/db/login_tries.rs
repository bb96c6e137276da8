//! Failed dashboard logins per client address, in the database so every API node counts the
//! same tries. A try is a row from the moment it starts (guesses sent in parallel count as
//! surely as guesses in a row); a successful login deletes its own row.

use std::time::Duration;

use diesel::sql_types::{BigInt, Double, Integer, Nullable, Text};
use diesel_async::{AsyncConnection as _, AsyncPgConnection, RunQueryDsl};

/// Starts a try from `address` unless it made `max` tries within `window`: `Ok(id)` of the
/// try, or `Err(wait)` until its oldest try leaves the window. Tries older than the window
/// (of every address) are forgotten on the way.
pub async fn begin(
    conn: &mut AsyncPgConnection,
    address: &str,
    max: u32,
    window: Duration,
) -> diesel::QueryResult<Result<i64, Duration>> {
    #[derive(diesel::QueryableByName)]
    struct Counted {
        #[diesel(sql_type = BigInt)]
        n: i64,
        #[diesel(sql_type = Nullable<Double>)]
        oldest_age: Option<f64>,
    }
    #[derive(diesel::QueryableByName)]
    struct Id {
        #[diesel(sql_type = BigInt)]
        id: i64,
    }
    let window_secs = window.as_secs_f64();
    let address = address.to_owned();
    conn.transaction(async |conn| {
        // One address's tries are counted one at a time on every node.
        diesel::sql_query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind::<Integer, _>(0x7664_7110)
            .bind::<Text, _>(&address)
            .execute(conn)
            .await?;
        diesel::sql_query(
            "DELETE FROM login_tries WHERE at < clock_timestamp() - make_interval(secs => $1)",
        )
        .bind::<Double, _>(window_secs)
        .execute(conn)
        .await?;
        let counted: Counted = diesel::sql_query(
            "SELECT count(*) AS n,
                    extract(epoch FROM clock_timestamp() - min(at))::float8 AS oldest_age
               FROM login_tries WHERE address = $1",
        )
        .bind::<Text, _>(&address)
        .get_result(conn)
        .await?;
        if counted.n >= i64::from(max) {
            let age = counted.oldest_age.unwrap_or_default().max(0.0);
            return Ok(Err(Duration::from_secs_f64((window_secs - age).max(0.0))));
        }
        let id: Id =
            diesel::sql_query("INSERT INTO login_tries (address) VALUES ($1) RETURNING id")
                .bind::<Text, _>(&address)
                .get_result(conn)
                .await?;
        Ok(Ok(id.id))
    })
    .await
}

/// A try that logged in: it does not count against its address.
pub async fn give_back(conn: &mut AsyncPgConnection, id: i64) -> diesel::QueryResult<usize> {
    diesel::sql_query("DELETE FROM login_tries WHERE id = $1")
        .bind::<BigInt, _>(id)
        .execute(conn)
        .await
}
