//! Operators: who may open the dashboard, their login sessions, and the dashboard's
//! overview of the whole system.
//!
//! An operator proves themselves with the operator token (`VIDQ_ADMIN_TOKEN`) or with the API
//! key of a user made with `vidq user create --admin`. A login opens a session row; the
//! browser holds only its random token (HttpOnly cookie), the database only the token's
//! hash. Each session carries its own CSRF token, which every form of the dashboard echoes.

use chrono::{Duration, Utc};
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::AppError;
use crate::config::Secret;
use crate::db::{self, DbPool, operator_view as view};
use crate::domain::api_key::hash_presented_key;

/// How long a login lasts.
pub const SESSION_HOURS: i64 = 12;

/// Who may log in.
#[derive(Clone, Debug, Default)]
pub struct OperatorAccess {
    /// `VIDQ_ADMIN_TOKEN`, if set.
    pub token: Option<Secret>,
    /// Unsuccessful logins per client address.
    pub logins: super::login_throttle::LoginThrottle,
}

/// A logged-in operator.
#[derive(Clone, Debug)]
pub struct OperatorSession {
    /// `token` or `user:<name>`.
    pub subject: String,
    /// The token this session's forms must send back.
    pub csrf: String,
}

/// A session just opened: the cookie's value and the session.
pub struct Opened {
    /// Goes into the cookie, nowhere else.
    pub cookie_token: String,
    /// The session.
    pub session: OperatorSession,
}

fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

fn session_hash(cookie_token: &str) -> [u8; 32] {
    Sha256::digest(cookie_token.as_bytes()).into()
}

/// Equal-time comparison of two secrets (through their hashes, so lengths leak nothing).
fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// Shortest operator token accepted: anything shorter can be guessed through the form.
pub const MIN_TOKEN_CHARS: usize = 16;

impl OperatorAccess {
    /// From `VIDQ_ADMIN_TOKEN`, refusing a short one (the message names no value).
    pub fn from_args(args: &crate::config::AdminArgs) -> Result<Self, String> {
        if let Some(token) = &args.admin_token
            && token.expose().trim().chars().count() < MIN_TOKEN_CHARS
        {
            return Err(format!(
                "VIDQ_ADMIN_TOKEN (--admin-token) must have at least {MIN_TOKEN_CHARS} \
                 characters, e.g. `openssl rand -hex 24`"
            ));
        }
        Ok(Self {
            token: args.admin_token.clone(),
            logins: super::login_throttle::LoginThrottle {
                trusted_proxies: args.trusted_proxies.clone(),
            },
        })
    }

    /// Whether the dashboard exists at all: a token is set or an operator user exists.
    pub async fn enabled(&self, pool: &DbPool) -> Result<bool, AppError> {
        if self.token.is_some() {
            return Ok(true);
        }
        let mut conn = pool.get().await?;
        Ok(db::users::any_admin(&mut conn).await?)
    }

    /// Opens a session for whoever presents `secret`, or `None` if it opens nothing.
    pub async fn login(&self, pool: &DbPool, secret: &str) -> Result<Option<Opened>, AppError> {
        let secret = secret.trim();
        if secret.is_empty() {
            return Ok(None);
        }
        let mut conn = pool.get().await?;
        let subject = match &self.token {
            Some(token) if same_secret(token.expose().trim(), secret) => "token".to_owned(),
            _ => match db::users::find_admin_by_key_hash(&mut conn, &hash_presented_key(secret))
                .await?
            {
                Some(name) => format!("user:{name}"),
                None => return Ok(None),
            },
        };
        let cookie_token = random_hex();
        let csrf = random_hex();
        db::admin_sessions::open(
            &mut conn,
            &session_hash(&cookie_token),
            &hash_presented_key(secret),
            &subject,
            &csrf,
            Utc::now() + Duration::hours(SESSION_HOURS),
        )
        .await?;
        Ok(Some(Opened {
            cookie_token,
            session: OperatorSession { subject, csrf },
        }))
    }
}

impl OperatorAccess {
    /// The live session the cookie's token names, if any, and only while the secret that
    /// opened it still opens the dashboard: a changed `VIDQ_ADMIN_TOKEN`, or an operator's
    /// key revoked (`vidq user delete`) or no longer an operator's, ends it at once.
    pub async fn session(
        &self,
        pool: &DbPool,
        cookie_token: &str,
    ) -> Result<Option<OperatorSession>, AppError> {
        let mut conn = pool.get().await?;
        let Some(found) = db::admin_sessions::find(&mut conn, &session_hash(cookie_token)).await?
        else {
            return Ok(None);
        };
        let still_valid = match &self.token {
            Some(token)
                if hash_presented_key(token.expose().trim())[..] == found.credential_hash[..] =>
            {
                true
            }
            _ => db::users::find_admin_by_key_hash(&mut conn, &found.credential_hash)
                .await?
                .is_some(),
        };
        if !still_valid {
            db::admin_sessions::close(&mut conn, &session_hash(cookie_token)).await?;
            return Ok(None);
        }
        Ok(Some(OperatorSession {
            subject: found.subject,
            csrf: found.csrf,
        }))
    }
}

/// Ends the session the cookie's token names.
pub async fn logout(pool: &DbPool, cookie_token: &str) -> Result<(), AppError> {
    let mut conn = pool.get().await?;
    db::admin_sessions::close(&mut conn, &session_hash(cookie_token)).await?;
    Ok(())
}

/// Whether a form's CSRF token is this session's.
pub fn csrf_matches(session: &OperatorSession, presented: &str) -> bool {
    same_secret(&session.csrf, presented)
}

/// Everything the dashboard shows, read in one go.
#[derive(Debug, Clone)]
pub struct Overview {
    /// Processes that reported in the last day.
    pub nodes: Vec<view::NodeReport>,
    /// Jobs by status.
    pub queue: Vec<view::StatusCount>,
    /// Seconds the oldest claimable job has waited.
    pub oldest_pending_secs: Option<f64>,
    /// Attempts running now.
    pub running: Vec<view::RunningAttempt>,
    /// DEAD jobs and jobs of failed videos.
    pub attention: Vec<view::JobLine>,
    /// The newest jobs.
    pub recent: Vec<view::JobLine>,
    /// The outbox's backlog.
    pub outbox: view::Backlog,
    /// Webhook endpoints' delivery health.
    pub endpoints: Vec<view::EndpointHealth>,
    /// What the sweepers have left to land.
    pub sweep: Vec<view::SweepBacklog>,
    /// Recordings still open.
    pub recordings: Vec<view::OpenRecording>,
    /// Time to READY over the last hour.
    pub ready: Vec<view::ReadySlice>,
}

/// Rows per table on the dashboard.
const ROWS: i64 = 25;

/// Longest any one read of the overview may take.
const READ_BUDGET_MS: u32 = 3_000;

/// Reads the overview: a dozen plain reads in one read-only transaction, each bounded by
/// [`READ_BUDGET_MS`].
pub async fn overview(pool: &DbPool) -> Result<Overview, AppError> {
    let mut conn = pool.get().await?;
    let read = conn
        .build_transaction()
        .read_only()
        .run::<_, diesel::result::Error, _>(async |conn| {
            view::bound_statements(conn, READ_BUDGET_MS).await?;
            Ok(Overview {
                nodes: view::node_reports(conn).await?,
                queue: view::queue_by_status(conn).await?,
                oldest_pending_secs: view::oldest_pending_secs(conn).await?,
                running: view::running_attempts(conn, ROWS).await?,
                attention: view::needing_attention(conn, ROWS).await?,
                recent: view::recent_jobs(conn, ROWS).await?,
                outbox: view::outbox_backlog(conn).await?,
                endpoints: view::endpoint_health(conn, ROWS).await?,
                sweep: view::sweep_backlog(conn).await?,
                recordings: view::open_recordings(conn, ROWS).await?,
                ready: view::time_to_ready(conn).await?,
            })
        })
        .await?;
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_equal_only_when_identical() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
        assert!(!same_secret("", "a"));
    }
}
