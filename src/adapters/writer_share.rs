//! Fair shares of a node's spool writers, so no user can take a node's ingest from the
//! others: every write into the spool (a tus PATCH, a single PUT, a live file) holds one of
//! the node's writer slots for as long as its body arrives, and also one of its user's and,
//! for a live file, one of its recording's. One user holding bodies open (trickling, or simply many) takes at most
//! their own share; the rest of the node stays free for everyone else.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::domain::ids::{RecordingId, UserId};
use crate::sync::Locked;

/// Writer slots of one node, one user and one recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareLimits {
    /// Writes at once on the node.
    pub node: usize,
    /// Writes at once of one user (all their uploads and recordings).
    pub user: usize,
    /// Writes at once into one live recording (an encoder sends one or two files at once).
    pub recording: usize,
}

impl Default for ShareLimits {
    /// 256 on the node, 32 a user (eight users at their cap still leave half the node), 4 a
    /// recording.
    fn default() -> Self {
        Self {
            node: 256,
            user: 32,
            recording: 4,
        }
    }
}

/// Whose write it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Writer {
    /// The uploader or broadcaster.
    pub user: UserId,
    /// The live recording written to, if it is one.
    pub recording: Option<RecordingId>,
}

/// Which share was full.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShareFull {
    /// Every writer slot of the node is taken.
    #[error("all {0} spool writers of this node are busy")]
    Node(usize),
    /// The user holds their whole share.
    #[error("this user already holds {0} spool writers of this node")]
    User(usize),
    /// The recording holds its whole share.
    #[error("this recording already has {0} files arriving at once")]
    Recording(usize),
}

#[derive(Debug, Default)]
struct Held {
    node: usize,
    users: HashMap<UserId, usize>,
    recordings: HashMap<RecordingId, usize>,
}

/// The node's writer slots, counted per user and per recording.
#[derive(Clone, Debug, Default)]
pub struct WriterShares {
    limits: ShareLimits,
    held: Arc<Mutex<Held>>,
}

/// One write's slots, given back when dropped.
#[derive(Debug)]
pub struct WriterSlot {
    writer: Writer,
    held: Arc<Mutex<Held>>,
}

impl WriterShares {
    /// Shares under `limits`.
    pub fn new(limits: ShareLimits) -> Self {
        Self {
            limits,
            held: Arc::default(),
        }
    }

    /// Takes a slot for `writer`, or says which share is full (nothing is taken then).
    pub fn take(&self, writer: Writer) -> Result<WriterSlot, ShareFull> {
        let mut held = self.held.locked();
        if held.node >= self.limits.node {
            return Err(ShareFull::Node(self.limits.node));
        }
        if held.users.get(&writer.user).copied().unwrap_or(0) >= self.limits.user {
            return Err(ShareFull::User(self.limits.user));
        }
        if let Some(recording) = writer.recording
            && held.recordings.get(&recording).copied().unwrap_or(0) >= self.limits.recording
        {
            return Err(ShareFull::Recording(self.limits.recording));
        }
        held.node += 1;
        *held.users.entry(writer.user).or_insert(0) += 1;
        if let Some(recording) = writer.recording {
            *held.recordings.entry(recording).or_insert(0) += 1;
        }
        Ok(WriterSlot {
            writer,
            held: self.held.clone(),
        })
    }

    /// Slots held now on the node.
    pub fn in_use(&self) -> usize {
        self.held.locked().node
    }
}

fn give_back<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: K) {
    if let Some(n) = map.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            map.remove(&key);
        }
    }
}

impl Drop for WriterSlot {
    fn drop(&mut self) {
        let mut held = self.held.locked();
        held.node -= 1;
        give_back(&mut held.users, self.writer.user);
        if let Some(recording) = self.writer.recording {
            give_back(&mut held.recordings, recording);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(user: u128, recording: Option<u128>) -> Writer {
        Writer {
            user: UserId(uuid::Uuid::from_u128(user)),
            recording: recording.map(|r| RecordingId(uuid::Uuid::from_u128(r))),
        }
    }

    #[test]
    fn one_user_takes_their_share_and_the_others_still_write() {
        let shares = WriterShares::new(ShareLimits {
            node: 10,
            user: 3,
            recording: 2,
        });
        let held: Vec<_> = (0..3)
            .map(|_| shares.take(writer(1, None)).unwrap())
            .collect();
        assert_eq!(
            shares.take(writer(1, None)).unwrap_err(),
            ShareFull::User(3)
        );
        let other = shares.take(writer(2, None)).unwrap();
        assert_eq!(shares.in_use(), 4);
        drop(held);
        assert_eq!(shares.in_use(), 1);
        shares.take(writer(1, None)).unwrap();
        drop(other);
    }

    #[test]
    fn a_recording_has_its_own_cap_inside_its_users() {
        let shares = WriterShares::new(ShareLimits {
            node: 10,
            user: 5,
            recording: 2,
        });
        let _a = shares.take(writer(1, Some(7))).unwrap();
        let _b = shares.take(writer(1, Some(7))).unwrap();
        assert_eq!(
            shares.take(writer(1, Some(7))).unwrap_err(),
            ShareFull::Recording(2)
        );
        // Another recording of the same user, and the user's uploads, still write.
        let _c = shares.take(writer(1, Some(8))).unwrap();
        let _d = shares.take(writer(1, None)).unwrap();
    }

    #[test]
    fn the_node_cap_holds_for_everyone() {
        let shares = WriterShares::new(ShareLimits {
            node: 2,
            user: 2,
            recording: 2,
        });
        let _a = shares.take(writer(1, None)).unwrap();
        let _b = shares.take(writer(2, None)).unwrap();
        assert_eq!(
            shares.take(writer(3, None)).unwrap_err(),
            ShareFull::Node(2)
        );
    }
}
