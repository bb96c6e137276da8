//! `vidq reconcile [--fix] [--json]`: compares the ledger (uploads, artifacts, recording
//! files) with a listing of the bucket and reports rows whose object is missing or of another
//! size, recording files whose object holds other bytes of their size (by the SHA-256 stored
//! with it), and objects no live row owns (past a grace period). `--fix` deletes the orphans and re-drives the uploads
//! through vidq whose spool file is still there. Exit status: 0 when there is no difference
//! (or `--fix` fixed every one), 1 otherwise, 2 when it could not run (see `main.rs`).

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::Context;
use serde_json::json;
use uuid::Uuid;

use crate::adapters::spool::{SpoolCheck, SpoolRoot};
use crate::adapters::storage::Storage;
pub use crate::config::ReconcileConfig;
use crate::db;
use crate::db::reconcile::UploadKey;
use crate::domain::reconcile::{BucketObject, Difference, Kind, Owner, Report};
use crate::domain::upload::UploadVia;

/// What `--fix` did about one difference.
#[derive(Debug)]
struct Fix {
    done: bool,
    action: String,
}

/// Runs the comparison (and the fix); returns whether the ledger and the bucket agree (or
/// every difference was fixed). An error means it could not compare at all.
pub async fn run(config: ReconcileConfig) -> anyhow::Result<bool> {
    let storage = Storage::connect(&config.storage, None).await;
    let pool = db::connect(config.database.url.expose(), 1)
        .await
        .context("connecting to the database (DATABASE_URL)")?;
    // A namespace another deployment owns is not compared, let alone fixed.
    crate::app::deployment_marker::claim(&storage, &pool)
        .await
        .context("checking the bucket's deployment marker")?;
    let mut conn = pool.get().await.context("connecting to the database")?;
    // The ledger first, then the listing: a row that claims its object was confirmed after
    // its PUT, so the later listing holds that object; an object written after the read
    // belongs to a row the read did not see, and is young enough for the grace period.
    let snapshot = db::reconcile::snapshot(&mut conn)
        .await
        .context("reading the ledger")?;
    let mut objects: Vec<BucketObject> = Vec::new();
    for prefix in crate::app::reconcile::PREFIXES {
        let listed = storage
            .list_with_sizes(prefix)
            .await
            .context("listing the bucket")?;
        objects.extend(listed.into_iter().map(BucketObject::from));
    }
    read_recording_digests(&snapshot, &mut objects, &storage)
        .await
        .context("reading the digests of recording files")?;
    let report = crate::app::reconcile::compare_snapshot(
        &snapshot,
        &objects,
        chrono::Utc::now(),
        config.grace_secs,
    )?;

    let fixes = if config.fix {
        let rows: HashMap<Uuid, &UploadKey> = snapshot.uploads.iter().map(|u| (u.id, u)).collect();
        let spool_dir = config.spool_dir.clone().unwrap_or_else(|| "spool".into());
        Some(fix(&report, &rows, &storage, &mut conn, spool_dir).await)
    } else {
        None
    };
    let agree = match &fixes {
        Some(fixes) => fixes.iter().all(|f| f.done),
        None => report.differences.is_empty(),
    };
    if config.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&as_json(&report, fixes.as_deref(), &config))?
        );
    } else {
        print_text(&report, fixes.as_deref(), &config);
    }
    Ok(agree)
}

/// How many digests are read at once.
const DIGEST_READS: usize = 16;

/// Reads the SHA-256 stored with each object an `uploaded` recording file names with a
/// digest and the same size (one HEAD each, a few at a time): a listing carries sizes only,
/// and two versions of one segment can have the same size (a re-sent file with other bytes).
async fn read_recording_digests(
    snapshot: &db::reconcile::LedgerSnapshot,
    objects: &mut [BucketObject],
    storage: &Storage,
) -> anyhow::Result<()> {
    use futures_util::{StreamExt, TryStreamExt};
    let uploaded = crate::domain::recording::FileState::Uploaded;
    let sizes: HashMap<&str, i64> = snapshot
        .recording_files
        .iter()
        .filter(|f| f.state == uploaded && f.content_sha256.is_some())
        .map(|f| (f.object_key.as_str(), f.size_bytes))
        .collect();
    let wanted: Vec<usize> = objects
        .iter()
        .enumerate()
        .filter(|(_, o)| sizes.get(o.key.as_str()) == Some(&o.size))
        .map(|(i, _)| i)
        .collect();
    use crate::domain::reconcile::StoredDigest;
    let read: Vec<(usize, StoredDigest)> = futures_util::stream::iter(wanted)
        .map(|i| {
            let key = objects[i].key.clone();
            async move {
                let head = storage.head(&key).await?;
                // Gone since the listing: no verdict here (the listing's is the report's).
                let stored = match head {
                    None => StoredDigest::Unread,
                    Some(head) => head
                        .sha256
                        .map_or(StoredDigest::Absent, StoredDigest::Sha256),
                };
                Ok::<_, crate::adapters::storage::StorageError>((i, stored))
            }
        })
        .buffer_unordered(DIGEST_READS)
        .try_collect()
        .await?;
    for (i, stored) in read {
        objects[i].sha256 = stored;
    }
    Ok(())
}

/// Deletes the orphans (outside any transaction, after the snapshot's has ended) and
/// re-drives what can be re-driven; one [`Fix`] per difference, in report order.
async fn fix(
    report: &Report,
    rows: &HashMap<Uuid, &UploadKey>,
    storage: &Storage,
    conn: &mut diesel_async::AsyncPgConnection,
    spool_dir: PathBuf,
) -> Vec<Fix> {
    let orphans: Vec<String> = report
        .differences
        .iter()
        .filter(|d| d.kind == Kind::Orphan)
        .map(|d| d.key.clone())
        .collect();
    let deleted = match storage.delete_keys(&orphans).await {
        // The ledger forgets what it said of them (a failed attempt's outputs), so the
        // next comparison does not call them missing.
        Ok(_) => db::artifacts::forget_keys(conn, &orphans)
            .await
            .map(drop)
            .map_err(|err| crate::telemetry::error_chain(&err)),
        Err(err) => Err(crate::telemetry::error_chain(&err)),
    };
    let mut spool: Option<Result<SpoolRoot, String>> = None;
    let mut fixes = Vec::with_capacity(report.differences.len());
    for difference in &report.differences {
        let fix = match difference.owner {
            Owner::Nobody => match &deleted {
                Ok(()) => Fix {
                    done: true,
                    action: "deleted".to_owned(),
                },
                Err(why) => Fix {
                    done: false,
                    action: format!("not deleted: {why}"),
                },
            },
            Owner::Artifact(video) => Fix {
                done: false,
                action: format!(
                    "cannot be re-driven: an encoded output is not kept once uploaded; \
                     video {video} needs a new encode"
                ),
            },
            Owner::Recording(recording) => Fix {
                done: false,
                action: format!(
                    "cannot be re-driven: a recording file's spool copy is removed once it is \
                     in S3; recording {recording} lost it"
                ),
            },
            Owner::Upload(id) => match rows.get(&id) {
                Some(row) => {
                    let root = spool.get_or_insert_with(|| {
                        SpoolRoot::open(&spool_dir).map_err(|e| crate::telemetry::error_chain(&e))
                    });
                    redrive(difference, row, root, storage).await
                }
                None => Fix {
                    done: false,
                    action: "the row is gone".to_owned(),
                },
            },
        };
        fixes.push(fix);
    }
    fixes
}

/// Re-drives a confirmed upload through vidq whose object is missing: its video exists, so
/// it must not be confirmed twice; its spool file is PUT again to the same key here.
async fn redrive(
    difference: &Difference,
    row: &UploadKey,
    root: &Result<SpoolRoot, String>,
    storage: &Storage,
) -> Fix {
    let not = |action: String| Fix {
        done: false,
        action,
    };
    if row.via != UploadVia::Vidq {
        return not("cannot be re-driven: a presigned upload's bytes never reached vidq".into());
    }
    let root = match root {
        Ok(root) => root,
        Err(why) => return not(format!("cannot be re-driven: the spool directory: {why}")),
    };
    let path = match root.check(row.spool_path.as_deref()) {
        SpoolCheck::File { path, size } if i64::try_from(size) == Ok(row.declared_size) => path,
        SpoolCheck::File { size, .. } => {
            return not(format!(
                "cannot be re-driven: the spool file has {size} bytes, not {}",
                row.declared_size
            ));
        }
        SpoolCheck::Refused(reason) => {
            return not(format!(
                "cannot be re-driven: {} on this node",
                reason.as_str()
            ));
        }
        SpoolCheck::Unreadable(err) => {
            return not(format!("cannot be re-driven now: the spool file: {err}"));
        }
    };
    match storage
        .put_file(&difference.key, &path, &row.content_type)
        .await
    {
        Ok(_) => Fix {
            done: true,
            action: "PUT again from the spool file".into(),
        },
        Err(err) => not(format!(
            "PUT from the spool failed: {}",
            crate::telemetry::error_chain(&err)
        )),
    }
}

fn print_text(report: &Report, fixes: Option<&[Fix]>, config: &ReconcileConfig) {
    println!(
        "vidq reconcile: {} rows that claim an object, {} objects listed",
        report.rows, report.objects
    );
    for kind in Kind::ALL {
        println!("{}: {}", kind.as_str(), report.count(kind));
    }
    if report.young > 0 {
        println!(
            "({} objects no row owns are younger than the {} s grace period: left alone)",
            report.young, config.grace_secs
        );
    }
    for (i, d) in report.differences.iter().enumerate() {
        println!("{} {} {}", d.kind.as_str(), d.key, d.reason);
        if let Some(fix) = fixes.and_then(|f| f.get(i)) {
            println!("  fix: {}", fix.action);
        }
    }
}

fn as_json(report: &Report, fixes: Option<&[Fix]>, config: &ReconcileConfig) -> serde_json::Value {
    let counts: serde_json::Map<_, _> = Kind::ALL
        .iter()
        .map(|k| (k.as_str().to_owned(), json!(report.count(*k))))
        .collect();
    json!({
        "rows": report.rows,
        "objects": report.objects,
        "grace_secs": config.grace_secs,
        "young_unowned_objects": report.young,
        "counts": counts,
        "differences": report.differences.iter().enumerate().map(|(i, d)| {
            let fix = fixes.and_then(|f| f.get(i));
            json!({
                "kind": d.kind.as_str(),
                "key": d.key,
                "reason": d.reason,
                "fixed": fix.map(|f| f.done),
                "fix": fix.map(|f| f.action.as_str()),
            })
        }).collect::<Vec<_>>(),
    })
}
