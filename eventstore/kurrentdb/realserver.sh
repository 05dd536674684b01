#!/bin/sh
# realserver.sh: the kurrentdb backend's real-server plan, in one command.
#
#   eventstore/kurrentdb/realserver.sh                 every version below, a single node then a
#                                                      three-node cluster each, in docker
#   eventstore/kurrentdb/realserver.sh 25.1 26.1       those versions only
#   TURNSTILE_KURRENTDB_URL='kurrentdb://host:2113?tls=false' eventstore/kurrentdb/realserver.sh
#                                                      a server you run yourself: the conformance
#                                                      suite and the tests that need no control of
#                                                      the server (restart, stop, kill, scavenge skip)
#   TURNSTILE_KURRENTDB_URL=fake eventstore/kurrentdb/realserver.sh
#                                                      a dry run of the plan on the in-process fake
#
# What runs (go doc / realserver_test.go say what each checks): TestConformance (the store
# conformance suite), then TestReal*: positions across a batch and its retries; the same ids
# with other content after later appends; writers racing with Exact; an Any retry across a
# restart; a subscription across a restart and a stop (the codes seen are logged); reads and
# subscriptions from the start after a scavenge; and, on the cluster, appends and a
# subscription while the leader is killed. Logs go to $OUT (default ./kurrentdb-real-<date>),
# one file per server; the last lines printed are the summary.
#
# Needs: docker, curl, go. Ports 2111-2113 must be free. Containers and the network are
# removed at the end (KEEP=1 keeps them).
#
# Images (override with IMAGE_<version with _ for .>, e.g. IMAGE_24_10=...):
#   24.10  EventStoreDB 24.10 (the last release under that name), docker.eventstore.com/eventstore-ce/eventstoredb-ce:24.10
#   25.0   docker.io/kurrentplatform/kurrentdb:25.0   (no multi-stream append)
#   25.1   docker.io/kurrentplatform/kurrentdb:25.1   (multi-stream append: AppendSession)
#   26.1   docker.io/kurrentplatform/kurrentdb:26.1   (AppendRecords, with checks on streams not written)
# Every server reads the EVENTSTORE_* settings used here (KurrentDB accepts both prefixes).

set -u
cd "$(dirname "$0")/../.." || exit 2 # the module's root

VERSIONS=${*:-24.10 25.0 25.1 26.1}
OUT=${OUT:-./kurrentdb-real-$(date -u +%Y%m%dT%H%M%SZ)}
RUN='TestConformance$|TestReal'
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: >"$summary"

# runtests NAME: runs the plan against $TURNSTILE_KURRENTDB_URL, logging to $OUT/NAME.log.
runtests() {
	echo "== $1: go test -run '$RUN' against $TURNSTILE_KURRENTDB_URL"
	go test -count=1 -timeout 30m -v -run "$RUN" ./eventstore/kurrentdb/ >"$OUT/$1.log" 2>&1
	rc=$?
	{
		echo "$1: exit $rc; $(grep -c -- '--- PASS' "$OUT/$1.log") passed, $(grep -c -- '--- FAIL' "$OUT/$1.log") failed, $(grep -c -- '--- SKIP' "$OUT/$1.log") skipped"
		grep -- '--- FAIL' "$OUT/$1.log" | sed 's/^/    /'
	} | tee -a "$summary"
}

if [ -n "${TURNSTILE_KURRENTDB_URL:-}" ]; then
	export TURNSTILE_KURRENTDB_URL
	runtests given-server
	exit 0
fi

command -v docker >/dev/null || {
	echo "realserver.sh: needs docker (or TURNSTILE_KURRENTDB_URL)" >&2
	exit 2
}

image() {
	var=IMAGE_$(echo "$1" | tr . _)
	eval "img=\${$var:-}"
	if [ -n "$img" ]; then
		echo "$img"
	elif [ "$1" = 24.10 ]; then
		echo docker.eventstore.com/eventstore-ce/eventstoredb-ce:24.10
	else
		echo "docker.io/kurrentplatform/kurrentdb:$1"
	fi
}

# Settings of every node: no TLS, appends up to turnstile's limit (16 MiB plus headers),
# small chunks so that a scavenge has completed chunks to work on, AtomPub to read a
# scavenge's stream over HTTP.
COMMON="-e EVENTSTORE_INSECURE=true -e EVENTSTORE_MAX_APPEND_SIZE=20971520 -e EVENTSTORE_CHUNK_SIZE=4194304
	-e EVENTSTORE_RUN_PROJECTIONS=None -e EVENTSTORE_TELEMETRY_OPTOUT=true -e EVENTSTORE_ALLOW_UNKNOWN_OPTIONS=true
	-e EVENTSTORE_ENABLE_ATOM_PUB_OVER_HTTP=true"

# waitup PORT: waits until the node on localhost:PORT answers /health/live.
waitup() {
	i=0
	until curl -fsS "http://localhost:$1/health/live" >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -gt 120 ] && return 1
		sleep 1
	done
}

cleanup() {
	[ "${KEEP:-}" = 1 ] && return
	docker rm -f turnstile-kdb turnstile-kdb-1 turnstile-kdb-2 turnstile-kdb-3 >/dev/null 2>&1
	docker network rm turnstile-kdb >/dev/null 2>&1
}
trap cleanup EXIT

for v in $VERSIONS; do
	img=$(image "$v")
	cleanup

	# One node.
	# shellcheck disable=SC2086
	docker run -d --name turnstile-kdb -p 2113:2113 $COMMON "$img" >/dev/null || {
		echo "$v single: cannot start $img" | tee -a "$summary"
		continue
	}
	if ! waitup 2113; then
		echo "$v single: $img did not come up" | tee -a "$summary"
		docker logs turnstile-kdb >"$OUT/$v-single.server.log" 2>&1
		continue
	fi
	echo "$v single: $(curl -fsS http://localhost:2113/info 2>/dev/null)" >>"$summary"
	export TURNSTILE_KURRENTDB_URL='kurrentdb://localhost:2113?tls=false'
	export TURNSTILE_KURRENTDB_RESTART='docker restart turnstile-kdb >/dev/null'
	export TURNSTILE_KURRENTDB_STOP='docker stop turnstile-kdb >/dev/null'
	export TURNSTILE_KURRENTDB_START='docker start turnstile-kdb >/dev/null'
	# A scavenge runs in the background: wait for its end, as /admin/scavenge/last reports
	# it (newer servers) or as its stream $scavenges-<id> records it (AtomPub, enabled above).
	export TURNSTILE_KURRENTDB_SCAVENGE='id=$(curl -fsS -u admin:changeit -X POST http://localhost:2113/admin/scavenge | sed -n "s/.*\"scavengeId\" *: *\"\([^\"]*\)\".*/\1/p");
		echo "scavenge $id started";
		for i in $(seq 300); do
			curl -fsS -u admin:changeit http://localhost:2113/admin/scavenge/last 2>/dev/null | grep -qi "success" && exit 0;
			curl -fsS -u admin:changeit -H "Accept: application/json" "http://localhost:2113/streams/%24scavenges-$id?embed=body" 2>/dev/null | grep -q scavengeCompleted && exit 0;
			sleep 1; done; echo "scavenge $id did not end in 5 minutes"; exit 1'
	unset TURNSTILE_KURRENTDB_KILL_LEADER
	runtests "$v-single"
	docker logs turnstile-kdb >"$OUT/$v-single.server.log" 2>&1
	docker rm -f turnstile-kdb >/dev/null 2>&1

	# Three nodes; the client sees them on localhost:2111..2113.
	docker network create --subnet 172.30.241.0/24 turnstile-kdb >/dev/null
	for n in 1 2 3; do
		seeds=""
		for m in 1 2 3; do [ $m != $n ] && seeds="$seeds${seeds:+,}172.30.241.1$m:2113"; done
		# shellcheck disable=SC2086
		docker run -d --name turnstile-kdb-$n --network turnstile-kdb --ip 172.30.241.1$n -p 211$n:2113 $COMMON \
			-e EVENTSTORE_CLUSTER_SIZE=3 -e EVENTSTORE_DISCOVER_VIA_DNS=false -e EVENTSTORE_GOSSIP_SEED="$seeds" \
			-e EVENTSTORE_REPLICATION_IP=172.30.241.1$n -e EVENTSTORE_NODE_IP=172.30.241.1$n \
			-e EVENTSTORE_ADVERTISE_HOST_TO_CLIENT_AS=localhost -e EVENTSTORE_ADVERTISE_NODE_PORT_TO_CLIENT_AS=211$n \
			"$img" >/dev/null
	done
	if ! waitup 2111 || ! waitup 2112 || ! waitup 2113; then
		echo "$v cluster: did not come up" | tee -a "$summary"
		for n in 1 2 3; do docker logs turnstile-kdb-$n >"$OUT/$v-cluster-$n.server.log" 2>&1; done
		continue
	fi
	sleep 10 # an election
	export TURNSTILE_KURRENTDB_URL='kurrentdb://localhost:2111,localhost:2112,localhost:2113?tls=false&nodePreference=leader'
	unset TURNSTILE_KURRENTDB_RESTART TURNSTILE_KURRENTDB_STOP TURNSTILE_KURRENTDB_START TURNSTILE_KURRENTDB_SCAVENGE
	export TURNSTILE_KURRENTDB_KILL_LEADER='for n in 1 2 3; do
		if curl -fsS http://localhost:211$n/info 2>/dev/null | grep -qi "\"state\" *: *\"leader\""; then
			echo "killing node $n, the leader"; docker kill turnstile-kdb-$n >/dev/null;
			(sleep 20; docker start turnstile-kdb-$n >/dev/null) & exit 0; fi; done; echo "no leader found"; exit 1'
	runtests "$v-cluster"
	for n in 1 2 3; do docker logs turnstile-kdb-$n >"$OUT/$v-cluster-$n.server.log" 2>&1; done
	docker rm -f turnstile-kdb-1 turnstile-kdb-2 turnstile-kdb-3 >/dev/null 2>&1
	docker network rm turnstile-kdb >/dev/null 2>&1
	unset TURNSTILE_KURRENTDB_KILL_LEADER
done

echo "== summary ($OUT)"
cat "$summary"
