//! `vidq user create` and `vidq user delete`.

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::app::{self, AppError};
use crate::config::{DatabaseConfig, StorageConfig, UploadConfig};

/// `vidq user ...`.
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create an uploader and print their new API key as the only line on stdout. The key is
    /// shown once; only its hash is stored.
    Create(UserCreate),
    /// Delete an uploader with all their uploads, videos, jobs, events and S3 objects. The key
    /// is revoked first and rows go in pages; run it again to finish an interrupted deletion.
    Delete(Box<UserDelete>),
}

/// `vidq user create`.
#[derive(Debug, Args)]
// Flattened groups are documented on their own types.
#[allow(missing_docs)]
pub struct UserCreate {
    /// Unique name of the uploader (1-100 characters).
    #[arg(long)]
    pub name: String,
    /// Make the user an operator: their API key also logs in to the dashboard (`/admin`),
    /// which shows every user's jobs and can retry and cancel them.
    #[arg(long)]
    pub admin: bool,
    #[command(flatten)]
    pub database: DatabaseConfig,
}

/// `vidq user delete`.
#[derive(Debug, Args)]
// Flattened groups are documented on their own types.
#[allow(missing_docs)]
pub struct UserDelete {
    /// Name of the uploader to delete.
    #[arg(long)]
    pub name: String,
    #[command(flatten)]
    pub database: DatabaseConfig,
    #[command(flatten)]
    pub storage: StorageConfig,
}

/// Runs a `vidq user` command.
pub async fn user(command: UserCommand) -> anyhow::Result<()> {
    match command {
        UserCommand::Create(args) => {
            let pool = crate::db::connect(args.database.url.expose(), 1)
                .await
                .context("connecting to the database (DATABASE_URL)")?;
            let (id, key) = app::users::create_user_as(&pool, &args.name, args.admin)
                .await
                .map_err(explain)?;
            tracing::info!(user_id = %id, name = args.name.trim(), operator = args.admin, "user created");
            println!("{}", key.reveal());
            Ok(())
        }
        UserCommand::Delete(args) => {
            let upload = UploadConfig {
                max_upload_bytes: 1,
                upload_url_ttl_secs: 60,
                playback_url_ttl_secs: 60,
                confirm_batch_max: 64,
                confirm_committers: 2,
                max_open_uploads_per_user: 1000,
                max_open_recordings_per_user: 20,
            };
            let ctx =
                crate::roles::api::context(&args.database, &args.storage, &upload, None).await?;
            let deleted = app::users::delete_user(&ctx, &args.name)
                .await
                .map_err(explain)?;
            eprintln!(
                "deleted user {:?}: {} videos, {} objects",
                args.name, deleted.videos, deleted.objects
            );
            Ok(())
        }
    }
}

/// Turns a use-case error into the sentence an operator needs.
fn explain(err: AppError) -> anyhow::Error {
    match err {
        AppError::NotFound => anyhow::anyhow!("no such user"),
        other => anyhow::Error::new(other),
    }
}
