//! The checks a request passes before any of its bytes is taken, the same for both stores:
//! the upload's state, the request's media type, offset, length and checksum against the row.

use super::{Receive, Received, UploadStatus};
use crate::app::{AppError, ReceiveError, UploadError};
use crate::db;
use crate::domain::tus::Checksum;
use crate::domain::upload::UploadState;

/// What a request may do, once checked against the row.
pub(super) enum Admission {
    /// Every byte has arrived already and this request repeats the last (its answer was
    /// lost): answered as it was.
    Complete(Received),
    /// Bytes to take.
    Go(Admitted),
}

/// A request admitted to send bytes.
#[derive(Debug, Clone)]
pub(in crate::app) struct Admitted {
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
pub(super) fn admit(status: &UploadStatus, receive: &Receive) -> Result<Admission, AppError> {
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
            _ => Err(AppError::Receive(ReceiveError::UploadComplete)),
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
            return Err(AppError::Receive(ReceiveError::ContentTypeMismatch {
                sent: essence.to_owned(),
                contract: row.content_type.clone(),
            }));
        }
    }
    // A contract checked as one whole file takes the single PUT only, and a PUT never
    // starts over bytes that arrived through tus.
    if !whole_file && row.checksum.is_some() {
        return Err(AppError::Receive(ReceiveError::WholeFileOnly));
    }
    if whole_file && held != 0 {
        return Err(AppError::Receive(ReceiveError::ResumableInProgress {
            held,
        }));
    }
    if !whole_file && offset != held {
        return Err(AppError::Receive(ReceiveError::OffsetMismatch {
            expected: held,
        }));
    }
    match receive.length {
        Some(length) if whole_file && length != declared => {
            return Err(AppError::Upload(UploadError::SizeMismatch {
                declared: row.declared_size,
                actual: length as i64,
            }));
        }
        Some(length) if offset.checked_add(length).is_none_or(|end| end > declared) => {
            return Err(AppError::Receive(ReceiveError::PastUploadLength {
                length: declared,
            }));
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
