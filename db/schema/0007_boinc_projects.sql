-- Version 7: what a project moving over from BOINC brings. Teams (BOINC's
-- team table: the columns the task server, its replies and the statistics
-- export use), and the user and host columns BOINC keeps that the
-- statistics export and the replies carry: a volunteer's country, URL and
-- profile flag, a host's venue, its measured bandwidth and memory, and
-- the coprocessor summary BOINC keeps in serialnum.
-- Who writes which column: db/schema/WRITERS.md.

-- A team: founder (userid), names, country and credit. nusers,
-- total_credit and expavg_credit are kept up to date as members join,
-- leave and are granted credit (BOINC recomputes them with update_stats).
CREATE TABLE team (
    id            INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    create_time   INT NOT NULL,
    userid        INT NOT NULL DEFAULT 0,
    name          VARCHAR(191) NOT NULL,
    name_lc       VARCHAR(254) NOT NULL DEFAULT '',
    url           VARCHAR(254) NOT NULL DEFAULT '',
    type          INT NOT NULL DEFAULT 0,
    name_html     VARCHAR(254) NOT NULL DEFAULT '',
    description   MEDIUMTEXT,
    nusers        INT NOT NULL DEFAULT 0,
    country       VARCHAR(254) NOT NULL DEFAULT '',
    total_credit  DOUBLE NOT NULL DEFAULT 0,
    expavg_credit DOUBLE NOT NULL DEFAULT 0,
    expavg_time   DOUBLE NOT NULL DEFAULT 0,
    joinable      TINYINT NOT NULL DEFAULT 1,
    UNIQUE KEY team_name (name),
    KEY team_userid (userid)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

ALTER TABLE user
    ADD COLUMN country         VARCHAR(254) NOT NULL DEFAULT '',
    ADD COLUMN postal_code     VARCHAR(254) NOT NULL DEFAULT '',
    ADD COLUMN url             VARCHAR(254) NOT NULL DEFAULT '',
    ADD COLUMN venue           VARCHAR(254) NOT NULL DEFAULT '',
    ADD COLUMN global_prefs    MEDIUMTEXT,
    ADD COLUMN send_email      TINYINT NOT NULL DEFAULT 1,
    ADD COLUMN show_hosts      TINYINT NOT NULL DEFAULT 1,
    ADD COLUMN has_profile     TINYINT NOT NULL DEFAULT 0,
    ADD COLUMN email_validated TINYINT NOT NULL DEFAULT 0,
    ADD KEY user_teamid (teamid);

ALTER TABLE host
    ADD COLUMN venue              VARCHAR(254) NOT NULL DEFAULT '',
    ADD COLUMN serialnum          VARCHAR(254) NOT NULL DEFAULT '',
    ADD COLUMN external_ip_addr   VARCHAR(254) NOT NULL DEFAULT '',
    ADD COLUMN product_name       VARCHAR(254) NOT NULL DEFAULT '',
    ADD COLUMN p_membw            DOUBLE NOT NULL DEFAULT 0,
    ADD COLUMN m_cache            DOUBLE NOT NULL DEFAULT 0,
    ADD COLUMN n_bwup             DOUBLE NOT NULL DEFAULT 0,
    ADD COLUMN n_bwdown           DOUBLE NOT NULL DEFAULT 0,
    ADD COLUMN credit_per_cpu_sec DOUBLE NOT NULL DEFAULT 0;
