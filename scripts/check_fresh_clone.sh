#!/usr/bin/env bash
# Checks the Quick start's promise on a machine with nothing but Debian's base and Rust: makes
# a Debian bookworm chroot with debootstrap (minbase), copies this machine's Rust toolchain
# into it (~/.rustup and ~/.cargo/bin; no crates, no build output), clones the committed HEAD
# of this repository, runs scripts/test inside it (which installs everything else), then
# scripts/dev until its upload page answers with a key filled in. Run as root on Debian;
# about 45 minutes on two cores. This machine's PostgreSQL and NATS are stopped meanwhile
# (and started again after), so the tests start their own from what scripts/test installed.
#   scripts/check_fresh_clone.sh [DIR]     (default /var/tmp/vidq-fresh, made anew)
set -euo pipefail
root=${1:-/var/tmp/vidq-fresh}
repo=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "run as root (debootstrap, chroot, mounts)" >&2; exit 2; }
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null

unmount() {
  for m in dev/pts dev proc sys; do umount -l "$root/$m" 2>/dev/null || true; done
}
services() { # start|stop this machine's PostgreSQL and NATS
  local cluster
  for cluster in /etc/postgresql/*/main; do
    [ -d "$cluster" ] || continue
    pg_ctlcluster --skip-systemctl-redirect "$(basename "$(dirname "$cluster")")" main "$1" 2>/dev/null || true
  done
  if [ "$1" = stop ]; then pkill -x nats-server || true; fi
  if [ "$1" = start ] && command -v nats-server >/dev/null; then
    start-stop-daemon --start --oknodo --background --exec "$(command -v nats-server)" -- \
      -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
  fi
}
unmount
rm -rf "$root"
echo "== debootstrap: Debian bookworm, minbase, into $root"
debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/dev/null
cp /etc/resolv.conf "$root/etc/resolv.conf"
# This machine's own certificate authorities (a network that inspects TLS has one), for
# the ca-certificates package scripts/test installs to take in.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
echo "== Rust: this machine's toolchain ($(rustc --version))"
mkdir -p "$root/root/.cargo"
cp -a "$HOME/.rustup" "$root/root/.rustup"
cp -a "$HOME/.cargo/bin" "$root/root/.cargo/bin"
echo "== a clean clone of $(git -C "$repo" rev-parse --short HEAD)"
git clone -q "$repo" "$root/root/vidq"
mount -t proc proc "$root/proc"
mount --bind /sys "$root/sys"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
services stop
trap 'unmount; services start' EXIT

# The settings that point tools at the system's certificates (Node.js and pip ship their
# own), when this machine has them.
tls_env=()
for name in SSL_CERT_FILE NODE_EXTRA_CA_CERTS PIP_CERT REQUESTS_CA_BUNDLE CURL_CA_BUNDLE AWS_CA_BUNDLE; do
  [ -n "${!name:-}" ] && tls_env+=("$name=${!name}")
done
inside() {
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 "${tls_env[@]}" \
    PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "cd /root/vidq && $1"
}
echo "== scripts/test"
start=$(date +%s)
inside scripts/test
echo "== scripts/test passed in $(( ($(date +%s) - start) / 60 )) min"

echo "== scripts/dev, until its page answers"
inside 'scripts/dev > /root/dev.log 2>&1 & echo $! > /root/dev.pid'
for _ in $(seq 1 600); do
  if inside 'curl -sf http://127.0.0.1:8080/ | grep -q "name=\"vidq-key\" content=\"vidq_"' 2>/dev/null; then
    echo "== scripts/dev: the page answers at http://127.0.0.1:8080/ with a key filled in"
    inside 'kill -INT $(pgrep -x vidq) 2>/dev/null; sleep 5; grep -c "vidq dev is running" /root/dev.log'
    exit 0
  fi
  sleep 1
done
echo "scripts/dev did not serve its page; its log:" >&2
tail -50 "$root/root/dev.log" >&2
exit 1
