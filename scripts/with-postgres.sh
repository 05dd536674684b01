#!/usr/bin/env bash
# with-postgres.sh CMD [ARG...]
#
# Runs CMD with TURNSTILE_POSTGRES_URL pointing at a PostgreSQL database and
# exits with CMD's status.
#
# If TURNSTILE_POSTGRES_URL is already set, CMD just runs against that database.
# Otherwise a throwaway cluster is created in a temporary directory: initdb and
# pg_ctl are looked up in /usr/lib/postgresql/*/bin (newest first), then PATH;
# when they are missing and CI=true, the postgresql package is installed with
# apt-get (as root, or through sudo). The cluster listens on 127.0.0.1 on a free
# port with trust authentication for loopback only, is owned by the postgres
# system user when this runs as root, and is tuned for tests (fsync stays on).
# It is stopped (by its postmaster pid) and removed when the script exits,
# whatever happens to CMD.
#
# Examples:
#   scripts/with-postgres.sh go test -race -count=1 ./eventstore/...
#   TURNSTILE_POSTGRES_URL=postgres://me:secret@db:5432/turnstile scripts/with-postgres.sh go test ./eventstore/postgres/
#   TURNSTILE_PG_EXTRA_CONF="shared_preload_libraries = 'pg_stat_statements'" scripts/with-postgres.sh …
#     (lines appended to the throwaway cluster's postgresql.conf)
set -euo pipefail

prog=$(basename "$0")
log() { echo "$prog: $*" >&2; }

if [[ $# -eq 0 ]]; then
	echo "usage: $prog CMD [ARG...]  (runs CMD with TURNSTILE_POSTGRES_URL set)" >&2
	exit 2
fi

if [[ -n "${TURNSTILE_POSTGRES_URL:-}" ]]; then
	exec "$@"
fi

# as_root runs a command as root: directly, or through sudo.
as_root() {
	if [[ $(id -u) -eq 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null; then
		sudo "$@"
	else
		log "need root (or sudo) to run: $*"
		return 1
	fi
}

find_bindir() {
	local d
	# Newest major version first.
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -rn); do
		if [[ -x $d/initdb && -x $d/pg_ctl ]]; then
			echo "$d"
			return
		fi
	done
	if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
		dirname "$(command -v initdb)"
	fi
}

bindir=$(find_bindir)
if [[ -z $bindir && ${CI:-} == true ]]; then
	log "PostgreSQL server binaries not found; CI=true, installing the postgresql package"
	if ! command -v apt-get >/dev/null; then
		log "no apt-get here: install the PostgreSQL server, or set TURNSTILE_POSTGRES_URL"
		exit 127
	fi
	# Do not let the package create and start its own cluster: we make ours.
	as_root mkdir -p /etc/postgresql-common/createcluster.d
	echo 'create_main_cluster = false' | as_root tee /etc/postgresql-common/createcluster.d/turnstile-ci.conf >/dev/null
	as_root apt-get update -q
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql
	bindir=$(find_bindir)
fi
if [[ -z $bindir ]]; then
	log "initdb and pg_ctl not found (looked in /usr/lib/postgresql/*/bin and PATH)."
	log "Install the PostgreSQL server (e.g. apt-get install postgresql), or set"
	log "TURNSTILE_POSTGRES_URL=postgres://user:pass@host:port/db to use an existing database."
	exit 127
fi

# The cluster belongs to a non-root user: PostgreSQL refuses to run as root.
run_as=()
if [[ $(id -u) -eq 0 ]]; then
	if ! id postgres >/dev/null 2>&1; then
		log "running as root, but there is no 'postgres' system user to own the cluster"
		exit 1
	fi
	if command -v runuser >/dev/null; then
		run_as=(runuser -u postgres --)
	else
		run_as=(su postgres -s /bin/sh -c '"$0" "$@"')
	fi
fi
pg() { "${run_as[@]}" "$@"; }

# As root, under /tmp: the postgres user must be able to reach it.
tmpbase=${TMPDIR:-/tmp}
if [[ ${#run_as[@]} -gt 0 ]]; then
	tmpbase=/tmp
fi
tmp=$(mktemp -d "$tmpbase/turnstile-pg.XXXXXX")
pid=""
cleanup() {
	local status=$?
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		kill -INT "$pid" 2>/dev/null || true # fast shutdown
		for _ in $(seq 1 300); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "postmaster $pid did not stop in 30s; sending SIGQUIT"
			kill -QUIT "$pid" 2>/dev/null || true
			sleep 1
		fi
	fi
	rm -rf "$tmp"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ ${#run_as[@]} -gt 0 ]]; then
	chown postgres: "$tmp"
fi
chmod 700 "$tmp"

pg "$bindir/initdb" -D "$tmp/data" -U postgres -E UTF8 --locale=C \
	--auth-local=trust --auth-host=trust --no-sync >"$tmp/initdb.log" 2>&1 || {
	cat "$tmp/initdb.log" >&2
	exit 1
}
# Loopback only, trust: replace initdb's pg_hba.conf with exactly that.
pg sh -c "cat >'$tmp/data/pg_hba.conf'" <<'HBA'
local all all               trust
host  all all 127.0.0.1/32  trust
host  all all ::1/128       trust
HBA
pg sh -c "cat >>'$tmp/data/postgresql.conf'" <<CONF
# turnstile tests: a throwaway cluster. Durability settings stay as in
# production (fsync, synchronous_commit, full_page_writes) so timings mean
# something; the rest is sized for many parallel test connections.
listen_addresses = '127.0.0.1'
unix_socket_directories = '$tmp'
max_connections = 300
shared_buffers = 256MB
work_mem = 16MB
maintenance_work_mem = 128MB
max_wal_size = 2GB
checkpoint_timeout = 15min
max_locks_per_transaction = 256
fsync = on
synchronous_commit = on
full_page_writes = on
log_min_messages = warning
log_min_duration_statement = -1
CONF
if [[ -n "${TURNSTILE_PG_EXTRA_CONF:-}" ]]; then
	# Extra settings for a measurement, e.g.
	# TURNSTILE_PG_EXTRA_CONF="shared_preload_libraries = 'pg_stat_statements'"
	printf '%s\n' "$TURNSTILE_PG_EXTRA_CONF" | pg sh -c "cat >>'$tmp/data/postgresql.conf'"
fi

free_port() {
	local port
	for _ in $(seq 1 100); do
		port=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return
		fi
	done
	return 1
}

started=""
for _ in 1 2 3 4 5; do
	port=$(free_port) || break
	if pg "$bindir/pg_ctl" -D "$tmp/data" -l "$tmp/postgres.log" -o "-p $port" -w -t 60 start >/dev/null 2>&1; then
		started=yes
		break
	fi
	log "could not start on port $port; trying another"
done
if [[ -z $started ]]; then
	log "PostgreSQL did not start; its log:"
	cat "$tmp/postgres.log" >&2 || true
	exit 1
fi
pid=$(head -n 1 "$tmp/data/postmaster.pid")

pg "$bindir/createdb" -h 127.0.0.1 -p "$port" -U postgres turnstile_test

export TURNSTILE_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/turnstile_test?sslmode=disable"
log "PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (pid $pid, data in $tmp)"

set +e
"$@"
status=$?
set -e
exit "$status"
