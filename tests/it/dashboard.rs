//! The operator dashboard: off without an operator, a login that sets a strict cookie, CSRF
//! and Origin checks on its buttons, and a real browser (Debian's headless Chromium) that
//! logs in, watches a job die, retries it and sees it go PENDING and then READY.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{COOKIE, LOCATION, ORIGIN, SET_COOKIE};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::app::{TestApp, TestAppOptions};
use crate::support::queue::{Worker, claim, expire_lease, fast_settings};
use crate::support::scripted::{Scripted, Step};
use crate::support::wait::wait_for_count;

const TOKEN: &str = "operator-token-for-the-tests";

async fn with_token() -> TestApp {
    TestApp::spawn_with(TestAppOptions {
        admin_token: Some(TOKEN.to_owned()),
        ..Default::default()
    })
    .await
}

/// An app with an operator token, and alice's confirmed upload with its PENDING job.
async fn with_a_queued_job() -> (TestApp, i64) {
    let app = with_token().await;
    let key = app.create_user("alice").await;
    app.uploaded_video(&key).await;
    let job = app
        .count("SELECT max(id) AS n FROM video_encoding_jobs")
        .await;
    (app, job)
}

/// A client that shows redirects instead of following them.
fn browserless() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Logs in with `secret`; the `vidq_admin=...` cookie pair and the whole Set-Cookie line.
async fn log_in(app: &TestApp, secret: &str) -> (String, String) {
    let response = browserless()
        .post(app.url("/admin/login"))
        .form(&[("token", secret)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(response.headers()[LOCATION], "/admin");
    let set_cookie = response.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    let pair = set_cookie.split(';').next().unwrap().to_owned();
    (pair, set_cookie)
}

/// POSTs the dashboard script's way (`x-vidq-dashboard`), with a session cookie and an
/// `Origin` if given.
async fn post_form(
    url: &str,
    cookie: Option<&str>,
    origin: Option<&str>,
    form: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = browserless()
        .post(url)
        .header("x-vidq-dashboard", "1")
        .form(form);
    if let Some(cookie) = cookie {
        request = request.header(COOKIE, cookie);
    }
    if let Some(origin) = origin {
        request = request.header(ORIGIN, origin);
    }
    request.send().await.unwrap()
}

/// `GET /admin` with the session cookie `cookie`.
async fn dashboard_page(app: &TestApp, cookie: &str) -> reqwest::Response {
    browserless()
        .get(app.url("/admin"))
        .header(COOKIE, cookie)
        .send()
        .await
        .unwrap()
}

/// The CSRF token the page's forms carry.
fn csrf_of(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .expect("a form with a csrf field")
        + 19;
    page[at..at + 64].to_owned()
}

#[tokio::test]
async fn without_an_operator_token_or_user_the_dashboard_does_not_exist() {
    let app = TestApp::spawn().await;
    for path in [
        "/admin",
        "/admin/login",
        "/admin/panels",
        "/admin/static/dashboard.js",
    ] {
        let response = browserless().get(app.url(path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
    }
    let login = post_form(
        &app.url("/admin/login"),
        None,
        None,
        &[("token", "anything")],
    )
    .await;
    assert_eq!(login.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_visitor_is_sent_to_the_login_form_and_a_wrong_token_opens_nothing() {
    let app = with_token().await;
    let client = browserless();
    let page = client.get(app.url("/admin")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::SEE_OTHER);
    assert_eq!(page.headers()[LOCATION], "/admin/login");
    let panels = client.get(app.url("/admin/panels")).send().await.unwrap();
    assert_eq!(panels.status(), StatusCode::UNAUTHORIZED);
    let form = client.get(app.url("/admin/login")).send().await.unwrap();
    assert_eq!(form.status(), StatusCode::OK);
    assert!(
        form.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("frame-ancestors 'none'")
    );
    assert!(form.text().await.unwrap().contains("name=\"token\""));

    let login = app.url("/admin/login");
    let wrong = post_form(
        &login,
        None,
        None,
        &[("token", "operator-token-for-the-test")],
    )
    .await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(wrong.headers().get(SET_COOKIE).is_none());
    assert!(wrong.text().await.unwrap().contains("opens nothing"));
    // A regular user's API key is not an operator's.
    let key = app.create_user("alice").await;
    let user = post_form(&login, None, None, &[("token", &key)]).await;
    assert_eq!(user.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_login_sets_a_strict_http_only_cookie_and_the_buttons_need_its_csrf_token() {
    let (app, job) = with_a_queued_job().await;
    let (cookie, set_cookie) = log_in(&app, TOKEN).await;
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/admin"] {
        assert!(set_cookie.contains(attribute), "{set_cookie}");
    }
    let client = browserless();
    let page = dashboard_page(&app, &cookie).await;
    assert_eq!(page.status(), StatusCode::OK);
    let page = page.text().await.unwrap();
    assert!(
        page.contains(&format!("data-job=\"{job}\" data-status=\"PENDING\"")),
        "{page}"
    );
    assert!(page.contains("alice"), "operators see users' data");
    let csrf = csrf_of(&page);
    let cancel = app.url(&format!("/admin/jobs/{job}/cancel"));

    let zeros = "0".repeat(64);
    let forged = post_form(&cancel, Some(&cookie), None, &[("csrf", &zeros)]).await;
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let cross_site = post_form(
        &cancel,
        Some(&cookie),
        Some("https://evil.example"),
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(cross_site.status(), StatusCode::FORBIDDEN);
    let logged_out = post_form(&cancel, None, None, &[("csrf", &csrf)]).await;
    assert_eq!(logged_out.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        app.count("SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'PENDING'")
            .await,
        1,
        "none of the refused posts changed anything"
    );

    let cancelled = post_form(&cancel, Some(&cookie), Some(&app.base), &[("csrf", &csrf)]).await;
    assert_eq!(cancelled.status(), StatusCode::OK);
    assert!(cancelled.text().await.unwrap().contains("cancelled"));
    assert_eq!(
        app.count(
            "SELECT count(*) AS n FROM videos WHERE status = 'failed' AND error_code = 'cancelled'"
        )
        .await,
        1
    );
    let again = post_form(&cancel, Some(&cookie), None, &[("csrf", &csrf)]).await;
    assert_eq!(
        again.status(),
        StatusCode::CONFLICT,
        "the same rule as `vidq jobs cancel`"
    );

    let logout = client
        .post(app.url("/admin/logout"))
        .header(COOKIE, &cookie)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(logout.status(), StatusCode::SEE_OTHER);
    let after = dashboard_page(&app, &cookie).await;
    assert_eq!(after.status(), StatusCode::SEE_OTHER, "the session is gone");
}

#[tokio::test]
async fn an_operator_users_api_key_opens_the_dashboard_with_no_token_set() {
    let app = TestApp::spawn().await;
    let (_, key) = vidq::app::users::create_user_as(&app.pool, "ops", true)
        .await
        .unwrap();
    let (cookie, _) = log_in(&app, key.reveal()).await;
    let page = dashboard_page(&app, &cookie).await;
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("user:ops"));
}

#[tokio::test]
async fn a_session_ends_when_its_key_is_revoked_or_no_longer_an_operators() {
    let app = TestApp::spawn().await;
    let (_, key) = vidq::app::users::create_user_as(&app.pool, "ops", true)
        .await
        .unwrap();
    let (_, other) = vidq::app::users::create_user_as(&app.pool, "ops2", true)
        .await
        .unwrap();
    let (demoted, _) = log_in(&app, key.reveal()).await;
    let (revoked, _) = log_in(&app, other.reveal()).await;
    assert_eq!(
        dashboard_page(&app, &demoted).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        dashboard_page(&app, &revoked).await.status(),
        StatusCode::OK
    );

    app.count("WITH d AS (UPDATE users SET is_admin = false WHERE name = 'ops' RETURNING 1) SELECT count(*) AS n FROM d")
        .await;
    assert_eq!(
        dashboard_page(&app, &demoted).await.status(),
        StatusCode::SEE_OTHER,
        "no longer an operator"
    );
    // What `vidq user delete` does first.
    let mut conn = app.pool.get().await.unwrap();
    vidq::db::users::revoke_key_by_name(&mut conn, "ops2", &[0u8; 32])
        .await
        .unwrap();
    assert_eq!(
        dashboard_page(&app, &revoked).await.status(),
        StatusCode::SEE_OTHER,
        "its key is revoked"
    );
}

#[tokio::test]
async fn what_users_wrote_is_shown_as_text_never_as_markup() {
    let app = with_token().await;
    let key = app.create_user("<img src=x onerror=alert(1)>").await;
    app.uploaded_video(&key).await;
    let (cookie, _) = log_in(&app, TOKEN).await;
    let page = dashboard_page(&app, &cookie).await.text().await.unwrap();
    assert!(!page.contains("<img src=x"), "{page}");
    assert!(
        page.contains("&#60;img src=x onerror=alert(1)&#62;"),
        "{page}"
    );
}

/// Makes job `id` die: three claims whose leases run out, then the reaper.
async fn kill_job(app: &TestApp) {
    for _ in 0..3 {
        let claimed = claim(app, "doomed-node", 30.0).await.unwrap();
        expire_lease(app, &claimed).await;
    }
    vidq::queue::reaper::reap_dead(&app.pool).await.unwrap();
}

#[tokio::test]
async fn in_a_real_browser_an_operator_retries_a_dead_job_and_watches_it_become_ready() {
    let (app, job) = with_a_queued_job().await;
    // A worker node reporting itself, as `vidq worker` does, for the nodes panel.
    let shutdown = tokio_util::sync::CancellationToken::new();
    vidq::roles::presence::spawn(
        app.pool.clone(),
        vidq::roles::presence::Presence {
            role: "worker",
            node_id: "encoder-1".to_owned(),
            slots: 2,
            detail: std::sync::Arc::new(|| serde_json::json!({ "running": 0 })),
        },
        shutdown.clone(),
    );
    let screenshot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    let _ = std::fs::remove_file(&screenshot);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/dashboard.mjs");
    let mut browser = tokio::process::Command::new("node")
        .arg(script)
        .args([&app.base, TOKEN, &job.to_string()])
        .arg(&screenshot)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs (the CI installs it, with playwright-core and Debian's chromium)");
    let mut lines = BufReader::new(browser.stdout.take().unwrap()).lines();
    let mut steps = Vec::new();
    let mut worker = None;
    let run = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            assert!(
                !line.starts_with("fail"),
                "the browser: {line} (after {steps:?})"
            );
            let Some(step) = line.strip_prefix("step ") else {
                continue;
            };
            steps.push(step.to_owned());
            match step {
                "logged-in" => kill_job(&app).await,
                "saw-pending" => {
                    worker = Some(
                        Worker::start(
                            &app.db.url,
                            Scripted::new(Step::Succeed(Duration::from_millis(500))),
                            fast_settings("encoder-1"),
                        )
                        .await,
                    );
                }
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the browser test finishes within 2 minutes");
    let status = browser.wait().await.unwrap();
    assert!(
        status.success(),
        "the browser script failed after {steps:?}"
    );
    assert_eq!(
        steps,
        [
            "redirected-to-login",
            "wrong-token-refused",
            "logged-in",
            "saw-dead",
            "saw-pending",
            "saw-ready",
            "screenshot"
        ]
    );
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM videos WHERE status = 'ready'",
        1,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(
        app.count(
            "SELECT count(*) AS n FROM video_encoding_jobs WHERE run = 2 AND status = 'COMPLETED'"
        )
        .await,
        1,
        "Retry started a second run, which the worker finished"
    );
    let png = std::fs::read(&screenshot).expect("the screenshot was taken");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    shutdown.cancel();
    if let Some(worker) = worker {
        worker.stop().await;
    }
}

#[tokio::test]
async fn parallel_wrong_logins_from_one_address_are_cut_off_and_other_addresses_are_not() {
    let app = with_token().await;
    let from = |ip: &str| {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .local_address(ip.parse::<std::net::IpAddr>().unwrap())
            .build()
            .unwrap()
    };
    // Twenty guesses at once from 127.0.0.2: five are looked at, the rest refused unread.
    let guesser = from("127.0.0.2");
    let guesses = (0..20).map(|n| {
        guesser
            .post(app.url("/admin/login"))
            .form(&[("token", format!("guess-{n}-of-the-operator-token"))])
            .send()
    });
    let mut statuses = Vec::new();
    for answer in futures_util::future::join_all(guesses).await {
        statuses.push(answer.unwrap().status());
    }
    let wrong = statuses
        .iter()
        .filter(|s| **s == StatusCode::UNAUTHORIZED)
        .count();
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!((wrong, refused), (5, 15), "{statuses:?}");
    // Even the right token waits now from that address, and is told for how long.
    let late = guesser
        .post(app.url("/admin/login"))
        .form(&[("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(late.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = late.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    // The operator at another address logs in at once.
    let operator = from("127.0.0.1")
        .post(app.url("/admin/login"))
        .form(&[("token", TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(operator.status(), StatusCode::SEE_OTHER);
}
