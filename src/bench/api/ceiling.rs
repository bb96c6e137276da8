//! The yardstick: pgbench running the confirm transaction's own statements, on a scratch
//! database of its own, at the API's pool size.

use crate::bench::Scratch;
use crate::db;

/// confirms/s of pgbench running the confirm's statements at `clients`, or why not.
pub(super) async fn ceiling(server: &str, confirms: usize, clients: u32) -> Result<f64, String> {
    let scratch = Scratch::create(server, "api_ceiling")
        .await
        .map_err(|e| format!("{e:#}"))?;
    let run = async {
        let pool = db::connect(&scratch.url, 1).await?;
        let (owner, _) = crate::app::users::create_user(&pool, "bench").await?;
        {
            let mut conn = pool.get().await?;
            db::bench::pending_contracts(&mut conn, owner, confirms as i64).await?;
            db::bench::checkpoint(&mut conn).await?;
        }
        drop(pool);
        let per_client = (confirms / clients as usize) as u64;
        let owner = [("owner", owner.0.to_string())];
        let script = db::bench::confirm_pgbench();
        crate::bench::pgbench::tps(&scratch.url, &script, clients, per_client, &owner).await
    };
    let result = run.await;
    scratch.drop_now().await;
    result.map_err(|e: anyhow::Error| format!("{e:#}"))
}
