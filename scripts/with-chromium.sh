#!/usr/bin/env bash
# with-chromium.sh CMD [ARG...]
#
# Runs CMD with TURNSTILE_CHROMIUM naming a Chromium binary, for the
# dashboard's browser test (cmd/turnstile TestDashboardInBrowser), and exits
# with CMD's status.
#
# Chromium is looked up as $TURNSTILE_CHROMIUM, then chromium,
# chromium-browser, google-chrome on PATH. When none is found and CI=true,
# Debian's chromium package is installed with apt-get (as root, or through
# sudo), the way scripts/with-postgres.sh installs PostgreSQL. Without CI the
# command runs anyway and the browser test says SKIPPED; with CI=true the
# test fails if no browser is there, so CI cannot skip it silently.
#
# Example:
#   scripts/with-chromium.sh go test -count=1 -run TestDashboardInBrowser -v ./cmd/turnstile/
set -euo pipefail

prog=$(basename "$0")
log() { echo "$prog: $*" >&2; }

if [[ $# -eq 0 ]]; then
	echo "usage: $prog CMD [ARG...]  (runs CMD with TURNSTILE_CHROMIUM set)" >&2
	exit 2
fi

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

find_chromium() {
	local c
	for c in "${TURNSTILE_CHROMIUM:-}" chromium chromium-browser google-chrome; do
		if [[ -n $c ]] && command -v "$c" >/dev/null; then
			command -v "$c"
			return
		fi
	done
}

bin=$(find_chromium)
if [[ -z $bin && ${CI:-} == true ]]; then
	log "Chromium not found; CI=true, installing the chromium package"
	if ! command -v apt-get >/dev/null; then
		log "no apt-get here: install Chromium, or set TURNSTILE_CHROMIUM"
		exit 127
	fi
	as_root apt-get update -q
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
	bin=$(find_chromium)
fi
if [[ -z $bin ]]; then
	log "Chromium not found: the browser test will be SKIPPED (apt-get install chromium, or set TURNSTILE_CHROMIUM)"
	exec "$@"
fi
log "using $bin ($("$bin" --version 2>/dev/null || echo 'version unknown'))"
export TURNSTILE_CHROMIUM=$bin
exec "$@"
