//! One publisher per recording at a time, in this process. An encoder that reconnects (its
//! network dropped, it was restarted) often does so before this side has noticed the old
//! connection is dead: the new publish stops the old one and waits until its FFmpeg has
//! written its last files, so the two never write the same segment numbers and the new one
//! goes on from where the old one ended.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::domain::ids::RecordingId;
use crate::sync::Locked;

/// The recordings being published to on this process.
#[derive(Default)]
pub struct Streams {
    entries: Mutex<HashMap<RecordingId, Arc<Entry>>>,
}

#[derive(Default)]
struct Entry {
    /// Held by the recording's publisher for as long as it runs (its FFmpeg included).
    turn: Arc<tokio::sync::Mutex<()>>,
    /// Stops the publisher that holds the turn.
    stop: Mutex<Option<CancellationToken>>,
}

/// The turn of one publisher; the next one waits until this is dropped.
pub struct Publishing {
    streams: Arc<Streams>,
    recording: RecordingId,
    entry: Arc<Entry>,
    _turn: tokio::sync::OwnedMutexGuard<()>,
}

impl Streams {
    /// Takes the recording's turn for a publisher stopped by `stop`: stops the one that holds
    /// it (if any) and waits until it has finished.
    pub async fn take(
        self: &Arc<Self>,
        recording: RecordingId,
        stop: CancellationToken,
    ) -> Publishing {
        let entry = {
            let mut entries = self.entries.locked();
            entries.entry(recording).or_default().clone()
        };
        if let Some(previous) = entry.stop.locked().take() {
            previous.cancel();
        }
        let turn = entry.turn.clone().lock_owned().await;
        *entry.stop.locked() = Some(stop);
        Publishing {
            streams: self.clone(),
            recording,
            entry,
            _turn: turn,
        }
    }
}

impl Drop for Publishing {
    fn drop(&mut self) {
        let mut entries = self.streams.entries.locked();
        // Forget the recording once nobody else holds or waits for its entry (the map's
        // reference, this one).
        if Arc::strong_count(&self.entry) <= 2 {
            entries.remove(&self.recording);
        }
    }
}
