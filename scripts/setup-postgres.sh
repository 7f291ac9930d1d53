#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster for the store tests and exports
# AGENTPLANE_TEST_POSTGRES: the DSN of its superuser, with which each test
# creates (and drops) a database of its own. It installs Debian's postgresql
# only if no server binaries are found, keeps the cluster in a folder under
# $AGENTPLANE_TOOLS (default ~/.cache/agentplane-tools/postgres) owned by the
# postgres user (the server refuses to run as root), listens on 127.0.0.1
# only, on a free port, with its unix socket in the same folder.
#
# Source it (scripts/test.sh does) to get the variables; AGENTPLANE_PG_PID is
# the postmaster's PID and pg_stop_test_cluster stops it. Run directly, it
# starts the cluster and prints the export line.
set -euo pipefail

TOOLS="${AGENTPLANE_TOOLS:-$HOME/.cache/agentplane-tools}"

pg_bindir() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/postgres" ] && { echo "$d"; return 0; }
  done
  return 1
}

if ! PGBIN="$(pg_bindir)"; then
  printf '\n=== installing postgresql (apt-get)\n'
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql
  PGBIN="$(pg_bindir)"
fi

# as_pg runs a server program as the postgres user when we are root.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

PGROOT="$TOOLS/postgres"
PGDATA="$PGROOT/data"
mkdir -p "$PGROOT"
if [ "$(id -u)" = 0 ]; then
  chown postgres: "$PGROOT"
  # The cache folder's parents must be traversable by the postgres user.
  d="$PGROOT"
  while [ "$d" != / ]; do d="$(dirname "$d")"; chmod o+x "$d" 2>/dev/null || true; done
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  printf '\n=== creating a PostgreSQL test cluster in %s\n' "$PGDATA"
  as_pg "$PGBIN/initdb" -D "$PGDATA" -U postgres --auth=trust --encoding=UTF8 --no-locale >/dev/null
fi
# A cluster left running by an interrupted run is stopped first.
if [ -s "$PGDATA/postmaster.pid" ]; then
  as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -m immediate stop >/dev/null 2>&1 || true
fi

PGPORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
# fsync stays on: the tests measure what a durable append costs.
as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -l "$PGROOT/server.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $PGPORT -c unix_socket_directories=$PGROOT -c max_connections=300" start >/dev/null
AGENTPLANE_PG_PID="$(head -1 "$PGDATA/postmaster.pid")"
export AGENTPLANE_PG_PID
export AGENTPLANE_TEST_POSTGRES="postgres://postgres@127.0.0.1:$PGPORT/postgres?sslmode=disable"
export AGENTPLANE_PG_BIN="$PGBIN" AGENTPLANE_PG_DATA="$PGDATA"

# pg_stop_test_cluster stops the cluster this script started, by its PID.
pg_stop_test_cluster() {
  if [ -n "${AGENTPLANE_PG_PID:-}" ] && kill -0 "$AGENTPLANE_PG_PID" 2>/dev/null; then
    kill -INT "$AGENTPLANE_PG_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$AGENTPLANE_PG_PID" 2>/dev/null || break; sleep 0.1; done
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  echo "export AGENTPLANE_TEST_POSTGRES='$AGENTPLANE_TEST_POSTGRES' AGENTPLANE_PG_PID=$AGENTPLANE_PG_PID"
fi
