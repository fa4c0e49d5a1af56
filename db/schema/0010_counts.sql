-- Version 10: the status page's queue counts, kept as the rows change.
-- Until now `taskctl status` and the status page counted result and
-- workunit rows by state with GROUP BY scans: 21 s at 10^7 result rows.
-- Triggers on result and workunit now append one row of +1 or -1 to a
-- count table for every insert, delete, and update that moves a row from
-- one counted key to another, whichever program or statement made it; a
-- count is the sum of its key's rows. The tables are append-only for
-- writers (an auto-increment key, so concurrent writers, also on other
-- nodes of a cluster, never touch the same row), and db_purge folds the
-- oldest rows into one net row per key (store.CountsFold). See WRITERS.md.
CREATE TABLE result_count (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    appid INT NOT NULL,
    server_state INT NOT NULL,
    outcome INT NOT NULL,
    file_delete_state INT NOT NULL,
    n BIGINT NOT NULL
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

-- failed is error_mask <> 0, held is hold_reason <> 0: a job whose
-- error_mask gains another bit stays in the same key.
CREATE TABLE workunit_count (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    appid INT NOT NULL,
    need_validate TINYINT NOT NULL,
    assimilate_state INT NOT NULL,
    file_delete_state INT NOT NULL,
    failed TINYINT NOT NULL,
    held TINYINT NOT NULL,
    n BIGINT NOT NULL
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

-- A trigger's body is kept on one line: the migration runner ends a
-- statement at a line ending in a semicolon.
CREATE TRIGGER result_count_insert AFTER INSERT ON result FOR EACH ROW
INSERT INTO result_count (appid, server_state, outcome, file_delete_state, n) VALUES (NEW.appid, NEW.server_state, NEW.outcome, NEW.file_delete_state, 1);

CREATE TRIGGER result_count_delete AFTER DELETE ON result FOR EACH ROW
INSERT INTO result_count (appid, server_state, outcome, file_delete_state, n) VALUES (OLD.appid, OLD.server_state, OLD.outcome, OLD.file_delete_state, -1);

CREATE TRIGGER result_count_update AFTER UPDATE ON result FOR EACH ROW
IF OLD.appid <> NEW.appid OR OLD.server_state <> NEW.server_state OR OLD.outcome <> NEW.outcome OR OLD.file_delete_state <> NEW.file_delete_state THEN INSERT INTO result_count (appid, server_state, outcome, file_delete_state, n) VALUES (OLD.appid, OLD.server_state, OLD.outcome, OLD.file_delete_state, -1), (NEW.appid, NEW.server_state, NEW.outcome, NEW.file_delete_state, 1); END IF;

CREATE TRIGGER workunit_count_insert AFTER INSERT ON workunit FOR EACH ROW
INSERT INTO workunit_count (appid, need_validate, assimilate_state, file_delete_state, failed, held, n) VALUES (NEW.appid, NEW.need_validate, NEW.assimilate_state, NEW.file_delete_state, NEW.error_mask <> 0, NEW.hold_reason <> 0, 1);

CREATE TRIGGER workunit_count_delete AFTER DELETE ON workunit FOR EACH ROW
INSERT INTO workunit_count (appid, need_validate, assimilate_state, file_delete_state, failed, held, n) VALUES (OLD.appid, OLD.need_validate, OLD.assimilate_state, OLD.file_delete_state, OLD.error_mask <> 0, OLD.hold_reason <> 0, -1);

CREATE TRIGGER workunit_count_update AFTER UPDATE ON workunit FOR EACH ROW
IF OLD.appid <> NEW.appid OR OLD.need_validate <> NEW.need_validate OR OLD.assimilate_state <> NEW.assimilate_state OR OLD.file_delete_state <> NEW.file_delete_state OR (OLD.error_mask <> 0) <> (NEW.error_mask <> 0) OR (OLD.hold_reason <> 0) <> (NEW.hold_reason <> 0) THEN INSERT INTO workunit_count (appid, need_validate, assimilate_state, file_delete_state, failed, held, n) VALUES (OLD.appid, OLD.need_validate, OLD.assimilate_state, OLD.file_delete_state, OLD.error_mask <> 0, OLD.hold_reason <> 0, -1), (NEW.appid, NEW.need_validate, NEW.assimilate_state, NEW.file_delete_state, NEW.error_mask <> 0, NEW.hold_reason <> 0, 1); END IF;

-- The rows already there. An upgrade runs with the daemons stopped
-- (README, Upgrade), so no row changes between the triggers and these.
INSERT INTO result_count (appid, server_state, outcome, file_delete_state, n)
SELECT appid, server_state, outcome, file_delete_state, COUNT(*) FROM result
GROUP BY appid, server_state, outcome, file_delete_state;

INSERT INTO workunit_count (appid, need_validate, assimilate_state, file_delete_state, failed, held, n)
SELECT appid, need_validate, assimilate_state, file_delete_state, error_mask <> 0, hold_reason <> 0, COUNT(*) FROM workunit
GROUP BY appid, need_validate, assimilate_state, file_delete_state, error_mask <> 0, hold_reason <> 0;
