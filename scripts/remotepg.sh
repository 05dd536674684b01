#!/usr/bin/env bash
# remotepg.sh: turnstile on PostgreSQL as separate processes (the API, two
# executors, remote workers over HTTP), driven through the API alone, with
# River's figure beside it in the same minutes (issue 17, BENCHMARKS.md).
#
#   scripts/with-postgres.sh scripts/remotepg.sh [ROUNDS]
#
# Each round starts, in a fresh schema of $TURNSTILE_POSTGRES_URL:
#   turnstile serve --store … --executor=false --workers 0   (the API and the worker protocol)
#   turnstile executor --store …   ×2                         (one active on the lease, one standing by)
#   turnstile worker --server … --token …   ×$WORKERS, $SLOTS slots each (no database credentials)
# then runs scripts/remotebench against the API ($EXECUTIONS executions of
# $ACTIONS actions × $MAX_CONCURRENT, core.noop), stops the processes, and
# runs scripts/riverbench (the same pattern) in a fresh schema. Each
# program's last line is a JSON object; this script prints them prefixed
# with the round and what ran. The binary is $TURNSTILE_BIN (default: built
# into a temporary directory from this tree).
set -euo pipefail

rounds=${1:-1}
: "${TURNSTILE_POSTGRES_URL:?run under scripts/with-postgres.sh, or set TURNSTILE_POSTGRES_URL}"
EXECUTIONS=${EXECUTIONS:-20000}
ACTIONS=${ACTIONS:-10}
MAX_CONCURRENT=${MAX_CONCURRENT:-10}
WORKERS=${WORKERS:-8}
SLOTS=${SLOTS:-32}
PORT=${PORT:-18491}
SUBMITTERS=${SUBMITTERS:-64}
RATE=${RATE:-0}

root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
pids=()
stop_all() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap 'stop_all; rm -rf "$tmp"' EXIT

bin=${TURNSTILE_BIN:-}
if [[ -z $bin ]]; then
	bin=$tmp/turnstile
	(cd "$root" && go build -o "$bin" ./cmd/turnstile)
fi
(cd "$root" && go build -o "$tmp/remotebench" ./scripts/remotebench)

admin=admin-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
wtok=worker-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')

with_schema() { # URL SCHEMA
	if [[ $1 == *\?* ]]; then echo "$1&schema=$2"; else echo "$1?schema=$2"; fi
}

for round in $(seq 1 "$rounds"); do
	schema=remotepg_$(date +%s)_$round
	url=$(with_schema "$TURNSTILE_POSTGRES_URL" "$schema")
	log=$tmp/round$round
	mkdir -p "$log"
	"$bin" serve --store "$url" --migrate --executor=false --workers 0 --addr 127.0.0.1:$PORT \
		--token "admin:bench:$admin" --token "worker:workers:$wtok" >"$log/serve.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 1 300); do
		curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
		sleep 0.1
	done
	for i in 1 2; do
		"$bin" executor --store "$url" --name "executor-$i" >"$log/executor$i.log" 2>&1 &
		pids+=($!)
	done
	for i in $(seq 1 "$WORKERS"); do
		"$bin" worker --server "http://127.0.0.1:$PORT" --token "$wtok" --id "remote-$i" --slots "$SLOTS" >"$log/worker$i.log" 2>&1 &
		pids+=($!)
	done
	for _ in $(seq 1 300); do # until the workers are listed live
		live=$(curl -fs -H "Authorization: Bearer $admin" "http://127.0.0.1:$PORT/api/v1/workers" | grep -o '"status":"active"' | wc -l || true)
		[[ $live -ge $WORKERS ]] && break
		sleep 0.1
	done
	echo "round $round $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg): turnstile (serve, 2 executors, $WORKERS workers × $SLOTS slots, separate processes)"
	"$tmp/remotebench" --server "http://127.0.0.1:$PORT" --token "$admin" --executions "$EXECUTIONS" --actions "$ACTIONS" \
		--max-concurrent "$MAX_CONCURRENT" --submitters "$SUBMITTERS" --rate "$RATE" 2>"$log/remotebench.log" | tail -1
	hz=$(getconf CLK_TCK)
	for p in "${pids[@]}"; do # each process's RSS (peak) and CPU so far
		[[ -r /proc/$p/stat ]] || continue
		awk -v hz="$hz" -v what="$(tr '\0' ' ' </proc/$p/cmdline | cut -d' ' -f2-3)" \
			'{printf "  %-22s cpu %.2fs", what, ($14+$15)/hz}' "/proc/$p/stat"
		awk '/^VmHWM/ {printf "  peak rss %d MiB\n", $2/1024}' "/proc/$p/status"
	done
	stop_all
	if command -v psql >/dev/null; then # the round's schema is not kept (River drops its own)
		psql -q "$TURNSTILE_POSTGRES_URL" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || echo "  (could not drop schema $schema)"
	else
		echo "  (no psql: schema $schema is left in the database)"
	fi
	echo "round $round $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg): River ($ACTIONS queues × $MAX_CONCURRENT workers)"
	(cd "$root/scripts/riverbench" && go run . --url "$TURNSTILE_POSTGRES_URL" \
		--jobs "$EXECUTIONS" --queues "$ACTIONS" --workers "$MAX_CONCURRENT" --submitters "$SUBMITTERS" 2>"$log/river.log" | tail -1)
done
