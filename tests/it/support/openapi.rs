//! The OpenAPI document an app serves.

use serde_json::Value;

use crate::support::app::TestApp;

/// The document `app` serves.
pub async fn document(app: &TestApp) -> Value {
    app.http
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}
