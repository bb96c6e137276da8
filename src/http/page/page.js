// vidq's upload page: the /v1 API from a browser, with the key typed into the page (or
// filled in by `vidq dev`). Uploads go over tus (tus-js-client, resumable across a reload:
// the upload's URL is kept in localStorage under the file's fingerprint), the video's state
// comes from the event feed's long poll (GET /v1/events?wait=), playback is hls.js on the
// video's hls_url. No build step: this file is served as it is.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORAGE = "vidq.key";
// Types vidq accepts, for files the browser gives no type (an .mkv on some systems).
const TYPES_BY_EXTENSION = {
  mp4: "video/mp4", m4v: "video/x-m4v", mov: "video/quicktime", webm: "video/webm",
  mkv: "video/x-matroska", "3gp": "video/3gpp", "3g2": "video/3gpp2",
};

const state = {
  key: "",
  // Bumped when the key changes: loops started under an older key stop.
  generation: 0,
  // upload id -> file name, for the uploads this page made.
  uploads: new Map(),
  // upload id -> video id, from `video.accepted` events.
  accepted: new Map(),
  // The video the player follows.
  current: null,
  videoTimer: null,
  players: new Map(),
  live: null,
};

class ApiError extends Error {
  constructor(status, code, message) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: `Bearer ${state.key}` }, options.headers || {});
  const res = await fetch(path, Object.assign({}, options, { headers }));
  if (!res.ok) {
    let body = {};
    try {
      body = await res.json();
    } catch (_) {
      // A body that is not JSON: the status says enough.
    }
    const error = body.error || {};
    throw new ApiError(res.status, error.code, error.message);
  }
  return res.status === 204 ? null : res.json();
}

function say(id, text, kind) {
  const el = $(id);
  el.textContent = text;
  el.dataset.kind = kind || "info";
}

// --- the key --------------------------------------------------------------------------------

async function useKey(key) {
  state.key = key.trim();
  state.generation += 1;
  if (!state.key) {
    say("key-status", "Paste an API key: `vidq user create --name me` prints one.", "error");
    return;
  }
  try {
    await api("/v1/videos?limit=1");
  } catch (error) {
    const why = error.status === 401 ? "this key opens nothing" : error.message;
    say("key-status", `Not usable: ${why}.`, "error");
    document.body.dataset.key = "refused";
    return;
  }
  localStorage.setItem(KEY_STORAGE, state.key);
  document.body.dataset.key = "accepted";
  say("key-status", "Key accepted.", "ok");
  const generation = state.generation;
  refreshVideos();
  followEvents(generation);
}

// --- the event feed -------------------------------------------------------------------------

// Skips the history: the page follows what happens from now on.
async function latestCursor() {
  let cursor = "";
  for (;;) {
    const page = await api(`/v1/events?limit=1000&after=${encodeURIComponent(cursor)}`);
    cursor = page.next_cursor || cursor;
    if (page.events.length < 1000) return cursor;
  }
}

async function followEvents(generation) {
  let cursor;
  try {
    cursor = await latestCursor();
  } catch (error) {
    say("videos-status", `The event feed did not answer: ${error.message}`, "error");
    return;
  }
  while (generation === state.generation) {
    try {
      const page = await api(`/v1/events?wait=25&limit=100&after=${encodeURIComponent(cursor)}`);
      if (generation !== state.generation) return;
      cursor = page.next_cursor || cursor;
      for (const event of page.events) onEvent(event);
    } catch (error) {
      // The API restarting, the network gone: wait a little and ask again.
      say("videos-status", `Waiting for the event feed: ${error.message}`, "error");
      await new Promise((resolve) => setTimeout(resolve, 2000));
    }
  }
}

function onEvent(event) {
  const data = event.data || {};
  if (event.type === "video.accepted" && data.upload_id) {
    state.accepted.set(data.upload_id, event.video_id);
    if (state.uploads.has(data.upload_id)) follow(event.video_id, state.uploads.get(data.upload_id));
  }
  if (state.current === event.video_id) showVideo(event.video_id);
  refreshVideos();
}

// --- uploading ------------------------------------------------------------------------------

function typeOf(file) {
  if (file.type) return file.type;
  const extension = file.name.split(".").pop().toLowerCase();
  return TYPES_BY_EXTENSION[extension] || "application/octet-stream";
}

async function upload(file) {
  if (!state.key) {
    say("upload-status", "Enter an API key first.", "error");
    return;
  }
  const progress = $("progress");
  progress.hidden = false;
  progress.value = 0;
  const endpoint = new URL("/v1/tus/", window.location.href).href;
  const options = {
    endpoint,
    headers: { Authorization: `Bearer ${state.key}` },
    metadata: { filename: file.name, filetype: typeOf(file) },
    retryDelays: [0, 1000, 3000, 5000, 10000],
    removeFingerprintOnSuccess: true,
    onProgress(sent, total) {
      const percent = total ? Math.floor((sent / total) * 100) : 0;
      progress.value = percent;
      progress.dataset.percent = String(percent);
      say("upload-status", `Uploading ${file.name}: ${percent} % of ${megabytes(total)}`);
    },
    onError(error) {
      const response = error.originalResponse;
      let why = error.message;
      if (response) {
        try {
          why = JSON.parse(response.getBody()).error.message || why;
        } catch (_) {
          // Not vidq's JSON (a proxy's page): the message tus-js-client made is kept.
        }
      }
      say("upload-status", `The upload stopped: ${why}`, "error");
      document.body.dataset.upload = "failed";
    },
    onSuccess() {
      const id = tusUpload.url.split("/").pop();
      state.uploads.set(id, file.name);
      progress.value = 100;
      document.body.dataset.upload = "sent";
      listResumable();
      say("upload-status", `${file.name} is in. vidq lands it in the bucket and queues it...`, "ok");
      const video = state.accepted.get(id);
      if (video) {
        follow(video, file.name);
      } else {
        waitForConfirm(id, file.name);
      }
    },
  };
  const tusUpload = new tus.Upload(file, options);
  const previous = await tusUpload.findPreviousUploads();
  if (previous.length > 0) {
    // The same file, started before a reload: go on from the offset the server holds.
    tusUpload.resumeFromPreviousUpload(previous[0]);
    say("upload-status", `Resuming ${file.name}...`);
    document.body.dataset.upload = "resuming";
  } else {
    document.body.dataset.upload = "uploading";
  }
  tusUpload.start();
}

// The `video.accepted` event names the video; should the feed be slow, the upload's own
// status says it too.
async function waitForConfirm(uploadId, name) {
  for (let i = 0; i < 120 && !state.accepted.has(uploadId); i += 1) {
    try {
      const status = await api(`/v1/uploads/${uploadId}`);
      if (status.video_id) {
        follow(status.video_id, name);
        return;
      }
      if (status.state === "rejected" || status.state === "expired") {
        say("upload-status", `vidq did not take ${name}: ${status.reject_reason || status.state}`, "error");
        return;
      }
    } catch (_) {
      // Asked again below.
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

// Uploads interrupted earlier (a reload, a closed tab) that can go on.
async function listResumable() {
  const stored = await tus.defaultOptions.urlStorage.findAllUploads();
  const names = stored.map((u) => `${(u.metadata || {}).filename || "a file"} (${megabytes(u.size)})`);
  const el = $("resumable");
  el.hidden = names.length === 0;
  el.textContent = `Interrupted: ${names.join(", ")}. Drop the same file again to resume it.`;
}

// --- a video --------------------------------------------------------------------------------

function follow(videoId, name) {
  if (state.current === videoId) return;
  state.current = videoId;
  $("player-section").hidden = false;
  $("player-title").textContent = name || videoId;
  showVideo(videoId);
}

async function showVideo(videoId) {
  let video;
  try {
    video = await api(`/v1/videos/${videoId}`);
  } catch (error) {
    say("video-status", `Cannot read the video: ${error.message}`, "error");
    return;
  }
  if (state.current !== videoId) return;
  const el = $("player");
  el.dataset.video = videoId;
  el.dataset.status = video.status;
  if (video.status === "ready") {
    say("video-status", `Ready: ${seconds(video.duration_ms)}, ${video.width}×${video.height}.`, "ok");
    if (el.dataset.playing !== videoId) {
      el.dataset.playing = videoId;
      play(el, video.playback.hls_url, video.playback.thumbnail_url);
    }
  } else if (video.status === "failed") {
    say("video-status", `Failed: ${video.error ? video.error.message : "no reason given"}`, "error");
  } else {
    const progress = video.progress ? ` (${video.progress.done} of ${video.progress.total} parts)` : "";
    say("video-status", `${video.status}${progress}: a worker encodes it; this updates by itself.`);
    // Its end comes as an event; queued -> processing and a long video's parts are read.
    clearTimeout(state.videoTimer);
    state.videoTimer = setTimeout(() => state.current === videoId && showVideo(videoId), 3000);
  }
}

// Plays an HLS URL in a <video>: hls.js over MSE where the browser has it, else natively.
function play(el, url, poster) {
  const old = state.players.get(el.id);
  if (old) old.destroy();
  state.players.delete(el.id);
  if (poster) el.poster = poster;
  if (window.Hls && Hls.isSupported()) {
    const hls = new Hls({ enableWorker: false });
    hls.on(Hls.Events.ERROR, (_, data) => {
      if (!data.fatal) return;
      if (data.type === Hls.ErrorTypes.MEDIA_ERROR) {
        hls.recoverMediaError();
      } else {
        el.dataset.error = data.details;
        setTimeout(() => hls.loadSource(url), 2000);
      }
    });
    hls.loadSource(url);
    hls.attachMedia(el);
    state.players.set(el.id, hls);
  } else {
    el.src = url;
  }
  el.play().catch(() => {
    // Autoplay refused (a browser setting): the controls are there.
  });
}

// --- going live -----------------------------------------------------------------------------

async function goLive() {
  let recording;
  try {
    recording = await api("/v1/live", { method: "POST" });
  } catch (error) {
    say("live-status", `Cannot go live: ${error.message}`, "error");
    $("live-details").hidden = false;
    return;
  }
  state.live = recording;
  $("live-details").hidden = false;
  $("live-server").textContent = recording.rtmp_url || "(RTMP is off on this server)";
  $("live-key").textContent = recording.stream_key || "";
  $("live-ffmpeg").textContent = recording.rtmp_url
    ? `ffmpeg -re -i in.mp4 -c:v libx264 -g 50 -c:a aac -f flv "${recording.rtmp_url}/${recording.stream_key}"`
    : `ffmpeg -re -i in.mp4 -c copy -f hls -hls_segment_type fmp4 -method PUT "${recording.ingest_url}index.m3u8"`;
  watchLive(recording.id, state.generation);
}

async function watchLive(id, generation) {
  const el = $("live-player");
  while (generation === state.generation && state.live && state.live.id === id) {
    let recording;
    try {
      recording = await api(`/v1/live/${id}`);
    } catch (error) {
      say("live-status", `Cannot read the broadcast: ${error.message}`, "error");
      await new Promise((resolve) => setTimeout(resolve, 2000));
      continue;
    }
    el.dataset.state = recording.state;
    const segments = recording.segments || {};
    say("live-status", `${recording.state}: ${segments.received || 0} segments received.`);
    // Two segments listed make a playlist a player can start on.
    if (el.dataset.playing !== id && (segments.received || 0) >= 2) {
      el.dataset.playing = id;
      play(el, recording.playback_url);
    }
    if (["ended", "ready", "failed"].includes(recording.state)) {
      $("end-live").hidden = true;
      if (recording.video_id) say("live-status", `${recording.state}: it becomes video ${recording.video_id}.`);
      if (recording.state !== "ended") return;
    }
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}

async function endLive() {
  if (!state.live) return;
  try {
    await api(`/v1/live/${state.live.id}/end`, { method: "POST" });
    say("live-status", "Ending: the encoder may stay connected; what arrived is kept.");
  } catch (error) {
    say("live-status", `Cannot end it: ${error.message}`, "error");
  }
}

// --- the list -------------------------------------------------------------------------------

let refreshing = null;
function refreshVideos() {
  // One refresh at a time, and one more after it if asked meanwhile.
  if (refreshing) {
    refreshing.again = true;
    return;
  }
  refreshing = { again: false };
  loadVideos().finally(() => {
    const again = refreshing.again;
    refreshing = null;
    if (again) refreshVideos();
  });
}

async function loadVideos() {
  let page;
  try {
    page = await api("/v1/videos?limit=20");
  } catch (error) {
    say("videos-status", `Cannot list the videos: ${error.message}`, "error");
    return;
  }
  const body = $("videos").tBodies[0];
  body.replaceChildren(...page.videos.map(row));
  say("videos-status", page.videos.length ? "" : "No videos yet.");
}

function row(video) {
  const tr = document.createElement("tr");
  tr.dataset.video = video.id;
  tr.dataset.status = video.status;
  const size = video.width ? `${video.width}×${video.height}` : "";
  for (const text of [new Date(video.created_at).toLocaleString(), video.source, video.status,
    seconds(video.duration_ms), size]) {
    const td = document.createElement("td");
    td.textContent = text;
    tr.appendChild(td);
  }
  const td = document.createElement("td");
  if (video.status === "ready") {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = "Play";
    button.addEventListener("click", () => follow(video.id, new Date(video.created_at).toLocaleString()));
    td.appendChild(button);
  }
  tr.appendChild(td);
  return tr;
}

// --- wiring ---------------------------------------------------------------------------------

function megabytes(bytes) {
  return `${(bytes / 1048576).toFixed(1)} MiB`;
}

function seconds(ms) {
  return ms == null ? "" : `${(ms / 1000).toFixed(1)} s`;
}

function start() {
  const filled = document.querySelector('meta[name="vidq-key"]').content;
  const key = filled || localStorage.getItem(KEY_STORAGE) || "";
  $("api-key").value = key;
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    useKey($("api-key").value);
  });
  const drop = $("drop");
  drop.addEventListener("dragover", (event) => {
    event.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    if (event.dataTransfer.files.length) upload(event.dataTransfer.files[0]);
  });
  $("file").addEventListener("change", (event) => {
    if (event.target.files.length) upload(event.target.files[0]);
  });
  $("go-live").addEventListener("click", goLive);
  $("end-live").addEventListener("click", endLive);
  $("refresh").addEventListener("click", refreshVideos);
  listResumable();
  if (key) {
    useKey(key);
  } else {
    say("key-status", "Paste an API key: `vidq user create --name me` prints one.");
  }
}

start();
