#!/usr/bin/env bash
# chromium-up.sh: make headless Chromium (`chromium`, Debian package
# chromium) available for the status page's end-to-end test
# (e2e/statuspage_test.go). Installs it with apt-get when it is missing;
# does nothing when it is there. Works as root without a terminal (CI).
# Progress goes to stderr.
set -euo pipefail

log() { echo "chromium-up: $*" >&2; }

if ! command -v chromium >/dev/null 2>&1; then
	"$(dirname "$0")"/apt-install.sh --no-install-recommends "chromium (the status page's browser test)" chromium
fi
log "using $(command -v chromium) ($(chromium --version 2>/dev/null | head -1))"
