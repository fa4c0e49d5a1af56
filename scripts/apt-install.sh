#!/usr/bin/env bash
# apt-install.sh: install one set of Debian packages for the project's
# set-up scripts (db-up.sh, cgo-up.sh, boinc-client-up.sh, ...), quietly.
#
#   scripts/apt-install.sh [--no-install-recommends] NAME PACKAGE...
#
# Prints one line, "installing NAME (log: .local/apt.log)", on stderr and
# sends apt-get's own output to .local/apt.log; on failure it prints the
# log's tail. Runs as root, or through sudo otherwise; never asks a
# question (DEBIAN_FRONTEND=noninteractive). The package lists are updated
# at most once per hour (the stamp .local/apt-updated), so the scripts of
# one `make test` update them once, and again if an install fails on stale
# lists. Packages never start their system services on install
# (policy-rc.d): the tests start private servers of their own.
# TASKSERVER_APT_DRY_RUN=1 prints the line and logs the apt-get commands
# without running them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
recommends=()
if [ "${1:-}" = --no-install-recommends ]; then
	recommends=(--no-install-recommends)
	shift
fi
if [ $# -lt 2 ]; then
	echo "usage: $0 [--no-install-recommends] NAME PACKAGE..." >&2
	exit 2
fi
name=$1
shift
mkdir -p "$root/.local"
log=$root/.local/apt.log
stamp=$root/.local/apt-updated
echo "installing $name (log: ${log#"$root"/})" >&2
echo "=== $(date -u '+%F %T') installing $name: $*" >>"$log"

dry=${TASKSERVER_APT_DRY_RUN:-}
SUDO=()
if [ "$(id -u)" -ne 0 ] && [ -z "$dry" ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "apt-install: installing $name needs root: run as root, or install sudo" >&2
		exit 1
	fi
	SUDO=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive

# run CMD...: runs one command with its output in the log (only logs it
# in a dry run).
run() {
	echo "+ $*" >>"$log"
	[ -n "$dry" ] && return 0
	"${SUDO[@]}" "$@" >>"$log" 2>&1
}

fail() {
	echo "apt-install: installing $name ($*) failed; the end of ${log#"$root"/}:" >&2
	tail -20 "$log" >&2
	exit 1
}

update() {
	run apt-get update || fail "apt-get update"
	[ -n "$dry" ] || touch "$stamp"
}

# Lists a minimal image never downloaded, or older than an hour, are
# updated first; a recent stamp skips the update.
if [ -z "$(find "$stamp" -mmin -60 2>/dev/null)" ] || ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
	update
	updated=1
else
	updated=
fi

# policy-rc.d exit 101 keeps the maintainer scripts from starting services
# (boinc-client, prometheus and mariadb-server each ship one); it is
# removed again only if this script created it.
created_policy=
if [ ! -e /usr/sbin/policy-rc.d ] && [ -z "$dry" ]; then
	printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee /usr/sbin/policy-rc.d >/dev/null
	"${SUDO[@]}" chmod 755 /usr/sbin/policy-rc.d
	created_policy=1
fi
status=0
install() { run apt-get install -y -q "${recommends[@]}" "$@"; }
if ! install "$@"; then
	# Lists from an earlier run may name versions the mirror dropped.
	if [ -z "$updated" ]; then
		update
		install "$@" || status=$?
	else
		status=1
	fi
fi
if [ -n "$created_policy" ]; then "${SUDO[@]}" rm -f /usr/sbin/policy-rc.d; fi
[ "$status" -eq 0 ] || fail "apt-get install $*"
