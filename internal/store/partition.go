package store

import (
	"hash/crc32"
	"strconv"
)

// The --mod partition rule: replica I of N takes the rows whose id hashes to
// I, CRC32 of the id's decimal text modulo N. It is a hash, not id % N,
// because the share must not depend on how ids are handed out: a Galera
// cluster steps auto-increment ids by its size (1, 4, 7, … on three nodes),
// which puts every new row into one residue of id % 3, and shifts again
// when a node leaves. CRC32 spreads any such arithmetic sequence over all
// partitions. MariaDB and MySQL 8 both have CRC32, and CRC32 of an integer
// is CRC32 of its decimal text there, so SQL and Go agree (the store's
// partition test holds them to it).

// partitionFilter is the SQL form of the rule for the id column col (as the
// query names it: "id", "w.id", "r.id"), with two placeholders: the number
// of replicas, then this replica's index. It is the only SQL copy of the
// rule; col is always a literal column name from this package. The hash is
// a filter on rows read in the enumeration's own index order, as the modulo
// was, so it changes no plan.
func partitionFilter(col string) string {
	return "CRC32(" + col + ") % ? = ?"
}

// Partition returns the --mod-index of the replica (of mod) that owns the
// row with this id: the Go copy of partitionFilter, for code and tests that
// decide partition membership outside SQL. A mod below 2 has one partition,
// 0.
func Partition(id int64, mod int) int {
	if mod < 2 {
		return 0
	}
	return int(crc32.ChecksumIEEE([]byte(strconv.FormatInt(id, 10))) % uint32(mod))
}
