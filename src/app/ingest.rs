//! Uploads through vidq: a contract whose bytes the client sends to vidq (tus at
//! `/v1/tus/`, or one `PUT /v1/uploads/{id}/content`) instead of to a presigned S3 URL.
//!
//! The bytes stream into a spool file under the node's allowed root (docs/architecture.md,
//! "Upload recovery"); each request's bytes are fsynced before the ledger counts them (a CAS
//! on the previous count), and the request that completes the file moves the row
//! `receiving -> pending` and wakes this node's sweeper, which PUTs the contracted key and
//! confirms. Nothing more is asked of the client.

use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures_util::{Stream, StreamExt};

use super::upload_locks::{UploadGuard, UploadLocks};
use super::{AppContext, AppError};
use crate::adapters::spool::{AppendEnd, AppendError, SpoolRoot};
use crate::db::{self, uploads::UploadRow};
use crate::domain::ids::{UploadId, UserId};
use crate::domain::keys;
use crate::domain::tus::Checksum;
use crate::domain::upload::{NewUpload, RejectReason, UploadState, UploadStore, UploadVia};

/// How long a new request waits for one that holds the same upload to let go.
const TAKEOVER_WAIT: Duration = Duration::from_secs(5);

/// Where this node keeps uploads through vidq.
#[derive(Clone, Debug)]
pub struct Ingest {
    /// The allowed root.
    pub spool: SpoolRoot,
    /// This process's directory for live files still arriving.
    pub incoming: std::sync::Arc<crate::adapters::incoming::IncomingDir>,
    /// The node the rows are written under (the sweeper of the same name lands them).
    pub node_id: String,
    /// Where new uploads keep their bytes while they arrive (`VIDQ_TUS_STORE`).
    pub store: UploadStore,
    /// With the `s3` store: the size of a part.
    pub part_bytes: u64,
    /// How long an upload may take to arrive.
    pub ttl: Duration,
    /// Files of a recording still count this long after its end.
    pub live_grace: Duration,
    /// One request at a time per upload.
    pub locks: UploadLocks,
    /// Where encoders reach the live ingest listener: a fixed public URL, or the port it
    /// listens on at the host the client reached the API at.
    pub live_ingest: LiveIngestAt,
    /// Where encoders reach the RTMP listener, when one runs (`VIDQ_RTMP_ADDR`); its URL
    /// is made as the live ingest listener's is.
    pub rtmp: Option<LiveIngestAt>,
}

/// How a recording's `ingest_url` is made.
#[derive(Clone, Debug)]
pub enum LiveIngestAt {
    /// `VIDQ_INGEST_PUBLIC_URL`.
    Public(String),
    /// The ingest listener's port, at the API's host.
    Port(u16),
}

impl Ingest {
    /// `rtmp://host:port/live`, the server URL an encoder publishes to (the stream key is the
    /// stream name), given the API's base; `None` without an RTMP listener.
    pub fn rtmp_url(&self, api_base: &str) -> Option<String> {
        let base = match self.rtmp.as_ref()? {
            LiveIngestAt::Public(url) => url.trim_end_matches('/').to_owned(),
            LiveIngestAt::Port(port) => {
                let host = url::Url::parse(api_base)
                    .ok()
                    .and_then(|url| url.host().map(|h| h.to_string()))
                    .unwrap_or_else(|| "127.0.0.1".to_owned());
                format!("rtmp://{host}:{port}")
            }
        };
        Some(format!("{base}/{}", crate::rtmp::APP_NAME))
    }

    /// `scheme://host[:port]` of the ingest listener, given the API's base.
    pub fn ingest_base(&self, api_base: &str) -> String {
        match &self.live_ingest {
            LiveIngestAt::Public(url) => url.trim_end_matches('/').to_owned(),
            LiveIngestAt::Port(port) => {
                let mut url = match url::Url::parse(api_base) {
                    Ok(url) => url,
                    Err(_) => return api_base.to_owned(),
                };
                match url.set_port(Some(*port)) {
                    Ok(()) => url.as_str().trim_end_matches('/').to_owned(),
                    Err(()) => api_base.to_owned(),
                }
            }
        }
    }
}

/// A new upload through vidq waiting for its bytes.
#[derive(Debug, Clone)]
pub struct ReceivingUpload {
    /// The contract's id.
    pub id: UploadId,
    /// Bytes it must receive.
    pub size: u64,
    /// When it expires if not complete.
    pub expires_at: DateTime<Utc>,
}

/// Where an upload stands, as the status endpoint and tus `HEAD` show it.
#[derive(Debug, Clone)]
pub struct UploadStatus {
    /// The row.
    pub row: UploadRow,
    /// Its state.
    pub state: UploadState,
    /// How its bytes reach S3.
    pub via: UploadVia,
    /// The video made from it, once confirmed.
    pub video_id: Option<uuid::Uuid>,
}

impl UploadStatus {
    /// Bytes vidq holds of an upload through vidq (a presigned upload's are in S3 or not:
    /// the declared size once confirmed, else 0).
    pub fn received_bytes(&self) -> i64 {
        match (self.via, self.state) {
            (UploadVia::Vidq, _) => self.row.received_bytes,
            (_, UploadState::Uploaded | UploadState::Confirmed) => self.row.declared_size,
            _ => 0,
        }
    }
}

/// A request body's failure, as the HTTP layer saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// The body stopped arriving (the idle limit).
    Idle,
    /// The connection broke.
    Broken,
}

/// How the bytes of one request are to be taken.
#[derive(Debug, Clone)]
pub struct Receive {
    /// tus: the `Upload-Offset` the client claims; `None`: the single PUT, always the whole
    /// file from byte 0.
    pub offset: Option<u64>,
    /// The body's `Content-Length`, when the client said it.
    pub length: Option<u64>,
    /// The client's digest of this request's bytes (tus `Upload-Checksum`).
    pub checksum: Option<Checksum>,
    /// The single PUT's `Content-Type`, when it sent one: it must be the contract's.
    pub content_type: Option<String>,
}

/// What a request's bytes did.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Bytes held now (the next tus offset).
    pub offset: u64,
    /// The whole file has arrived; the sweeper takes it from here.
    pub complete: bool,
    /// When the upload expires if it is not complete by then.
    pub expires_at: DateTime<Utc>,
}

fn ingest(ctx: &AppContext) -> Result<&Ingest, AppError> {
    ctx.ingest.as_ref().ok_or(AppError::IngestDisabled)
}

/// Checks the request like a presigned one and the caller's open uploads against their cap,
/// then records the `receiving` contract under this node. Its spool file is made when its
/// first byte arrives ([`SpoolRoot::hold_or_start`]): until then a row that counts 0 bytes
/// needs no file.
#[tracing::instrument(skip_all, fields(owner = %owner))]
pub async fn create(
    ctx: &AppContext,
    owner: UserId,
    filename: &str,
    content_type: &str,
    size_bytes: i64,
    checksum: Option<Checksum>,
    tus_metadata: Option<&str>,
) -> Result<ReceivingUpload, AppError> {
    let ingest = ingest(ctx)?;
    let request = NewUpload::parse(
        filename,
        content_type,
        size_bytes,
        ctx.upload.max_upload_bytes,
    )?;
    super::open_work::admit_upload(ctx, owner).await?;
    let id = UploadId::new();
    let key = keys::original(id);
    let size = i64::try_from(request.size_bytes).expect("size was checked against the limit");
    let expires_at =
        Utc::now() + chrono::Duration::from_std(ingest.ttl).expect("the TTL is at most 30 days");
    let checksum = checksum.map(|c| c.to_ledger());
    let contract = db::uploads::NewUploadRow {
        id: id.0,
        owner_id: owner.0,
        object_key: &key,
        filename: &request.filename,
        content_type: &request.content_type,
        declared_size: size,
        expires_at,
        checksum: checksum.as_deref(),
        tus_metadata,
    };
    match ingest.store {
        UploadStore::S3 => super::ingest_s3::create(ctx, &contract, ingest.part_bytes).await?,
        UploadStore::Spool => {
            let spool_path = format!("{}/{id}", crate::adapters::spool::UPLOADS_DIR);
            let mut conn = ctx.db.get().await?;
            db::ingest::insert_receiving(
                &mut conn,
                &db::ledger::NewVidqUpload {
                    contract,
                    spool_path: &spool_path,
                    node_id: &ingest.node_id,
                },
            )
            .await?;
        }
    }
    tracing::info!(upload_id = %id, size, node = %ingest.node_id, store = ingest.store.as_str(), "upload through vidq created");
    Ok(ReceivingUpload {
        id,
        size: request.size_bytes,
        expires_at,
    })
}

/// The contract and what became of it; `None` for an unknown id or a stranger's.
pub async fn status(
    ctx: &AppContext,
    owner: UserId,
    id: UploadId,
) -> Result<UploadStatus, AppError> {
    let mut conn = ctx.db.get().await?;
    let row = db::uploads::find_owned(&mut conn, owner.0, id.0)
        .await?
        .ok_or(AppError::NotFound)?;
    let video_id = db::uploads::video_of(&mut conn, id.0).await?;
    let state = row.state.parse().map_err(db::DbError::from)?;
    let via = row.via.parse().map_err(db::DbError::from)?;
    Ok(UploadStatus {
        row,
        state,
        via,
        video_id,
    })
}

/// Takes the upload over from any request that holds it (which keeps what it received),
/// then reads it: the tus `HEAD`, so the offset it answers is the one on disk.
pub async fn resume_point(
    ctx: &AppContext,
    owner: UserId,
    id: UploadId,
) -> Result<UploadStatus, AppError> {
    let (status, _guard) = take(ctx, owner, id).await?;
    if is_s3(&status) {
        super::ingest_s3::resume(ctx, &status).await?;
        return self::status(ctx, owner, id).await;
    }
    Ok(status)
}

/// The upload keeps its bytes in S3's multipart upload (the `s3` store).
fn is_s3(status: &UploadStatus) -> bool {
    status.row.store.as_deref() == Some(UploadStore::S3.as_str())
}

/// Locks the upload on this node and reads it: only an upload through vidq of this caller,
/// spooled on this node (or in S3's multipart upload, which any node serves), still open.
async fn take(
    ctx: &AppContext,
    owner: UserId,
    id: UploadId,
) -> Result<(UploadStatus, UploadGuard), AppError> {
    let ingest = ingest(ctx)?;
    let guard = ingest
        .locks
        .acquire(id.0, TAKEOVER_WAIT)
        .await
        .ok_or(AppError::UploadBusy)?;
    let status = status(ctx, owner, id).await?;
    if status.via != UploadVia::Vidq {
        return Err(AppError::NotThroughVidq);
    }
    if !is_s3(&status) && status.row.node_id.as_deref() != Some(&ingest.node_id) {
        return Err(AppError::WrongNode {
            node: status.row.node_id.clone().unwrap_or_default(),
        });
    }
    match status.state {
        UploadState::Expired | UploadState::Rejected => {
            return Err(AppError::UploadGone {
                state: status.state,
            });
        }
        UploadState::Receiving if status.row.expires_at < Utc::now() => {
            return Err(AppError::UploadGone {
                state: UploadState::Expired,
            });
        }
        _ => {}
    }
    Ok((status, guard))
}

/// Streams one request's bytes into the spool file (see the module doc). tus (`offset`
/// given): appends at the ledger's offset, keeps what arrived of a body cut short (unless a
/// checksum was promised), refuses a checksum mismatch with nothing kept. The single PUT:
/// the whole file from byte 0 or nothing.
#[tracing::instrument(skip_all, fields(owner = %owner, upload_id = %id))]
pub async fn receive<S>(
    ctx: &AppContext,
    owner: UserId,
    id: UploadId,
    receive: Receive,
    mut body: S,
) -> Result<Received, AppError>
where
    S: Stream<Item = Result<Bytes, BodyError>> + Unpin,
{
    let ingest = ingest(ctx)?;
    let (status, guard) = take(ctx, owner, id).await?;
    let admitted = match admit(&status, &receive)? {
        Admission::Complete(received) => {
            // Every byte has arrived; the `s3` store may still owe the completion.
            if is_s3(&status) && status.state == UploadState::Pending {
                super::ingest_s3::finish(ctx, &status).await?;
            }
            return Ok(received);
        }
        Admission::Go(admitted) => admitted,
    };
    if is_s3(&status) {
        return super::ingest_s3::receive(ctx, &status, admitted, body, &guard).await;
    }
    let row = &status.row;
    let declared = row.declared_size as u64;
    let Admitted {
        held,
        offset,
        whole_file,
        checksum,
        ..
    } = admitted;
    let spool_path = row.spool_path.as_deref().unwrap_or_default();
    // Held until the ledger counts what this request kept: no other request, of this
    // process or another sharing the spool, can cut or extend the file in between.
    let file = ingest
        .spool
        .hold_or_start(spool_path, row.received_bytes == 0)
        .await
        .map_err(spool_error);
    let file = match file {
        Ok(file) => file,
        Err(AppError::SpoolLost) => {
            lose(ctx, id).await?;
            return Err(closed(ctx, id).await);
        }
        Err(error) => return Err(error),
    };
    let mut append = ingest
        .spool
        .append(
            file,
            offset,
            checksum,
            crate::adapters::writer_share::Writer {
                user: row.owner_id,
                recording: None,
            },
        )
        .map_err(spool_error)?;

    let mut sent = 0u64;
    let mut failure = None;
    let end = loop {
        let next = tokio::select! {
            next = body.next() => next,
            () = guard.stop.cancelled() => {
                failure = Some(AppError::UploadBusy);
                break AppendEnd::Interrupted;
            }
        };
        match next {
            Some(Ok(chunk)) => {
                sent += chunk.len() as u64;
                if offset + sent > declared {
                    failure = Some(AppError::PastUploadLength { length: declared });
                    break AppendEnd::Discard;
                }
                if append.write(chunk).await.is_err() {
                    break AppendEnd::Interrupted;
                }
            }
            Some(Err(error)) => {
                failure = Some(AppError::BodyInterrupted(error));
                break AppendEnd::Interrupted;
            }
            None if whole_file && sent != declared => {
                failure = Some(AppError::SizeMismatch {
                    declared: row.declared_size,
                    actual: sent as i64,
                });
                break AppendEnd::Discard;
            }
            None => break AppendEnd::Complete,
        }
    };
    // The single PUT is all or nothing: a body cut short leaves nothing behind.
    let end = if whole_file && end == AppendEnd::Interrupted {
        AppendEnd::Discard
    } else {
        end
    };
    let appended = append.finish(end).await.map_err(spool_error);
    let (appended, _held) = match appended {
        Ok(appended) => appended,
        Err(AppError::SpoolLost) => {
            lose(ctx, id).await?;
            return Err(closed(ctx, id).await);
        }
        Err(error) => return Err(error),
    };
    let now_held = offset + appended.kept;
    let complete = now_held == declared;
    if now_held != held {
        let mut conn = ctx.db.get().await?;
        let moved =
            db::ingest::advance(&mut conn, id.0, held as i64, now_held as i64, complete).await?;
        if moved == 0 {
            // Expired or terminated while the bytes arrived.
            drop(conn);
            return Err(closed(ctx, id).await);
        }
    }
    tracing::info!(
        from = offset,
        kept = appended.kept,
        held = now_held,
        declared,
        complete,
        "upload bytes received and fsynced"
    );
    if appended.checksum_mismatch {
        return Err(AppError::ChecksumMismatch);
    }
    if let Some(failure) = failure {
        return Err(failure);
    }
    Ok(Received {
        offset: now_held,
        complete,
        expires_at: row.expires_at,
    })
}

/// What a request may do, once checked against the row.
enum Admission {
    /// Every byte has arrived already and this request repeats the last (its answer was
    /// lost): answered as it was.
    Complete(Received),
    /// Bytes to take.
    Go(Admitted),
}

/// A request admitted to send bytes.
#[derive(Debug, Clone)]
pub(super) struct Admitted {
    /// Bytes the ledger holds.
    pub held: u64,
    /// Where the request's bytes start (`held`).
    pub offset: u64,
    /// The body's length, when the client said it.
    pub length: Option<u64>,
    /// The single PUT: the whole file or nothing.
    pub whole_file: bool,
    /// The digest the request's bytes must have (the tus header's, or for the single PUT
    /// the contract's).
    pub checksum: Option<Checksum>,
}

/// Checks a request against the row: the same rules for both stores.
fn admit(status: &UploadStatus, receive: &Receive) -> Result<Admission, AppError> {
    let row = &status.row;
    let declared = row.declared_size as u64;
    let held = row.received_bytes as u64;
    let whole_file = receive.offset.is_none();
    let offset = receive.offset.unwrap_or(0);
    if status.state != UploadState::Receiving {
        // Complete already: a repeat of the last PATCH whose answer was lost is fine.
        return match (receive.offset, receive.length) {
            (Some(o), Some(0) | None) if o == declared => Ok(Admission::Complete(Received {
                offset: declared,
                complete: true,
                expires_at: row.expires_at,
            })),
            _ => Err(AppError::UploadComplete),
        };
    }
    // The contract names the bytes' media type; a PUT that says otherwise (text/html
    // against video/mp4) is refused before a byte is kept. `application/octet-stream`
    // says only "bytes", as no type at all does.
    if let Some(sent) = &receive.content_type {
        let essence = sent.split(';').next().unwrap_or_default().trim();
        if !essence.eq_ignore_ascii_case(&row.content_type)
            && !essence.eq_ignore_ascii_case("application/octet-stream")
        {
            return Err(AppError::ContentTypeMismatch {
                sent: essence.to_owned(),
                contract: row.content_type.clone(),
            });
        }
    }
    // A contract checked as one whole file takes the single PUT only, and a PUT never
    // starts over bytes that arrived through tus.
    if !whole_file && row.checksum.is_some() {
        return Err(AppError::WholeFileOnly);
    }
    if whole_file && held != 0 {
        return Err(AppError::ResumableInProgress { held });
    }
    if !whole_file && offset != held {
        return Err(AppError::OffsetMismatch { expected: held });
    }
    match receive.length {
        Some(length) if whole_file && length != declared => {
            return Err(AppError::SizeMismatch {
                declared: row.declared_size,
                actual: length as i64,
            });
        }
        Some(length) if offset.checked_add(length).is_none_or(|end| end > declared) => {
            return Err(AppError::PastUploadLength { length: declared });
        }
        _ => {}
    }
    // The single PUT's whole body is the whole file: the contract's checksum covers it.
    let checksum =
        match (&receive.checksum, whole_file, &row.checksum) {
            (Some(c), _, _) => Some(c.clone()),
            (None, true, Some(ledger)) => Some(Checksum::from_ledger(ledger).map_err(|_| {
                db::DbError::from(crate::domain::upload::UnknownState(ledger.clone()))
            })?),
            _ => None,
        };
    Ok(Admission::Go(Admitted {
        held,
        offset,
        length: receive.length,
        whole_file,
        checksum,
    }))
}

/// tus termination: drops a `receiving` upload and its spool file.
#[tracing::instrument(skip_all, fields(owner = %owner, upload_id = %id))]
pub async fn terminate(ctx: &AppContext, owner: UserId, id: UploadId) -> Result<(), AppError> {
    let ingest = ingest(ctx)?;
    let (status, _guard) = take(ctx, owner, id).await?;
    if status.state != UploadState::Receiving {
        return Err(AppError::UploadComplete);
    }
    if is_s3(&status) {
        return super::ingest_s3::terminate(ctx, &status).await;
    }
    // Not while a request of another process sharing the spool writes it.
    let _held = match status.row.spool_path.as_deref() {
        Some(path) => match ingest.spool.hold(path).await {
            Ok(held) => Some(held),
            Err(AppendError::Lost { .. }) => None,
            Err(error) => return Err(spool_error(error)),
        },
        None => None,
    };
    let deleted = {
        let mut conn = ctx.db.get().await?;
        db::ingest::delete_receiving(&mut conn, id.0).await?
    };
    if deleted == 0 {
        return Err(AppError::UploadComplete);
    }
    if let Some(path) = status.row.spool_path.as_deref()
        && let Err(error) = ingest.spool.remove(path).await
    {
        tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not remove a terminated upload's spool file");
    }
    tracing::info!("upload through vidq terminated");
    Ok(())
}

/// Why an upload that was open a moment ago no longer is, from its row.
async fn closed(ctx: &AppContext, id: UploadId) -> AppError {
    let state = async {
        let mut conn = ctx.db.get().await?;
        Ok::<_, AppError>(db::uploads::state_of(&mut conn, id.0).await?)
    }
    .await;
    match state {
        Ok(Some(state)) => match state.parse() {
            Ok(state) => AppError::UploadGone { state },
            Err(e) => AppError::Database(db::DbError::from(e)),
        },
        Ok(None) => AppError::NotFound,
        Err(error) => error,
    }
}

/// The spool file is gone or shorter than the ledger's count: the bytes cannot be
/// resumed. The row is rejected (`spool_missing`) so the client sees why.
async fn lose(ctx: &AppContext, id: UploadId) -> Result<(), AppError> {
    tracing::warn!(upload_id = %id, "the spool file of an upload in progress is lost");
    let mut conn = ctx.db.get().await?;
    db::ingest::reject_receiving(&mut conn, id.0, RejectReason::SpoolMissing).await?;
    Ok(())
}

pub(crate) fn spool_error(error: AppendError) -> AppError {
    match error {
        AppendError::Lost { .. } => AppError::SpoolLost,
        AppendError::Busy(full) => AppError::SpoolBusy(full),
        AppendError::Held => AppError::UploadBusy,
        AppendError::Io(io) if io.kind() == std::io::ErrorKind::StorageFull => {
            tracing::warn!(
                "the spool disk is full: a write was refused (507); the sweeper frees space as it lands what is there"
            );
            AppError::SpoolFull
        }
        other => AppError::Spool(other),
    }
}
