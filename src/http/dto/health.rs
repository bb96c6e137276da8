//! Bodies of the probes: `/healthz` (the process answers) and `/readyz` (what it depends on
//! answers too).

use serde::Serialize;
use utoipa::ToSchema;

use crate::http::openapi::one_of;

/// `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct HealthDto {
    /// Always `ok`.
    #[schema(schema_with = ok_status)]
    pub status: &'static str,
}

/// `GET /readyz`: what answers and what does not.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReadinessDto {
    /// `ready` when the node takes requests (the database answers, and the bucket too when
    /// `VIDQ_READY_REQUIRES_STORAGE` is on), else `unavailable`.
    #[schema(schema_with = readiness)]
    pub status: &'static str,
    /// `ok` or `unavailable`.
    #[schema(schema_with = check_verdicts)]
    pub database: &'static str,
    /// `ok` or `unavailable`.
    #[schema(schema_with = check_verdicts)]
    pub storage: &'static str,
}

// Schemas of the fixed words the probes answer, from the same constants the handlers write.
fn ok_status() -> utoipa::openapi::Object {
    one_of([HEALTH_OK])
}

fn readiness() -> utoipa::openapi::Object {
    one_of([READY, UNAVAILABLE])
}

fn check_verdicts() -> utoipa::openapi::Object {
    one_of([HEALTH_OK, UNAVAILABLE])
}

/// What `/healthz` and a check of `/readyz` that answered say.
pub const HEALTH_OK: &str = "ok";
/// `status` of `/readyz` when every check answered.
pub const READY: &str = "ready";
/// What `/readyz` says of itself or of a check that did not answer.
pub const UNAVAILABLE: &str = "unavailable";
