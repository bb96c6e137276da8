// Drives vidq's upload page (/) in Debian's headless Chromium (playwright-core), the way a
// web developer trying vidq would. Spawned by tests/it/upload_page.rs.
//
//   node upload_page.mjs BASE_URL CLIP.mp4 LIVE_SOURCE.mp4 SCREENSHOT_DIR
//
// The key comes filled in (`vidq dev`). The upload runs on a throttled link (DevTools'
// network conditions, so the page has time to be reloaded half way); after the reload the
// same file is chosen again and must resume. The video must show READY and play through
// MSE; then a live broadcast is created, FFmpeg publishes to the RTMP server and stream key
// the page shows, and the live player must play. Prints `step NAME [values]` per milestone
// and `fail WHY` (exit 1) on the first failure.
import { spawn } from "node:child_process";
import http from "node:http";
import { chromium } from "playwright-core";

const [base, clip, liveSource, shots] = process.argv.slice(2);
const step = (name, ...values) => console.log(["step", name, ...values].join(" "));
const fail = (why) => {
  console.log(`fail ${why}`);
  process.exit(1);
};
const UPLOAD_BYTES_PER_SECOND = 1_000_000;

// Waits until the <video> at `selector` plays through MSE (a blob: source) and has reached
// `seconds`; its currentTime then.
const playsThrough = async (page, selector, seconds, timeout) => {
  const reached = await page.waitForFunction(
    ([selector, seconds]) => {
      const el = document.querySelector(selector);
      return el.src.startsWith("blob:") && el.currentTime >= seconds && el.currentTime;
    },
    [selector, seconds],
    { timeout },
  );
  return reached.jsonValue();
};

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
let encoder = null;
try {
  const page = await browser.newPage({ viewport: { width: 1200, height: 1400 } });
  const pageErrors = [];
  page.on("pageerror", (error) => pageErrors.push(String(error)));
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Network.enable");
  await cdp.send("Network.emulateNetworkConditions", {
    offline: false,
    latency: 0,
    downloadThroughput: -1,
    uploadThroughput: UPLOAD_BYTES_PER_SECOND,
  });

  await page.goto(`${base}/`);
  await page.waitForSelector("body[data-key=accepted]", { timeout: 15000 });
  const filled = await page.inputValue("#api-key");
  if (!filled.startsWith("vidq_")) fail(`the key box holds ${JSON.stringify(filled)}`);
  step("key-filled");
  const supported = await page.evaluate(() => window.Hls && Hls.isSupported());
  if (!supported) fail("hls.js says this Chromium has no MSE for H.264");

  // Half way, the page is reloaded: the running PATCH dies with it.
  await page.setInputFiles("#file", clip);
  await page.waitForFunction(
    () => Number(document.querySelector("#progress").dataset.percent || 0) >= 45,
    null,
    { timeout: 60000 },
  );
  const before = await page.getAttribute("#progress", "data-percent");
  await page.screenshot({ path: `${shots}/upload-half-way.png`, fullPage: true });
  step("reloading-at", before);
  await page.reload();
  await page.waitForSelector("body[data-key=accepted]", { timeout: 15000 });
  const hint = await page.textContent("#resumable");
  if (!hint.includes("Drop the same file again")) fail(`no resumable upload listed: ${hint}`);
  await page.setInputFiles("#file", clip);
  await page.waitForSelector("body[data-upload=resuming], body[data-upload=sent]", { timeout: 10000 });
  const resumedAt = await page.getAttribute("#progress", "data-percent");
  step("resumed", resumedAt);
  await page.waitForSelector("body[data-upload=sent]", { timeout: 60000 });
  step("uploaded");

  await page.waitForSelector("#player[data-status=ready]", { timeout: 180000 });
  const video = await page.getAttribute("#player", "data-video");
  step("ready", video);
  const poster = await page.getAttribute("#player", "poster");
  if (!poster) fail("the player has no poster");
  step("played", await playsThrough(page, "#player", 3.2, 60000));
  await page.waitForSelector(`#videos tr[data-video="${video}"][data-status=ready]`, { timeout: 10000 });
  step("listed");
  await page.screenshot({ path: `${shots}/upload-ready-playing.png`, fullPage: true });

  // The same video from a page on another origin (another port), as an app would embed it:
  // hls.js takes the playlist from the API and the segments from the bucket, both cross-origin.
  const hlsUrl = await page.evaluate(async (id) => {
    const key = document.querySelector("#api-key").value;
    const answer = await fetch(`/v1/videos/${id}`, { headers: { Authorization: `Bearer ${key}` } });
    return (await answer.json()).playback.hls_url;
  }, video);
  const app = http.createServer((_, res) => {
    res.setHeader("content-type", "text/html; charset=utf-8");
    res.end(`<!doctype html><video id="v" muted playsinline></video>
<script src="${base}/ui/vendor/hls.light.min.js"></script>
<script>
  const v = document.getElementById("v");
  const hls = new Hls();
  hls.on(Hls.Events.ERROR, (_, d) => { if (d.fatal) document.title = "error " + d.details; });
  hls.loadSource(${JSON.stringify(hlsUrl)});
  hls.attachMedia(v);
  v.play();
</script>`);
  });
  await new Promise((resolve) => app.listen(0, "127.0.0.1", resolve));
  const appOrigin = `http://127.0.0.1:${app.address().port}`;
  if (appOrigin === new URL(base).origin) fail("the app page is on vidq's own origin");
  const embedded = await browser.newPage();
  await embedded.goto(`${appOrigin}/`);
  const elsewhere = await playsThrough(embedded, "#v", 3.2, 60000).catch(async (error) =>
    fail(`cross-origin: ${await embedded.title()} ${error}`),
  );
  step("played-cross-origin", elsewhere);
  await embedded.close();
  app.close();

  await page.click("#go-live");
  await page.waitForSelector("#live-details:not([hidden])");
  const server = (await page.textContent("#live-server")).trim();
  const key = (await page.textContent("#live-key")).trim();
  if (!server.startsWith("rtmp://") || !key) fail(`live details: server ${server}, key ${key}`);
  step("live-created", server);
  encoder = spawn(
    "ffmpeg",
    ["-v", "error", "-re", "-i", liveSource, "-c", "copy", "-f", "flv", `${server}/${key}`],
    { stdio: ["ignore", "ignore", "inherit"] },
  );
  step("live-playing", await playsThrough(page, "#live-player", 2, 120000));
  await page.screenshot({ path: `${shots}/live-playing.png`, fullPage: true });

  if (pageErrors.length) fail(`page errors: ${pageErrors.join("; ")}`);
  step("done");
} catch (error) {
  fail(String(error).replace(/\s+/g, " "));
} finally {
  if (encoder) encoder.kill("SIGKILL");
  await browser.close();
}
