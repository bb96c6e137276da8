// Screenshots the operator dashboard of a running vidq with some work in it, for the README
// (scripts/dashboard-screenshot.sh starts `vidq dev` and calls this).
//
//   node dashboard_scene.mjs BASE_URL ADMIN_TOKEN API_KEY CLIP.mp4 OUT.png
//
// Uploads the clip three times and a file that is not a video once, registers a webhook
// whose receiver is down, waits for the encodes, logs in and takes the picture.
import { readFile } from "node:fs/promises";
import { chromium } from "playwright-core";

const [base, token, key, clipPath, out] = process.argv.slice(2);
const auth = { Authorization: `Bearer ${key}` };

async function api(method, path, body) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { ...auth, "Content-Type": "application/json" },
    body: body && JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.status === 204 ? null : res.json();
}

async function upload(name, bytes) {
  const contract = await api("POST", "/v1/uploads", {
    filename: name,
    content_type: "video/mp4",
    size_bytes: bytes.length,
  });
  const put = await fetch(contract.upload_url, {
    method: "PUT",
    headers: contract.headers,
    body: bytes,
  });
  if (!put.ok) throw new Error(`PUT ${name}: ${put.status}`);
  return api("POST", `/v1/uploads/${contract.upload_id}/confirm`);
}

const clip = await readFile(clipPath);
await api("POST", "/v1/webhooks", { url: "http://127.0.0.1:9/hooks" });
for (const name of ["launch.mp4", "keynote.mp4", "demo.mp4"]) await upload(name, clip);
await upload("notes.mp4", Buffer.from("these are meeting notes, not a video\n".repeat(40)));

const deadline = Date.now() + 120_000;
for (;;) {
  const { videos } = await api("GET", "/v1/videos?limit=10");
  const settled = videos.filter((v) => v.status === "ready" || v.status === "failed");
  if (settled.length === videos.length) break;
  if (Date.now() > deadline) throw new Error("the encodes did not finish within 2 minutes");
  await new Promise((r) => setTimeout(r, 1000));
}
// One more job waiting, so the queue is not empty in the picture.
await upload("interview.mp4", clip);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
await page.goto(`${base}/admin/login`);
await page.fill("#token", token);
await page.click("button[type=submit]");
await page.waitForSelector("#queue");
await page.waitForTimeout(2500);
await page.screenshot({ path: out, fullPage: true });
await browser.close();
console.log(`wrote ${out}`);
