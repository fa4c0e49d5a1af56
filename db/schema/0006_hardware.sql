-- Version 6: real hardware. What a host has (its CPU features, its
-- coprocessors, its client's version), what each host has shown of each
-- app version it ran (host_app_version), beta apps and versions, and each
-- volunteer's project preferences.
-- Who writes which column: db/schema/WRITERS.md.

-- p_features: the CPU features the client reports (/proc/cpuinfo flags),
-- which plan classes test. coprocs: the host's coprocessors as the
-- scheduler last read them from the request (package protocol's canonical
-- <coprocs> form: type, count, name, RAM, peak FLOPS, driver and OpenCL
-- versions), for operators and for taskctl host explain.
-- client_version: major*10000 + minor*100 + release, as BOINC counts it
-- (plan classes' min_core_client_version).
ALTER TABLE host
    ADD COLUMN p_features     VARCHAR(1024) NOT NULL DEFAULT '',
    ADD COLUMN coprocs        MEDIUMTEXT,
    ADD COLUMN client_version INT NOT NULL DEFAULT 0;

-- What one host has shown of one app version: BOINC's host_app_version.
-- app_version_id is the version's id; for a client on the anonymous
-- platform (its own builds) it is -(appid * 1000000 + resource number), as
-- BOINC's generalized app version id.
-- et_*: statistics of the elapsed time of a valid result divided by its
-- job's rsc_fpops_est (seconds per estimated FLOP, the inverse of the
-- host's processing rate for the version): count, mean, variance and a
-- running estimate of the median. turnaround_*: send-to-report seconds of
-- valid results. consecutive_valid: valid results since the last error or
-- invalid one. max_jobs_per_day: the daily quota (per CPU, or per GPU for a
-- GPU version) that shrinks on errors and grows back on valid results;
-- n_jobs_today: jobs sent on day (days since 1970-01-01, UTC).
-- n_errors, n_valid: totals, for operators.
CREATE TABLE host_app_version (
    host_id           INT NOT NULL,
    app_version_id    INT NOT NULL,
    et_n              INT NOT NULL DEFAULT 0,
    et_avg            DOUBLE NOT NULL DEFAULT 0,
    et_var            DOUBLE NOT NULL DEFAULT 0,
    et_median         DOUBLE NOT NULL DEFAULT 0,
    turnaround_n      INT NOT NULL DEFAULT 0,
    turnaround_avg    DOUBLE NOT NULL DEFAULT 0,
    consecutive_valid INT NOT NULL DEFAULT 0,
    max_jobs_per_day  INT NOT NULL DEFAULT 0,
    n_jobs_today      INT NOT NULL DEFAULT 0,
    day               INT NOT NULL DEFAULT 0,
    n_errors          INT NOT NULL DEFAULT 0,
    n_valid           INT NOT NULL DEFAULT 0,
    PRIMARY KEY (host_id, app_version_id)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

-- Beta apps and versions go only to volunteers whose project preferences
-- allow beta work.
ALTER TABLE app
    ADD COLUMN beta TINYINT NOT NULL DEFAULT 0;
ALTER TABLE app_version
    ADD COLUMN beta TINYINT NOT NULL DEFAULT 0;

-- A volunteer's project preferences, BOINC's <project_preferences>
-- document: the apps they run (<app_id>), whether other apps may be sent
-- when those have no work (<allow_non_selected_apps>), beta work
-- (<allow_beta_work>), resources not to use (<no_cpu>, <no_gpus>, ...).
ALTER TABLE user
    ADD COLUMN project_prefs MEDIUMTEXT;

-- The speed the scheduler told the client to assume for the instance's app
-- version on its host (the reply's <flops>) when it sent it: its runtime
-- estimate is the job's rsc_fpops_est / flops_estimate, as BOINC's
-- result.flops_estimate. Kept to measure how estimates converge.
ALTER TABLE result
    ADD COLUMN flops_estimate DOUBLE NOT NULL DEFAULT 0;
