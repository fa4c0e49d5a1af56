#!/usr/bin/env bash
# chromium-up.sh: make headless Chromium (`chromium`, Debian package
# chromium) available for the status page's end-to-end test
# (e2e/statuspage_test.go). Installs it with apt-get when it is missing;
# does nothing when it is there. Works as root without a terminal (CI).
# Progress goes to stderr.
set -euo pipefail

log() { echo "chromium-up: $*" >&2; }
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi

if ! command -v chromium >/dev/null 2>&1; then
	log "chromium is not installed: installing it (apt-get)"
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq >&2
	$SUDO apt-get install -y -qq --no-install-recommends chromium >&2
fi
log "using $(command -v chromium) ($(chromium --version 2>/dev/null | head -1))"
