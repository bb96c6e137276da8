//! The `vidq` binary: one executable, one subcommand per role or admin command.

use clap::{Parser, Subcommand};

use vidq::cli::UserCommand;
use vidq::config::{ApiConfig, DatabaseConfig};
use vidq::roles::dev::DevConfig;

/// vidq takes videos over HTTP, encodes them on any number of worker nodes and tells your
/// backend when each is ready. PostgreSQL is the only queue; S3 holds the bytes.
#[derive(Debug, Parser)]
#[command(name = "vidq", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: vidq::config::LogArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP API (uploads, confirm, status). Applies migrations at start unless
    /// --no-migrate.
    Api(ApiConfig),
    /// Claim encoding jobs and run them (ffprobe, ffmpeg, outputs to S3). Run one per node;
    /// any number of nodes share the database.
    Worker(vidq::roles::worker::WorkerConfig),
    /// Deliver events from the outbox: signed webhooks with retries, and NATS JetStream when
    /// VIDQ_NATS_URL is set. Run one or more; they share the work.
    Relay(vidq::roles::relay::RelayConfig),
    /// Re-drive this node's pending uploads from its spool to S3 (forward cursor, bounded
    /// queue, backoff, circuit breaker) and expire presigned uploads never confirmed.
    Sweeper(vidq::roles::sweeper::SweeperConfig),
    /// Run everything on this machine: the API, a worker, a relay, a sweeper and an embedded S3 server over a
    /// local directory, against a local PostgreSQL (database created if missing). For laptops.
    Dev(DevConfig),
    /// Apply pending database migrations and exit.
    Migrate(MigrateArgs),
    /// Manage uploaders and their API keys.
    #[command(subcommand)]
    User(UserCommand),
    /// Inspect the encoding queue, retry or cancel a job.
    #[command(subcommand)]
    Jobs(vidq::cli::jobs::JobsCommand),
    /// Compare the ledger (uploads, artifacts) with a listing of the bucket: rows whose object
    /// is missing or of another size, objects no live row owns (past --grace-secs). Exit 0
    /// when they agree, 1 on any difference, 2 when it cannot run. --fix deletes the orphans
    /// and re-drives uploads through vidq whose spool file is still there.
    Reconcile(vidq::cli::reconcile::ReconcileConfig),
    /// Benchmarks to run on your own machine and database.
    #[command(subcommand)]
    #[cfg(feature = "bench")]
    Bench(vidq::bench::BenchCommand),
    /// Print what the worker's hardened probe makes of a local file, as JSON (or the typed
    /// refusal, with exit status 1).
    Probe(vidq::cli::media::ProbeArgs),
    /// Probe and encode a local file exactly as a worker would (HLS, MP4, thumbnail), into
    /// a local directory.
    Encode(vidq::cli::media::EncodeArgs),
}

#[derive(Debug, clap::Args)]
struct MigrateArgs {
    #[command(flatten)]
    database: DatabaseConfig,
}

fn main() -> std::process::ExitCode {
    let cli: Cli = vidq::config::parse_cli();
    match cli.command {
        #[cfg(feature = "bench")]
        Command::Bench(_) => vidq::telemetry::init_with_default("warn", cli.log.format),
        _ => vidq::telemetry::init(cli.log.format),
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if let Command::Reconcile(config) = cli.command {
        // Its own statuses: 1 means "they differ", so a failure to compare is 2 (as clap's
        // usage errors are).
        return match runtime.block_on(vidq::cli::reconcile::run(config)) {
            Ok(true) => std::process::ExitCode::SUCCESS,
            Ok(false) => std::process::ExitCode::from(1),
            Err(err) => {
                eprintln!("error: {err:#}");
                std::process::ExitCode::from(2)
            }
        };
    }
    match runtime.block_on(run(cli.command)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Api(config) => vidq::roles::api::run(config, vidq::shutdown::on_signals()).await,
        Command::Worker(config) => {
            vidq::roles::worker::run(config, vidq::shutdown::on_signals()).await
        }
        Command::Relay(config) => {
            vidq::roles::relay::run(config, vidq::shutdown::on_signals()).await
        }
        Command::Sweeper(config) => {
            vidq::roles::sweeper::run(config, vidq::shutdown::on_signals()).await
        }
        Command::Dev(config) => vidq::roles::dev::run(config, vidq::shutdown::on_signals()).await,
        Command::Migrate(args) => vidq::roles::api::migrate(&args.database).await,
        Command::User(command) => vidq::cli::user(command).await,
        Command::Jobs(command) => vidq::cli::jobs::run(command).await,
        Command::Reconcile(_) => unreachable!("reconcile is run by main for its exit status"),
        #[cfg(feature = "bench")]
        Command::Bench(command) => vidq::bench::run(command).await,
        Command::Probe(args) => vidq::cli::media::probe(args).await,
        Command::Encode(args) => vidq::cli::media::encode(args).await,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use clap::CommandFactory;

    use super::Cli;

    /// Names docs/operations.md's settings table documents that are not `vidq`'s own
    /// settings: the test suite's.
    const NOT_SETTINGS: &[&str] = &["VIDQ_TEST_DATABASE_URL"];

    /// Every `VIDQ_*` variable any subcommand (at any depth) reads, from clap itself.
    fn declared() -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        let mut stack = vec![Cli::command()];
        while let Some(command) = stack.pop() {
            for arg in command.get_arguments() {
                if let Some(env) = arg.get_env() {
                    let env = env.to_string_lossy();
                    if env.starts_with("VIDQ_") {
                        names.insert(env.into_owned());
                    }
                }
            }
            stack.extend(command.get_subcommands().cloned());
        }
        names
    }

    #[test]
    fn every_command_says_what_it_does_and_every_setting_what_it_sets() {
        let mut missing = Vec::new();
        let mut stack = vec![(String::from("vidq"), Cli::command())];
        while let Some((path, command)) = stack.pop() {
            if command.get_about().is_none() && path != "vidq help" {
                missing.push(format!("`{path}` has no description"));
            }
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if !["help", "version"].contains(&id) && arg.get_help().is_none() {
                    missing.push(format!("`{path}`: `{id}` has no help"));
                }
            }
            for sub in command.get_subcommands() {
                stack.push((format!("{path} {}", sub.get_name()), sub.clone()));
            }
        }
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }

    /// Every `VIDQ_*` name in the first column of docs/operations.md's settings table (the
    /// table under `## Configuration`, up to the next heading).
    fn documented(operations: &str) -> BTreeSet<String> {
        let section = operations
            .split("\n## Configuration")
            .nth(1)
            .expect("docs/operations.md has a `## Configuration` section");
        let section = section.split("\n#").next().unwrap_or(section);
        let mut names = BTreeSet::new();
        for row in section.lines().filter(|l| l.starts_with('|')) {
            let first = row.split('|').nth(1).unwrap_or_default();
            for word in first.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("VIDQ_") && !NOT_SETTINGS.contains(&word) {
                    names.insert(word.to_owned());
                }
            }
        }
        names
    }

    #[test]
    fn the_operations_settings_table_lists_exactly_the_declared_settings() {
        let operations = include_str!("../docs/operations.md");
        let declared = declared();
        let documented = documented(operations);
        let undocumented: Vec<_> = declared.difference(&documented).collect();
        let stale: Vec<_> = documented.difference(&declared).collect();
        assert!(
            undocumented.is_empty() && stale.is_empty(),
            "docs/operations.md's settings table (## Configuration) and src/config/ disagree.\n\
             declared in src/config/ but missing from docs/operations.md: {undocumented:?}\n\
             in docs/operations.md but declared nowhere: {stale:?}"
        );
        assert!(declared.len() > 30, "found only {declared:?}");
    }
}
