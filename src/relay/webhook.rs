//! One webhook try: sign the envelope (Standard Webhooks), POST it with a timeout, and say
//! what the receiver's answer means for the delivery.

use std::time::Duration;

use chrono::Utc;
use reqwest::StatusCode;

use super::sink::{SendFuture, Sink, TryOutcome};
use crate::adapters::destination::GuardedResolver;
use crate::db::deliveries::ClaimedDelivery;
use crate::domain::destination;
use crate::domain::retry::parse_retry_after;
use crate::domain::signature::{WebhookSecret, signature_header};

/// Most of a response body the relay reads (then it stops; the body is never stored).
const MAX_RESPONSE_BODY: usize = 64 * 1024;

/// Signs and POSTs webhook deliveries.
#[derive(Clone, Debug)]
pub struct WebhookSender {
    client: reqwest::Client,
    allow_private: bool,
    timeout: Duration,
}

/// The pieces of one delivery the sender needs.
#[derive(Debug)]
pub struct WebhookTry<'a> {
    /// The destination.
    pub url: &'a str,
    /// `webhook-id`: the event id.
    pub event_id: &'a str,
    /// The envelope, sent byte for byte as signed.
    pub body: &'a str,
    /// The current secret and, during a rotation, the previous one.
    pub secrets: Vec<&'a str>,
}

impl WebhookSender {
    /// A client that resolves through the destination policy, never follows redirects and
    /// gives each try `timeout` in all.
    pub fn new(timeout: Duration, allow_private: bool) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .dns_resolver(std::sync::Arc::new(GuardedResolver { allow_private }))
            .redirect(reqwest::redirect::Policy::none())
            // A proxy would resolve the destination itself, past the guarded resolver.
            .no_proxy()
            .user_agent(concat!("vidq-relay/", env!("CARGO_PKG_VERSION")))
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self {
            client,
            allow_private,
            timeout,
        })
    }

    /// One try.
    pub async fn post(&self, delivery: &WebhookTry<'_>) -> TryOutcome {
        let failed = TryOutcome::failed;
        let url = match destination::parse_url(delivery.url) {
            Ok(url) => url,
            Err(err) => return failed(err.to_string()),
        };
        // Names are checked by the resolver at connect time; literal addresses never reach it.
        if let Err(err) = destination::check_literal(&url, self.allow_private) {
            return failed(err.to_string());
        }
        let secrets: Vec<WebhookSecret> = match delivery
            .secrets
            .iter()
            .map(|s| WebhookSecret::parse(s))
            .collect()
        {
            Ok(secrets) => secrets,
            Err(err) => return failed(err.to_string()),
        };
        let timestamp = Utc::now().timestamp();
        let signature = signature_header(
            &secrets.iter().collect::<Vec<_>>(),
            delivery.event_id,
            timestamp,
            delivery.body.as_bytes(),
        );
        let sent = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", delivery.event_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(delivery.body.to_owned())
            .send()
            .await;
        let mut response = match sent {
            Ok(response) => response,
            Err(err) => return failed(describe(&err, self.timeout)),
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, Utc::now()));
        // Read (a bounded part of) the body so the connection can be reused.
        let mut read = 0;
        while let Ok(Some(chunk)) = response.chunk().await {
            read += chunk.len();
            if read >= MAX_RESPONSE_BODY {
                break;
            }
        }
        classify(status, retry_after)
    }
}

impl Sink for WebhookSender {
    fn send<'a>(&'a self, delivery: &'a ClaimedDelivery) -> SendFuture<'a> {
        Box::pin(async move {
            let Some(endpoint) = &delivery.endpoint else {
                // Routing gives every webhook delivery an endpoint, and deleting the endpoint
                // deletes its deliveries; nothing here can be sent.
                return TryOutcome::Discard {
                    reason: "not sent: the delivery has no webhook endpoint".into(),
                };
            };
            // Disabled (410) while this delivery waited or was in flight elsewhere.
            if endpoint.disabled {
                return TryOutcome::Discard {
                    reason: "not sent: the endpoint was disabled".into(),
                };
            }
            let secrets: Vec<&str> = std::iter::once(endpoint.secret.as_str())
                .chain(endpoint.previous_secret.as_deref())
                .collect();
            self.post(&WebhookTry {
                url: &endpoint.url,
                event_id: &delivery.event_id.to_string(),
                body: &delivery.body,
                secrets,
            })
            .await
        })
    }
}

fn classify(status: StatusCode, retry_after: Option<Duration>) -> TryOutcome {
    if status.is_success() {
        TryOutcome::Delivered {
            status: status.as_u16(),
        }
    } else if status == StatusCode::GONE {
        TryOutcome::Gone
    } else {
        TryOutcome::Failed {
            status: Some(status.as_u16()),
            error: format!("the receiver answered {status}"),
            retry_after,
        }
    }
}

fn describe(err: &reqwest::Error, timeout: Duration) -> String {
    if err.is_timeout() {
        return format!("no answer within {} ms", timeout.as_millis());
    }
    // The resolver's refusal is the useful part of a connect error; say it plainly.
    let mut source: Option<&dyn std::error::Error> = Some(err);
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<destination::DestinationError>() {
            return refused.to_string();
        }
        source = cause.source();
    }
    if err.is_connect() {
        format!("cannot connect: {}", crate::telemetry::error_chain(err))
    } else {
        format!("request failed: {}", crate::telemetry::error_chain(err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_map_to_outcomes() {
        assert_eq!(
            classify(StatusCode::NO_CONTENT, None),
            TryOutcome::Delivered { status: 204 }
        );
        assert_eq!(classify(StatusCode::GONE, None), TryOutcome::Gone);
        let wait = Some(Duration::from_secs(3));
        assert_eq!(
            classify(StatusCode::TOO_MANY_REQUESTS, wait),
            TryOutcome::Failed {
                status: Some(429),
                error: "the receiver answered 429 Too Many Requests".into(),
                retry_after: wait,
            }
        );
        // A redirect is not followed, so it is not a delivery.
        assert!(matches!(
            classify(StatusCode::FOUND, None),
            TryOutcome::Failed {
                status: Some(302),
                ..
            }
        ));
    }
}
