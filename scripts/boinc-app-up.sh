#!/usr/bin/env bash
# boinc-app-up.sh: make the C++ compiler and BOINC's application library
# (Debian's libboinc-app-dev: boinc_api.h, libboinc_api, libboinc) available,
# so `make boinc-app` can build the real BOINC-API demo application that
# `make test-client` runs on the real client. Installs g++ and
# libboinc-app-dev with apt-get when a test program cannot be built; does
# nothing otherwise. Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
cxx=${CXX:-g++}
# builds: the library's headers are found and its libraries link.
builds() {
	command -v "$cxx" >/dev/null 2>&1 || return 1
	printf '#include <boinc/boinc_api.h>\nint main() { return boinc_is_standalone() < 0; }\n' |
		"$cxx" -x c++ -o /dev/null - -lboinc_api -lboinc -lpthread >/dev/null 2>&1
}
if ! builds; then
	scripts/apt-install.sh "g++ and libboinc-app-dev (the real BOINC-API app)" g++ libboinc-app-dev
	builds || { echo "boinc-app-up: $cxx still cannot build against libboinc-app-dev after installing it" >&2; exit 1; }
fi
