//! A video's public status, as clients and events see it.

spelled_states! {
    /// Where a video is: waiting for a worker, being encoded, playable, or failed for good.
    /// The API and events spell it as the database does; the database stores all but
    /// `processing`, which the API reports for a queued video whose job a worker holds.
    pub enum VideoStatus {
        /// Its encoding job waits for a worker.
        Queued = "queued",
        /// A worker holds its job (reported, never stored: the row stays `queued`).
        Processing = "processing",
        /// Outputs are in S3 and playable.
        Ready = "ready",
        /// No attempt can succeed, or every attempt failed.
        Failed = "failed",
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
