#!/usr/bin/env node
// Real-client driver for vidq's tus integration tests (tests/it): uploads one file to
// vidq's tus endpoint with tus-js-client (Node build: NodeHttpStack over node:http),
// chunked, and survives connection cuts through the library's own retry (retryDelays):
// after a failure it HEADs the upload URL for the server's offset, then PATCHes from there.
// On success prints one JSON line: {"upload_url", "bytes", "retries_seen"};
// on failure exits 1 with the error on stderr.
//
// The file is passed as an fs.ReadStream: tus-js-client then re-opens the file at any
// offset for each PATCH (nothing held in memory) and does not need `chunkSize`; a plain
// Readable would need a finite chunkSize and can only re-send its last buffered chunk.
// tus-js-client has no checksum support, so no Upload-Checksum is sent.
import { createReadStream, statSync } from 'node:fs'
import { basename } from 'node:path'
import { parseArgs } from 'node:util'
import { Upload, defaultOptions } from 'tus-js-client'

const { values: a } = parseArgs({
  options: {
    endpoint: { type: 'string' }, // tus creation URL, e.g. http://127.0.0.1:PORT/v1/tus/
    token: { type: 'string' },
    file: { type: 'string' },
    'chunk-size': { type: 'string', default: String(1024 * 1024) },
    filetype: { type: 'string', default: 'video/mp4' },
    retries: { type: 'string', default: '10' },
    'retry-delay': { type: 'string', default: '0.2' }, // seconds
    // Every PATCH as a POST with X-HTTP-Method-Override (for proxies that pass only GET
    // and POST).
    'override-patch': { type: 'boolean', default: false },
  },
})
for (const k of ['endpoint', 'token', 'file']) {
  if (!a[k]) {
    console.error(`tus_upload.mjs: --${k} is required`)
    process.exit(2)
  }
}

let retriesSeen = 0
const upload = new Upload(createReadStream(a.file), {
  endpoint: a.endpoint,
  headers: { Authorization: `Bearer ${a.token}` },
  chunkSize: Number(a['chunk-size']),
  overridePatchMethod: a['override-patch'],
  metadata: { filename: basename(a.file), filetype: a.filetype },
  // retryDelays' length is the number of retries; the counter resets whenever a
  // retry made progress, so it bounds consecutive failures without progress.
  retryDelays: Array(Number(a.retries)).fill(Number(a['retry-delay']) * 1000),
  // Keep the library's default decision (network error, 5xx, 409, 423 → retry;
  // other 4xx → fail); only count the retries it decides to make.
  onShouldRetry(err, attempt, options) {
    const retry = defaultOptions.onShouldRetry(err, attempt, options)
    if (retry) {
      retriesSeen++
      console.error(`tus_upload.mjs: retry ${attempt + 1} after: ${err.message}`)
    }
    return retry
  },
  onSuccess({ lastResponse }) {
    // Server-confirmed offset of the last PATCH (or HEAD); a 0-byte upload only has the POST.
    const bytes = Number(lastResponse.getHeader('Upload-Offset') ?? statSync(a.file).size)
    console.log(JSON.stringify({ upload_url: upload.url, bytes, retries_seen: retriesSeen }))
    process.exit(0)
  },
  onError(err) {
    console.error(`tus_upload.mjs: upload failed: ${err.stack || err}`)
    process.exit(1)
  },
})
upload.start()
