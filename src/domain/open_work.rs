//! The kinds of unfinished work a user's cap counts: uploads not yet turned into videos (or
//! refused, or expired) and live recordings not yet ended.

/// What kind of open work hit its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpenWork {
    /// Uploads `receiving`, `pending` or `uploaded`.
    Uploads,
    /// Recordings `waiting`, `live` or `ending`.
    Recordings,
}

impl OpenWork {
    /// The setting that holds the cap.
    pub fn setting(self) -> &'static str {
        match self {
            Self::Uploads => "VIDQ_MAX_OPEN_UPLOADS_PER_USER",
            Self::Recordings => "VIDQ_MAX_OPEN_RECORDINGS_PER_USER",
        }
    }

    /// What is open, in words.
    pub fn noun(self) -> &'static str {
        match self {
            Self::Uploads => "unfinished uploads",
            Self::Recordings => "open live recordings",
        }
    }
}
