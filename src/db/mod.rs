//! The only code that knows SQL. Query functions take `&mut AsyncPgConnection`, so the caller
//! decides which transaction they join (a confirm's video, job and outbox inserts share one).
//! Those of the hot transactions (the confirm, the finalize) take `&AsyncPgConnection`
//! instead: a shared reference is how several statements of one transaction are sent at once
//! and answered in order ([`pipelined`]). They still join the caller's transaction.
//!
//! # Lock order
//!
//! This is the one statement of vidq's lock order; the docs and comments point here.
//! Every transaction takes the row locks it may wait for in this order, skips tables it does
//! not touch and never goes back to an earlier table; rows of one table in id order:
//!
//! 1. `users`: `FOR KEY SHARE` first, by every transaction that writes an uploader's rows
//!    (confirm, finalize READY/FAILED, the reaper, an operator's retry/cancel, video
//!    deletion, each page of a user deletion; a plain insert such as a new upload contract
//!    takes it through its foreign key); `FOR NO KEY UPDATE` by a webhook registration (it
//!    counts the user's endpoints against the cap, so two registrations take turns) and by
//!    revoking the key when a user deletion starts; `FOR UPDATE` by the last step of a user
//!    deletion only. So a user deletion and that user's other writes meet at this first row.
//!    A batch of confirms (`app::uploads::accept_all`) locks all its uploaders at once, in id
//!    order, and so does a batch of a worker's READY finalizes (`queue::complete::ready`). That
//!    batch then updates its videos with one statement and completes its jobs with another,
//!    last, each visiting its rows in the order of the plan, not of the ids: no other
//!    writer of those rows takes more than one of them at a time except a user deletion's
//!    page, and a deadlock with that page is detected by PostgreSQL and retried, finalize
//!    by finalize, as any transient failure of a finalize is.
//! 2. `uploads`: the confirm's compare-and-set `pending|uploaded -> confirmed` (a batch of
//!    confirms locks its contracts in id order before it sets them; the sweeper's confirm
//!    of an upload through vidq takes it too, through the same transaction); a user
//!    deletion's page locks a page of the owner's contracts `FOR UPDATE`. The sweeper's own
//!    ledger statements (`uploads::sweep`: claim a page `FOR UPDATE SKIP LOCKED`, record a failure,
//!    reject, release, expire presigned contracts `FOR UPDATE SKIP LOCKED`) are single
//!    statements that lock `uploads` rows only, in id order, and hold no lock across a PUT
//!    (the claim is a lease column, `claimed_until`, committed before the transfer).
//!    `vidq reconcile` reads without locks (one read-only snapshot) and its `--fix` re-queue
//!    is one such single statement; it deletes objects outside any transaction. An `s3`-store
//!    upload's own rows come right after its `uploads` row (`uploads::multiparts`): taking the lease
//!    and counting stored bytes lock the `uploads` row, then its `tus_multiparts` row, then
//!    write `tus_parts` and `tus_tail_pieces`; a HEAD's take-over, a renewal and a release
//!    touch the `tus_multiparts` row alone, and the expiry pass locks `uploads` rows
//!    `FOR UPDATE SKIP LOCKED` before it reads theirs. No lock is held across an S3 call
//!    (the lease is a column, committed before the part streams).
//! 3. `videos`: `FOR UPDATE` or an UPDATE (finalize, reaper, operator, video deletion, a user
//!    deletion's page); `FOR KEY SHARE` by an attempt registering its outputs.
//!    `recordings` come right after, then their `recording_files`: the finalize of a video
//!    made from a recording moves the recording with it, the deletion of such a video deletes
//!    its recording; the ingest and the sweeper's passes take a recording (share lock or one
//!    UPDATE) and then its files, and lock nothing else; the transaction that makes a
//!    finished recording's video locks the recording `FOR UPDATE` after `users` and then only
//!    inserts (video, job, outbox); a user deletion's page of recordings locks their videos,
//!    then the recordings, and deletes them (files, videos and jobs cascade).
//! 4. `video_encoding_jobs`, then that job's `job_attempt_log` (the claim that takes over an
//!    expired lease and every fenced job update that ends an attempt otherwise than READY
//!    insert its row in the same statement; a READY finalize writes none).
//!    `video_artifacts` sit beside them, after `videos`: the output ledger's writes
//!    (register, CAS, forget) take no other row lock after them, and register locks its
//!    video first.
//! 5. `notification_outbox`: `FOR UPDATE` by a user deletion's event pages and its last
//!    step; `FOR KEY SHARE` by a resend (the event must stay while its delivery is added);
//!    relays route and prune with `SKIP LOCKED`, so they never wait here.
//! 6. `webhook_endpoints`: `FOR NO KEY UPDATE` by a resend (per-endpoint limit), `FOR UPDATE`
//!    by a user deletion's last step, an UPDATE by a relay disabling an endpoint (410).
//! 7. `event_deliveries`, then their `delivery_attempts`: user deletion, a relay's
//!    acknowledgement, a disabled endpoint's discards.
//!
//! What looks out of order but cannot wait on anyone:
//! - A new row locks nothing another transaction can see or wait for. The confirm inserts
//!   its video, job and outbox row after the upload's CAS; finalize and the reaper insert
//!   their outbox row before their LAST statement, the fenced job update (docs/architecture.md),
//!   so the job row is the last existing row they lock.
//! - Video deletion deletes the video's upload contract after the video: that contract is
//!   `confirmed`, and no path locks a confirmed contract (the confirm's CAS does not match
//!   it, so it does not wait for it).
//! - A user deletion works in pages, each its own transaction in this order: a page of
//!   contracts with their videos and jobs (deleting the contracts cascades to videos, jobs,
//!   attempts and artifacts, rows it locked or that hang below them), then pages of outbox
//!   rows with their deliveries, then the user row itself (`FOR UPDATE`), its remaining
//!   outbox rows, endpoints and deliveries, and `DELETE FROM users`, which cascades to what
//!   is left. Every writer of a user's rows holds the user's `KEY SHARE` (step 1) while it
//!   writes, which that last `FOR UPDATE` excludes; relays, which do not lock users, only take
//!   outbox, endpoint and delivery rows in the order above.
//! - Advisory locks are never waited for inside these transactions: a producer's outbox
//!   insert only tries the wake-up lock (`wake`), and the idle line's lock lives on a
//!   session of its own (`session`).

pub mod admin_sessions;
pub mod artifacts;
pub mod attempts;
#[cfg(feature = "bench")]
pub mod bench;
pub mod deliveries;
pub mod doomed_objects;
pub mod events;
pub mod identity;
mod ids;
pub mod jobs;
pub mod login_tries;
pub mod migrations;
pub mod nodes;
pub mod open_work;
pub mod operator_view;
pub mod pipelined;
pub mod pool;
pub mod prepared;
pub mod provision;
pub mod queue_ceiling;
pub mod reconcile;
pub mod recordings;
pub mod retrying;
/// The tables as `diesel print-schema` generates them from `migrations/`.
#[allow(missing_docs)]
pub mod schema;
pub mod session;
mod states;
#[cfg(feature = "bench")]
pub mod synthetic;
pub mod uploads;
pub mod users;
pub mod videos;
pub mod wake;
pub mod webhooks;

pub use pool::{DbConn, DbPool, connect};
/// A row of one `id uuid` column (what `RETURNING id` or `SELECT id` answers).
#[derive(diesel::QueryableByName)]
pub(crate) struct UuidRow {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub id: uuid::Uuid,
}

/// A row of one `n bigint` column (what a counting statement answers).
#[derive(diesel::QueryableByName)]
pub(crate) struct CountRow {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub n: i64,
}

impl CountRow {
    /// The count as a number of rows (a negative count, which no statement answers, is 0).
    pub fn rows(self) -> usize {
        usize::try_from(self.n).unwrap_or_default()
    }
}

/// What a fenced statement answered: its count, or 0 when its fence raised `failure` (the
/// message of `vidq_claim_held` or of a `vidq_fence` call). The transaction is then failed
/// on the server, and a `COMMIT` sent behind it in the same pipeline ([`pipelined`]) rolls
/// it back. diesel does not surface SQLSTATEs, so the message, vidq's own, tells the fence
/// from any other error.
pub(crate) fn fence_answer(
    answer: diesel::QueryResult<CountRow>,
    failure: &str,
) -> diesel::QueryResult<usize> {
    match answer {
        Ok(count) => Ok(count.rows()),
        Err(diesel::result::Error::DatabaseError(_, info)) if info.message() == failure => Ok(0),
        Err(other) => Err(other),
    }
}

/// A database failure, with its cause kept for the log.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// No connection could be had from the pool in time (database down or pool exhausted).
    #[error("no database connection available")]
    Pool(#[source] bb8::RunError<diesel_async::pooled_connection::PoolError>),
    /// A statement failed.
    #[error("database query failed")]
    Query(#[from] diesel::result::Error),
    /// The URL is malformed or the server refused the connection at start-up.
    #[error("cannot connect to the database")]
    Connect(#[source] ConnectError),
    /// A row holds a state this code does not know (a newer schema, or a hand edit).
    #[error("unexpected value in the database")]
    UnknownState(#[from] crate::domain::upload::UnknownState),
    /// Applying migrations failed.
    #[error("database migration failed")]
    Migration(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Why no connection could be had, with the driver's or parser's error as the source.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// `DATABASE_URL` does not parse.
    #[error("DATABASE_URL is not a valid URL")]
    Url(#[source] url::ParseError),
    /// `DATABASE_URL` is some other kind of URL.
    #[error("DATABASE_URL must start with postgres:// or postgresql://")]
    Scheme,
    /// The URL cannot take the default user name.
    #[error("DATABASE_URL cannot carry a user name")]
    User,
    /// The URL names no database.
    #[error("DATABASE_URL names no database")]
    NoDatabase,
    /// The server refused or could not be reached.
    #[error("opening a connection failed")]
    Establish(#[source] diesel::ConnectionError),
    /// The pool could not open its first connection.
    #[error("opening a pooled connection failed")]
    Pool(#[source] bb8::RunError<diesel_async::pooled_connection::PoolError>),
}

impl DbError {
    /// Whether the database was out of reach rather than wrong: no connection could be had,
    /// or the session died under the statement (a restart, a failover, a cut network). The
    /// same request a moment later can succeed, so the API answers 503 and a worker tries
    /// again; any other failure is a bug or a bad row.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Pool(_) => true,
            Self::Query(query) => connection_lost(query),
            _ => false,
        }
    }
}

/// Whether a statement failed because its session was lost, not because of what it asked.
pub fn connection_lost(err: &diesel::result::Error) -> bool {
    use diesel::result::{DatabaseErrorKind as Kind, Error};
    match err {
        Error::DatabaseError(Kind::ClosedConnection | Kind::UnableToSendCommand, _)
        | Error::BrokenTransactionManager => true,
        Error::RollbackErrorOnCommit { commit_error, .. } => connection_lost(commit_error),
        // diesel names no kind for these SQLSTATEs; PostgreSQL's messages are stable: 57P01
        // (the server ended the session: a fast shutdown or a restart), 57P02 (crash), 57P03
        // (starting up or shutting down).
        Error::DatabaseError(Kind::Unknown, info) => {
            let message = info.message();
            message.starts_with("terminating connection")
                || message.starts_with("the database system is")
        }
        _ => false,
    }
}

impl From<ConnectError> for DbError {
    fn from(err: ConnectError) -> Self {
        Self::Connect(err)
    }
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for DbError {
    fn from(err: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        Self::Pool(err)
    }
}
