//! `vidq jobs list|show|retry|cancel`: look at the queue and act on one job through the same
//! fenced transactions the workers use.

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::config::DatabaseConfig;
use crate::db;
use crate::domain::job::JobStatus;
use crate::queue::operator::{self, OperatorAction};

/// `vidq jobs ...`.
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List jobs, newest first.
    List(ListArgs),
    /// Show one job and every attempt it made, as JSON.
    Show(JobArgs),
    /// Put a DEAD job, or the job of a failed video, back in the queue as a new run with a
    /// fresh budget of 3 attempts (the new run writes under its own keys).
    Retry(JobArgs),
    /// Cancel a PENDING or PROCESSING job: its video fails with `cancelled`; a worker running
    /// it stops at its next heartbeat.
    Cancel(JobArgs),
}

/// `vidq jobs list`.
#[derive(Debug, Args)]
#[allow(missing_docs)]
pub struct ListArgs {
    /// Only jobs in this status (PENDING, PROCESSING, COMPLETED, DEAD).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(JobStatus::ALL.iter().map(|s| s.as_str())))]
    pub status: Option<String>,
    /// How many to list.
    #[arg(long, default_value_t = 50)]
    pub limit: i64,
    #[command(flatten)]
    pub database: DatabaseConfig,
}

/// A command on one job.
#[derive(Debug, Args)]
#[allow(missing_docs)]
pub struct JobArgs {
    /// The job id (see `vidq jobs list`).
    pub id: i64,
    #[command(flatten)]
    pub database: DatabaseConfig,
}

/// Runs a `vidq jobs` command.
pub async fn run(command: JobsCommand) -> anyhow::Result<()> {
    let database = match &command {
        JobsCommand::List(a) => &a.database,
        JobsCommand::Show(a) | JobsCommand::Retry(a) | JobsCommand::Cancel(a) => &a.database,
    };
    let pool = db::connect(database.url.expose(), 1)
        .await
        .context("connecting to the database (DATABASE_URL)")?;
    let mut conn = pool.get().await?;
    match command {
        JobsCommand::List(args) => {
            let jobs = db::jobs::list(&mut conn, args.status.as_deref(), args.limit).await?;
            println!(
                "{:>8}  {:<10}  {:<10}  {:>4}  {:>8}  {:<16}  {:<36}  last error",
                "job", "status", "video", "run", "attempts", "claimed by", "video id"
            );
            for job in jobs {
                println!(
                    "{:>8}  {:<10}  {:<10}  {:>4}  {:>8}  {:<16}  {:<36}  {}",
                    job.id,
                    job.status,
                    job.video_status,
                    job.run,
                    job.attempt_count,
                    job.claimed_by.as_deref().unwrap_or("-"),
                    job.video_id,
                    job.last_error.as_deref().unwrap_or("")
                );
            }
        }
        JobsCommand::Show(args) => {
            let job = db::jobs::find(&mut conn, args.id)
                .await?
                .with_context(|| format!("no job {}", args.id))?;
            let attempts = db::jobs::attempts_of(&mut conn, args.id).await?;
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({ "job": job, "attempts": attempts })
                )?
            );
        }
        JobsCommand::Retry(args) => {
            drop(conn);
            operator::apply(&pool, args.id, OperatorAction::Retry).await?;
            eprintln!("job {} is back in the queue", args.id);
        }
        JobsCommand::Cancel(args) => {
            drop(conn);
            operator::apply(&pool, args.id, OperatorAction::Cancel).await?;
            eprintln!(
                "job {} cancelled; its video failed with `cancelled`",
                args.id
            );
        }
    }
    Ok(())
}
