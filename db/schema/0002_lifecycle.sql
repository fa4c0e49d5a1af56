-- Version 2: the complete job lifecycle: batches, holds, credit and
-- redundancy policies, host reliability, known-answer jobs, scientists'
-- submission. Who writes which column: db/schema/WRITERS.md.

-- Per-app policies. credit_policy: 'fpops' (from the job's FLOP estimate),
-- 'fixed' (workunit.fixed_credit), 'median' (median of the quorum's claimed
-- credit). homogeneous_redundancy (version 1) selects the host classes:
-- 0 off, 1 fine (OS, vendor and model), 2 coarse (OS and vendor).
ALTER TABLE app
    ADD COLUMN adaptive_replication  TINYINT NOT NULL DEFAULT 0,
    ADD COLUMN credit_policy         VARCHAR(32) NOT NULL DEFAULT 'fpops',
    ADD COLUMN hold_failed_jobs      TINYINT NOT NULL DEFAULT 0,
    ADD COLUMN known_answer_fraction DOUBLE NOT NULL DEFAULT 0;

-- hold_reason: the error bit (state.ErrorMask) a job would have failed with,
-- when its app holds failed jobs instead; 0 = not held. replication_quorum:
-- for adaptive replication, the quorum the job needs when it is replicated
-- (its min_quorum starts at 1); 0 = not adaptive. known_answer_id: the
-- known_answer row whose expected output this job checks hosts against.
-- tail_copies: extra instances added by tail acceleration.
ALTER TABLE workunit
    ADD COLUMN hold_reason        INT NOT NULL DEFAULT 0,
    ADD COLUMN hold_time          INT NOT NULL DEFAULT 0,
    ADD COLUMN fixed_credit       DOUBLE NOT NULL DEFAULT 0,
    ADD COLUMN replication_quorum INT NOT NULL DEFAULT 0,
    ADD COLUMN known_answer_id    INT NOT NULL DEFAULT 0,
    ADD COLUMN tail_copies        INT NOT NULL DEFAULT 0,
    ADD KEY wu_batch (batch),
    ADD KEY wu_hold (hold_reason);

-- send_flags: bit 1 = send only to a fast, reliable host (tail acceleration).
ALTER TABLE result
    ADD COLUMN send_flags INT NOT NULL DEFAULT 0,
    ADD KEY res_batch (batch);

-- consecutive_valid: valid results since the last invalid or error one
-- (adaptive replication trusts a host on it). error_streak: error or invalid
-- results since the last valid one (quarantine).
ALTER TABLE host
    ADD COLUMN consecutive_valid INT NOT NULL DEFAULT 0,
    ADD COLUMN error_streak      INT NOT NULL DEFAULT 0;

-- submit_allowed: the user may submit batches through the submission API.
ALTER TABLE user
    ADD COLUMN submit_allowed TINYINT NOT NULL DEFAULT 0;

-- A batch of jobs submitted together. state: 1 in progress, 2 done (every
-- job assimilated), 3 cancelled. idempotency_key makes a retried submission
-- return the batch it created the first time.
CREATE TABLE batch (
    id              INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    create_time     INT NOT NULL,
    appid           INT NOT NULL,
    userid          INT NOT NULL DEFAULT 0,
    name            VARCHAR(254) NOT NULL,
    description     VARCHAR(1024) NOT NULL DEFAULT '',
    idempotency_key VARCHAR(254) NULL,
    state           INT NOT NULL DEFAULT 1,
    njobs           INT NOT NULL DEFAULT 0,
    completion_time INT NOT NULL DEFAULT 0,
    cancel_time     INT NOT NULL DEFAULT 0,
    UNIQUE KEY batch_name (name),
    UNIQUE KEY batch_idempotency (userid, idempotency_key),
    KEY batch_state (state)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

-- Known-answer jobs: inputs whose correct output the project knows. A
-- fraction of an app's stream (app.known_answer_fraction) is made of copies
-- of them; a host whose output differs is caught.
CREATE TABLE known_answer (
    id          INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    create_time INT NOT NULL,
    appid       INT NOT NULL,
    name        VARCHAR(254) NOT NULL,
    input       MEDIUMBLOB NOT NULL,
    output      MEDIUMBLOB NOT NULL,
    UNIQUE KEY known_answer_name (appid, name)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;
