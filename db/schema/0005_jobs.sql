-- Version 5: real jobs. Jobs described by BOINC's input and output
-- templates, with several files each way; files shared between jobs; and
-- trickle messages between the application and the project.
-- Who writes which column: db/schema/WRITERS.md.

-- A template (BOINC's input or output template, as submitted), stored once
-- by its content: millions of jobs of one app share a handful of rows.
-- kind is 'input' or 'output'; md5 is of body. Rows are never changed.
CREATE TABLE job_template (
    id          INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    create_time INT NOT NULL,
    kind        VARCHAR(16) NOT NULL,
    md5         CHAR(32) NOT NULL,
    body        MEDIUMBLOB NOT NULL,
    UNIQUE KEY job_template_content (kind, md5)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

-- An app's default templates (0: the built-in ones: one input opened as
-- "in", one output opened as "out"); a job's output template, from which
-- the transitioner makes each new instance's xml_doc_in (0: the built-in
-- one). The input template is applied when the job is created, into
-- workunit.xml_doc, so the job keeps no reference to it.
ALTER TABLE app
    ADD COLUMN input_template_id  INT NOT NULL DEFAULT 0,
    ADD COLUMN output_template_id INT NOT NULL DEFAULT 0;
ALTER TABLE workunit
    ADD COLUMN output_template_id INT NOT NULL DEFAULT 0;

-- A shared input file: staged once in the download directory under name,
-- used by many jobs. name is content-addressed (see package sharedfile);
-- gzipped_nbytes > 0 when a gzip'd copy (name.gz) is staged too.
-- state: 0 live, 1 being deleted (no new job may refer to it), 2 deleted.
-- last_ref_time: when a job last referred to it (or it was staged), so a
-- file staged for jobs not yet submitted is not deleted at once. njobs:
-- how many jobs have referred to it; every new reference increments it, so
-- the reference's conditional update (WHERE state = 0) always changes the
-- row and conflicts with a delete pass on a cluster too.
CREATE TABLE shared_file (
    id             INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    create_time    INT NOT NULL,
    name           VARCHAR(254) NOT NULL,
    md5            CHAR(32) NOT NULL,
    nbytes         DOUBLE NOT NULL,
    gzipped_nbytes DOUBLE NOT NULL DEFAULT 0,
    state          TINYINT NOT NULL DEFAULT 0,
    last_ref_time  INT NOT NULL,
    njobs          INT NOT NULL DEFAULT 0,
    UNIQUE KEY shared_file_name (name),
    KEY shared_file_state (state, last_ref_time)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

-- Which jobs refer to which shared file: inserted with the job, deleted by
-- db_purge with the job. A shared file is deleted only when no job that
-- still needs its files refers to it.
CREATE TABLE workunit_shared_file (
    shared_file_id INT NOT NULL,
    workunitid     INT NOT NULL,
    PRIMARY KEY (shared_file_id, workunitid),
    KEY wsf_workunit (workunitid)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

-- Trickle-up messages (BOINC's msg_from_host): sent by a running
-- application through the client, stored by the scheduler, handled once by
-- a trickle handler (handled: 0 new, 1 handled). msg_md5 is the md5 of
-- the message as received: a message the client sends again (its ack was
-- lost) is stored once.
CREATE TABLE msg_from_host (
    id          INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    create_time INT NOT NULL,
    hostid      INT NOT NULL,
    variety     VARCHAR(254) NOT NULL,
    handled     TINYINT NOT NULL DEFAULT 0,
    result_name VARCHAR(254) NOT NULL DEFAULT '',
    msg_md5     CHAR(32) NOT NULL,
    xml         MEDIUMBLOB,
    UNIQUE KEY mfh_message (hostid, msg_md5),
    KEY mfh_handled (handled, id)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

-- Trickle-down messages (BOINC's msg_to_host): queued by a trickle
-- handler or the operator, delivered once to the host in a scheduler reply
-- (handled: 0 queued, 1 delivered).
CREATE TABLE msg_to_host (
    id          INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    create_time INT NOT NULL,
    hostid      INT NOT NULL,
    variety     VARCHAR(254) NOT NULL,
    handled     TINYINT NOT NULL DEFAULT 0,
    xml         MEDIUMBLOB,
    KEY mth_host (hostid, handled)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;
