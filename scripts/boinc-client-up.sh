#!/usr/bin/env bash
# boinc-client-up.sh: make the real BOINC client (`boinc`, Debian package
# boinc-client) available for `make test-client`. Installs it with apt-get
# when it is missing. The package also installs a system service that would
# run a client of its own (and compete for the CPUs and the GUI RPC port), so
# that service is stopped and disabled: the test starts its own clients, each
# in a private data directory.
# Progress goes to stderr.
set -euo pipefail

log() { echo "boinc-client-up: $*" >&2; }
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi

if ! command -v boinc >/dev/null 2>&1; then
	log "boinc is not installed: installing boinc-client (apt-get)"
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq >&2
	# policy-rc.d exit 101 keeps the package's maintainer scripts from
	# starting the service on hosts without systemd; the file is removed
	# again only if this script created it.
	created_policy=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
		$SUDO chmod 755 /usr/sbin/policy-rc.d
		created_policy=1
	fi
	status=0
	$SUDO apt-get install -y -qq boinc-client >&2 || status=$?
	if [ -n "$created_policy" ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
	[ "$status" -eq 0 ] || exit "$status"
fi

# Stop the packaged service, whatever started it.
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
	if systemctl is-active --quiet boinc-client 2>/dev/null || systemctl is-enabled --quiet boinc-client 2>/dev/null; then
		log "stopping and disabling the boinc-client system service"
		$SUDO systemctl disable --now boinc-client >&2 || true
	fi
elif [ -x /etc/init.d/boinc-client ] && [ -f /var/run/boinc.pid ]; then
	log "stopping the boinc-client service (init script)"
	$SUDO /etc/init.d/boinc-client stop >&2 || true
fi
# A client the service started runs in the package's data directory
# /var/lib/boinc-client (or /var/lib/boinc); ours never do.
for pid in $(pgrep -x boinc 2>/dev/null || true); do
	cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null || true)
	case "$cwd" in
	/var/lib/boinc*)
		log "stopping the packaged client (pid $pid, $cwd)"
		$SUDO kill "$pid" 2>/dev/null || true
		;;
	esac
done
log "using $(command -v boinc) ($(boinc --version 2>/dev/null | head -1))"
