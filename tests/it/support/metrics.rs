//! Prometheus text: one scrape of an app's `/metrics`, one sample read from it.

use crate::support::app::TestApp;

/// The value of the first sample line starting with `series ` in `text`.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// One scrape of the API's `/metrics`, checked to be Prometheus text.
pub async fn scrape(app: &TestApp) -> String {
    let response = reqwest::get(app.url("/metrics")).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    response.text().await.unwrap()
}
