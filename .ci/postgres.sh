#!/usr/bin/env bash
# Start a throw-away PostgreSQL server on 127.0.0.1 for the multi-worker study test and print
# the URL to export.  Debian packages; needs root.  Usage (in .ci/run):
#   export AUTOTUNE_TEST_POSTGRES_URL="$(.ci/postgres.sh)"
set -euo pipefail
PORT="${AUTOTUNE_PG_PORT:-55432}"
if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2
fi
VERSION="$(ls /usr/lib/postgresql | sort -n | tail -1)"
if ! pg_lsclusters -h | awk '{print $2}' | grep -qx autotune; then
  pg_createcluster "$VERSION" autotune -p "$PORT" -- --auth-local=peer --auth-host=scram-sha-256 >&2
fi
pg_ctlcluster "$VERSION" autotune start -o "-c listen_addresses=127.0.0.1" >&2 || true
for _ in $(seq 30); do
  su postgres -c "psql -p $PORT -h /var/run/postgresql -Atqc 'select 1'" >/dev/null 2>&1 && break
  sleep 0.5
done
su postgres -c "psql -p $PORT -h /var/run/postgresql -qc \"do \\\$\\\$ begin if not exists (select from pg_roles where rolname = 'autotune') then create role autotune login password 'autotune'; end if; end \\\$\\\$;\"" >&2
su postgres -c "psql -p $PORT -h /var/run/postgresql -Atqc \"select 1 from pg_database where datname = 'autotune'\"" | grep -q 1 \
  || su postgres -c "createdb -p $PORT -h /var/run/postgresql -O autotune autotune" >&2
echo "postgresql://autotune:autotune@127.0.0.1:${PORT}/autotune"
