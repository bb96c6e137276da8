//! When a failed delivery is tried again: a growing schedule with jitter, and the receiver's
//! `Retry-After` honoured.
//!
//! The schedule lists the delay before each try: the first entry stands for the first try,
//! which is always made as soon as the event is routed (write it as 0), and a delivery is
//! exhausted when every entry has been used.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// Delays before each try: immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h
/// (8 tries over about 28 hours).
pub const DEFAULT_SCHEDULE: &str = "0s,5s,5m,30m,2h,5h,10h,10h";

/// Longest wait a `Retry-After` may ask for; longer requests are capped, not obeyed.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

/// The delays before each try.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetrySchedule(Vec<Duration>);

/// A schedule that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// An entry is not `<number><ms|s|m|h>`.
    #[error("{0:?} is not a delay (use e.g. 500ms, 5s, 30m, 2h)")]
    BadDelay(String),
    /// No entries.
    #[error("the retry schedule needs at least one entry")]
    Empty,
}

impl std::str::FromStr for RetrySchedule {
    type Err = ScheduleError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let delays = text
            .split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(parse_delay)
            .collect::<Result<Vec<_>, _>>()?;
        if delays.is_empty() {
            return Err(ScheduleError::Empty);
        }
        Ok(Self(delays))
    }
}

fn parse_delay(part: &str) -> Result<Duration, ScheduleError> {
    let bad = || ScheduleError::BadDelay(part.to_owned());
    if part == "0" {
        return Ok(Duration::ZERO);
    }
    let split = part.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = part.split_at(split);
    let number: u64 = number.parse().map_err(|_| bad())?;
    let millis = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(bad()),
    };
    Ok(Duration::from_millis(
        number.checked_mul(millis).ok_or_else(bad)?,
    ))
}

impl Default for RetrySchedule {
    fn default() -> Self {
        DEFAULT_SCHEDULE
            .parse()
            .expect("the default schedule parses")
    }
}

/// What to do after a failed try.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NextTry {
    /// Try again after this long.
    After(Duration),
    /// Every try is used up.
    Exhausted,
}

impl RetrySchedule {
    /// How many tries a delivery gets.
    pub fn tries(&self) -> usize {
        self.0.len()
    }

    /// After failed try number `tried` (1-based), when to try again. The scheduled delay gets
    /// up to ±20% jitter (`jitter` in `[0, 1)`), so endpoints that failed together are not
    /// retried together; a `Retry-After` longer than that is honoured, capped at 24 hours.
    pub fn after_failure(&self, tried: u32, retry_after: Option<Duration>, jitter: f64) -> NextTry {
        let Some(&delay) = self.0.get(tried as usize) else {
            return NextTry::Exhausted;
        };
        let jittered = delay.mul_f64(0.8 + 0.4 * jitter.clamp(0.0, 1.0));
        let asked = retry_after
            .map(|d| d.min(MAX_RETRY_AFTER))
            .unwrap_or_default();
        NextTry::After(jittered.max(asked))
    }
}

/// Reads a `Retry-After` value: delay-seconds or an HTTP date.
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = DateTime::parse_from_rfc2822(value)
        .ok()?
        .with_timezone(&Utc);
    Some((at - now).to_std().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_schedule_has_eight_tries_growing() {
        let schedule = RetrySchedule::default();
        assert_eq!(schedule.tries(), 8);
        assert_eq!(
            schedule.after_failure(1, None, 0.5),
            NextTry::After(Duration::from_secs(5))
        );
        assert_eq!(
            schedule.after_failure(2, None, 0.5),
            NextTry::After(Duration::from_secs(300))
        );
        assert_eq!(
            schedule.after_failure(7, None, 0.5),
            NextTry::After(Duration::from_secs(36_000))
        );
        assert_eq!(schedule.after_failure(8, None, 0.5), NextTry::Exhausted);
    }

    #[test]
    fn jitter_stays_within_twenty_percent() {
        let schedule: RetrySchedule = "0s,10s".parse().unwrap();
        assert_eq!(
            schedule.after_failure(1, None, 0.0),
            NextTry::After(Duration::from_secs(8))
        );
        let NextTry::After(high) = schedule.after_failure(1, None, 0.999) else {
            panic!("a second try is scheduled");
        };
        assert!(high > Duration::from_millis(11_900) && high < Duration::from_secs(12));
    }

    #[test]
    fn retry_after_wins_when_longer_and_is_capped() {
        let schedule: RetrySchedule = "0s,1s,1s".parse().unwrap();
        let next = schedule.after_failure(1, Some(Duration::from_secs(30)), 0.5);
        assert_eq!(next, NextTry::After(Duration::from_secs(30)));
        let next = schedule.after_failure(1, Some(Duration::from_millis(10)), 0.5);
        assert_eq!(next, NextTry::After(Duration::from_secs(1)));
        let next = schedule.after_failure(1, Some(Duration::from_secs(10 * 86_400)), 0.5);
        assert_eq!(next, NextTry::After(MAX_RETRY_AFTER));
    }

    #[test]
    fn schedules_parse_units_and_refuse_nonsense() {
        let schedule: RetrySchedule = "0, 250ms ,2m,1h".parse().unwrap();
        assert_eq!(schedule.tries(), 4);
        assert!("".parse::<RetrySchedule>().is_err());
        assert!("5".parse::<RetrySchedule>().is_err());
        assert!("5d".parse::<RetrySchedule>().is_err());
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = DateTime::parse_from_rfc2822("Wed, 21 Oct 2026 07:28:00 GMT")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2026 07:29:00 GMT", now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2026 07:27:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
