#!/usr/bin/env bash
# galera-up.sh: make what a private MariaDB Galera cluster needs available
# (internal/galera, `make cluster`): the MariaDB server, the Galera
# provider library (galera-4) and rsync, which the full state transfer
# (wsrep_sst_method=rsync) runs; ss or lsof (iproute2), which the transfer
# script uses to see its rsync daemon listening. Installs the missing ones
# with apt-get; does nothing otherwise. Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server)
provider=
for p in /usr/lib/galera/libgalera_smm.so /usr/lib/galera-4/libgalera_smm.so \
	/usr/lib64/galera-4/libgalera_smm.so /usr/lib64/galera/libgalera_smm.so /usr/lib/libgalera_smm.so; do
	[ -f "$p" ] && provider=$p && break
done
[ -n "$provider" ] || missing+=(galera-4)
command -v rsync >/dev/null 2>&1 || missing+=(rsync)
command -v ss >/dev/null 2>&1 || command -v lsof >/dev/null 2>&1 || missing+=(iproute2)
if [ ${#missing[@]} -gt 0 ]; then
	scripts/apt-install.sh "a Galera cluster's packages (${missing[*]})" "${missing[@]}"
fi
