#!/usr/bin/env bash
# prometheus-up.sh: make Prometheus and promtool (Debian package prometheus)
# available for the deploy/ tests (e2e/deploy_test.go). Installs the package
# with apt-get when either program is missing. The package also installs a
# system service that would scrape on :9090 with its own configuration; that
# service is stopped and disabled, since the tests start their own Prometheus
# on a free loopback port with a private storage directory.
# Idempotent; needs no stdin. Progress goes to stderr.
set -euo pipefail

log() { echo "prometheus-up: $*" >&2; }
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi

if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
	# No recommends: the node exporter and its timers are not needed.
	# apt-install.sh keeps the package from starting its service.
	"$(dirname "$0")"/apt-install.sh --no-install-recommends "prometheus (the deploy/ tests)" prometheus
fi

# Stop the packaged service, whatever started it, and keep it from starting
# at the next boot.
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
	if systemctl is-active --quiet prometheus 2>/dev/null || systemctl is-enabled --quiet prometheus 2>/dev/null; then
		log "stopping and disabling the prometheus system service"
		$SUDO systemctl disable --now prometheus >&2 || true
	fi
else
	if [ -x /etc/init.d/prometheus ]; then
		$SUDO /etc/init.d/prometheus stop >/dev/null 2>&1 || true
	fi
	# Without a running systemd, disable only removes the install links.
	if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled --quiet prometheus 2>/dev/null; then
		log "disabling the prometheus system service"
		$SUDO systemctl disable prometheus >/dev/null 2>&1 || true
	fi
fi
# The packaged server runs as the prometheus user; the tests' never do.
for pid in $(pgrep -u prometheus -x prometheus 2>/dev/null || true); do
	log "stopping the packaged prometheus (pid $pid)"
	$SUDO kill "$pid" 2>/dev/null || true
done
log "using $(command -v prometheus) and $(command -v promtool) ($(promtool --version 2>&1 | head -1))"
