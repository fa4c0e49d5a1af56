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
	# apt-install.sh keeps the package from starting its service.
	"$(dirname "$0")"/apt-install.sh "boinc-client (the real BOINC client tests)" boinc-client
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
