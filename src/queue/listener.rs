//! A dedicated connection that LISTENs on one channel and calls back on every notification:
//! "an event committed", for relays and long-polling feed readers (workers listen through
//! the idle line, [`super::line`]). NOTIFY is only a wake-up: the poll tick stays as the safety net, and the
//! connection is re-established if it drops.

use std::time::Duration;

use diesel_async::{AsyncPgConnection, RunQueryDsl};
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

/// Starts listening on `channel`; resolves once the first LISTEN is in place, so a NOTIFY
/// sent after this returns is never missed. Each notification (and each reconnect, which may
/// have missed some) calls `wake`.
pub async fn spawn(
    url: String,
    channel: &'static str,
    wake: impl Fn() + Send + 'static,
    stop: CancellationToken,
) {
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        let mut backoff = Duration::from_millis(100);
        while !stop.is_cancelled() {
            match listen(&url, channel).await {
                Ok(mut conn) => {
                    backoff = Duration::from_millis(100);
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                    // A connection lost while we were away may have dropped notifications.
                    wake();
                    let mut stream = Box::pin(conn.notifications_stream());
                    loop {
                        tokio::select! {
                            () = stop.cancelled() => return,
                            note = stream.next() => match note {
                                Some(Ok(_)) => wake(),
                                Some(Err(error)) => {
                                    tracing::warn!(%error, channel, "LISTEN connection failed; reconnecting");
                                    break;
                                }
                                None => break,
                            },
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, channel, "cannot LISTEN; relying on polling until it can");
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    });
    let _ = ready_rx.await;
}

async fn listen(
    url: &str,
    channel: &str,
) -> Result<AsyncPgConnection, Box<dyn std::error::Error + Send + Sync>> {
    let mut conn = crate::db::pool::dedicated(url).await?;
    diesel::sql_query(format!("LISTEN {channel}"))
        .execute(&mut conn)
        .await?;
    Ok(conn)
}
