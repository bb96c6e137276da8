//! What the API says about itself: its batch size histograms, read from `/metrics`, so the
//! table can say how many confirms (or reads) it took together.

/// The mean of one of the API's batch size histograms so far (`family`'s sum over its
/// count): confirms per transaction, status reads per statement.
pub(super) async fn mean_batch(base: &str, family: &str) -> Option<f64> {
    let (sum, count) = batch_totals(base, family).await?;
    (count > 0.0).then(|| sum / count)
}

/// The sum and count of one of the API's batch size histograms so far; `None` from a build
/// without it.
pub(super) async fn batch_totals(base: &str, family: &str) -> Option<(f64, f64)> {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let value = |name: &str| {
        text.lines().find_map(|line| {
            line.strip_prefix(name)?
                .strip_prefix(' ')?
                .parse::<f64>()
                .ok()
        })
    };
    Some((
        value(&format!("{family}_sum"))?,
        value(&format!("{family}_count"))?,
    ))
}
