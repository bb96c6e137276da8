//! The operator dashboard under `/admin`: a login form, the page, its panels (fetched again
//! every 2 s by a small script) and the Retry / Cancel buttons, which run the same fenced
//! transactions as `vidq jobs retry|cancel`.
//!
//! It exists only when an operator token is set or an operator user exists; otherwise every
//! `/admin` path answers 404 like any unknown path. A login sets an HttpOnly, SameSite=Strict
//! cookie naming a session row; every button's form carries the session's CSRF token, and a
//! POST whose `Origin` is another site's is refused before anything else.

pub mod pages;

use actix_web::body::MessageBody;
use actix_web::cookie::{Cookie, SameSite, time::Duration as CookieDuration};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{StatusCode, header};
use actix_web::middleware::{Next, from_fn};
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use serde::Deserialize;

use super::error::ApiError;
use crate::app::AppContext;
use crate::app::operators::{self, OperatorSession, SESSION_HOURS};
use crate::queue::operator::{OperatorAction, OperatorError};
use pages::{DashboardPage, LoginPage, Panels};

/// The session cookie.
const COOKIE: &str = "vidq_admin";
/// Sent by the dashboard's script: answer in words instead of redirecting.
const SCRIPT_HEADER: &str = "x-vidq-dashboard";

/// Registers `/admin` and everything under it.
pub fn configure(cfg: &mut web::ServiceConfig) {
    use web::{get, post, resource};
    cfg.service(
        web::scope("/admin")
            .wrap(from_fn(only_when_enabled))
            .service(resource(["", "/"]).route(get().to(dashboard)))
            .service(resource("/panels").route(get().to(panels)))
            .service(
                resource("/login")
                    .route(get().to(login_form))
                    .route(post().to(login)),
            )
            .service(resource("/logout").route(post().to(logout)))
            .service(resource("/jobs/{id}/{action}").route(post().to(job_action)))
            .service(resource("/static/dashboard.js").route(get().to(script)))
            .service(resource("/static/dashboard.css").route(get().to(stylesheet))),
    );
}

/// 404 for every `/admin` path while no operator can log in; otherwise the headers that keep
/// the pages out of frames, caches and other sites' scripts.
async fn only_when_enabled(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody + 'static>, actix_web::Error> {
    let ctx = req
        .app_data::<web::Data<AppContext>>()
        .cloned()
        .ok_or_else(ApiError::not_found)?;
    if !ctx
        .operators
        .enabled(&ctx.db)
        .await
        .map_err(ApiError::from)?
    {
        return Err(ApiError::not_found().into());
    }
    let mut res = next.call(req).await?;
    let headers = res.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, header::HeaderValue::from_static(value));
    }
    Ok(res)
}

/// The logged-in operator's session and its cookie token, if the cookie names a live one.
async fn current(
    ctx: &AppContext,
    req: &HttpRequest,
) -> Result<Option<(OperatorSession, String)>, ApiError> {
    let Some(cookie) = req.cookie(COOKIE) else {
        return Ok(None);
    };
    let token = cookie.value().to_owned();
    Ok(ctx
        .operators
        .session(&ctx.db, &token)
        .await?
        .map(|session| (session, token)))
}

fn see_other(location: &'static str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, location))
        .finish()
}

fn see_other_with(location: &'static str, cookie: Cookie<'_>) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, location))
        .cookie(cookie)
        .finish()
}

fn html(status: StatusCode, template: &impl Template) -> HttpResponse {
    match template.render() {
        Ok(body) => HttpResponse::build(status)
            .content_type("text/html; charset=utf-8")
            .body(body),
        Err(error) => {
            tracing::error!(%error, "could not render a dashboard template");
            HttpResponse::InternalServerError().finish()
        }
    }
}

fn words(status: StatusCode, text: impl Into<String>) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("text/plain; charset=utf-8")
        .body(text.into())
}

/// A POST from another site's page (its `Origin` names another host) is refused; browsers
/// send `Origin` on every cross-site POST, so a missing one is a same-site form or a script.
fn same_origin(req: &HttpRequest) -> bool {
    let Some(origin) = req.headers().get(header::ORIGIN) else {
        return true;
    };
    // The host the client reached (behind a proxy: Forwarded / X-Forwarded-Host), as a URL
    // of the same scheme, so `example.com` and `example.com:443` compare equal.
    let info = req.connection_info();
    let here = url::Url::parse(&format!("{}://{}", info.scheme(), info.host())).ok();
    let there = origin.to_str().ok().and_then(|o| url::Url::parse(o).ok());
    match (here, there) {
        (Some(here), Some(there)) => {
            let same_host = here.host_str().map(str::to_ascii_lowercase)
                == there.host_str().map(str::to_ascii_lowercase);
            // A Host with no port (a TLS proxy that does not say so in X-Forwarded-Proto)
            // names the host only.
            same_host
                && (here.port().is_none()
                    || here.port_or_known_default() == there.port_or_known_default())
        }
        _ => false,
    }
}

async fn panels_html(ctx: &AppContext, session: &OperatorSession) -> Result<String, ApiError> {
    let overview = operators::overview(&ctx.db).await?;
    Panels::new(overview, &session.csrf)
        .render()
        .map_err(|error| {
            tracing::error!(%error, "could not render the dashboard's panels");
            ApiError::internal()
        })
}

/// `GET /admin`: the page, or the login form's address.
async fn dashboard(ctx: web::Data<AppContext>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let Some((session, _)) = current(&ctx, &req).await? else {
        return Ok(see_other("/admin/login"));
    };
    let panels = panels_html(&ctx, &session).await?;
    Ok(html(
        StatusCode::OK,
        &DashboardPage {
            subject: session.subject,
            csrf: session.csrf,
            panels,
        },
    ))
}

/// `GET /admin/panels`: the panels alone, for the page's script (401 once logged out).
async fn panels(ctx: web::Data<AppContext>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let Some((session, _)) = current(&ctx, &req).await? else {
        return Ok(words(StatusCode::UNAUTHORIZED, "log in at /admin/login"));
    };
    let body = panels_html(&ctx, &session).await?;
    Ok(HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(body))
}

/// `GET /admin/login`.
async fn login_form() -> HttpResponse {
    html(StatusCode::OK, &LoginPage { message: None })
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

/// `POST /admin/login`: a session cookie and the page, or the form again with why not.
async fn login(
    ctx: web::Data<AppContext>,
    req: HttpRequest,
    form: web::Form<LoginForm>,
) -> Result<HttpResponse, ApiError> {
    if !same_origin(&req) {
        return Ok(words(StatusCode::FORBIDDEN, "cross-site login refused"));
    }
    // Guesses are counted per client address, on every node alike, before the token is
    // looked at, parallel ones too.
    let forwarded: Vec<&str> = req
        .headers()
        .get_all("x-forwarded-for")
        .filter_map(|v| v.to_str().ok())
        .collect();
    let address = req
        .peer_addr()
        .map(|peer| ctx.operators.logins.address_of(peer.ip(), &forwarded));
    let attempt = match address {
        Some(address) => match ctx.operators.logins.begin(&ctx.db, address).await? {
            Ok(attempt) => Some(attempt),
            Err(wait) => {
                tracing::warn!(client = %address, "dashboard login refused: too many failed logins from this address");
                let mut refused = html(
                    StatusCode::TOO_MANY_REQUESTS,
                    &LoginPage {
                        message: Some(
                            "Too many failed logins from this address. Wait a minute and try again.",
                        ),
                    },
                );
                refused.headers_mut().insert(
                    actix_web::http::header::RETRY_AFTER,
                    (wait.as_secs() + 1).into(),
                );
                return Ok(refused);
            }
        },
        None => None,
    };
    let Some(opened) = ctx.operators.login(&ctx.db, &form.token).await? else {
        tracing::warn!(client = ?address, "dashboard login refused");
        return Ok(html(
            StatusCode::UNAUTHORIZED,
            &LoginPage {
                message: Some("That token opens nothing here."),
            },
        ));
    };
    if let Some(attempt) = attempt {
        attempt.succeeded(&ctx.db).await?;
    }
    tracing::info!(subject = %opened.session.subject, "operator logged in to the dashboard");
    let secure = req.connection_info().scheme() == "https";
    let cookie = Cookie::build(COOKIE, opened.cookie_token)
        .path("/admin")
        .http_only(true)
        .secure(secure)
        .same_site(SameSite::Strict)
        .max_age(CookieDuration::hours(SESSION_HOURS))
        .finish();
    Ok(see_other_with("/admin", cookie))
}

#[derive(Deserialize)]
struct CsrfForm {
    csrf: String,
}

/// `POST /admin/logout`: ends the session and clears the cookie.
async fn logout(
    ctx: web::Data<AppContext>,
    req: HttpRequest,
    form: web::Form<CsrfForm>,
) -> Result<HttpResponse, ApiError> {
    if let Some((session, token)) = current(&ctx, &req).await?
        && same_origin(&req)
        && operators::csrf_matches(&session, &form.csrf)
    {
        operators::logout(&ctx.db, &token).await?;
    }
    let mut gone = Cookie::build(COOKIE, "").path("/admin").finish();
    gone.make_removal();
    Ok(see_other_with("/admin/login", gone))
}

/// `POST /admin/jobs/{id}/retry|cancel`: the operator command, answered in words to the
/// page's script and with a redirect to the page otherwise.
async fn job_action(
    ctx: web::Data<AppContext>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
    form: web::Form<CsrfForm>,
) -> Result<HttpResponse, ApiError> {
    let Some((session, _)) = current(&ctx, &req).await? else {
        return Ok(words(StatusCode::UNAUTHORIZED, "log in at /admin/login"));
    };
    if !same_origin(&req) || !operators::csrf_matches(&session, &form.csrf) {
        return Ok(words(
            StatusCode::FORBIDDEN,
            "this form is stale or from another site; reload the dashboard",
        ));
    }
    let (id, action) = path.into_inner();
    let Ok(id) = id.parse::<i64>() else {
        return Err(ApiError::not_found());
    };
    let (action, done) = match action.as_str() {
        "retry" => (OperatorAction::Retry, "back in the queue as a new run"),
        "cancel" => (OperatorAction::Cancel, "cancelled; its video failed"),
        _ => return Err(ApiError::not_found()),
    };
    let (status, text) = match crate::queue::operator::apply(&ctx.db, id, action).await {
        Ok(()) => {
            tracing::info!(job_id = id, ?action, subject = %session.subject, "operator action from the dashboard");
            (StatusCode::OK, format!("job {id}: {done}"))
        }
        Err(OperatorError::NotFound(_)) => (StatusCode::NOT_FOUND, format!("no job {id}")),
        Err(error @ (OperatorError::WrongState { .. } | OperatorError::PartOfVideo { .. })) => {
            (StatusCode::CONFLICT, error.to_string())
        }
        Err(error) => {
            tracing::error!(job_id = id, error = %crate::telemetry::error_chain(&error), "operator action failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("job {id}: the database did not take it; try again"),
            )
        }
    };
    if req.headers().contains_key(SCRIPT_HEADER) {
        Ok(words(status, text))
    } else {
        Ok(see_other("/admin"))
    }
}

async fn script() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .body(include_str!("static/dashboard.js"))
}

async fn stylesheet() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/css; charset=utf-8")
        .body(include_str!("static/dashboard.css"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn post(host: &str, origin: Option<&str>) -> HttpRequest {
        let mut req = TestRequest::post().insert_header((header::HOST, host));
        if let Some(origin) = origin {
            req = req.insert_header((header::ORIGIN, origin));
        }
        req.to_http_request()
    }

    #[test]
    fn only_a_post_from_the_dashboards_own_host_passes_the_origin_check() {
        assert!(same_origin(&post("127.0.0.1:8080", None)));
        assert!(same_origin(&post(
            "127.0.0.1:8080",
            Some("http://127.0.0.1:8080")
        )));
        assert!(same_origin(&post(
            "Media.Example.com",
            Some("https://media.example.com")
        )));
        assert!(!same_origin(&post(
            "127.0.0.1:8080",
            Some("http://127.0.0.1:9999")
        )));
        assert!(!same_origin(&post(
            "127.0.0.1:8080",
            Some("https://evil.example")
        )));
        assert!(!same_origin(&post("127.0.0.1:8080", Some("null"))));
    }
}
