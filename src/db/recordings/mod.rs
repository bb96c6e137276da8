//! Live recordings and the ledger of their files (`recordings`, `recording_files`). Every
//! statement here is a single statement on these two tables (a recording row, then its file
//! rows), after `users` through their foreign keys: see the lock order in `db/mod.rs`.
//!
//! The statements are grouped by who runs them: the recording row's own life (`rows`), the
//! ingest registering files and playlists (`files`), the sweeper landing files in S3
//! (`sweep`) and ending recordings nobody ended (`ends`). Callers use the names re-exported
//! here; what makes a finished recording into its video, and keeps the two in step, is
//! `videos`.

mod ends;
mod files;
mod rows;
mod sweep;
pub mod videos;

pub use ends::{close_past_cutoff, end_idle, expire_waiting, fail_without_video};
pub use files::{
    FileCounts, FileView, NewRecordingFile, RecordedFile, counts, file_digest, files_of,
    record_file, segment_extent, set_playlist,
};
pub use rows::{
    RecordingRow, add_lost_file, by_stream_key, delete, end, find, find_owned, insert, touch,
};
pub use sweep::{
    ClaimedFile, claim_files, mark_file_uploaded, record_file_failure, reject_file, release_files,
};
