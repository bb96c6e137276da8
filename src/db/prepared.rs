//! Hand-written SQL that PostgreSQL prepares once per connection and then only executes.
//!
//! diesel's `sql_query` is never cached as a prepared statement, so every run is parsed and
//! planned again; for the queue's hot statements (the claim, the fenced updates) planning
//! costs about as much as executing. [`Prepared`] carries the same `$n`-numbered SQL and
//! typed binds, and lets diesel cache the statement by its text.

use diesel::QueryResult;
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::serialize::ToSql;
use diesel::sql_types::{HasSqlType, Untyped};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// One bound value with its SQL type.
trait Bind: Send + Sync {
    fn push<'b>(&'b self, out: &mut AstPass<'_, 'b, Pg>) -> QueryResult<()>;
}

struct Typed<ST, T> {
    value: T,
    _type: std::marker::PhantomData<fn() -> ST>,
}

impl<ST, T> Bind for Typed<ST, T>
where
    Pg: HasSqlType<ST>,
    T: ToSql<ST, Pg> + Send + Sync,
    ST: Send + Sync,
{
    fn push<'b>(&'b self, out: &mut AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_bind_param::<ST, T>(&self.value)
    }
}

/// SQL with `$1`, `$2`... placeholders and their binds; a placeholder may appear twice.
pub struct Prepared<'a> {
    sql: String,
    binds: Vec<Box<dyn Bind + 'a>>,
}

/// Starts a prepared statement.
pub fn prepared<'a>(sql: impl Into<String>) -> Prepared<'a> {
    Prepared {
        sql: sql.into(),
        binds: Vec::new(),
    }
}

impl<'a> Prepared<'a> {
    /// Binds the next `$n`.
    pub fn bind<ST, T>(mut self, value: T) -> Self
    where
        Pg: HasSqlType<ST>,
        T: ToSql<ST, Pg> + Send + Sync + 'a,
        ST: Send + Sync + 'a,
    {
        self.binds.push(Box::new(Typed::<ST, T> {
            value,
            _type: std::marker::PhantomData,
        }));
        self
    }
}

/// Runs the rest of the current transaction's prepared statements from their generic plans
/// (`plan_cache_mode`, set for the transaction only), for a batch's statements over arrays.
///
/// PostgreSQL plans a statement with parameters for their values a few times, then compares
/// its generic plan. Over an array parameter the generic plan has to guess the length (10) and
/// so looks dearer than a plan for the real length (2 or 3 in a worker's batch): the statement
/// is planned again on every execution, for ever. The batch statements look each row up by key
/// whatever the length, so the guess costs them nothing. Sent first in a pipelined
/// transaction, the setting is in force when the statements behind it are bound, which is when
/// PostgreSQL picks their plans.
pub async fn generic_plans_in_this_transaction(mut conn: &AsyncPgConnection) -> QueryResult<()> {
    prepared("SELECT set_config('plan_cache_mode', 'force_generic_plan', true)")
        .execute(&mut conn)
        .await
        .map(drop)
}

impl QueryFragment<Pg> for Prepared<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        // diesel numbers placeholders itself as binds are pushed, so the text is cut at each
        // `$n` and the n-th bind pushed there.
        let mut rest = self.sql.as_str();
        while let Some(at) = rest.find('$') {
            let digits = rest[at + 1..]
                .bytes()
                .take_while(u8::is_ascii_digit)
                .count();
            if digits == 0 {
                out.push_sql(&rest[..=at]);
                rest = &rest[at + 1..];
                continue;
            }
            out.push_sql(&rest[..at]);
            let n: usize = rest[at + 1..at + 1 + digits].parse().expect("digits");
            let bind = self.binds.get(n.wrapping_sub(1)).ok_or_else(|| {
                diesel::result::Error::QueryBuilderError(format!("no bind for ${n}").into())
            })?;
            bind.push(&mut out)?;
            rest = &rest[at + 1 + digits..];
        }
        out.push_sql(rest);
        Ok(())
    }
}

impl QueryId for Prepared<'_> {
    type QueryId = ();
    // No static id: diesel caches the prepared statement by its SQL text instead.
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl Query for Prepared<'_> {
    type SqlType = Untyped;
}
