#!/usr/bin/env bash
# Runs every benchmark of docs/benchmarks.md, one after the other, on the commit checked out,
# and keeps each one's output in target/bench-results/NAME.txt under a header naming the
# date, the commit, the machine and the peers' versions: the tables are copied from there.
#   scripts/bench_all.sh [NAME...]     (no name: all of them, in the order below)
# Needs what .ci/run installs, plus the peers: npm ci --prefix scripts/peers/graphile-worker
# and npm ci --prefix scripts/peers/tus-node (this script runs both). Leave the machine
# otherwise idle while it runs: the figures are rates on shared cores.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/bench-results
mkdir -p "$out"
cargo build --release -q
if ! command -v fio >/dev/null; then
  echo "installing: fio (the spool's limit)"
  if [ "$(id -u)" = 0 ]; then apt-get install -y -qq fio >/dev/null; else sudo apt-get install -y -qq fio >/dev/null; fi
fi
for peer in graphile-worker tus-node; do
  npm ci --prefix "scripts/peers/$peer" --no-audit --no-fund --loglevel=error
done
vidq=./target/release/vidq

header() {
  local commit dirty=""
  commit=$(git rev-parse --short HEAD)
  git diff --quiet HEAD -- src migrations Cargo.toml Cargo.lock scripts || dirty=" (with changes not committed)"
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit: $commit$dirty"
  echo "machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(uname -r)"
  echo "disk: $(df -T . | awk 'NR==2 {print $2}') on $(df . | awk 'NR==2 {print $1}')"
  echo "postgresql: $(psql -h 127.0.0.1 -U postgres -Atc 'SHOW server_version' postgres 2>/dev/null || echo '?'), pgbench $(pgbench --version 2>/dev/null | awk '{print $3}')"
  echo "ffmpeg: $(ffmpeg -version | awk 'NR==1 {print $3}'), node $(node --version), $(fio --version)"
  local settings
  settings=$(env | grep -E '^VIDQ_' | sort | tr '\n' ' ' || true)
  echo "settings from the environment: ${settings:-none}"
  echo "peers: graphile-worker $(node -p 'require("./scripts/peers/graphile-worker/node_modules/graphile-worker/package.json").version'), @tus/server $(node -p 'require("./scripts/peers/tus-node/node_modules/@tus/server/package.json").version'), @tus/s3-store $(node -p 'require("./scripts/peers/tus-node/node_modules/@tus/s3-store/package.json").version'), @tus/file-store $(node -p 'require("./scripts/peers/tus-node/node_modules/@tus/file-store/package.json").version')"
}

run() {
  local name=$1
  shift
  echo "== $name: $*"
  { header; echo "command: $*"; echo; "$@" 2>&1; } > "$out/$name.txt" || echo "   FAILED: see $out/$name.txt"
}

all=(tus-spool tus-s3-https tus-s3-http api live-rtmp live-hls queue relay sweeper e2e
  encode claim-plan chaos queue-sustained long-video)
for name in "${@:-${all[@]}}"; do
  case $name in
    tus-spool) run "$name" $vidq bench tus --store spool --spool-dir target/bench-spool ;;
    tus-s3-https) run "$name" $vidq bench tus --store s3 --s3-tls ;;
    tus-s3-http) run "$name" $vidq bench tus --store s3 ;;
    api) run "$name" $vidq bench api ;;
    live-rtmp) run "$name" $vidq bench live --protocol rtmp --streams 1,8,16,32 --rounds 3 ;;
    live-hls) run "$name" $vidq bench live --protocol hls --streams 1,2,4,8,16,32 ;;
    queue) run "$name" $vidq bench queue --jobs 10000 --workers 2,8 --backlog 1000,100000 --rounds 3 --slots 1,8 ;;
    relay) run "$name" $vidq bench relay ;;
    sweeper) run "$name" $vidq bench sweeper --pending 128,1100,4096 --repeat 5 --failing 1000 ;;
    e2e) run "$name" $vidq bench e2e ;;
    encode) run "$name" python3 scripts/bench_encode.py --rounds 5 ;;
    claim-plan) run "$name" scripts/explain_claim.sh 100000 ;;
    chaos) run "$name" $vidq bench chaos --seconds 600 ;;
    queue-sustained) run "$name" $vidq bench queue --sustained 1000000 --workers 2 --slots 1 ;;
    long-video) run "$name" $vidq bench e2e --long 600 --workers 1,2 ;;
    *) echo "no benchmark named $name (known: ${all[*]})" >&2; exit 2 ;;
  esac
done
