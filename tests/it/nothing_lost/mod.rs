//! Nothing lost, nobody locked out: per-user caps under concurrency, live files through
//! database restarts, the login throttle across nodes behind a load balancer, broadcasts
//! without video refused at once, one bucket namespace per deployment, and deletions that
//! finish once S3 is back. Every test runs vidq as real processes.

mod caps;
mod deletes;
mod live_outage;
mod login;
mod namespaces;
mod no_video;
