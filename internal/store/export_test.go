package store

// PartitionFilter exposes the SQL form of the --mod rule to the external
// tests, which hold it to Partition on the server itself.
var PartitionFilter = partitionFilter
