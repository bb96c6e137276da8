//! The yardstick: pgbench running the confirm transaction's own statements, on a scratch
//! database of its own, at the API's pool size.

use anyhow::{Context, ensure};

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
            db::bench::pending_contracts(&mut conn, owner.0, confirms as i64).await?;
            db::bench::checkpoint(&mut conn).await?;
        }
        drop(pool);
        let dir = tempfile::tempdir()?;
        let script = dir.path().join("confirm.sql");
        std::fs::write(&script, db::bench::confirm_pgbench())?;
        let per_client = confirms / clients as usize;
        let out = tokio::process::Command::new("pgbench")
            .args(["-n", "-M", "prepared", "-j", "2"])
            .arg(format!("-c{clients}"))
            .arg(format!("-t{per_client}"))
            .arg(format!("-Downer={}", owner.0))
            .arg("-f")
            .arg(&script)
            .arg(&scratch.url)
            .output()
            .await
            .context("running pgbench")?;
        let text = String::from_utf8_lossy(&out.stdout);
        let whole = format!("actually processed: {0}/{0}", per_client * clients as usize);
        ensure!(
            text.contains(&whole),
            "pgbench: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        );
        text.lines()
            .find_map(|l| l.strip_prefix("tps = "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
            .with_context(|| format!("no tps in pgbench's output: {text}"))
    };
    let result = run.await;
    scratch.drop_now().await;
    result.map_err(|e: anyhow::Error| format!("{e:#}"))
}
