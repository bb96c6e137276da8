//! Settings of the `worker` role: how it claims and paces jobs, and how FFmpeg runs.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use super::shared::{DatabaseUrl, StorageConfig, loopback_addr};

/// How the media pipeline runs FFmpeg and what it accepts.
#[derive(Debug, Clone, Args)]
pub struct MediaArgs {
    /// The ffmpeg binary.
    #[arg(
        long = "ffmpeg",
        env = "VIDQ_FFMPEG",
        value_name = "PATH",
        default_value = "ffmpeg"
    )]
    pub ffmpeg: std::path::PathBuf,
    /// The ffprobe binary.
    #[arg(
        long = "ffprobe",
        env = "VIDQ_FFPROBE",
        value_name = "PATH",
        default_value = "ffprobe"
    )]
    pub ffprobe: std::path::PathBuf,
    /// Wall-clock limit of each FFmpeg call (probe, encode, thumbnail), in seconds.
    #[arg(long = "ffmpeg-timeout-secs", env = "VIDQ_FFMPEG_TIMEOUT_SECS", value_name = "SECS", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub ffmpeg_timeout_secs: u64,
    /// Longest accepted video, in seconds (default 4 h; a long video is split into chunks that
    /// every idle worker encodes, so no single FFmpeg call runs for its whole length).
    #[arg(long = "max-duration-secs", env = "VIDQ_MAX_DURATION_SECS", value_name = "SECS", default_value_t = 14_400,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub max_duration_secs: u64,
    /// Widest accepted frame (the long side, for portrait videos too).
    #[arg(long = "max-width", env = "VIDQ_MAX_WIDTH", value_name = "PX", default_value_t = 3840,
          value_parser = clap::value_parser!(i32).range(16..=16_384))]
    pub max_width: i32,
    /// Tallest accepted frame (the short side, for portrait videos too).
    #[arg(long = "max-height", env = "VIDQ_MAX_HEIGHT", value_name = "PX", default_value_t = 2160,
          value_parser = clap::value_parser!(i32).range(16..=16_384))]
    pub max_height: i32,
    /// Highest accepted source frame rate (a faster source fails as `too_high_frame_rate`).
    #[arg(
        long = "max-source-fps",
        env = "VIDQ_MAX_SOURCE_FPS",
        value_name = "FPS",
        default_value_t = 120.0
    )]
    pub max_source_fps: f64,
    /// Highest output frame rate: a source whose densest stretch runs faster is encoded at
    /// this rate (both the whole and the split encode read the rate from the packets).
    #[arg(long = "max-fps", env = "VIDQ_MAX_FPS", value_name = "FPS", default_value_t = 60,
          value_parser = clap::value_parser!(u32).range(1..=240))]
    pub max_fps: u32,
    /// Short sides of the HLS renditions, comma-separated (e.g. `1080,720,480`; default one
    /// rendition at 720p). The MP4 is made at the largest; rungs above the source are skipped.
    #[arg(long = "ladder", env = "VIDQ_LADDER", value_name = "HEIGHTS", value_delimiter = ',', default_value = "720",
          value_parser = clap::value_parser!(i32).range(16..=4320))]
    pub ladder: Vec<i32>,
    /// HLS segment length, in seconds.
    #[arg(long = "segment-secs", env = "VIDQ_SEGMENT_SECS", value_name = "SECS", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=60))]
    pub segment_secs: u32,
    /// Sources longer than this are split into chunk jobs that any idle worker encodes, and
    /// stitched back together exactly; 0 never splits.
    #[arg(long = "chunk-min-source-secs", env = "VIDQ_CHUNK_MIN_SOURCE_SECS", value_name = "SECS",
          default_value_t = 120, value_parser = clap::value_parser!(u32).range(0..=86_400))]
    pub chunk_min_source_secs: u32,
    /// Length of one chunk of a split video, in seconds: a multiple of VIDQ_SEGMENT_SECS.
    #[arg(long = "chunk-secs", env = "VIDQ_CHUNK_SECS", value_name = "SECS", default_value_t = 48,
          value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub chunk_secs: u32,
    /// The most disk the copies of originals a worker keeps for a split video's next parts may
    /// take, in MiB (the three most recently used, none unused for 30 min); 0 keeps none.
    #[arg(
        long = "originals-cache-mb",
        env = "VIDQ_ORIGINALS_CACHE_MB",
        value_name = "MIB",
        default_value_t = 4096
    )]
    pub originals_cache_mb: u64,
    /// Encoder threads per FFmpeg call (0 lets FFmpeg choose; 1 per core pinned).
    #[arg(
        long = "ffmpeg-threads",
        env = "VIDQ_FFMPEG_THREADS",
        value_name = "N",
        default_value_t = 0
    )]
    pub ffmpeg_threads: u32,
}

/// How a worker claims and paces jobs.
#[derive(Debug, Clone, Args)]
pub struct QueueArgs {
    /// Name written to each claim (`claimed_by`). Default: the host name.
    #[arg(long = "node-id", env = "VIDQ_NODE_ID", value_name = "NAME")]
    pub node_id: Option<String>,
    /// Jobs this process encodes at once (one FFmpeg per small node is the usual shape).
    /// With more than one, free slots are claimed in one statement, and results that
    /// finish at the same moment are committed READY in one transaction.
    #[arg(long, env = "VIDQ_SLOTS", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub slots: u32,
    /// Safety-net poll interval in milliseconds (NOTIFY wakes the worker sooner).
    #[arg(long = "poll-ms", env = "VIDQ_POLL_MS", value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub poll_ms: u64,
    /// Lease of a claim in seconds: a node that dies loses its job after this long.
    #[arg(long = "lease-secs", env = "VIDQ_LEASE_SECS", value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub lease_secs: u64,
    /// Lease renewal interval in seconds; 0 turns the heartbeat off (then set the lease to
    /// cover a whole attempt, e.g. 2100).
    #[arg(
        long = "heartbeat-secs",
        env = "VIDQ_HEARTBEAT_SECS",
        value_name = "SECS",
        default_value_t = 15
    )]
    pub heartbeat_secs: u64,
    /// Hard limit of one attempt in seconds (default 35 min = 3 FFmpeg calls x 10 min + 5 min S3).
    #[arg(long = "deadline-secs", env = "VIDQ_DEADLINE_SECS", value_name = "SECS", default_value_t = 2100,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub deadline_secs: u64,
    /// Attempts in a row whose media tools could not run (a missing library, a crash, a tool
    /// that cannot be executed: `tool_failed`) after which this worker stops claiming, hands
    /// such a claim back with its attempt restored and reports itself unhealthy, until its
    /// tools work again; 0 never stops.
    #[arg(
        long = "worker-tool-failures",
        env = "VIDQ_WORKER_TOOL_FAILURES",
        value_name = "N",
        default_value_t = 3
    )]
    pub tool_failures: u32,
    /// While its tools fail, how often the worker tries them again, in seconds.
    #[arg(long = "worker-tool-recheck-secs", env = "VIDQ_WORKER_TOOL_RECHECK_SECS", value_name = "SECS",
          default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub tool_recheck_secs: u64,
    /// Scratch space for originals and outputs (one directory per attempt, removed after).
    #[arg(long = "work-dir", env = "VIDQ_WORK_DIR", value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
}

/// Settings of the `worker` role.
#[derive(Debug, Clone, Args)]
#[allow(missing_docs)] // flattened groups are documented on their own types
pub struct WorkerConfig {
    #[command(flatten)]
    pub database: DatabaseUrl,
    #[command(flatten)]
    pub queue: QueueArgs,
    /// Serve `/healthz` and `/metrics` on this loopback address (e.g. 127.0.0.1:9091). Off
    /// by default; only loopback addresses are accepted.
    #[arg(long = "health-listen", env = "VIDQ_HEALTH_LISTEN", value_name = "ADDR",
          value_parser = loopback_addr)]
    pub health_listen: Option<SocketAddr>,
    #[command(flatten)]
    pub storage: StorageConfig,
    #[command(flatten)]
    pub media: MediaArgs,
}
