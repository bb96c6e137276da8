//! A webhook receiver for vidq events that acts on each event exactly once.
//!
//! vidq delivers at least once: a try whose answer was lost, a relay that died mid-send, or a
//! resend delivers the same event again, always with the same `webhook-id`. This receiver
//! (1) verifies the Standard Webhooks signature with the `standardwebhooks` crate, rejecting
//! anything unsigned, forged or older than five minutes, and (2) records the event id and
//! performs its effect in ONE database transaction, so a repeat finds the id already there and
//! changes nothing. Answering 2xx only after that commit is what makes the pair exactly once.
//!
//! ```sh
//! cargo run --example webhook_receiver -- \
//!     --secret whsec_... --listen 127.0.0.1:4000 --database-url postgres://localhost/receiver
//! ```
//!
//! The "effect" here is a row in `ready_videos`; in your backend it is whatever `video.ready`
//! means to you (publish the post, notify the uploader).

use std::net::SocketAddr;

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use clap::Parser;
use diesel::sql_types::{Text, Uuid as SqlUuid};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use tokio::sync::Mutex;

#[derive(Parser)]
struct Args {
    /// The endpoint's signing secret (`whsec_...`), as `POST /v1/webhooks` returned it.
    #[arg(long, env = "WEBHOOK_SECRET")]
    secret: String,
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:4000")]
    listen: SocketAddr,
    /// The receiver's own database (created if missing, with its tables processed_events
    /// and ready_videos), never vidq's.
    #[arg(
        long,
        env = "RECEIVER_DATABASE_URL",
        default_value = "postgres://localhost/postgres"
    )]
    database_url: String,
}

struct Receiver {
    verifier: standardwebhooks::Webhook,
    db: Mutex<AsyncPgConnection>,
}

async fn receive(
    receiver: web::Data<Receiver>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    // 1. Authenticity: the signature covers id, timestamp and the exact body bytes.
    let mut headers = http::HeaderMap::new();
    for (name, value) in request.headers() {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name.as_str().as_bytes()),
            http::HeaderValue::from_bytes(value.as_bytes()),
        ) {
            headers.append(name, value);
        }
    }
    if let Err(err) = receiver.verifier.verify(&body, &headers) {
        eprintln!("rejected a delivery: {err:?}");
        return HttpResponse::Unauthorized().finish();
    }
    let Ok(event) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return HttpResponse::BadRequest().finish();
    };
    let (Some(id), Some(kind)) = (
        event["id"]
            .as_str()
            .and_then(|id| id.parse::<uuid::Uuid>().ok()),
        event["type"].as_str(),
    ) else {
        return HttpResponse::BadRequest().finish();
    };

    // 2. Exactly once: the id and the effect commit together, or neither does.
    let mut conn = receiver.db.lock().await;
    let outcome = conn
        .transaction::<_, diesel::result::Error, _>(async |conn| {
            let first_time = diesel::sql_query(
                "INSERT INTO processed_events (event_id) VALUES ($1) ON CONFLICT DO NOTHING",
            )
            .bind::<SqlUuid, _>(id)
            .execute(conn)
            .await?
                == 1;
            if first_time && kind == "video.ready" {
                diesel::sql_query("INSERT INTO ready_videos (video_id, hls_key) VALUES ($1, $2)")
                    .bind::<Text, _>(event["video_id"].as_str().unwrap_or_default())
                    .bind::<Text, _>(
                        event["data"]["playback"]["hls_key"]
                            .as_str()
                            .unwrap_or_default(),
                    )
                    .execute(conn)
                    .await?;
            }
            Ok(first_time)
        })
        .await;
    match outcome {
        Ok(true) => {
            println!("{kind} {} (event {id})", event["video_id"]);
            HttpResponse::NoContent().finish()
        }
        // Seen before: acknowledge so vidq stops resending, and do nothing.
        Ok(false) => {
            println!("duplicate of event {id} dropped");
            HttpResponse::NoContent().finish()
        }
        // Not recorded: a non-2xx answer makes vidq try again later, with the same id.
        Err(err) => {
            eprintln!("could not record event {id}: {err}");
            HttpResponse::ServiceUnavailable().finish()
        }
    }
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let verifier = standardwebhooks::Webhook::new(&args.secret)
        .map_err(|err| anyhow::anyhow!("--secret is not a whsec_ secret: {err:?}"))?;
    // Its own database, apart from vidq's: created on the same server if missing.
    if vidq::db::provision::create_database_if_missing(&args.database_url).await? {
        eprintln!("created the receiver's database");
    }
    let mut conn = AsyncPgConnection::establish(&args.database_url).await?;
    diesel::sql_query(
        "CREATE TABLE IF NOT EXISTS processed_events (
             event_id uuid PRIMARY KEY, processed_at timestamptz NOT NULL DEFAULT now())",
    )
    .execute(&mut conn)
    .await?;
    diesel::sql_query(
        "CREATE TABLE IF NOT EXISTS ready_videos (video_id text NOT NULL, hls_key text NOT NULL)",
    )
    .execute(&mut conn)
    .await?;
    let receiver = web::Data::new(Receiver {
        verifier,
        db: Mutex::new(conn),
    });
    println!("listening on http://{}/", args.listen);
    HttpServer::new(move || {
        App::new()
            .app_data(receiver.clone())
            .default_service(web::post().to(receive))
    })
    .bind(args.listen)?
    .run()
    .await?;
    Ok(())
}
