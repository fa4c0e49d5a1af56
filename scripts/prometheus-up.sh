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
	log "prometheus/promtool not installed: installing prometheus (apt-get)"
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq >&2
	# policy-rc.d exit 101 keeps the package's maintainer scripts from
	# starting the service; the file is removed again only if this script
	# created it.
	created_policy=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
		$SUDO chmod 755 /usr/sbin/policy-rc.d
		created_policy=1
	fi
	status=0
	# No recommends: the node exporter and its timers are not needed.
	$SUDO apt-get install -y -qq --no-install-recommends prometheus >&2 || status=$?
	if [ -n "$created_policy" ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
	[ "$status" -eq 0 ] || exit "$status"
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
