// The operator dashboard's live part: the panels are re-rendered by the server every 2 s
// (GET /admin/panels) and swapped in; the job buttons are sent with fetch, so the page keeps
// its place and shows what happened. Without this script the page still works (reload it).
(function () {
  "use strict";
  var panels = document.getElementById("panels");
  var notice = document.getElementById("notice");
  var freshness = document.getElementById("freshness");

  function toLogin() { window.location.assign("/admin/login"); }

  function refresh() {
    return fetch("/admin/panels", { credentials: "same-origin", redirect: "manual" })
      .then(function (res) {
        if (res.status === 401 || res.type === "opaqueredirect") { toLogin(); return; }
        if (!res.ok) { freshness.textContent = "stale (" + res.status + ")"; return; }
        return res.text().then(function (html) {
          panels.innerHTML = html;
          freshness.textContent = "live · " + new Date().toLocaleTimeString();
        });
      })
      .catch(function () { freshness.textContent = "stale (offline)"; });
  }

  function show(text, isError) {
    notice.textContent = text;
    notice.className = isError ? "notice error" : "notice";
    notice.hidden = false;
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.matches("form[data-job-action]")) { return; }
    event.preventDefault();
    var body = new URLSearchParams(new FormData(form));
    fetch(form.action, {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: { "X-Vidq-Dashboard": "1" },
    })
      .then(function (res) {
        if (res.status === 401) { toLogin(); return; }
        return res.text().then(function (text) { show(text, !res.ok); });
      })
      .catch(function () { show("the server did not answer", true); })
      .then(refresh);
  });

  // The next refresh is planned when this one is done, so a slow server never has several
  // refreshes of one page in flight.
  function loop() { refresh().then(function () { window.setTimeout(loop, 2000); }); }
  window.setTimeout(loop, 2000);
})();
