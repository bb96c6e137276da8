//! Resumable uploads behind a load balancer: three `vidq api` processes with the `s3` tus
//! store (each its own node id and directory) behind HAProxy, round robin per request and no
//! affinity, and a worker on another node. Real clients (tus-js-client, tuspy) upload clips
//! in 256 KiB chunks, so each upload's PATCHes land on every node; each object is the file
//! byte for byte and each video READY, also while one API process is SIGKILLed mid-upload
//! and stays down for 10 s. Two PATCHes of one upload through two nodes at once: one wins.

use std::path::PathBuf;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::StatusCode;
use tokio::process::Child;

use crate::support::clients::run_client_with;
use crate::support::deployment::Deployment;
use crate::support::haproxy::Haproxy;
use crate::support::process::free_port;
use crate::support::tus::upload_id;

const CHUNK: usize = 256 * 1024;
const NODES: usize = 3;

/// The API nodes, the worker and the load balancer.
struct Farm {
    d: Deployment,
    ports: Vec<u16>,
    apis: Vec<Option<Child>>,
    _worker: Child,
    lb: Haproxy,
}

impl Farm {
    async fn start() -> Self {
        let d = Deployment::prepare().await;
        let ports: Vec<u16> = (0..NODES).map(|_| free_port()).collect();
        let worker = d.spawn_worker(&d.s3.endpoint());
        let apis = (0..NODES).map(|n| Some(spawn_api(&d, &ports, n))).collect();
        for n in 0..NODES {
            wait_until_up(&d, &ports, n).await;
        }
        // The balancer comes last: its first health checks find every node up, so none is
        // out of the rotation while the first uploads go through.
        let lb = Haproxy::start(&ports).await;
        let mut farm = Self {
            lb,
            d,
            ports,
            apis,
            _worker: worker,
        };
        farm.d.api = farm.lb.url();
        farm
    }

    fn spawn_api(&self, n: usize) -> Child {
        spawn_api(&self.d, &self.ports, n)
    }

    async fn wait_until_up(&self, n: usize) {
        wait_until_up(&self.d, &self.ports, n).await;
    }

    /// The bytes S3 holds for upload `id`.
    async fn original(&self, id: &str) -> Vec<u8> {
        self.d
            .storage
            .get_bytes(&format!("originals/{id}"))
            .await
            .unwrap()
            .expect("the original")
    }

    /// How many PATCHes of upload `id` node `n` answered 204.
    fn patches_served(&self, n: usize, id: &str) -> usize {
        std::fs::read_to_string(self.d.log(&format!("api-{}", n + 1)))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("PATCH") && l.contains(id) && l.contains("status=204"))
            .count()
    }

    fn tus_endpoint(&self) -> String {
        format!("{}/v1/tus/", self.lb.url())
    }

    /// Waits until every upload of `clips` is a READY video whose original is the file.
    async fn all_ready(&self, key: &str, done: &[(serde_json::Value, PathBuf)]) {
        self.d
            .wait_for(
                "SELECT count(*) AS n FROM videos WHERE status = 'ready'",
                done.len() as i64,
                Duration::from_secs(240),
            )
            .await;
        for (client, clip) in done {
            let id = &upload_id(client["upload_url"].as_str().unwrap());
            let status: serde_json::Value = self
                .d
                .get(key, &format!("/v1/uploads/{id}"))
                .await
                .json()
                .await
                .unwrap();
            assert_eq!(status["state"], "confirmed", "{status}");
            assert!(
                self.original(id).await == std::fs::read(clip).unwrap(),
                "{id}: S3 holds the file byte for byte"
            );
        }
        // Every multipart upload S3 still holds is named by an upload still arriving: a
        // create whose answer a killed node never sent leaves one, which that upload's expiry
        // aborts. None is orphaned.
        for (object, multipart) in self.d.storage.list_multiparts("").await.unwrap() {
            let named = self
                .d
                .count(&format!(
                    "SELECT count(*) AS n FROM tus_multiparts m JOIN uploads u ON u.id = m.upload_id
                      WHERE m.multipart_id = '{multipart}' AND u.state = 'receiving'"
                ))
                .await;
            assert_eq!(
                named, 1,
                "{object}: multipart upload {multipart} no upload names"
            );
        }
    }
}

/// API node `n` (`api-{n+1}`): its own directory and log, the `s3` tus store with 5 MiB
/// parts, its HTTP port `ports[n]`.
fn spawn_api(d: &Deployment, ports: &[u16], n: usize) -> Child {
    let node = format!("api-{}", n + 1);
    d.command_logged("api", &node, &d.s3.endpoint(), &node)
        .env("RUST_LOG", "info,vidq::http::access=debug")
        .env("VIDQ_TUS_STORE", "s3")
        .env("VIDQ_TUS_PART_BYTES", (5 * 1024 * 1024).to_string())
        .env("VIDQ_SPOOL_DIR", d.node_dir(&node).join("spool"))
        .env("VIDQ_HTTP_ADDR", format!("127.0.0.1:{}", ports[n]))
        .env("VIDQ_INGEST_ADDR", format!("127.0.0.1:{}", free_port()))
        .spawn()
        .unwrap()
}

/// Returns once API node `n` answers `/healthz` on its own port.
async fn wait_until_up(d: &Deployment, ports: &[u16], n: usize) {
    let base = format!("http://127.0.0.1:{}", ports[n]);
    crate::support::process::answering(&d.http, &base, || d.logs()).await;
}

/// Clips of 4 to 4 + n - 1 seconds at 640x360 (about 1-2 MiB: 4 to 8 chunks each).
fn clips(n: u32) -> Vec<PathBuf> {
    (0..n)
        .map(|i| crate::support::clips::video(4 + i, 640, 360))
        .collect()
}

async fn upload_all(
    farm: &Farm,
    key: &str,
    (program, script): (&str, &str),
    files: &[PathBuf],
) -> Vec<(serde_json::Value, PathBuf)> {
    let mut done = Vec::new();
    for file in files {
        let answer = run_client_with(
            program,
            script,
            &farm.tus_endpoint(),
            key,
            file,
            (CHUNK, 40, 0.5),
        )
        .await;
        assert_eq!(
            answer["bytes"].as_u64().unwrap(),
            std::fs::metadata(file).unwrap().len()
        );
        done.push((answer, file.clone()));
    }
    done
}

const TUS_JS: (&str, &str) = ("node", "tus_upload.mjs");
const TUSPY: (&str, &str) = ("python3", "tus_upload.py");

#[tokio::test]
async fn real_clients_upload_through_a_load_balancer_and_every_node_takes_part() {
    let farm = Farm::start().await;
    let key = farm.d.user("alice").await;
    let files = clips(5);
    // One client at a time: round robin then sends each upload's requests to each node in
    // turn.
    let mut done = upload_all(&farm, &key, TUS_JS, &files).await;
    done.extend(upload_all(&farm, &key, TUSPY, &files).await);
    for (client, _) in &done {
        let id = &upload_id(client["upload_url"].as_str().unwrap());
        let served: Vec<usize> = (0..NODES).map(|n| farm.patches_served(n, id)).collect();
        assert!(
            served.iter().all(|n| *n > 0),
            "upload {id}: PATCHes per node {served:?}"
        );
        eprintln!("upload {id}: 204 PATCHes per node {served:?}");
    }
    farm.all_ready(&key, &done).await;
    // With every node up, every upload finished: no multipart upload is left open.
    assert_eq!(farm.d.storage.list_multiparts("").await.unwrap(), vec![]);
    farm.d.ends_clean().await;
}

#[tokio::test]
async fn uploads_complete_while_one_api_node_is_killed_and_down_for_10_seconds() {
    let mut farm = Farm::start().await;
    let key = farm.d.user("alice").await;
    let files = clips(3);
    let mut victim = farm.apis[1].take().unwrap();
    let started = async {
        let (js, py) = futures_util::join!(
            upload_all(&farm, &key, TUS_JS, &files),
            upload_all(&farm, &key, TUSPY, &files)
        );
        js.into_iter().chain(py).collect::<Vec<_>>()
    };
    let kill = async {
        // Mid-upload: once some bytes of an upload are counted.
        farm.d
            .wait_for(
                "SELECT count(*) AS n FROM (SELECT 1 FROM uploads
                  WHERE received_bytes > 0 AND state = 'receiving' LIMIT 1) x",
                1,
                Duration::from_secs(60),
            )
            .await;
        victim.start_kill().unwrap();
        victim.wait().await.unwrap();
        let killed_at = farm
            .d
            .count("SELECT (extract(epoch FROM now()) * 1000)::int8 AS n")
            .await;
        // The node stays down 10 s (the scenario) while the uploads go on without it.
        tokio::time::sleep(Duration::from_secs(10)).await;
        killed_at
    };
    let (done, killed_at) = futures_util::join!(started, kill);
    let retries: u64 = done
        .iter()
        .map(|(c, _)| c["retries_seen"].as_u64().unwrap_or_default())
        .sum();
    // Which requests the dead node held when it died is up to the round robin: the clients
    // either retried cut requests, or went on with new uploads through the other nodes.
    let begun_after = farm
        .d
        .count(&format!(
            "SELECT count(*) AS n FROM uploads WHERE created_at > to_timestamp({killed_at} / 1000.0)"
        ))
        .await;
    eprintln!(
        "{} uploads, {begun_after} begun while a node was dead, {retries} client retries",
        done.len()
    );
    assert!(
        retries > 0 || begun_after > 0,
        "the uploads went on through the other nodes while one was dead"
    );
    // Back after its 10 s down, as an operator would bring it.
    farm.apis[1] = Some(farm.spawn_api(1));
    farm.wait_until_up(1).await;
    farm.all_ready(&key, &done).await;
    farm.d.ends_clean().await;
}

#[tokio::test]
async fn two_patches_of_one_upload_through_two_nodes_at_once_one_wins() {
    let farm = Farm::start().await;
    let key = farm.d.user("alice").await;
    let file = bytes::Bytes::from(crate::support::tus::bytes(6 * 1024 * 1024 + 5));
    for round in 0..5 {
        let created = farm
            .d
            .http
            .post(farm.tus_endpoint())
            .bearer_auth(&key)
            .header("Tus-Resumable", "1.0.0")
            .header("Upload-Length", file.len().to_string())
            .header(
                "Upload-Metadata",
                crate::support::tus::metadata("x.mp4", "video/mp4"),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), StatusCode::CREATED);
        let id = upload_id(created.headers()["location"].to_str().unwrap());
        // The whole file from offset 0, through node 1 and node 2 at once, each body sent
        // over about a second so the two overlap.
        let patch = |n: usize| {
            let chunks: Vec<bytes::Bytes> = (0..file.len())
                .step_by(256 * 1024)
                .map(|at| file.slice(at..(at + 256 * 1024).min(file.len())))
                .collect();
            let body = futures_util::stream::iter(chunks).then(|chunk| async move {
                tokio::time::sleep(Duration::from_millis(40)).await;
                Ok::<_, std::io::Error>(chunk)
            });
            farm.d
                .http
                .patch(format!("http://127.0.0.1:{}/v1/tus/{id}", farm.ports[n]))
                .bearer_auth(&key)
                .header("Tus-Resumable", "1.0.0")
                .header("Upload-Offset", "0")
                .header("Content-Type", "application/offset+octet-stream")
                .header("Content-Length", file.len().to_string())
                .body(reqwest::Body::wrap_stream(body))
                .send()
        };
        let (a, b) = futures_util::join!(patch(0), patch(1));
        let mut statuses = [a.unwrap().status(), b.unwrap().status()];
        statuses.sort();
        assert_eq!(
            statuses[0],
            StatusCode::NO_CONTENT,
            "round {round}: {statuses:?}"
        );
        assert!(
            matches!(statuses[1], StatusCode::CONFLICT | StatusCode::LOCKED),
            "round {round}: the other is refused: {statuses:?}"
        );
        assert!(
            farm.original(&id).await == file[..],
            "round {round}: the object is the file"
        );
    }
    assert_eq!(farm.d.storage.list_multiparts("").await.unwrap(), vec![]);
}
