// Package feeder keeps a host's shared-memory work cache (internal/shmcache)
// full of unsent results, so that schedulers find work without querying the
// database for it.
//
// Each pass it
//   - publishes the static tables (platforms, apps, app versions) into the
//     cache when they changed, reloading them every TablesInterval;
//   - sets the cache's heartbeat;
//   - empties BUSY slots whose scheduler died or kept them too long;
//   - fills EMPTY slots with unsent results (result.server_state = UNSENT) not
//     already cached: first those with priority > 0, most urgent first, then
//     in id order from a cursor that wraps to 0 at the end of the table, so
//     every unsent result comes round and none starves. Results of deprecated
//     apps are left out. With --mod N --mod-index I it caches only results
//     whose id hashes to I (store.Partition: CRC32 of the id, not id % N,
//     so the share does not depend on how ids are handed out, e.g. stepped
//     by a Galera cluster's size). One feeder per scheduler host: feeders of
//     separate caches never offer one instance twice, so their schedulers
//     never race for a claim. Each slot carries the result's send_flags, so
//     schedulers give a reliable-only instance (tail acceleration) to
//     reliable hosts only.
//
// It queries for unsent results only when enough slots are EMPTY to fill
// many per query (--refill-at, default a quarter of the slots), or when
// fewer have waited a second; after a query that found no uncached unsent
// result, not again for a second. A full or idle cache costs the database
// nothing, and a busy one about two queries per refill. The other passes,
// every --sleep, read only the shared memory.
//
// It reads result, workunit, app, app_version and platform, and writes
// nothing in the database: the scheduler that claims a slot marks the result
// sent with a conditional update.
package feeder
