#!/usr/bin/env bash
# Makes docs/dashboard.png, the README's picture of the operator dashboard: starts `vidq dev`
# (private PostgreSQL, spare ports, a scratch data directory), gives it a little work and
# screenshots the dashboard with Debian's headless Chromium. Needs what the tests need
# (README: Quick start).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
# The private PostgreSQL runs as the postgres user when this runs as root: it must get in.
chmod 755 "$work"
trap 'kill "${dev:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
cargo build -q
export VIDQ_HTTP_ADDR=127.0.0.1:18080 VIDQ_DEV_S3_ADDR=127.0.0.1:19000 \
  VIDQ_INGEST_ADDR=127.0.0.1:18081 VIDQ_DEV_DATA_DIR="$work/data" \
  VIDQ_ADMIN_TOKEN=dashboard-screenshot-token
./target/debug/vidq dev --postgres private > "$work/dev.log" 2>&1 &
dev=$!
for _ in $(seq 1 60); do
  curl -sf http://127.0.0.1:18080/readyz >/dev/null && break
  sleep 1
done
url=$(grep -o 'postgres://[^ ]*/vidq' "$work/dev.log" | head -n 1)
key=$(DATABASE_URL="$url" ./target/debug/vidq user create --name alice 2>/dev/null)
ffmpeg -v error -f lavfi -i testsrc2=size=640x360:rate=25 -f lavfi -i sine -t 4 \
  -c:v libx264 -c:a aac -shortest "$work/clip.mp4"
mkdir -p docs
node tests/clients/dashboard_scene.mjs http://127.0.0.1:18080 "$VIDQ_ADMIN_TOKEN" "$key" \
  "$work/clip.mp4" "$work/dashboard.png"
# Fewer colours, same picture: keeps the committed file small.
ffmpeg -v error -y -i "$work/dashboard.png" -vf "split[a][b];[a]palettegen=max_colors=64[p];[b][p]paletteuse=dither=none" docs/dashboard.png
ls -l docs/dashboard.png
