#!/usr/bin/env bash
# cgo-up.sh: make the C compiler and C library headers that cgo needs
# available, because the race detector (go test -race) needs cgo. Installs
# gcc and libc6-dev with apt-get when the compiler Go uses ($(go env CC))
# cannot compile a C file; does nothing otherwise. Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
cc=$(go env CC)
compiles() { printf '#include <stdlib.h>\nint main(void) { return 0; }\n' | "$cc" -x c -o /dev/null - >/dev/null 2>&1; }
if ! compiles; then
	scripts/apt-install.sh "gcc (go test -race needs cgo)" gcc libc6-dev
	compiles || { echo "cgo-up: $cc still cannot compile C after installing gcc" >&2; exit 1; }
fi
