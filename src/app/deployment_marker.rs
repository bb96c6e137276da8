//! One namespace per deployment. A bucket (or a prefix of one, `VIDQ_S3_PREFIX`) holds the
//! objects of one deployment, and its orphan pass deletes what that deployment's database
//! does not know. A second deployment on the same keys would see the first one's objects as
//! orphans and delete them, so each deployment claims its namespace: at first start it
//! writes the marker object `{prefix}.vidq-deployment` naming its database (cluster system
//! identifier and database name), and every role that finds a marker naming another database
//! refuses to start, naming both.

use serde::{Deserialize, Serialize};

use crate::adapters::storage::{Storage, StorageError};
use crate::db::{self, DbPool, identity::DatabaseIdentity};

/// The marker's key, under the deployment's prefix.
pub const MARKER_KEY: &str = ".vidq-deployment";

/// What the marker holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Marker {
    /// The owning database's cluster system identifier.
    pub system_identifier: String,
    /// The owning database's name.
    pub database: String,
}

/// What claiming found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimed {
    /// The namespace was free; this deployment's marker is now in it.
    Written,
    /// This deployment's marker was there.
    Ours,
}

/// A marker of another deployment, and this deployment's identity.
#[derive(Debug)]
pub struct Foreign {
    /// The bucket.
    pub bucket: String,
    /// The prefix.
    pub prefix: String,
    /// The marker's key in the bucket.
    pub marker: String,
    /// The marker's database name.
    pub theirs_db: String,
    /// The marker's cluster.
    pub theirs_id: String,
    /// This deployment's database name.
    pub ours_db: String,
    /// This deployment's cluster.
    pub ours_id: String,
}

/// Why a deployment may not use its namespace (or could not find out).
#[derive(Debug, thiserror::Error)]
pub enum MarkerError {
    /// Another database's deployment owns it.
    #[error(
        "the bucket {bucket:?} under prefix {prefix:?} belongs to another vidq deployment: its marker \
         {marker:?} names database {theirs_db:?} of cluster {theirs_id}, and this deployment's \
         database is {ours_db:?} of cluster {ours_id}. Give each deployment its own bucket or \
         VIDQ_S3_PREFIX. If this is the same deployment moved to a new database server, delete \
         that marker object and start again.",
        bucket = .0.bucket, prefix = .0.prefix, marker = .0.marker, theirs_db = .0.theirs_db,
        theirs_id = .0.theirs_id, ours_db = .0.ours_db, ours_id = .0.ours_id
    )]
    Foreign(Box<Foreign>),
    /// The marker is there but is not one vidq wrote.
    #[error(
        "the object {0:?} is not a vidq deployment marker; vidq will not share a namespace with it"
    )]
    NotAMarker(String),
    /// S3 did not answer.
    #[error("could not read or write the deployment marker")]
    Storage(#[from] StorageError),
    /// The database did not answer, or would not say its identity.
    #[error(
        "could not read the database's identity (pg_control_system() needs a superuser or the pg_monitor role)"
    )]
    Database(#[from] db::DbError),
}

impl MarkerError {
    /// Whether trying again later can help (S3 or the database was away).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Storage(_) => true,
            Self::Database(error) => error.is_unavailable(),
            _ => false,
        }
    }
}

/// Reads the marker and writes it when missing; refuses one naming another database.
pub async fn claim(storage: &Storage, pool: &DbPool) -> Result<Claimed, MarkerError> {
    let ours = {
        let mut conn = pool.get().await.map_err(db::DbError::from)?;
        db::identity::identity(&mut conn)
            .await
            .map_err(db::DbError::from)?
    };
    if ours.system_identifier == db::identity::UNREADABLE {
        tracing::warn!(database = %ours.database,
            "this database user may not read pg_control_system() (grant it pg_monitor): the bucket's deployment marker tells deployments apart by database name only");
    }
    if let Some(found) = read(storage).await? {
        check(storage, &found, &ours)?;
        return Ok(Claimed::Ours);
    }
    // The same bytes from every process of one deployment (no time, no host): roles that
    // start together and all find no marker write identical objects.
    let marker = Marker {
        system_identifier: ours.system_identifier.clone(),
        database: ours.database.clone(),
    };
    let body = serde_json::to_vec_pretty(&marker).expect("a marker serializes");
    // Written only where none is (two deployments starting at once on an empty namespace:
    // one writes), then read back, so a store that ignores the condition is caught too.
    storage
        .put_bytes_if_absent(MARKER_KEY, body, "application/json")
        .await?;
    let back = read(storage)
        .await?
        .ok_or_else(|| MarkerError::NotAMarker(storage.at(MARKER_KEY)))?;
    check(storage, &back, &ours)?;
    tracing::info!(bucket = storage.bucket(), prefix = storage.prefix(), database = %ours.database,
        "claimed the bucket namespace for this deployment (wrote its marker)");
    Ok(Claimed::Written)
}

/// [`claim`] until it answers for good: S3 or the database away is tried again every few
/// seconds (logged once), a foreign marker is returned at once.
pub async fn claim_patiently(
    storage: &Storage,
    pool: &DbPool,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Result<Claimed, MarkerError> {
    let mut said = false;
    loop {
        match claim(storage, pool).await {
            Err(error) if error.is_transient() && !shutdown.is_cancelled() => {
                if !said {
                    said = true;
                    tracing::warn!(error = %crate::telemetry::error_chain(&error),
                        "cannot check the deployment marker yet; trying again every 5 s");
                }
                tokio::select! {
                    () = shutdown.cancelled() => {}
                    () = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
                }
            }
            done => return done,
        }
    }
}

async fn read(storage: &Storage) -> Result<Option<Marker>, MarkerError> {
    let Some(bytes) = storage.get_bytes(MARKER_KEY).await? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|_| MarkerError::NotAMarker(storage.at(MARKER_KEY)))
}

fn check(storage: &Storage, found: &Marker, ours: &DatabaseIdentity) -> Result<(), MarkerError> {
    // A marker written (or read) without the right to read the cluster's identifier can
    // compare names only; granting that right later must not lock a deployment out.
    let unreadable = db::identity::UNREADABLE;
    let same_cluster = found.system_identifier == ours.system_identifier
        || found.system_identifier == unreadable
        || ours.system_identifier == unreadable;
    if same_cluster && found.database == ours.database {
        return Ok(());
    }
    Err(MarkerError::Foreign(Box::new(Foreign {
        bucket: storage.bucket().to_owned(),
        prefix: storage.prefix().to_owned(),
        marker: storage.at(MARKER_KEY),
        theirs_db: found.database.clone(),
        theirs_id: found.system_identifier.clone(),
        ours_db: ours.database.clone(),
        ours_id: ours.system_identifier.clone(),
    })))
}
