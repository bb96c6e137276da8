//! What must hold once the faults stop and the healed deployment has had its time: nothing
//! confirmed is lost, nothing is announced twice, nothing is left half done.

use std::collections::HashMap;

use crate::db::DbPool;
use crate::domain::ids::UploadId;

/// One check and how it came out.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    /// What is checked.
    pub name: &'static str,
    /// Whether it held.
    pub ok: bool,
    /// The figures behind it.
    pub detail: String,
}

/// The checks that the database and the receiver answer; `confirmed` are the uploads the
/// API confirmed to a client, `received` the event ids the receiver verified (with how often
/// each arrived), `bad` the deliveries that did not verify.
pub async fn settled(
    pool: &DbPool,
    confirmed: &[UploadId],
    received: &HashMap<String, u32>,
    bad: u32,
) -> anyhow::Result<Vec<Check>> {
    let mut conn = pool.get().await?;
    let counts = crate::db::bench::soak_counts(&mut conn, confirmed).await?;
    let events = crate::db::bench::outbox_event_ids(&mut conn).await?;
    let missing = events
        .iter()
        .filter(|id| !received.contains_key(*id))
        .count();
    let strangers = received.len() + missing - events.len();
    let repeated: u32 = received.values().map(|n| n - 1).sum();
    let n = confirmed.len() as i64;
    Ok(vec![
        Check {
            name: "every confirmed upload READY",
            ok: counts.confirmed_ready == n,
            detail: format!("{}/{n}", counts.confirmed_ready),
        },
        Check {
            name: "exactly one video.ready per video",
            ok: counts.ready_once == counts.videos && counts.ready_twice == 0,
            detail: format!(
                "{} videos: {} with one, {} with more",
                counts.videos, counts.ready_once, counts.ready_twice
            ),
        },
        Check {
            name: "every event delivered and verified",
            ok: missing == 0 && strangers == 0 && bad == 0 && counts.deliveries_open == 0,
            detail: format!(
                "{} events; {missing} never arrived, {strangers} unknown ids, {bad} bad signatures, {repeated} repeated ids (retries), {} deliveries open",
                events.len(),
                counts.deliveries_open
            ),
        },
        Check {
            name: "no job left PROCESSING or queued",
            ok: counts.jobs_open == 0,
            detail: format!(
                "{} not COMPLETED, {} PROCESSING",
                counts.jobs_open, counts.jobs_processing
            ),
        },
        Check {
            name: "no ledger row pending",
            ok: counts.ledger_pending == 0,
            detail: counts.ledger_pending.to_string(),
        },
        Check {
            name: "nothing owed to the bucket",
            ok: counts.doomed_owed == 0,
            detail: format!("{} objects or prefixes", counts.doomed_owed),
        },
    ])
}

/// ERROR lines a soak may log on a healthy deployment: the faults it injects make them, and
/// each says so. Any other ERROR line fails the run. (Matched as a substring of the line.)
pub const EXPECTED_ERRORS: &[(&str, &str)] = &[];

/// The check that every role's ERROR lines are on [`EXPECTED_ERRORS`].
pub fn no_unexpected_errors(errors: &[(String, Vec<String>)]) -> Check {
    let unexpected: Vec<String> = errors
        .iter()
        .flat_map(|(role, lines)| {
            lines
                .iter()
                .filter(|line| !EXPECTED_ERRORS.iter().any(|(text, _)| line.contains(text)))
                .map(move |line| format!("{role}: {line}"))
        })
        .collect();
    Check {
        name: "no ERROR line outside the expected ones",
        ok: unexpected.is_empty(),
        detail: match unexpected.first() {
            None => "0".to_owned(),
            Some(first) => format!("{} (first: {first})", unexpected.len()),
        },
    }
}
