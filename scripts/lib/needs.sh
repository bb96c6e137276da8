# Sourced by scripts/dev and scripts/test: installs what is missing, says what it installs,
# and does nothing for what is already there (so both are safe to run again). Debian and
# Ubuntu (apt); as a user other than root, apt runs under sudo.

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

apt_updated=""
# install_packages PACKAGE...: apt-get install, saying what.
install_packages() {
  echo "installing (apt): $*"
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "$apt_updated" ]; then
    as_root apt-get update -qq
    apt_updated=1
  fi
  as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# need_packages COMMAND:PACKAGE[,PACKAGE...] ...: installs the packages of each missing command.
need_packages() {
  local wanted=() entry
  for entry in "$@"; do
    command -v "${entry%%:*}" >/dev/null 2>&1 || wanted+=(${entry#*:})
  done
  # One of each (ffmpeg and ffprobe are one package).
  read -r -a wanted <<< "$(printf '%s\n' ${wanted[@]//,/ } | sort -u | tr '\n' ' ')"
  [ ${#wanted[@]} -eq 0 ] || install_packages "${wanted[@]}"
}

# Rust (rustup's, under ~/.cargo/bin, or any on PATH), and the C compiler and linker some
# dependencies build with (the TLS libraries).
need_rust() {
  if [ -x "$HOME/.cargo/bin/cargo" ]; then export PATH="$HOME/.cargo/bin:$PATH"; fi
  if ! command -v cargo >/dev/null 2>&1; then
    echo "no cargo found: install Rust (https://rustup.rs), then run this again" >&2
    exit 1
  fi
  # Cargo fetches crates over HTTPS, trusting the system's certificates.
  need_packages cc:build-essential update-ca-certificates:ca-certificates
}

# PostgreSQL's server (initdb, postgres; pgbench and psql come with it): vidq dev and the
# tests start a private server from it when none answers on localhost:5432.
need_postgres() {
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || install_packages postgresql
}

# The real clients the tests drive, at the versions tests/clients pins: tus-js-client and
# playwright-core on Node.js, tuspy, schemathesis and the AWS CLI on Python.
need_test_clients() {
  local clients=tests/clients
  # Installed by this once for the lock file as it is now: not again.
  if ! [ "$clients/node_modules/.vidq-lock" -nt "$clients/package-lock.json" ]; then
    echo "installing (npm): $clients (tus-js-client, playwright-core)"
    npm ci --prefix "$clients" --no-audit --no-fund --loglevel=error
    touch "$clients/node_modules/.vidq-lock"
  fi
  if ! python3 -c 'import tusclient, schemathesis, awscli' >/dev/null 2>&1; then
    python3 -m pip --version >/dev/null 2>&1 || install_packages python3-pip
    echo "installing (pip): $clients/requirements.txt (tuspy, schemathesis, the AWS CLI)"
    # Into the interpreter the tests run; Debian marks its own as externally managed.
    if [ "$(id -u)" = 0 ]; then
      python3 -m pip install -q --disable-pip-version-check --break-system-packages -r "$clients/requirements.txt"
    else
      python3 -m pip install -q --disable-pip-version-check --user --break-system-packages -r "$clients/requirements.txt"
    fi
  fi
}
