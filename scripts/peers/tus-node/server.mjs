// The peer `vidq bench tus` measures vidq against: @tus/server on 127.0.0.1 (a free port,
// printed as `listening=PORT`), with the store the bench names:
//
//   node server.mjs file DIRECTORY
//   node server.mjs s3 ENDPOINT BUCKET PART_BYTES
//
// The S3 store runs at its documented settings but for the part size, which is the one vidq
// is given (`partSize` and `minPartSize` both, so every part but the last has that size):
// `maxConcurrentPartUploads` 60, its in-memory cache, no expiration. Credentials come from
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; an HTTPS endpoint's certificate from
// NODE_EXTRA_CA_CERTS. The server stops when its stdin closes (the bench dropping it).
import http from "node:http";
import { Server } from "@tus/server";

const [store, ...rest] = process.argv.slice(2);
let datastore;
if (store === "file") {
  const { FileStore } = await import("@tus/file-store");
  datastore = new FileStore({ directory: rest[0] });
} else if (store === "s3") {
  const { S3Store } = await import("@tus/s3-store");
  const [endpoint, bucket, partBytes] = rest;
  datastore = new S3Store({
    partSize: Number(partBytes),
    minPartSize: Number(partBytes),
    s3ClientConfig: {
      endpoint,
      bucket,
      region: "us-east-1",
      forcePathStyle: true,
      credentials: {
        accessKeyId: process.env.AWS_ACCESS_KEY_ID,
        secretAccessKey: process.env.AWS_SECRET_ACCESS_KEY,
      },
    },
  });
} else {
  console.error("usage: server.mjs file DIR | s3 ENDPOINT BUCKET PART_BYTES");
  process.exit(2);
}

const tus = new Server({ path: "/files", datastore });
const server = http.createServer((req, res) => tus.handle(req, res));
server.listen(0, "127.0.0.1", () => {
  console.log(`listening=${server.address().port}`);
});
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
