-- Version 9: the status page's throughput, counted as it happens. Until
-- now the page counted the result and workunit rows reported, validated
-- and assimilated in the last hour and day, scanning both tables (seconds
-- at millions of rows) and missing every row db_purge had deleted (after
-- a run that reported 3,248 results the page said 176). The scheduler,
-- the validator and the assimilator now add what they did to one row per
-- minute, kind and shard, in the transaction that does it, so a count is
-- exact and survives the purge; the page sums a day of rows. kind: 1
-- results reported, 2 results validated (valid or invalid), 3 jobs
-- assimilated. shard spreads concurrent writers over rows, so that two
-- schedulers' commits do not queue on one row (or, on a cluster, fail
-- certification on it). db_purge deletes rows older than two days.
CREATE TABLE throughput (
    minute BIGINT NOT NULL,
    kind TINYINT NOT NULL,
    shard TINYINT NOT NULL,
    n BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, kind, shard)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

-- The last day as the rows that are still there tell it, dated as the old
-- counts dated it, so the page does not start from zero after the upgrade.
INSERT INTO throughput (minute, kind, shard, n)
SELECT received_time DIV 60, 1, 0, COUNT(*) FROM result
WHERE received_time >= UNIX_TIMESTAMP() - 86400 GROUP BY received_time DIV 60;

INSERT INTO throughput (minute, kind, shard, n)
SELECT mod_time DIV 60, 2, 0, COUNT(*) FROM result
WHERE validate_state IN (1, 2) AND mod_time >= UNIX_TIMESTAMP() - 86400 GROUP BY mod_time DIV 60;

INSERT INTO throughput (minute, kind, shard, n)
SELECT mod_time DIV 60, 3, 0, COUNT(*) FROM workunit
WHERE assimilate_state = 2 AND mod_time >= UNIX_TIMESTAMP() - 86400 GROUP BY mod_time DIV 60;
