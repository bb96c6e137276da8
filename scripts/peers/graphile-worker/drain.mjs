// The peer of `vidq bench queue`: graphile-worker draining JOBS jobs with CONCURRENCY
// workers while BACKLOG more stay queued behind them, as vidq's throughput run does.
// Prints one line with jobs_per_s=N (what the benchmark reads) and left=N.
//
//   node drain.mjs DATABASE_URL JOBS CONCURRENCY BACKLOG [noop|ready] [defaults|batched]
//
// noop (the default): the task does nothing, in an empty database.
// ready: the database holds vidq's schema and one queued video per job (the benchmark puts
// them there), and each task records what vidq's finalize records, the way an application
// on graphile-worker would: one prepared statement that sets the video READY and inserts its
// video.ready event into vidq's outbox, committed on its own; graphile-worker then completes
// the job in a second commit. That is the same rows written, without vidq's fence (the
// writes and the completion are not one transaction) and without its attempt ledger.
//
// defaults (the default): graphile-worker 0.18.0 as it comes, each worker fetching its own
// job and each completion its own commit.
// batched: the settings graphile-worker's documentation recommends for throughput
// (https://worker.graphile.org/docs/performance#batching): a local queue of CONCURRENCY + 1
// jobs fetched in one query (preset.worker.localQueue.size) and completions batched
// (preset.worker.completeJobBatchDelay 0, the smallest delay; failures likewise). A job held in
// the local queue or awaiting its batched completion is then lost to a crash until its lock
// expires (4 hours by default), the trade-off those settings make.
//
// graphile-worker installs its schema in the database. Timing starts before the runner
// connects (as vidq's starts before its workers do) and stops at the JOBS-th job:complete.
import { run, runMigrations, Logger } from "graphile-worker";
import pg from "pg";
import { randomBytes } from "node:crypto";
import { EventEmitter } from "node:events";

const [url, jobsArg, concurrencyArg, backlogArg = "0", mode = "noop", settings = "defaults"] =
  process.argv.slice(2);
const jobs = Number(jobsArg);
const concurrency = Number(concurrencyArg);
const backlog = Number(backlogArg);
if (
  !url ||
  !(jobs > 0) || !(concurrency > 0) || !(backlog >= 0) || !["noop", "ready"].includes(mode) ||
  !["defaults", "batched"].includes(settings)
) {
  console.error("usage: node drain.mjs DATABASE_URL JOBS CONCURRENCY BACKLOG [noop|ready] [defaults|batched]");
  process.exit(2);
}
// A log line per job would measure the logger, not the queue.
const silent = new Logger(() => () => {});
await runMigrations({ connectionString: url, logger: silent });

const setup = new pg.Client({ connectionString: url });
await setup.connect();
// One add_jobs call, like vidq's one-statement backlog: the drained jobs are the first
// JOBS ids, all with the same run_at, and the backlog sorts after them.
const added =
  mode === "noop"
    ? await setup.query(
        `SELECT count(*)::int AS n FROM graphile_worker.add_jobs(ARRAY(
           SELECT ('noop', '{}'::json, NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
           FROM generate_series(1, $1)))`,
        [jobs + backlog],
      )
    : // vidq's ids are time-ordered, so id order is the order the videos were queued in.
      await setup.query(
        `SELECT count(*)::int AS n FROM graphile_worker.add_jobs(ARRAY(
           SELECT ('ready', json_build_object('video_id', id), NULL, NULL, NULL, NULL, NULL, NULL)
                  ::graphile_worker.job_spec
           FROM videos WHERE status = 'queued' ORDER BY id LIMIT $1))`,
        [jobs + backlog],
      );
if (added.rows[0].n !== jobs + backlog) {
  console.error(`queued ${added.rows[0].n} jobs, not ${jobs + backlog}: are the videos there?`);
  process.exit(1);
}
await setup.query("CHECKPOINT");

// A UUIDv7, as vidq's event ids are: time-ordered, so the outbox's event_id index grows at
// its end as it does under vidq.
function uuidV7() {
  const hex = Date.now().toString(16).padStart(12, "0");
  const rand = randomBytes(10).toString("hex");
  const variant = (8 + (parseInt(rand[3], 16) & 3)).toString(16);
  return `${hex.slice(0, 8)}-${hex.slice(8)}-7${rand.slice(0, 3)}-${variant}${rand.slice(4, 7)}-${rand.slice(7, 19)}`;
}

// What vidq's finalize writes for a READY video, as one prepared statement.
const READY_SQL = `
WITH video AS (
  UPDATE videos
     SET status = 'ready', duration_ms = 2000, width = 320, height = 240, video_codec = 'h264',
         audio_codec = NULL, live_run = 1, live_attempt = 1, hls_key = $3, mp4_key = $4,
         thumbnail_key = $5, error_code = NULL, error_message = NULL, failed_at = NULL,
         ready_at = statement_timestamp(), updated_at = statement_timestamp()
   WHERE id = $1
  RETURNING id, owner_id)
INSERT INTO notification_outbox (event_id, event_type, owner_id, video_id, payload)
SELECT $2, 'video.ready', video.owner_id, video.id, $6::jsonb FROM video`;

async function ready(payload, helpers) {
  const video = payload.video_id;
  const event = uuidV7();
  const prefix = `videos/${video}/r1/a1`;
  const keys = [`${prefix}/hls/index.m3u8`, `${prefix}/video.mp4`, `${prefix}/thumb.jpg`];
  const envelope = {
    id: event,
    type: "video.ready",
    occurred_at: new Date().toISOString(),
    video_id: video,
    data: {
      status: "ready",
      run: 1,
      duration_ms: 2000,
      width: 320,
      height: 240,
      source: "upload",
      playback: { hls_key: keys[0], mp4_key: keys[1], thumbnail_key: keys[2] },
    },
  };
  const { rowCount } = await helpers.withPgClient((client) =>
    client.query({ name: "vidq_ready", text: READY_SQL, values: [video, event, ...keys, envelope] }),
  );
  if (rowCount !== 1) throw new Error(`video ${video} not found`);
}

let completed = 0;
let finish;
const finished = new Promise((resolve) => {
  finish = resolve;
});
// The runner's events, given before it starts so that its local queue's start is seen: a
// "batched" run without one would be a defaults run under another name.
const events = new EventEmitter();
let localQueues = 0;
events.on("localQueue:init", () => {
  localQueues += 1;
});
const started = performance.now();
const runner = await run({
  events,
  connectionString: url,
  concurrency,
  // One connection per worker and two for the runner's own listening and upkeep.
  maxPoolSize: concurrency + 2,
  pollInterval: 1000,
  noHandleSignals: true,
  logger: silent,
  taskList: { noop: async () => {}, ready },
  ...(settings === "batched"
    ? {
        preset: {
          worker: {
            localQueue: { size: concurrency + 1 },
            completeJobBatchDelay: 0,
            failJobBatchDelay: 0,
          },
        },
      }
    : {}),
});
if ((settings === "batched") !== localQueues > 0) {
  console.error(`settings=${settings} but ${localQueues} local queue(s) started`);
  process.exit(1);
}
runner.events.on("job:complete", () => {
  completed += 1;
  if (completed === jobs) finish(performance.now());
});
const ended = await finished;
await runner.stop();
const { rows } = await setup.query("SELECT count(*)::int AS n FROM graphile_worker.jobs");
await setup.end();

const seconds = (ended - started) / 1000;
console.log(
  `settings=${settings} jobs=${jobs} concurrency=${concurrency} backlog=${backlog} seconds=${seconds.toFixed(3)} ` +
    `jobs_per_s=${(jobs / seconds).toFixed(1)} left=${rows[0].n}`,
);
