// Drives vidq's operator dashboard in Debian's headless Chromium (playwright-core, no
// downloaded browser), the way an operator would. Spawned by tests/it/dashboard.rs.
//
//   node dashboard.mjs BASE_URL TOKEN JOB_ID SCREENSHOT.png
//
// Prints one `step NAME` line per milestone on stdout, so the test can act in between
// (it makes the job DEAD after `logged-in` and starts a worker after `saw-pending`). Any
// failure prints `fail ...` and exits 1.
import { chromium } from "playwright-core";

const [base, token, job, screenshot] = process.argv.slice(2);
const step = (name) => console.log(`step ${name}`);
const fail = (why) => {
  console.log(`fail ${why}`);
  process.exit(1);
};

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const pageErrors = [];
  page.on("pageerror", (error) => pageErrors.push(String(error)));

  await page.goto(`${base}/admin`);
  if (new URL(page.url()).pathname !== "/admin/login") {
    fail(`not logged in, /admin should lead to /admin/login, got ${page.url()}`);
  }
  step("redirected-to-login");

  await page.fill("#token", "not-the-token-at-all");
  await page.click("button[type=submit]");
  await page.waitForSelector("p.error");
  step("wrong-token-refused");

  await page.fill("#token", token);
  await page.click("button[type=submit]");
  await page.waitForURL(`${base}/admin`);
  await page.waitForSelector("#queue");
  step("logged-in");

  // The job dies after the page is open: the panels' refresh has to bring it in.
  const dead = `#attention tr[data-job="${job}"][data-status="DEAD"]`;
  await page.waitForSelector(dead, { timeout: 20000 });
  step("saw-dead");

  await page.click(`${dead} button[value=retry]`);
  await page.waitForSelector(`#notice:not([hidden])`, { timeout: 10000 });
  const notice = await page.textContent("#notice");
  if (!notice.includes(`job ${job}`)) fail(`unexpected notice after Retry: ${notice}`);
  await page.waitForSelector(`#recent tr[data-job="${job}"][data-status="PENDING"]`, {
    timeout: 10000,
  });
  step("saw-pending");

  await page.waitForSelector(`#recent tr[data-job="${job}"][data-video-status="ready"]`, {
    timeout: 60000,
  });
  step("saw-ready");

  await page.screenshot({ path: screenshot, fullPage: true });
  step("screenshot");
  if (pageErrors.length > 0) fail(`script errors on the page: ${pageErrors.join("; ")}`);
} catch (error) {
  fail(String(error).split("\n")[0]);
} finally {
  await browser.close();
}
