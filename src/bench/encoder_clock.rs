//! The encoder's own clock for `vidq bench live`: FFmpeg run with `-progress pipe:1` reports,
//! every `-stats_period`, how far into the media its output has got (`out_time_us`). Each
//! report is stamped with the wall time it is read. A segment ending at media time `end` was
//! finished by the encoder no earlier than the last report still short of `end`: latency
//! counted from that report is never less than the true one, and at most one report period
//! more.

use chrono::{DateTime, Utc};
use tokio::io::{AsyncBufReadExt, BufReader};

/// How often the encoder reports, in seconds (FFmpeg's `-stats_period`).
pub const REPORT_SECS: f64 = 0.05;

/// The arguments that make FFmpeg report its progress on its stdout, which must be piped.
pub fn ffmpeg_args() -> [String; 4] {
    [
        "-progress".into(),
        "pipe:1".into(),
        "-stats_period".into(),
        REPORT_SECS.to_string(),
    ]
}

/// The reports of one encoder: when each was read, and its output's media time in seconds.
#[derive(Debug, Default)]
pub struct EncoderClock {
    reports: Vec<(DateTime<Utc>, f64)>,
}

impl EncoderClock {
    /// Reads `stdout` (FFmpeg's `-progress pipe:1`) to its end.
    pub async fn read(stdout: tokio::process::ChildStdout) -> Self {
        let mut lines = BufReader::new(stdout).lines();
        let mut clock = Self::default();
        while let Ok(Some(line)) = lines.next_line().await {
            clock.take_line(&line, Utc::now());
        }
        clock
    }

    fn take_line(&mut self, line: &str, at: DateTime<Utc>) {
        // `N/A` until the first packet is out.
        if let Some(us) = line.strip_prefix("out_time_us=")
            && let Ok(us) = us.trim().parse::<i64>()
        {
            self.reports.push((at, us as f64 / 1e6));
        }
    }

    /// The last report whose media time was still short of `end` (seconds): the encoder had
    /// not finished a segment ending there before this moment. `None` before any report.
    pub fn short_of(&self, end: f64) -> Option<DateTime<Utc>> {
        self.reports
            .iter()
            .take_while(|(_, media)| *media < end)
            .last()
            .map(|(at, _)| *at)
    }
}

/// The media time each of a playlist's segments ends at: the running sum of its `#EXTINF`
/// durations, in listed order.
pub fn segment_ends(playlist: &str) -> Vec<f64> {
    let mut end = 0.0;
    playlist
        .lines()
        .filter_map(|line| line.strip_prefix("#EXTINF:"))
        .map(|rest| {
            end += rest
                .split(',')
                .next()
                .and_then(|d| d.trim().parse::<f64>().ok())
                .unwrap_or(0.0);
            end
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_is_timed_from_the_last_report_short_of_its_end() {
        let t0 = Utc::now();
        let at = |ms: i64| t0 + chrono::Duration::milliseconds(ms);
        let mut clock = EncoderClock::default();
        for (ms, line) in [
            (0, "out_time_us=N/A"),
            (50, "out_time_us=1950000"),
            (100, "progress=continue"),
            (150, "out_time_us=3990000"),
            (200, "out_time_us=4010000"),
        ] {
            clock.take_line(line, at(ms));
        }
        assert_eq!(clock.short_of(4.0), Some(at(150)));
        assert_eq!(clock.short_of(1.0), None);
        assert_eq!(clock.short_of(9.0), Some(at(200)));
    }

    #[test]
    fn segment_ends_add_up_the_durations() {
        let playlist =
            "#EXTM3U\n#EXTINF:4.000000,\na.m4s\n#EXTINF:3.5,\nb.m4s\n#EXTINF:2,\nc.m4s\n";
        assert_eq!(segment_ends(playlist), vec![4.0, 7.5, 9.5]);
    }
}
