//! Creating and dropping whole databases: `vidq dev` creates its database on first run, and
//! the tests clone a migrated template per test.

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::pool::{database_name, with_database, with_default_user};
use super::{ConnectError, DbError};

#[derive(diesel::QueryableByName)]
struct Exists {
    #[diesel(sql_type = diesel::sql_types::Bool)]
    exists: bool,
}

/// Double-quotes an identifier for SQL that cannot take it as a bind parameter.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

async fn maintenance_connection(url: &str) -> Result<AsyncPgConnection, DbError> {
    let url = with_database(url, "postgres")?;
    AsyncPgConnection::establish(&url)
        .await
        .map_err(|err| ConnectError::Establish(err).into())
}

fn name_of(url: &str) -> Result<String, DbError> {
    database_name(&with_default_user(url)?).ok_or(ConnectError::NoDatabase.into())
}

/// Creates the database `url` points at unless it exists; returns whether it created it.
pub async fn create_database_if_missing(url: &str) -> Result<bool, DbError> {
    let name = name_of(url)?;
    let mut conn = maintenance_connection(url).await?;
    let found: Exists =
        diesel::sql_query("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1) AS exists")
            .bind::<diesel::sql_types::Text, _>(&name)
            .get_result(&mut conn)
            .await?;
    if found.exists {
        return Ok(false);
    }
    diesel::sql_query(format!("CREATE DATABASE {}", quote_ident(&name)))
        .execute(&mut conn)
        .await?;
    Ok(true)
}

/// Creates the database `url` points at as a copy of `template`.
pub async fn create_database_from_template(url: &str, template: &str) -> Result<(), DbError> {
    let name = name_of(url)?;
    let mut conn = maintenance_connection(url).await?;
    diesel::sql_query(format!(
        "CREATE DATABASE {} TEMPLATE {}",
        quote_ident(&name),
        quote_ident(template)
    ))
    .execute(&mut conn)
    .await?;
    Ok(())
}

/// Drops the database `url` points at, disconnecting its sessions.
pub async fn drop_database(url: &str) -> Result<(), DbError> {
    let name = name_of(url)?;
    let mut conn = maintenance_connection(url).await?;
    diesel::sql_query(format!(
        "DROP DATABASE IF EXISTS {} WITH (FORCE)",
        quote_ident(&name)
    ))
    .execute(&mut conn)
    .await?;
    Ok(())
}
