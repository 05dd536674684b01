#!/usr/bin/env bash
# serve-restart.sh DATA_DIR [PORT]
#
# Times one start of `turnstile serve --workers 0` on an existing embedded
# store: from exec to the first 200 of /readyz (the folds caught up, from
# their snapshots when there are any), prints it with the process's peak RSS,
# then stops the server with SIGTERM (which saves fresh snapshots).
# Used for the restart figures in BENCHMARKS.md; run `make build` first.
set -euo pipefail
dir=${1:?usage: serve-restart.sh DATA_DIR [PORT]}
port=${2:-$((30000 + RANDOM % 20000))}
bin=$(dirname "$0")/../bin/turnstile
start=$(date +%s.%N)
"$bin" serve --data "$dir" --workers 0 --addr "127.0.0.1:$port" 2>"$dir/serve-restart.log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true' EXIT
until [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz" || true) == 200 ]]; do
	kill -0 "$pid" 2>/dev/null || { echo "serve exited; its log: $dir/serve-restart.log" >&2; exit 1; }
	sleep 0.02
done
end=$(date +%s.%N)
rss_kb=$(awk '/VmHWM/{print $2}' "/proc/$pid/status")
echo "ready in $(echo "$end - $start" | bc) s, peak RSS $((rss_kb / 1024)) MiB"
grep -o 'msg="[^"]*snapshot[^"]*"' "$dir/serve-restart.log" || true
kill -TERM "$pid"
wait "$pid" || true
trap - EXIT
