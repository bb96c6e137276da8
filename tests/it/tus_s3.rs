//! The `s3` tus store in one API against the embedded S3: any chunk size (below a part,
//! exactly a part, a part and a byte) lands byte for byte as one object, with SHA-1 and
//! SHA-256 checksums per chunk, and a checksum that does not match keeps nothing;
//! termination, expiry and the deletion of the user leave no multipart upload and no tail
//! piece, and `vidq reconcile` agrees with the bucket.

use reqwest::StatusCode;

use crate::support::app::{TestApp, TestAppOptions};
use crate::support::reconcile::{expect, reconcile_at};
use crate::support::tus::{
    bytes, create, offset_of, patch, sha1_header, sha256_header, tus, upload_id,
};

const MIB: usize = 1024 * 1024;
/// The smallest part S3 takes, so a few MiB make several parts.
const PART: usize = 5 * MIB;

async fn s3_store() -> TestApp {
    TestApp::spawn_with(TestAppOptions {
        tus: ("s3", PART as u64),
        ..Default::default()
    })
    .await
}

/// Multipart uploads in progress, anywhere in the bucket.
async fn multiparts(app: &TestApp) -> Vec<(String, String)> {
    app.storage.list_multiparts("").await.unwrap()
}

async fn tail_pieces(app: &TestApp, id: &str) -> usize {
    app.storage
        .list_with_sizes(&format!("tus-tail/{id}/"))
        .await
        .unwrap()
        .len()
}

async fn reconciled(app: &TestApp) {
    let endpoint = app.s3.as_ref().unwrap().endpoint();
    expect(
        &reconcile_at(&app.db.url, &endpoint, &["--grace-secs", "0"]).await,
        0,
    );
}

#[tokio::test]
async fn any_chunk_size_lands_byte_for_byte_and_a_checksum_mismatch_keeps_nothing() {
    let app = s3_store().await;
    let key = app.create_user("alice").await;
    // Two whole parts and half of one, and 3 bytes: no chunk size divides it.
    let file = bytes(2 * PART + PART / 2 + 3);
    type Header = fn(&[u8]) -> String;
    let sizes: [(usize, Header); 4] = [
        (256 * 1024, sha1_header),
        (PART, sha256_header),
        (PART + 1, sha1_header),
        (3 * MIB + 17, sha256_header),
    ];
    for (chunk, checksum) in sizes {
        let url = create(&app, &key, file.len()).await;
        let id = upload_id(&url);
        let mut offset = 0;
        while offset < file.len() {
            let end = (offset + chunk).min(file.len());
            // The same chunk with a digest of other bytes first: refused, nothing kept.
            let wrong = patch(
                &app,
                &key,
                &url,
                offset,
                &file[offset..end],
                Some(checksum(b"other bytes")),
            )
            .await;
            assert_eq!(wrong.status().as_u16(), 460, "chunk {chunk} at {offset}");
            assert_eq!(offset_of(&app, &key, &url).await, offset as u64);
            let right = patch(
                &app,
                &key,
                &url,
                offset,
                &file[offset..end],
                Some(checksum(&file[offset..end])),
            )
            .await;
            assert_eq!(
                right.status(),
                StatusCode::NO_CONTENT,
                "chunk {chunk} at {offset}: {}",
                right.text().await.unwrap()
            );
            assert_eq!(right.headers()["upload-offset"], end.to_string().as_str());
            offset = end;
        }
        // Confirmed by the last PATCH itself: the object is the file, byte for byte.
        let status = app
            .get(&key, &format!("/v1/uploads/{id}"))
            .await
            .json::<serde_json::Value>()
            .await
            .unwrap();
        assert_eq!(status["state"], "confirmed", "chunk {chunk}: {status}");
        let held = app
            .storage
            .get_bytes(&format!("originals/{id}"))
            .await
            .unwrap()
            .expect("the object");
        assert!(held == file, "chunk {chunk}: S3 holds other bytes");
        assert_eq!(tail_pieces(&app, &id).await, 0, "chunk {chunk}");
    }
    assert_eq!(multiparts(&app).await, vec![]);
    reconciled(&app).await;
}

#[tokio::test]
async fn termination_and_expiry_leave_no_multipart_upload_and_no_tail_piece() {
    let app = s3_store().await;
    let key = app.create_user("alice").await;
    let file = bytes(PART + MIB);
    // A part and a tail piece of each upload are in S3.
    let mut urls = Vec::new();
    for _ in 0..2 {
        let url = create(&app, &key, 3 * PART).await;
        let r = patch(&app, &key, &url, 0, &file, None).await;
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
        assert_eq!(tail_pieces(&app, &upload_id(&url)).await, 1);
        urls.push(url);
    }
    assert_eq!(multiparts(&app).await.len(), 2);
    // Reconcile knows the tail pieces of uploads still arriving as theirs.
    reconciled(&app).await;

    // Termination.
    let terminated = tus(&app, &key, reqwest::Method::DELETE, &urls[0])
        .send()
        .await
        .unwrap();
    assert_eq!(terminated.status(), StatusCode::NO_CONTENT);
    assert_eq!(tail_pieces(&app, &upload_id(&urls[0])).await, 0);
    assert_eq!(multiparts(&app).await.len(), 1);

    // Expiry, by backdating the contract: any API node's pass aborts it.
    let id = upload_id(&urls[1]);
    app.count(&format!(
        "WITH x AS (UPDATE uploads SET expires_at = now() - interval '1 second'
                     WHERE id = '{id}' RETURNING 1) SELECT count(*) AS n FROM x"
    ))
    .await;
    assert_eq!(vidq::app::ingest_s3::expire_due(&app.ctx).await.unwrap(), 1);
    assert_eq!(multiparts(&app).await, vec![]);
    assert_eq!(tail_pieces(&app, &id).await, 0);
    let late = patch(&app, &key, &urls[1], file.len(), b"more", None).await;
    assert_eq!(late.status(), StatusCode::GONE);

    // A user deleted with an upload still arriving: its multipart upload goes too.
    let bob = app.create_user("bob").await;
    let url = create(&app, &bob, 3 * PART).await;
    let r = patch(&app, &bob, &url, 0, &file, None).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(multiparts(&app).await.len(), 1);
    vidq::app::users::delete_user(&app.ctx, "bob")
        .await
        .unwrap();
    assert_eq!(multiparts(&app).await, vec![]);
    assert_eq!(tail_pieces(&app, &upload_id(&url)).await, 0);
    assert_eq!(
        app.count("SELECT count(*) AS n FROM tus_multiparts").await,
        0
    );
    reconciled(&app).await;
}
