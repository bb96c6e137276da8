//! A dedicated connection that LISTENs on one channel and calls back on every notification:
//! "an event committed", for relays and long-polling feed readers. Workers listen through
//! the idle line ([`super::line`]), which shares this module's reconnect loop and
//! notification pump. NOTIFY is only a wake-up: the poll tick stays as the safety net, and
//! the connection is re-established if it drops.

use std::time::Duration;

use diesel_async::AsyncPgConnection;
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

/// Why a listening connection had to be given up.
pub(super) type ListenError = Box<dyn std::error::Error + Send + Sync>;

/// Starts listening on `channel`; resolves once the first LISTEN is in place, so a NOTIFY
/// sent after this returns is never missed. Each notification (and each reconnect, which may
/// have missed some) calls `wake`.
pub async fn spawn(
    url: String,
    channel: &'static str,
    wake: impl Fn() + Send + Sync + 'static,
    stop: CancellationToken,
) {
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        let mut retry = Reconnect::new("LISTEN connection");
        while !stop.is_cancelled() {
            let listening = listen(&url, channel).await;
            // The caller goes on either way; without a connection it relies on polling.
            if let Some(ready) = ready.take() {
                let _ = ready.send(());
            }
            let pumped = match listening {
                Ok(mut conn) => {
                    retry.connected();
                    // A connection lost while we were away may have dropped notifications.
                    wake();
                    pump(&mut conn, &wake, &stop, std::future::pending()).await
                }
                Err(error) => Err(error),
            };
            match pumped {
                Ok(_) => return,
                Err(error) if !retry.after(&error, &stop).await => return,
                Err(_) => {}
            }
        }
    });
    let _ = ready_rx.await;
}

/// The back-off between a listening connection's failure and the next try: 100 ms doubling
/// to 5 s, back to 100 ms once a connection works.
pub(super) struct Reconnect {
    what: &'static str,
    backoff: Duration,
    /// A failure was logged and no connection has worked since.
    down: bool,
}

impl Reconnect {
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(5);

    /// `what` names the connection in the log.
    pub(super) fn new(what: &'static str) -> Self {
        Self {
            what,
            backoff: Self::FIRST,
            down: false,
        }
    }

    /// The connection works: the next failure waits the shortest back-off again. After a
    /// failure this says so, the counterpart of the failure's WARN.
    pub(super) fn connected(&mut self) {
        self.backoff = Self::FIRST;
        if std::mem::take(&mut self.down) {
            tracing::info!("{} re-established; looking for what was missed", self.what);
        }
    }

    /// Logs why the connection was given up and waits the back-off; `false` if `stop` came
    /// first.
    pub(super) async fn after(&mut self, error: &ListenError, stop: &CancellationToken) -> bool {
        let error = crate::telemetry::error_chain(error.as_ref());
        tracing::warn!(%error, "{} failed; relying on polling until it is back", self.what);
        self.down = true;
        let waited = tokio::select! {
            () = stop.cancelled() => false,
            () = tokio::time::sleep(self.backoff) => true,
        };
        self.backoff = (self.backoff * 2).min(Self::MAX);
        waited
    }
}

/// Calls `wake` for every notification `conn` receives, until `until` resolves (`Ok(true)`)
/// or `stop` is cancelled (`Ok(false)`).
pub(super) async fn pump(
    conn: &mut AsyncPgConnection,
    wake: &impl Fn(),
    stop: &CancellationToken,
    until: impl Future<Output = ()>,
) -> Result<bool, ListenError> {
    let mut notes = std::pin::pin!(conn.notifications_stream());
    let mut until = std::pin::pin!(until);
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(false),
            () = &mut until => return Ok(true),
            note = notes.next() => match note {
                Some(Ok(_)) => wake(),
                Some(Err(error)) => return Err(error.into()),
                None => return Err("the LISTEN connection closed".into()),
            },
        }
    }
}

async fn listen(url: &str, channel: &str) -> Result<AsyncPgConnection, ListenError> {
    let mut conn = crate::db::pool::dedicated(url).await?;
    crate::db::session::listen(&mut conn, channel).await?;
    Ok(conn)
}
