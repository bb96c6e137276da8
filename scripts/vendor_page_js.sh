#!/usr/bin/env bash
# Fetches the upload page's JavaScript from npm at the pinned versions into
# src/http/page/vendor/, with the licences of everything each file bundles, and checks every
# file against the SHA-256 recorded in src/http/page/vendor/SHA256SUMS. The page is served
# from the binary (no CDN, no build step); this is how its vendored files are made and
# verified.
#   scripts/vendor_page_js.sh          fetch, write, verify
#   scripts/vendor_page_js.sh --check  verify only (fetches to a temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
vendor=src/http/page/vendor
check_only=${1:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fetch() { # package@version -> $work/package@version/package/...
  mkdir -p "$work/$1"
  (cd "$work/$1" && npm pack "$1" --silent >/dev/null && tar xzf ./*.tgz)
}
fetch hls.js@1.7.4
fetch tus-js-client@4.3.1
# What tus-js-client's browser bundle carries inside it (its dist/tus.min.js).
fetch js-base64@3.7.7
fetch url-parse@1.5.10
fetch querystringify@2.2.0
fetch requires-port@1.0.0

out=$work/out
mkdir -p "$out"
cp "$work/hls.js@1.7.4/package/dist/hls.light.min.js" "$out/hls.light.min.js"
cp "$work/tus-js-client@4.3.1/package/dist/tus.min.js" "$out/tus.min.js"
{
  echo "Licences of the JavaScript vendored in this directory, served by vidq's upload page."
  echo "hls.light.min.js is hls.js 1.7.4 (Apache-2.0). tus.min.js is tus-js-client 4.3.1 (MIT),"
  echo "which bundles js-base64 3.7.7 (BSD-3-Clause), url-parse 1.5.10, querystringify 2.2.0 and"
  echo "requires-port 1.0.0 (MIT). Each licence follows as its package ships it."
  for entry in "hls.js 1.7.4:hls.js@1.7.4/package/LICENSE" \
    "tus-js-client 4.3.1:tus-js-client@4.3.1/package/LICENSE" \
    "js-base64 3.7.7:js-base64@3.7.7/package/LICENSE.md" \
    "url-parse 1.5.10:url-parse@1.5.10/package/LICENSE" \
    "querystringify 2.2.0:querystringify@2.2.0/package/LICENSE" \
    "requires-port 1.0.0:requires-port@1.0.0/package/LICENSE"; do
    echo
    echo "==== ${entry%%:*} ===="
    echo
    cat "$work/${entry#*:}"
  done
} > "$out/LICENSES.txt"

(cd "$out" && sha256sum --check --quiet "$OLDPWD/$vendor/SHA256SUMS" 2>/dev/null) || {
  if [ "$check_only" = --check ] || [ -s "$vendor/SHA256SUMS" ]; then
    echo "the files npm serves differ from $vendor/SHA256SUMS" >&2
    [ "$check_only" = --check ] && exit 1
  fi
}
if [ "$check_only" = --check ]; then
  (cd "$vendor" && sha256sum --check --quiet SHA256SUMS)
  echo "vendored page JavaScript matches npm's"
  exit 0
fi
cp "$out"/* "$vendor/"
(cd "$vendor" && sha256sum hls.light.min.js tus.min.js LICENSES.txt > SHA256SUMS)
echo "wrote $vendor: $(cd "$vendor" && ls | tr '\n' ' ')"
