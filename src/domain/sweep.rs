//! The upload sweeper's decisions, without I/O: the forward cursor that pages through the
//! pending ledger and wraps, the per-row backoff (exponential, full jitter) and the circuit
//! breaker in front of S3. The role (`roles/sweeper.rs`) does the reading and the PUTs.
//!
//! Why a cursor and not "the first page again": rows that keep failing stay `pending` at
//! the front of the table; a sweeper that starts every round at the front hands its whole
//! page to them and never reaches newer rows. The cursor moves forward past
//! every row it offered, so a newer row is reached within `pending / page` rounds.

use std::time::{Duration, Instant};

use super::upload::RejectReason;

/// Rows read per round unless configured.
pub const DEFAULT_PAGE: u32 = 128;

/// Where the next page starts: after `position`, or at the start of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor<K> {
    position: Option<K>,
    page: u32,
}

impl<K: Copy + Ord> Cursor<K> {
    /// A cursor at the start, reading `page` rows a round (at least 1).
    pub fn new(page: u32) -> Self {
        Self {
            position: None,
            page: page.max(1),
        }
    }

    /// Rows to ask for.
    pub fn page(&self) -> u32 {
        self.page
    }

    /// Read rows with a key above this one (`None`: from the start).
    pub fn after(&self) -> Option<K> {
        self.position
    }

    /// Moves the cursor after a round that read `returned` rows (in key order, the last
    /// being `last_read`) and handed them on up to `last_accepted`. A row the queue did not
    /// take is read again next round (the cursor stops after the last one taken); a short
    /// page means the end of the table was reached, so the next round starts over.
    pub fn advance(&mut self, returned: usize, last_read: Option<K>, last_accepted: Option<K>) {
        let saturated = last_read != last_accepted;
        if saturated {
            // Keep the rows the queue refused ahead of the cursor; `None` keeps it where it
            // was (nothing of the page was taken).
            if last_accepted.is_some() {
                self.position = last_accepted;
            }
        } else if returned < self.page as usize {
            self.position = None;
        } else {
            self.position = last_read;
        }
    }
}

/// Checks a spool path as written in a row, before anything touches the disk: it must be
/// relative and made of plain names only (no root, no `..`, no `.` tricks, not empty). A
/// symlink that leads out of the root is caught later, by resolving the path (the file
/// boundary in `adapters/spool.rs`).
pub fn relative_spool_path(raw: &str) -> Result<&std::path::Path, RejectReason> {
    use std::path::Component;
    let path = std::path::Path::new(raw);
    let plain = !raw.is_empty()
        && !raw.contains('\0')
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if plain && path.components().any(|c| matches!(c, Component::Normal(_))) {
        Ok(path)
    } else {
        Err(RejectReason::OutsideSpoolRoot)
    }
}

/// Exponential backoff with full jitter: the n-th failure waits a uniformly random time in
/// `[0, min(cap, base * 2^(n-1))]`, so rows that failed together do not retry together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Ceiling after the first failure.
    pub base: Duration,
    /// Largest ceiling.
    pub cap: Duration,
}

impl Default for Backoff {
    /// Base 1 s, cap 5 min.
    fn default() -> Self {
        Self {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(300),
        }
    }
}

impl Backoff {
    /// The ceiling after `failures` failures (1 for the first).
    pub fn ceiling(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(32);
        self.base
            .checked_mul(1u32 << doublings.min(31))
            .unwrap_or(self.cap)
            .min(self.cap)
    }

    /// The wait after `failures` failures, for `jitter` drawn uniformly from `[0, 1)`.
    pub fn delay(&self, failures: u32, jitter: f64) -> Duration {
        self.ceiling(failures).mul_f64(jitter.clamp(0.0, 1.0))
    }
}

/// The breaker's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// PUTs go through.
    Closed,
    /// PUTs are held back until the cool-down ends.
    Open,
    /// One probe PUT is allowed; its outcome closes or re-opens the breaker.
    HalfOpen,
}

impl BreakerState {
    /// The name written to the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
        }
    }
}

/// A change of breaker state, to log and count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// Before.
    pub from: BreakerState,
    /// After.
    pub to: BreakerState,
}

/// The breaker's answer to whether a PUT may go ahead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerVerdict {
    /// Go ahead.
    Allowed,
    /// Go ahead as the half-open probe; the transition (open -> half-open) is returned.
    Probe(Transition),
    /// Hold the row back (release it without a PUT).
    Refused,
}

/// Breaker settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Consecutive storage failures that open it.
    pub failures_to_open: u32,
    /// How long it stays open before one probe.
    pub cool_down: Duration,
}

impl Default for BreakerSettings {
    /// 5 failures, 30 s.
    fn default() -> Self {
        Self {
            failures_to_open: 5,
            cool_down: Duration::from_secs(30),
        }
    }
}

/// A circuit breaker over S3: closed -> open after N consecutive failures -> half-open after
/// the cool-down (one probe) -> closed on its success, open again on its failure. The caller
/// passes the clock, so it is tested without waiting.
#[derive(Clone, Debug)]
pub struct Breaker {
    settings: BreakerSettings,
    state: BreakerState,
    consecutive_failures: u32,
    open_until: Option<Instant>,
    probe_in_flight: bool,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(settings: BreakerSettings) -> Self {
        Self {
            settings: BreakerSettings {
                failures_to_open: settings.failures_to_open.max(1),
                ..settings
            },
            state: BreakerState::Closed,
            consecutive_failures: 0,
            open_until: None,
            probe_in_flight: false,
        }
    }

    /// The current state.
    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// Asks to PUT at `now`.
    pub fn admit(&mut self, now: Instant) -> BreakerVerdict {
        match self.state {
            BreakerState::Closed => BreakerVerdict::Allowed,
            BreakerState::Open if self.open_until.is_some_and(|until| now >= until) => {
                self.state = BreakerState::HalfOpen;
                self.probe_in_flight = true;
                BreakerVerdict::Probe(Transition {
                    from: BreakerState::Open,
                    to: BreakerState::HalfOpen,
                })
            }
            BreakerState::Open | BreakerState::HalfOpen => BreakerVerdict::Refused,
        }
    }

    /// A storage call succeeded.
    pub fn on_success(&mut self) -> Option<Transition> {
        self.consecutive_failures = 0;
        self.probe_in_flight = false;
        let from = self.state;
        self.state = BreakerState::Closed;
        self.open_until = None;
        (from != BreakerState::Closed).then_some(Transition {
            from,
            to: BreakerState::Closed,
        })
    }

    /// A storage call failed at `now`.
    pub fn on_failure(&mut self, now: Instant) -> Option<Transition> {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        let from = self.state;
        let opens = match from {
            BreakerState::Closed => self.consecutive_failures >= self.settings.failures_to_open,
            // The probe failed (or a PUT admitted before the breaker opened): stay shut.
            BreakerState::HalfOpen | BreakerState::Open => true,
        };
        if !opens {
            return None;
        }
        self.probe_in_flight = false;
        self.state = BreakerState::Open;
        self.open_until = Some(now + self.settings.cool_down);
        (from != BreakerState::Open).then_some(Transition {
            from,
            to: BreakerState::Open,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_moves_forward_a_page_at_a_time_and_wraps_on_a_short_page() {
        let mut c = Cursor::<u32>::new(128);
        assert_eq!(c.after(), None);
        c.advance(128, Some(128), Some(128));
        assert_eq!(c.after(), Some(128));
        c.advance(128, Some(256), Some(256));
        assert_eq!(c.after(), Some(256));
        c.advance(5, Some(261), Some(261));
        assert_eq!(c.after(), None, "a short page wraps to the start");
        c.advance(0, None, None);
        assert_eq!(c.after(), None);
    }

    #[test]
    fn rows_the_queue_refused_are_read_again_next_round() {
        let mut c = Cursor::<u32>::new(128);
        c.advance(128, Some(128), Some(128));
        // The queue took rows up to 200 of 129..=256.
        c.advance(128, Some(256), Some(200));
        assert_eq!(c.after(), Some(200));
        // A short page whose tail was refused does not wrap past those rows.
        c.advance(10, Some(210), Some(205));
        assert_eq!(c.after(), Some(205));
        // Nothing taken: the cursor stays.
        c.advance(128, Some(400), None);
        assert_eq!(c.after(), Some(205));
    }

    #[test]
    fn eleven_hundred_pending_rows_are_all_reached_in_nine_rounds() {
        // The acceptance table: 1,100 rows, 128 a round -> all offered by round 9.
        let rows: Vec<u32> = (1..=1100).collect();
        let mut c = Cursor::<u32>::new(128);
        let mut seen = std::collections::BTreeSet::new();
        let mut round = 0;
        while seen.len() < rows.len() {
            round += 1;
            let page: Vec<u32> = rows
                .iter()
                .copied()
                .filter(|&r| c.after().is_none_or(|a| r > a))
                .take(128)
                .collect();
            seen.extend(page.iter().copied());
            c.advance(page.len(), page.last().copied(), page.last().copied());
        }
        assert_eq!(round, 9);
    }

    #[test]
    fn spool_paths_must_be_plain_relative_names() {
        assert!(relative_spool_path("ab/cd/upload.bin").is_ok());
        assert!(relative_spool_path("./upload.bin").is_ok());
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "a/..", ".", "a\0b"] {
            assert_eq!(
                relative_spool_path(bad),
                Err(RejectReason::OutsideSpoolRoot),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn backoff_doubles_from_one_second_up_to_five_minutes_with_full_jitter() {
        let b = Backoff::default();
        assert_eq!(b.ceiling(1), Duration::from_secs(1));
        assert_eq!(b.ceiling(2), Duration::from_secs(2));
        assert_eq!(b.ceiling(5), Duration::from_secs(16));
        assert_eq!(b.ceiling(9), Duration::from_secs(256));
        assert_eq!(b.ceiling(10), Duration::from_secs(300));
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(300));
        assert_eq!(b.delay(3, 0.0), Duration::ZERO);
        assert_eq!(b.delay(3, 0.5), Duration::from_secs(2));
        assert!(b.delay(3, 0.999_999) < Duration::from_secs(4));
        assert_eq!(b.delay(3, 7.0), Duration::from_secs(4), "jitter is clamped");
    }

    #[test]
    fn the_breaker_opens_after_n_failures_probes_half_open_and_closes_on_success() {
        let t0 = Instant::now();
        let mut b = Breaker::new(BreakerSettings {
            failures_to_open: 3,
            cool_down: Duration::from_secs(30),
        });
        assert_eq!(b.admit(t0), BreakerVerdict::Allowed);
        assert_eq!(b.on_failure(t0), None);
        assert_eq!(b.on_failure(t0), None);
        // A success in between resets the count.
        assert_eq!(b.on_success(), None);
        assert_eq!(b.on_failure(t0), None);
        assert_eq!(b.on_failure(t0), None);
        assert_eq!(
            b.on_failure(t0),
            Some(Transition {
                from: BreakerState::Closed,
                to: BreakerState::Open
            })
        );
        assert_eq!(
            b.admit(t0 + Duration::from_secs(29)),
            BreakerVerdict::Refused
        );
        let probe = b.admit(t0 + Duration::from_secs(30));
        assert_eq!(
            probe,
            BreakerVerdict::Probe(Transition {
                from: BreakerState::Open,
                to: BreakerState::HalfOpen
            })
        );
        // Only one probe at a time.
        assert_eq!(
            b.admit(t0 + Duration::from_secs(31)),
            BreakerVerdict::Refused
        );
        assert_eq!(
            b.on_success(),
            Some(Transition {
                from: BreakerState::HalfOpen,
                to: BreakerState::Closed
            })
        );
        assert_eq!(
            b.admit(t0 + Duration::from_secs(31)),
            BreakerVerdict::Allowed
        );
    }

    #[test]
    fn a_failed_probe_opens_the_breaker_for_another_cool_down() {
        let t0 = Instant::now();
        let mut b = Breaker::new(BreakerSettings {
            failures_to_open: 1,
            cool_down: Duration::from_secs(10),
        });
        b.on_failure(t0);
        assert_eq!(b.state(), BreakerState::Open);
        let t1 = t0 + Duration::from_secs(10);
        assert!(matches!(b.admit(t1), BreakerVerdict::Probe(_)));
        assert_eq!(
            b.on_failure(t1),
            Some(Transition {
                from: BreakerState::HalfOpen,
                to: BreakerState::Open
            })
        );
        assert_eq!(
            b.admit(t1 + Duration::from_secs(9)),
            BreakerVerdict::Refused
        );
        assert!(matches!(
            b.admit(t1 + Duration::from_secs(10)),
            BreakerVerdict::Probe(_)
        ));
    }
}
