//! A live file sent twice under one name is never lost silently. The rule: until a file has
//! landed in S3, a re-send replaces it (the row takes the new bytes' digest, and the
//! sweeper marks it uploaded only when S3 holds the object with that digest); once landed it
//! is final (the same bytes again `200`, other bytes `409 file_landed`). Tried as the probe
//! did, against real `vidq api` and `vidq sweeper` processes: content A and then content B
//! under one name, in both orders, of the same size and one byte apart, sent at once and
//! after the first has landed, 25 times each; S3's bytes are checked by SHA-256.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::support::deployment::Deployment;

const RUNS: usize = 25;
/// 1 MiB (the probe sent 4 MiB; the race is the same, and a debug build moves it faster).
const SIZE: usize = 1024 * 1024;

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Two contents for run `run`: A, and B of the same length or one byte longer.
fn contents(run: usize, one_byte_longer: bool) -> (Vec<u8>, Vec<u8>) {
    let a: Vec<u8> = (0..SIZE)
        .map(|i| ((i * 31 + run * 7) % 251) as u8)
        .collect();
    let mut b = a.clone();
    b[SIZE / 2] ^= 0xff;
    if one_byte_longer {
        b.push(7);
    }
    (a, b)
}

/// PUTs `bytes` as `name` to `ingest`; the status. A new connection each time, as FFmpeg's
/// `-method PUT` does: the listener closes a connection idle for 10 s, and a request sent on
/// a pooled one just as it closes would fail in the client, not in vidq.
async fn put(d: &Deployment, ingest: &str, name: &str, bytes: &[u8]) -> u16 {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    let client = CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap()
    });
    match client
        .put(format!("{ingest}{name}"))
        .body(bytes.to_vec())
        .send()
        .await
    {
        Ok(r) => r.status().as_u16(),
        Err(e) => panic!("PUT {name}: {e}\n{}", d.logs()),
    }
}

/// Waits until `name`'s row is `uploaded` naming `digest`.
async fn landed_as(d: &Deployment, recording: &str, sequence: usize, digest: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let row = format!(
        "FROM recording_files WHERE recording_id = '{recording}' AND axis = 'segment'
            AND sequence = {sequence}"
    );
    while d
        .count(&format!(
            "SELECT count(*) AS n {row} AND state = 'uploaded' AND content_sha256 = '{digest}'"
        ))
        .await
        != 1
    {
        if Instant::now() > deadline {
            let mut conn = d.pool.get().await.unwrap();
            #[derive(diesel::QueryableByName, Debug)]
            #[allow(dead_code)]
            struct Row {
                #[diesel(sql_type = diesel::sql_types::Text)]
                state: String,
                #[diesel(sql_type = diesel::sql_types::Text)]
                detail: String,
            }
            let rows: Vec<Row> = diesel_async::RunQueryDsl::load(
                diesel::sql_query(format!(
                    "SELECT state, concat_ws(' ', tries, next_try_at, claimed_until, last_error,
                            content_sha256, spool_path) AS detail {row}"
                )),
                &mut conn,
            )
            .await
            .unwrap();
            panic!("segment {sequence} never landed as {digest}: {rows:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The SHA-256 of what S3 holds for the recording's segment `sequence`.
async fn in_s3(d: &Deployment, recording: &str, sequence: usize) -> String {
    let key = format!("live/{recording}/seg_{sequence:06}.m4s");
    sha256(&d.storage.get_bytes(&key).await.unwrap().expect("in S3"))
}

/// One case, `RUNS` times, each run under a segment number of its own.
async fn case(
    d: &Deployment,
    key: &str,
    b_first: bool,
    one_byte_longer: bool,
    after_landing: bool,
    (replaced, refused): (&AtomicUsize, &AtomicUsize),
) {
    let made = d.live_recording(key).await;
    let id = made["id"].as_str().unwrap();
    let ingest = made["ingest_url"].as_str().unwrap();
    let what = format!(
        "{} then {}, {}, {} landing",
        if b_first { "B" } else { "A" },
        if b_first { "A" } else { "B" },
        if one_byte_longer {
            "one byte apart"
        } else {
            "same size"
        },
        if after_landing { "after" } else { "before" },
    );
    for run in 0..RUNS {
        let (a, b) = contents(run, one_byte_longer);
        let (first, second) = if b_first { (b, a) } else { (a, b) };
        let name = format!("index{run}.m4s");
        assert_eq!(
            put(d, ingest, &name, &first).await,
            201,
            "{what}, run {run}"
        );
        if after_landing {
            landed_as(d, id, run, &sha256(&first)).await;
            // Other bytes are refused; the same bytes are acknowledged; S3 keeps the first.
            assert_eq!(
                put(d, ingest, &name, &second).await,
                409,
                "{what}, run {run}"
            );
            assert_eq!(
                put(d, ingest, &name, &first).await,
                200,
                "{what}, run {run}"
            );
            assert_eq!(in_s3(d, id, run).await, sha256(&first), "{what}, run {run}");
        } else {
            // At once, as the probe did: the first may have landed by then (then the second
            // is refused) or not (then it replaces the first); either way the client is told,
            // and S3 and the ledger hold the bytes it was told they hold.
            let kept = match put(d, ingest, &name, &second).await {
                201 => {
                    replaced.fetch_add(1, Ordering::Relaxed);
                    &second
                }
                409 => {
                    refused.fetch_add(1, Ordering::Relaxed);
                    &first
                }
                other => panic!("{what}, run {run}: {other}"),
            };
            landed_as(d, id, run, &sha256(kept)).await;
            assert_eq!(in_s3(d, id, run).await, sha256(kept), "{what}, run {run}");
        }
    }
}

#[tokio::test]
async fn a_file_sent_again_is_replaced_until_it_lands_and_final_after_both_orders_x25() {
    let mut d = Deployment::prepare().await;
    let s3 = d.s3.endpoint();
    // A loaded machine may take its time over a run: no recording ends idle meanwhile.
    d.start_with(&s3, &[("VIDQ_LIVE_IDLE_SECS", "600")]).await;
    let started = Instant::now();
    // Eight cases at once, each in a recording (and of a broadcaster) of its own.
    let mut cases = Vec::new();
    for n in 0..8 {
        let key = d.user(&format!("broadcaster{n}")).await;
        cases.push((key, n & 1 == 1, n & 2 == 2, n & 4 == 4));
    }
    let (replaced, refused) = (AtomicUsize::new(0), AtomicUsize::new(0));
    futures_util::future::join_all(cases.iter().map(|(key, b_first, longer, after)| {
        case(&d, key, *b_first, *longer, *after, (&replaced, &refused))
    }))
    .await;
    eprintln!(
        "{} re-sends in {:?}; sent at once: {} replaced the first, {} refused after it landed",
        8 * RUNS,
        started.elapsed(),
        replaced.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    d.ends_clean().await;

    // Reconcile keeps the same rule: a landed segment whose object now holds other bytes of
    // its size (written over with another digest, or with none) is a digest mismatch.
    let landed: Vec<String> = {
        #[derive(diesel::QueryableByName)]
        struct Key {
            #[diesel(sql_type = diesel::sql_types::Text)]
            object_key: String,
        }
        let mut conn = d.pool.get().await.unwrap();
        let keys: Vec<Key> = diesel_async::RunQueryDsl::load(
            diesel::sql_query(
                "SELECT object_key FROM recording_files
                  WHERE axis = 'segment' AND state = 'uploaded' ORDER BY id LIMIT 2",
            ),
            &mut conn,
        )
        .await
        .unwrap();
        keys.into_iter().map(|k| k.object_key).collect()
    };
    let mut other = vec![0u8; SIZE];
    for (i, key) in landed.iter().enumerate() {
        let size = d.storage.head(key).await.unwrap().unwrap().size as usize;
        other.resize(size, i as u8 + 1);
        let digest = sha256(&other);
        let tmp = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(tmp.path(), &other).unwrap();
        let with_digest = (i == 0).then_some(digest.as_str());
        d.storage
            .put_file_tagged(
                key,
                tmp.path(),
                "video/iso.segment",
                with_digest,
                &Default::default(),
            )
            .await
            .unwrap();
    }
    let report = crate::support::reconcile::expect(
        &crate::support::reconcile::reconcile_at(
            &d.db.url,
            &d.s3.endpoint(),
            &["--grace-secs", "0"],
        )
        .await,
        1,
    );
    assert!(report.contains("digest_mismatch: 2"), "{report}");
    for key in &landed {
        assert!(
            report.contains(&format!("digest_mismatch {key} object holds")),
            "{report}"
        );
    }
}
