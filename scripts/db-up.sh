#!/usr/bin/env bash
# db-up.sh: make a MySQL-compatible server available and print its DSN (no
# database name) on stdout. Uses the server named by TASKSERVER_DB_SERVER
# (default root@tcp(127.0.0.1:3306)/) if it answers; otherwise installs
# MariaDB from Debian's packages if needed and starts a private instance under
# .local/mariadb on 127.0.0.1:${TASKSERVER_PRIVATE_DB_PORT:-3307}, with no
# configuration file (--no-defaults), as on a fresh machine.
# TASKSERVER_DB_PRIVATE=1 skips TASKSERVER_DB_SERVER and always uses the
# private instance (CI takes the fresh machine's path with it).
# Progress goes to stderr, so `dsn=$(scripts/db-up.sh)` works.
set -euo pipefail
cd "$(dirname "$0")/.."

server=${TASKSERVER_DB_SERVER:-root@tcp(127.0.0.1:3306)/}
port=${TASKSERVER_PRIVATE_DB_PORT:-3307}
root=$PWD/.local/mariadb
log() { echo "db-up: $*" >&2; }

# The probe is built once, and its build errors shown: with them hidden, a
# machine that cannot download the Go modules saw only "the private
# MariaDB did not answer" beside a log saying it was ready.
probe=$PWD/.local/bin/localproject
go build -o "$probe" ./cmd/localproject || {
	log "cannot build cmd/localproject, which probes the server (error above)"
	exit 1
}

# answers DSN: true if a server answers at DSN (user@tcp(host:port)/).
answers() {
	"$probe" --server-dsn "$1" dbping >/dev/null 2>&1
}

if [ "${TASKSERVER_DB_PRIVATE:-}" != 1 ] && answers "$server"; then
	log "using the server at ${server#*@}"
	echo "$server"
	exit 0
fi

private="root@tcp(127.0.0.1:${port})/"
if answers "$private"; then
	log "using the private server at 127.0.0.1:${port}"
	echo "$private"
	exit 0
fi

if ! command -v mariadbd >/dev/null 2>&1 && ! command -v mysqld >/dev/null 2>&1; then
	scripts/apt-install.sh "MariaDB (no database server answers)" mariadb-server
fi
daemon_bin=$(command -v mariadbd || command -v mysqld || echo /usr/sbin/mariadbd)
[ -x "$daemon_bin" ] || daemon_bin=/usr/sbin/mysqld
install_bin=$(command -v mariadb-install-db || command -v mysql_install_db)

mkdir -p "$root"
if [ ! -d "$root/data/mysql" ]; then
	log "initialising a private MariaDB in $root/data"
	"$install_bin" --no-defaults --datadir="$root/data" --auth-root-authentication-method=normal \
		--skip-test-db --user="$(id -un)" >"$root/install.log" 2>&1 || {
		cat "$root/install.log" >&2
		exit 1
	}
fi
log "starting the private MariaDB on 127.0.0.1:${port}"
"$daemon_bin" --no-defaults --datadir="$root/data" --socket="$root/mysqld.sock" \
	--pid-file="$root/mysqld.pid" --port="$port" --bind-address=127.0.0.1 --skip-name-resolve \
	--user="$(id -un)" --innodb-buffer-pool-size=256M --max-connections=500 \
	>"$root/mysqld.log" 2>&1 &
for _ in $(seq 1 60); do
	if answers "$private"; then
		echo "$private"
		exit 0
	fi
	sleep 1
done
log "the private MariaDB did not answer within 60 s; its log:"
tail -20 "$root/mysqld.log" >&2
exit 1
