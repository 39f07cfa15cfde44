#!/usr/bin/env bash
# A real PostgreSQL server for the tests, private to one build tree: on a free loopback port, with
# its socket and data under DIR, trusting local connections of the role `posbias`.
#   postgres_fixture.sh start DIR   initdb (first time) + start; writes the connection URI to DIR/uri
#   postgres_fixture.sh stop DIR    fast shutdown (the data stays for the next start)
# As root, the server runs as the `postgres` user (initdb refuses root).
set -euo pipefail
action="${1:?usage: postgres_fixture.sh start|stop DIR}"
dir="$(mkdir -p "${2:?usage: postgres_fixture.sh start|stop DIR}" && cd "$2" && pwd)"
bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
[ -x "$bin/pg_ctl" ] || { echo "postgres_fixture: PostgreSQL server binaries not found (install postgresql-15: scripts/setup.sh)" >&2; exit 1; }

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
# The server's files live where its user can reach them: DIR itself, or (as root, when a parent of
# DIR is closed to `postgres`) a folder of /var/tmp named after DIR.
home="$dir"
if [ "$(id -u)" -eq 0 ] && ! runuser -u postgres -- test -x "$dir"; then
  home="/var/tmp/posbias-postgres-$(printf '%s' "$dir" | sha256sum | cut -c1-16)"
  mkdir -p "$home"
fi
data="$home/data"
sock="$home/sock"
log="$home/server.log"

case "$action" in
  start)
    if [ -f "$data/postmaster.pid" ] && as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
      as_owner "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
    fi
    mkdir -p "$sock"
    if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres "$home" "$sock"; fi
    if [ ! -f "$data/PG_VERSION" ]; then
      rm -rf "$data"
      as_owner "$bin/initdb" -D "$data" -U posbias -A trust -E UTF8 --no-locale >"$home/initdb.log" 2>&1 \
        || { cat "$home/initdb.log" >&2; exit 1; }
    fi
    # A free port: ask the kernel for one, then start there (retry if another process took it).
    for attempt in 1 2 3 4 5; do
      port="$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
      if as_owner "$bin/pg_ctl" -D "$data" -l "$log" -w -t 30 \
          -o "-p $port -k $sock -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off" start >/dev/null; then
        break
      fi
      port=""
    done
    [ -n "$port" ] || { echo "postgres_fixture: the server did not start; its log:" >&2; cat "$log" >&2; exit 1; }
    "$bin/psql" -h 127.0.0.1 -p "$port" -U posbias -d postgres -qAt \
      -c "SELECT 1 FROM pg_database WHERE datname = 'posbias_test'" | grep -q 1 \
      || "$bin/createdb" -h 127.0.0.1 -p "$port" -U posbias posbias_test
    echo "postgresql://posbias@127.0.0.1:$port/posbias_test" >"$dir/uri"
    echo "postgres_fixture: PostgreSQL $("$bin/postgres" --version | awk '{print $3}') at $(cat "$dir/uri")"
    ;;
  stop)
    if [ -f "$data/postmaster.pid" ]; then as_owner "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null || true; fi
    rm -f "$dir/uri"
    ;;
  *)
    echo "usage: postgres_fixture.sh start|stop DIR" >&2
    exit 2
    ;;
esac
