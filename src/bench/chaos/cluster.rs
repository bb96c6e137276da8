//! The deployment the soak runs: PostgreSQL (a private server by default), the in-process S3
//! behind the fault proxy, and every role as its own `vidq` process with its own node id,
//! working directory and log: an API and its sweeper sharing a spool, three workers, two
//! relays. A role that is killed, or that exits on its own, is started again as a service
//! manager would (`Restart=always`), with the same command.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use tokio::process::{Child, Command};

use crate::adapters::private_pg::PrivatePostgres;
use crate::bench::s3_faults::S3Faults;
use crate::bench::{BenchS3, Scratch};

/// Where the database lives and how it is restarted.
pub enum Database {
    /// A server of the soak's own, under its working directory.
    Private(PrivatePostgres),
    /// A scratch database on the operator's server; restarted by their command, if any.
    Shared {
        /// The scratch database (dropped at the end).
        scratch: Scratch,
        /// A shell command that restarts the server (`--pg-restart-command`).
        restart: Option<String>,
    },
}

impl Database {
    /// The URL the roles use.
    pub fn url(&self) -> &str {
        match self {
            Self::Private(server) => &server.url,
            Self::Shared { scratch, .. } => &scratch.url,
        }
    }

    /// Whether a restart can be injected.
    pub fn restartable(&self) -> bool {
        matches!(
            self,
            Self::Private(_)
                | Self::Shared {
                    restart: Some(_),
                    ..
                }
        )
    }

    /// Restarts the server; returns once it accepts connections again.
    pub async fn restart(&self) -> anyhow::Result<()> {
        match self {
            Self::Private(server) => Ok(server.restart().await?),
            Self::Shared {
                restart: Some(command),
                ..
            } => {
                let status = Command::new("sh").arg("-c").arg(command).status().await?;
                anyhow::ensure!(status.success(), "`{command}` exited with {status}");
                Ok(())
            }
            Self::Shared { restart: None, .. } => {
                anyhow::bail!("no --pg-restart-command for the shared server")
            }
        }
    }

    /// Stops the private server or drops the scratch database. With `forget`, a private
    /// cluster that had to live outside the soak's directory (see [`PrivatePostgres`]) is
    /// removed too, so runs do not pile up clusters under `/var/tmp`.
    pub async fn finish(self, dir: &Path, forget: bool) {
        match self {
            Self::Private(server) => {
                let data = server.data_dir().to_owned();
                server.stop().await;
                if forget && !data.starts_with(dir) {
                    let _ = std::fs::remove_dir_all(&data);
                }
            }
            Self::Shared { scratch, .. } => scratch.drop_now().await,
        }
    }
}

/// One role's process and how to start it again.
pub struct Role {
    /// `api`, `sweeper`, `worker-2`, `relay-1`: its log is `<name>.log`.
    pub name: String,
    command: Vec<(String, String)>,
    subcommand: &'static str,
    child: Option<Child>,
    /// Times it was killed by the soak.
    pub killed: u32,
    /// Times it exited without being killed (each is started again).
    pub exited: u32,
}

/// Everything the soak started.
pub struct Cluster {
    /// The roles; the API is first.
    pub roles: Vec<Role>,
    /// `http://127.0.0.1:PORT` of the API.
    pub api: String,
    /// The proxy every role and client reaches S3 through.
    pub proxy: S3Faults,
    /// The S3 server itself (reconcile reads it directly).
    pub s3: BenchS3,
    /// Where logs, the spool and the workers' directories are.
    pub dir: PathBuf,
    bin: PathBuf,
}

/// Node of the API and its sweeper (they share the spool).
const API_NODE: &str = "api-1";

impl Cluster {
    /// Starts every role against `database_url` and returns once the API answers; with
    /// `s3_down`, S3 answers every request 503 from before the first role starts.
    pub async fn start(
        bin: PathBuf,
        dir: &Path,
        database_url: &str,
        s3: BenchS3,
        s3_down: bool,
    ) -> anyhow::Result<Self> {
        let proxy = S3Faults::start(&s3.server.endpoint()).await;
        proxy.set_down(s3_down);
        std::fs::create_dir_all(dir.join("logs"))?;
        let spool = dir.join(API_NODE).join("spool");
        let port = crate::bench::free_port()?;
        let mut common: Vec<(String, String)> = s3
            .env()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        common.retain(|(k, _)| k != "VIDQ_S3_ENDPOINT");
        let pairs: &[(&str, String)] = &[
            ("VIDQ_S3_ENDPOINT", proxy.endpoint()),
            ("DATABASE_URL", database_url.to_owned()),
            ("VIDQ_NO_MIGRATE", "true".to_owned()),
            ("RUST_LOG", "info".to_owned()),
            // Short bounds, so an S3 that is down costs seconds, not minutes.
            ("VIDQ_S3_CONNECT_TIMEOUT_MS", "500".to_owned()),
            ("VIDQ_S3_READ_TIMEOUT_SECS", "2".to_owned()),
            ("VIDQ_S3_OPERATION_TIMEOUT_SECS", "3".to_owned()),
            ("VIDQ_S3_TRANSFER_TIMEOUT_SECS", "10".to_owned()),
        ];
        common.extend(pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        let with = |extra: &[(&str, String)]| -> Vec<(String, String)> {
            let mut all = common.clone();
            all.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
            all
        };
        let spool_dir = spool.to_string_lossy().into_owned();
        let mut roles = vec![
            Role::new(
                "api",
                "api",
                with(&[
                    ("VIDQ_NODE_ID", API_NODE.to_owned()),
                    ("VIDQ_HTTP_ADDR", format!("127.0.0.1:{port}")),
                    (
                        "VIDQ_INGEST_ADDR",
                        format!("127.0.0.1:{}", crate::bench::free_port()?),
                    ),
                    ("VIDQ_RTMP_ADDR", "off".to_owned()),
                    ("VIDQ_SPOOL_DIR", spool_dir.clone()),
                    ("VIDQ_WEBHOOK_ALLOW_PRIVATE", "true".to_owned()),
                ]),
            ),
            Role::new(
                "sweeper",
                "sweeper",
                with(&[
                    ("VIDQ_NODE_ID", API_NODE.to_owned()),
                    ("VIDQ_SPOOL_DIR", spool_dir),
                    ("VIDQ_SWEEPER_INTERVAL_MS", "200".to_owned()),
                    ("VIDQ_SWEEPER_CLAIM_SECS", "15".to_owned()),
                    ("VIDQ_SWEEPER_BREAKER_COOLDOWN_MS", "500".to_owned()),
                ]),
            ),
        ];
        for n in 1..=3 {
            let work = dir.join(format!("enc-{n}")).join("work");
            roles.push(Role::new(
                &format!("worker-{n}"),
                "worker",
                with(&[
                    ("VIDQ_NODE_ID", format!("enc-{n}")),
                    ("VIDQ_WORK_DIR", work.to_string_lossy().into_owned()),
                    ("VIDQ_LEASE_SECS", "10".to_owned()),
                    ("VIDQ_HEARTBEAT_SECS", "2".to_owned()),
                    ("VIDQ_POLL_MS", "200".to_owned()),
                    ("VIDQ_FFMPEG_THREADS", "1".to_owned()),
                ]),
            ));
        }
        for n in 1..=2 {
            roles.push(Role::new(
                &format!("relay-{n}"),
                "relay",
                with(&[
                    ("VIDQ_NODE_ID", format!("relay-{n}")),
                    ("VIDQ_RELAY_ID", format!("relay-{n}")),
                    ("VIDQ_RELAY_POLL_MS", "200".to_owned()),
                    ("VIDQ_RELAY_LEASE_SECS", "5".to_owned()),
                    ("VIDQ_WEBHOOK_TIMEOUT_MS", "2000".to_owned()),
                    (
                        "VIDQ_WEBHOOK_RETRY_SCHEDULE",
                        "0s,1s,2s,4s,8s,8s,8s,8s,8s,8s".to_owned(),
                    ),
                    ("VIDQ_WEBHOOK_ALLOW_PRIVATE", "true".to_owned()),
                ]),
            ));
        }
        let mut cluster = Self {
            roles,
            api: format!("http://127.0.0.1:{port}"),
            proxy,
            s3,
            dir: dir.to_owned(),
            bin,
        };
        for i in 0..cluster.roles.len() {
            cluster.spawn(i)?;
        }
        cluster.wait_for_api().await?;
        Ok(cluster)
    }

    /// Starts role `i` (again).
    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let log = self.log(&self.roles[i].name);
        let role = &mut self.roles[i];
        let node_dir = self.dir.join(&role.name);
        std::fs::create_dir_all(&node_dir)?;
        let child = Command::new(&self.bin)
            .arg(role.subcommand)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(role.command.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(&node_dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            // Appended: a role started again adds to what it said before.
            .stderr(
                std::fs::File::options()
                    .create(true)
                    .append(true)
                    .open(&log)?,
            )
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", role.name))?;
        role.child = Some(child);
        Ok(())
    }

    /// SIGKILLs role `i` (a crash: nothing of it runs after) and waits until it is gone.
    pub async fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.roles[i].child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
            self.roles[i].killed += 1;
        }
    }

    /// Starts role `i` again after [`Cluster::kill`].
    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.spawn(i)
    }

    /// Starts again every role that exited on its own; returns their names.
    pub fn revive(&mut self) -> anyhow::Result<Vec<String>> {
        let mut revived = Vec::new();
        for i in 0..self.roles.len() {
            let exited = match self.roles[i].child.as_mut() {
                Some(child) => child.try_wait()?.is_some(),
                None => false,
            };
            if exited {
                self.roles[i].exited += 1;
                revived.push(self.roles[i].name.clone());
                self.spawn(i)?;
            }
        }
        Ok(revived)
    }

    /// Stops every role with SIGTERM (as a deploy does) and waits up to 30 s for each.
    pub async fn stop(&mut self) {
        for role in &mut self.roles {
            if let Some(pid) = role.child.as_ref().and_then(Child::id) {
                let _ = Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status()
                    .await;
            }
        }
        for role in &mut self.roles {
            if let Some(mut child) = role.child.take()
                && tokio::time::timeout(Duration::from_secs(30), child.wait())
                    .await
                    .is_err()
            {
                let _ = child.kill().await;
            }
        }
    }

    /// The log of role `name`.
    pub fn log(&self, name: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{name}.log"))
    }

    /// Each role's ERROR lines.
    pub fn error_lines(&self) -> Vec<(String, Vec<String>)> {
        self.roles
            .iter()
            .map(|role| {
                let text = std::fs::read_to_string(self.log(&role.name)).unwrap_or_default();
                let lines = text
                    .lines()
                    .filter(|line| line.contains(" ERROR "))
                    .map(str::to_owned)
                    .collect();
                (role.name.clone(), lines)
            })
            .collect()
    }

    async fn wait_for_api(&mut self) -> anyhow::Result<()> {
        let waited = crate::bench::wait_healthy(
            &self.api,
            Duration::from_secs(60),
            self.roles[0].child.as_mut(),
        )
        .await;
        waited.with_context(|| format!("vidq api did not start; see {}", self.log("api").display()))
    }
}

impl Role {
    fn new(name: &str, subcommand: &'static str, command: Vec<(String, String)>) -> Self {
        Self {
            name: name.to_owned(),
            command,
            subcommand,
            child: None,
            killed: 0,
            exited: 0,
        }
    }
}
