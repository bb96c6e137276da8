//! A video's public status, as clients and events see it.

use std::str::FromStr;

use serde::Serialize;

use super::upload::UnknownState;

/// Where a video is: waiting for a worker, being encoded, playable, or failed for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VideoStatus {
    /// Its encoding job waits for a worker.
    Queued,
    /// A worker holds its job.
    Processing,
    /// Outputs are in S3 and playable.
    Ready,
    /// No attempt can succeed, or every attempt failed.
    Failed,
}

impl VideoStatus {
    /// The database and API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Processing => "processing",
            Self::Ready => "ready",
            Self::Failed => "failed",
        }
    }
}

impl FromStr for VideoStatus {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "queued" => Self::Queued,
            "processing" => Self::Processing,
            "ready" => Self::Ready,
            "failed" => Self::Failed,
            other => return Err(UnknownState(other.to_owned())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip() {
        for s in [
            VideoStatus::Queued,
            VideoStatus::Processing,
            VideoStatus::Ready,
            VideoStatus::Failed,
        ] {
            assert_eq!(s.as_str().parse::<VideoStatus>().unwrap(), s);
        }
        assert!("READY".parse::<VideoStatus>().is_err());
    }
}
