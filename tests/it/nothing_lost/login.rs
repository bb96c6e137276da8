//! The dashboard's login throttle across API nodes and behind a load balancer: three `vidq
//! api` processes behind HAProxy (`option forwardfor`), `VIDQ_TRUSTED_PROXIES` naming it.
//! Twenty bad tokens from one client address are five failures for the whole deployment
//! (not five per node) and 429 on every node after that, while the operator at another
//! address logs in through the same balancer.

use reqwest::StatusCode;

use crate::support::deployment::Deployment;
use crate::support::haproxy::Haproxy;
use crate::support::process::free_port;

const TOKEN: &str = "operator-token-for-the-throttle-test";

fn client_at(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(ip.parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap()
}

async fn log_in(client: &reqwest::Client, base: &str, token: &str) -> StatusCode {
    client
        .post(format!("{base}/admin/login"))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn a_guesser_is_throttled_on_every_node_and_the_operator_is_not() {
    let d = Deployment::prepare().await;
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut nodes = Vec::new();
    for (n, port) in ports.iter().enumerate() {
        let node = format!("api-{}", n + 1);
        nodes.push(
            d.command_logged("api", &node, &d.s3.endpoint(), &node)
                .env("VIDQ_ADMIN_TOKEN", TOKEN)
                // HAProxy reaches the nodes from 127.0.0.1; the clients use other addresses.
                .env("VIDQ_TRUSTED_PROXIES", "127.0.0.1/32")
                .env("VIDQ_SPOOL_DIR", d.node_dir(&node).join("spool"))
                .env("VIDQ_HTTP_ADDR", format!("127.0.0.1:{port}"))
                .env("VIDQ_INGEST_ADDR", format!("127.0.0.1:{}", free_port()))
                .spawn()
                .unwrap(),
        );
    }
    for port in &ports {
        let base = format!("http://127.0.0.1:{port}");
        crate::support::process::answering(&d.http, &base, || d.logs()).await;
    }
    let lb = Haproxy::start(&ports).await;

    // Twenty guesses, one after another so they spread round robin over the three nodes.
    let guesser = client_at("127.0.0.2");
    let mut statuses = Vec::new();
    for n in 0..20 {
        statuses.push(log_in(&guesser, &lb.url(), &format!("guess-{n}-of-the-token")).await);
    }
    let wrong = statuses
        .iter()
        .filter(|s| **s == StatusCode::UNAUTHORIZED)
        .count();
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!(
        (wrong, refused),
        (5, 15),
        "five tries for the deployment: {statuses:?}"
    );
    // Every node refuses that address now, even with the right token.
    for _ in 0..3 {
        assert_eq!(
            log_in(&guesser, &lb.url(), TOKEN).await,
            StatusCode::TOO_MANY_REQUESTS
        );
    }
    // The operator, from another address through the same balancer, logs in on every node.
    let operator = client_at("127.0.0.3");
    for _ in 0..3 {
        assert_eq!(
            log_in(&operator, &lb.url(), TOKEN).await,
            StatusCode::SEE_OTHER
        );
    }
    // A client that writes its own X-Forwarded-For is counted by what the balancer saw:
    // the guesser cannot pose as a fresh address.
    let spoofed = guesser
        .post(format!("{}/admin/login", lb.url()))
        .header("X-Forwarded-For", "192.0.2.77")
        .form(&[("token", "yet-another-guess")])
        .send()
        .await
        .unwrap();
    assert_eq!(spoofed.status(), StatusCode::TOO_MANY_REQUESTS);
    let counted = d
        .count("SELECT count(DISTINCT address) AS n FROM login_tries WHERE address = '127.0.0.2'")
        .await;
    assert_eq!(
        counted, 1,
        "the guesser's tries are counted under its own address"
    );
    drop(nodes);
}
