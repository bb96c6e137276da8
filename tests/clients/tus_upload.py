#!/usr/bin/env python3
# Real-client driver for vidq's tus integration tests (tests/it): uploads one file
# to vidq's tus endpoint with tuspy (`tusclient`), chunked, with Upload-Checksum (sha1),
# and survives connection cuts through tuspy's own retry (HEAD for the offset, then PATCH
# from there). On success prints one JSON line: {"upload_url", "bytes", "retries_seen"};
# on failure exits 1 with the error on stderr.
#
# tuspy 1.1.0 retry facts (tusclient/uploader/uploader.py):
# - `retries`/`retry_delay` cover PATCH only; any failure (network error or any non-2xx,
#   4xx included) sleeps retry_delay, HEADs the upload for its offset, re-sends from that
#   offset. The budget is per chunk (reset after each accepted chunk).
# - The creation POST is NOT retried by tuspy, so we retry it here by calling the
#   library's own create_url() again (network errors, 5xx, 409, 423; like tus-js-client).
import argparse
import json
import os
import sys
import time

from tusclient import client
from tusclient.exceptions import TusCommunicationError
from tusclient.uploader import Uploader


class CountingUploader(Uploader):
    """tuspy has no retry hook; count the retries its own _retry_or_cry performs."""

    retries_seen = 0

    def _retry_or_cry(self, error):
        if self.retries > self._retried:  # tuspy will retry (else it re-raises)
            self.retries_seen += 1
            print(f"tus_upload.py: retrying after: {error!r}", file=sys.stderr)
        super()._retry_or_cry(error)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True, help="tus creation URL, e.g. http://127.0.0.1:PORT/v1/tus/")
    ap.add_argument("--token", required=True)
    ap.add_argument("--file", required=True)
    ap.add_argument("--chunk-size", type=int, default=1024 * 1024)
    ap.add_argument("--filetype", default="video/mp4")
    ap.add_argument("--retries", type=int, default=10)
    ap.add_argument("--retry-delay", type=float, default=0.2)
    ap.add_argument("--no-checksum", action="store_true", help="omit Upload-Checksum")
    a = ap.parse_args()

    tus = client.TusClient(a.endpoint, headers={"Authorization": f"Bearer {a.token}"})
    with open(a.file, "rb") as f:
        up = CountingUploader(
            client=tus,
            file_stream=f,  # seekable: tuspy seeks to the server's offset on each retry
            chunk_size=a.chunk_size,
            metadata={"filename": os.path.basename(a.file), "filetype": a.filetype},
            retries=a.retries,
            retry_delay=a.retry_delay,  # tuspy only calls time.sleep() with it, so floats work
            upload_checksum=not a.no_checksum,  # "Upload-Checksum: sha1 <base64>" per PATCH
        )
        # Creation: tuspy does not retry it, so retry the library's create_url() here.
        for attempt in range(a.retries + 1):
            try:
                up.set_url(up.create_url())
                break
            except TusCommunicationError as e:
                # like tus-js-client: retry network errors, 5xx, 409, 423; not other 4xx
                status = e.status_code or 0
                if attempt == a.retries or (400 <= status < 500 and status not in (409, 423)):
                    raise
                up.retries_seen += 1
                print(f"tus_upload.py: retrying creation after: {e!r}", file=sys.stderr)
                time.sleep(a.retry_delay)
        up.upload()  # PATCH chunks; tuspy's own retry/resume handles cuts
        print(json.dumps({"upload_url": up.url, "bytes": up.offset, "retries_seen": up.retries_seen}))


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - report any failure to the test
        detail = getattr(e, "response_content", None)
        print(f"tus_upload.py: upload failed: {e!r}" + (f" body={detail!r}" if detail else ""), file=sys.stderr)
        sys.exit(1)
