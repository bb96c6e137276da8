//! Transactions sent as pipelines: `BEGIN` goes out with the first statements and `COMMIT`
//! with the last, back to back, and the answers are read afterwards.
//!
//! PostgreSQL still runs the statements one after another, in the order they were sent, so
//! a pipelined transaction takes the same locks in the same order and has the same effects
//! as the same statements awaited one by one. What it saves is a round trip per statement:
//! on a busy small machine each round trip is two wake-ups (the client's task and the
//! server's backend), and those, not the statements, were most of a finalize's cost.
//!
//! A statement that is not part of the transaction can ride in the same flight, sent before
//! its `BEGIN` on the same connection and autocommitted on its own: a worker's READY finalize
//! carries the claim of its freed slot's next job that way (`queue::claim_ahead`).
//!
//! Two rules make a pipeline safe:
//! - A statement sent with the `COMMIT` must fail on the server, never only in the client,
//!   because its `COMMIT` is already on the wire when the answer is read. PostgreSQL turns
//!   the `COMMIT` of a failed transaction into a `ROLLBACK`. That is why the finalize's
//!   fence raises an error when it matches nothing (`vidq_claim_held`), instead of
//!   returning a row count for the client to check. A batch without the `COMMIT`
//!   ([`PipelinedTx::begin_with`]) may fail either way: it is rolled back before returning.
//! - A pipeline dropped half way (its task cancelled) leaves the connection in a state
//!   nobody knows; [`PipelinedTx`]'s `Drop` marks the connection broken, so the pool closes it
//!   instead of handing out an open transaction.

use diesel::QueryResult;
use diesel_async::{AsyncPgConnection, TransactionManager};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

/// One transaction on one connection, sent as pipelines. Statements take [`PipelinedTx::conn`]
/// (a shared reference: that is how diesel-async lets several run at once) and are joined
/// into a batch.
pub struct PipelinedTx<'c> {
    conn: &'c mut AsyncPgConnection,
    /// Whether a `BEGIN` was sent and no `COMMIT` or `ROLLBACK` has been answered since.
    open: AtomicBool,
}

impl<'c> PipelinedTx<'c> {
    /// A transaction on `conn`; nothing is sent until [`PipelinedTx::begin_with`].
    pub fn new(conn: &'c mut AsyncPgConnection) -> Self {
        Self {
            conn,
            open: AtomicBool::new(false),
        }
    }

    /// The connection to issue this transaction's statements on.
    pub fn conn(&self) -> &AsyncPgConnection {
        self.conn
    }

    /// Sends `BEGIN` and then `statements` without waiting in between. If they fail, the
    /// transaction is rolled back before the error is returned.
    pub async fn begin_with<T, E>(
        &self,
        statements: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E>
    where
        E: From<diesel::result::Error>,
    {
        self.open.store(true, Ordering::SeqCst);
        let (began, result) = futures_util::future::join(self.send("BEGIN"), statements).await;
        match began.map_err(E::from).and(result) {
            Ok(value) => Ok(value),
            Err(error) => {
                self.rollback().await?;
                Err(error)
            }
        }
    }

    /// Sends `statements` and then `COMMIT` without waiting in between, and waits for all
    /// of them. A statement that failed on the server makes the `COMMIT` a rollback; its
    /// error is returned. See the module's first rule.
    pub async fn commit_with<T, E>(
        &self,
        statements: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E>
    where
        E: From<diesel::result::Error>,
    {
        let (result, committed) = futures_util::future::join(statements, self.send("COMMIT")).await;
        // A COMMIT that got an answer ended the transaction, committed or rolled back; one
        // that did not (a broken connection) leaves it open, and so the connection broken.
        if committed.is_ok() {
            self.open.store(false, Ordering::SeqCst);
        }
        result.and_then(|value| committed.map(|_| value).map_err(E::from))
    }

    /// The whole transaction in one round trip: `BEGIN`, `statements`, `COMMIT`, sent back to
    /// back. Every statement is sent with the `COMMIT`: see the module's first rule.
    pub async fn run<T, E>(&self, statements: impl Future<Output = Result<T, E>>) -> Result<T, E>
    where
        E: From<diesel::result::Error>,
    {
        self.open.store(true, Ordering::SeqCst);
        let (began, result) =
            futures_util::future::join(self.send("BEGIN"), self.commit_with(statements)).await;
        began.map_err(E::from).and(result)
    }

    /// Ends the transaction without its changes.
    pub async fn rollback(&self) -> QueryResult<()> {
        self.send("ROLLBACK").await?;
        self.open.store(false, Ordering::SeqCst);
        Ok(())
    }

    fn send(&self, command: &'static str) -> impl Future<Output = QueryResult<usize>> + '_ {
        let mut conn = self.conn();
        async move {
            use diesel_async::RunQueryDsl;
            super::prepared::prepared(command).execute(&mut conn).await
        }
    }
}

impl Drop for PipelinedTx<'_> {
    fn drop(&mut self) {
        if self.open.load(Ordering::SeqCst) {
            // diesel's transaction manager did not see this BEGIN; an error state is what
            // makes the pool discard the connection rather than reuse it.
            <AsyncPgConnection as diesel_async::AsyncConnection>::TransactionManager::transaction_manager_status_mut(
                self.conn,
            )
            .set_in_error();
        }
    }
}
