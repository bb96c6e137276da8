//! Nobody can take a node's ingest from the others, tried with the black-box probe's own
//! shapes against real `vidq` processes: 1,024 idle connections from one address to the live
//! ingest port, and one user's 260 trickling upload bodies (plus 20 trickling segments into
//! one recording). Meanwhile a second user's uploads (a single PUT, tuspy) and a real encoder
//! (FFmpeg pushing HLS) go through as if nothing happened.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::deployment::{Deployment, broadcast};

/// A TCP connection to `to` from the loopback address `from` (127.0.0.0/8 is all loopback,
/// so each address is a client of its own).
async fn connect_from(from: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(format!("{from}:0").parse().unwrap())?;
    socket.connect(to).await
}

fn addr_of(url: &str) -> SocketAddr {
    let url: url::Url = url.parse().unwrap();
    format!("{}:{}", url.host_str().unwrap(), url.port().unwrap())
        .parse()
        .unwrap()
}

/// Whether the server has closed `stream` (end of stream or a reset) within `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(within, stream.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// A live recording of `key`'s: (id, ingest URL).
async fn recording(d: &Deployment, key: &str) -> (String, String) {
    let made = d.live_recording(key).await;
    (
        made["id"].as_str().unwrap().to_owned(),
        made["ingest_url"].as_str().unwrap().to_owned(),
    )
}

/// A broadcast from 127.0.0.1 becomes a READY video that plays `seconds`.
async fn an_encoder_streams_normally(d: &Deployment, key: &str, seconds: u32) {
    let (id, ingest) = recording(d, key).await;
    broadcast(&ingest, seconds).await;
    // FFmpeg exits once it has sent its last file, not once vidq has answered for it: the
    // recording's end is the condition, then what it holds.
    let status = d.recording_when_ready(key, &id).await;
    assert_eq!(
        status["segments"]["uploaded"],
        seconds / 2,
        "every segment was taken: {status}"
    );
}

/// A single PUT of a real clip by `key`, answered 2xx.
async fn a_single_put_goes_through(d: &Deployment, key: &str) {
    let bytes = std::fs::read(crate::support::clips::small()).unwrap();
    let contract: Value = d
        .post(
            key,
            "/v1/uploads",
            &json!({"filename": "b.mp4", "content_type": "video/mp4",
                    "size_bytes": bytes.len(), "via": "vidq"}),
        )
        .await
        .json()
        .await
        .unwrap();
    let put = d
        .http
        .put(contract["upload_url"].as_str().unwrap())
        .bearer_auth(key)
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{}", put.status());
}

#[tokio::test]
async fn a_thousand_idle_connections_from_one_address_leave_the_ingest_to_everyone_else() {
    let mut d = Deployment::prepare().await;
    let s3 = d.s3.endpoint();
    d.start(&s3).await;
    let key = d.user("broadcaster").await;
    let (_, ingest) = recording(&d, &key).await;
    let target = addr_of(&ingest);

    // The probe: 1,024 connections from one address, no key, nothing sent.
    let mut idle = Vec::new();
    for _ in 0..1024 {
        if let Ok(stream) = connect_from("127.0.0.2", target).await {
            idle.push(stream);
        }
    }
    let checks = idle
        .iter_mut()
        .map(|s| closed_within(s, Duration::from_secs(2)));
    let closed = futures_util::future::join_all(checks)
        .await
        .into_iter()
        .filter(|c| *c)
        .count();
    let cap = vidq::config::HttpLimits::default().max_connections_per_ip as usize;
    eprintln!("idle probe: {closed} of 1,024 closed by the listener at once");
    assert!(
        1024 - closed <= cap,
        "{} of 1,024 idle connections from one address stayed open (the cap is {cap})",
        1024 - closed
    );
    drop(idle);

    // The same address keeps 1,024 open (reopening what the server closes) while a real
    // encoder on another address streams and a second user uploads.
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicUsize::new(0));
    let flood = tokio::spawn({
        let (stop, opened) = (stop.clone(), opened.clone());
        async move {
            let mut held: Vec<TcpStream> = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                // The ones the server closed read as ended (or reset): open others.
                let mut buf = [0u8; 1];
                held.retain_mut(|s| {
                    matches!(s.try_read(&mut buf), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
                });
                while held.len() < 1024 {
                    match connect_from("127.0.0.2", target).await {
                        Ok(stream) => {
                            opened.fetch_add(1, Ordering::SeqCst);
                            held.push(stream);
                        }
                        Err(_) => break,
                    }
                }
                // The flood opens again what the server closed, once a second.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    });
    let other = d.user("other").await;
    a_single_put_goes_through(&d, &other).await;
    an_encoder_streams_normally(&d, &key, 6).await;
    stop.store(true, Ordering::SeqCst);
    flood.await.unwrap();
    eprintln!(
        "idle flood: {} connections opened from 127.0.0.2 meanwhile",
        opened.load(Ordering::SeqCst)
    );
    assert!(
        opened.load(Ordering::SeqCst) >= 1024,
        "the flood really held its connections"
    );
    d.ends_clean().await;
}

/// What one trickling request got: its status line's code (0: no answer) and when.
struct Trickled {
    status: u16,
    after: Duration,
}

/// Sends `head`, then one byte of its body every 5 s, until the server answers (or 60 s).
async fn trickle(from: &'static str, to: SocketAddr, head: String) -> Trickled {
    let started = Instant::now();
    let Ok(mut stream) = connect_from(from, to).await else {
        return Trickled {
            status: 0,
            after: started.elapsed(),
        };
    };
    if stream.write_all(head.as_bytes()).await.is_err() {
        return Trickled {
            status: 0,
            after: started.elapsed(),
        };
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 256];
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let _ = stream.write_all(b"x").await;
        match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {
                answer.extend_from_slice(&buf[..n]);
                if answer.len() >= 12 {
                    break;
                }
            }
            Ok(_) => break, // closed
            Err(_) => {}    // no answer yet: one more byte
        }
    }
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    Trickled {
        status,
        after: started.elapsed(),
    }
}

/// Waits until every one of `trickles` but the `share` that hold a writer has its answer:
/// those past the share are turned away (503) at once, the others only once they are cut.
async fn all_but_the_share_answered(
    what: &str,
    trickles: &[tokio::task::JoinHandle<Trickled>],
    share: usize,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answered = trickles.iter().filter(|t| t.is_finished()).count();
        if answered + share >= trickles.len() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {answered} of {} answered, {share} may hold a writer",
            trickles.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn one_users_trickling_bodies_take_only_that_users_share_of_the_spool() {
    let mut d = Deployment::prepare().await;
    let s3 = d.s3.endpoint();
    // A body must move 1 KiB every 5 s (the default is 15 s; shorter keeps the test short).
    d.start_with(&s3, &[("VIDQ_HTTP_BODY_IDLE_SECS", "5")])
        .await;
    let hog = d.user("hog").await;
    let other = d.user("other").await;
    let api = addr_of(&d.api);

    // The probe: 260 single PUTs of one user, each body sent a byte every 5 s, from two
    // addresses (the API port caps one address at 256 connections).
    let mut trickles = Vec::new();
    for n in 0..260 {
        let contract: Value = d
            .post(
                &hog,
                "/v1/uploads",
                &json!({"filename": "t.mp4", "content_type": "video/mp4",
                        "size_bytes": 100_000, "via": "vidq"}),
            )
            .await
            .json()
            .await
            .unwrap();
        let path = contract["upload_url"]
            .as_str()
            .unwrap()
            .trim_start_matches(&d.api)
            .to_owned();
        let head = format!(
            "PUT {path} HTTP/1.1\r\nHost: {api}\r\nAuthorization: Bearer {hog}\r\n\
             Content-Type: video/mp4\r\nContent-Length: 100000\r\n\r\n"
        );
        let from = if n % 2 == 0 { "127.0.0.3" } else { "127.0.0.4" };
        trickles.push(tokio::spawn(trickle(from, api, head)));
    }
    // And 20 trickling segments into one recording of a broadcaster with no other writes
    // (the hog's own share is full by now).
    let caster = d.user("caster").await;
    let (_, hog_ingest) = recording(&d, &caster).await;
    let ingest = addr_of(&hog_ingest);
    let ingest_path = hog_ingest
        .trim_start_matches(&format!("http://{ingest}"))
        .to_owned();
    let mut segments = Vec::new();
    for n in 0..20 {
        let head = format!(
            "PUT {ingest_path}index{n}.m4s HTTP/1.1\r\nHost: {ingest}\r\n\
             Content-Length: 100000\r\n\r\n"
        );
        segments.push(tokio::spawn(trickle("127.0.0.5", ingest, head)));
    }

    // While the hog holds all it may, a second user uploads and broadcasts as usual. It
    // holds all it may once every trickle past its shares has been turned away.
    let shares = vidq::adapters::writer_share::ShareLimits::default();
    all_but_the_share_answered("single PUTs", &trickles, shares.user).await;
    all_but_the_share_answered("live segments", &segments, shares.recording).await;
    a_single_put_goes_through(&d, &other).await;
    let clip = crate::support::clips::small();
    let tus = crate::support::clients::run_client(
        "python3",
        "tus_upload.py",
        &format!("{}/v1/tus/", d.api),
        &other,
        &clip,
    )
    .await;
    assert_eq!(tus["bytes"], std::fs::metadata(&clip).unwrap().len());
    an_encoder_streams_normally(&d, &other, 6).await;
    for (what, handles, share) in [
        ("single PUTs", trickles, shares.user),
        ("live segments", segments, shares.recording),
    ] {
        let sent = handles.len();
        let mut busy = 0;
        let mut cut = 0;
        for handle in handles {
            let got = handle.await.unwrap();
            match got.status {
                // Past the share: turned away at once, to retry.
                503 => {
                    assert!(
                        got.after < Duration::from_secs(15),
                        "{what}: 503 after {:?}",
                        got.after
                    );
                    busy += 1;
                }
                // Within the share: cut for moving less than 1 KiB in 5 s.
                408 => {
                    assert!(
                        got.after < Duration::from_secs(30),
                        "{what}: cut after {:?}",
                        got.after
                    );
                    cut += 1;
                }
                other => panic!("{what}: a trickling body got {other} after {:?}", got.after),
            }
        }
        eprintln!("{what}: {sent} trickling, {busy} turned away (503), {cut} cut (408)");
        assert_eq!(
            cut, share,
            "{what}: those that held a writer fill the share"
        );
        assert_eq!(busy + cut, sent, "{what}");
    }
    d.wait_for(
        "SELECT count(*) AS n FROM videos WHERE status = 'ready'",
        3,
        Duration::from_secs(120),
    )
    .await;
    d.ends_clean().await;
}
