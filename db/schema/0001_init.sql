-- Version 1: the tables of the task server, with BOINC's column names and
-- state codes (see internal/state). Times are Unix seconds, as in BOINC.
-- Who writes which column: db/schema/WRITERS.md.

CREATE TABLE platform (
    id                 INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    create_time        INT NOT NULL,
    name               VARCHAR(254) NOT NULL,
    user_friendly_name VARCHAR(254) NOT NULL,
    deprecated         TINYINT NOT NULL DEFAULT 0,
    UNIQUE KEY platform_name (name)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

CREATE TABLE app (
    id                     INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    create_time            INT NOT NULL,
    name                   VARCHAR(254) NOT NULL,
    user_friendly_name     VARCHAR(254) NOT NULL,
    min_version            INT NOT NULL DEFAULT 0,
    deprecated             TINYINT NOT NULL DEFAULT 0,
    homogeneous_redundancy SMALLINT NOT NULL DEFAULT 0,
    weight                 DOUBLE NOT NULL DEFAULT 1,
    UNIQUE KEY app_name (name)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

CREATE TABLE app_version (
    id          INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    create_time INT NOT NULL,
    appid       INT NOT NULL,
    version_num INT NOT NULL,
    platformid  INT NOT NULL,
    plan_class  VARCHAR(254) NOT NULL DEFAULT '',
    xml_doc     MEDIUMBLOB,
    deprecated  TINYINT NOT NULL DEFAULT 0,
    UNIQUE KEY app_version_key (appid, platformid, version_num, plan_class)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

CREATE TABLE user (
    id               INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    create_time      INT NOT NULL,
    email_addr       VARCHAR(254) NOT NULL,
    name             VARCHAR(254) NOT NULL,
    authenticator    VARCHAR(254) NOT NULL,
    passwd_hash      VARCHAR(254) NOT NULL DEFAULT '',
    total_credit     DOUBLE NOT NULL DEFAULT 0,
    expavg_credit    DOUBLE NOT NULL DEFAULT 0,
    expavg_time      DOUBLE NOT NULL DEFAULT 0,
    teamid           INT NOT NULL DEFAULT 0,
    cross_project_id VARCHAR(254) NOT NULL DEFAULT '',
    UNIQUE KEY user_email_addr (email_addr),
    UNIQUE KEY user_authenticator (authenticator)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

CREATE TABLE host (
    id             INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    create_time    INT NOT NULL,
    userid         INT NOT NULL,
    rpc_seqno      INT NOT NULL DEFAULT 0,
    rpc_time       INT NOT NULL DEFAULT 0,
    total_credit   DOUBLE NOT NULL DEFAULT 0,
    expavg_credit  DOUBLE NOT NULL DEFAULT 0,
    expavg_time    DOUBLE NOT NULL DEFAULT 0,
    timezone       INT NOT NULL DEFAULT 0,
    domain_name    VARCHAR(254) NOT NULL DEFAULT '',
    last_ip_addr   VARCHAR(254) NOT NULL DEFAULT '',
    host_cpid      VARCHAR(254) NOT NULL DEFAULT '',
    p_ncpus        INT NOT NULL DEFAULT 0,
    p_vendor       VARCHAR(254) NOT NULL DEFAULT '',
    p_model        VARCHAR(254) NOT NULL DEFAULT '',
    p_fpops        DOUBLE NOT NULL DEFAULT 0,
    p_iops         DOUBLE NOT NULL DEFAULT 0,
    m_nbytes       DOUBLE NOT NULL DEFAULT 0,
    m_swap         DOUBLE NOT NULL DEFAULT 0,
    d_total        DOUBLE NOT NULL DEFAULT 0,
    d_free         DOUBLE NOT NULL DEFAULT 0,
    os_name        VARCHAR(254) NOT NULL DEFAULT '',
    os_version     VARCHAR(254) NOT NULL DEFAULT '',
    on_frac        DOUBLE NOT NULL DEFAULT 0,
    active_frac    DOUBLE NOT NULL DEFAULT 0,
    nresults_today INT NOT NULL DEFAULT 0,
    avg_turnaround DOUBLE NOT NULL DEFAULT 0,
    KEY host_userid (userid)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

CREATE TABLE workunit (
    id                  INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    create_time         INT NOT NULL,
    appid               INT NOT NULL,
    name                VARCHAR(254) NOT NULL,
    xml_doc             BLOB,
    batch               INT NOT NULL DEFAULT 0,
    rsc_fpops_est       DOUBLE NOT NULL DEFAULT 0,
    rsc_fpops_bound     DOUBLE NOT NULL DEFAULT 0,
    rsc_memory_bound    DOUBLE NOT NULL DEFAULT 0,
    rsc_disk_bound      DOUBLE NOT NULL DEFAULT 0,
    need_validate       TINYINT NOT NULL DEFAULT 0,
    canonical_resultid  INT NOT NULL DEFAULT 0,
    canonical_credit    DOUBLE NOT NULL DEFAULT 0,
    transition_time     INT NOT NULL DEFAULT 0,
    delay_bound         INT NOT NULL DEFAULT 0,
    error_mask          INT NOT NULL DEFAULT 0,
    file_delete_state   INT NOT NULL DEFAULT 0,
    assimilate_state    INT NOT NULL DEFAULT 0,
    hr_class            INT NOT NULL DEFAULT 0,
    opaque              DOUBLE NOT NULL DEFAULT 0,
    min_quorum          INT NOT NULL DEFAULT 1,
    target_nresults     INT NOT NULL DEFAULT 1,
    max_error_results   INT NOT NULL DEFAULT 3,
    max_total_results   INT NOT NULL DEFAULT 6,
    max_success_results INT NOT NULL DEFAULT 3,
    priority            INT NOT NULL DEFAULT 0,
    mod_time            INT NOT NULL DEFAULT 0,
    UNIQUE KEY workunit_name (name),
    KEY wu_transition_time (transition_time),
    KEY wu_need_validate (appid, need_validate),
    KEY wu_assimilate (appid, assimilate_state),
    KEY wu_file_delete (file_delete_state),
    KEY wu_purge (file_delete_state, mod_time)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

CREATE TABLE result (
    id                INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    create_time       INT NOT NULL,
    workunitid        INT NOT NULL,
    server_state      INT NOT NULL,
    outcome           INT NOT NULL DEFAULT 0,
    client_state      INT NOT NULL DEFAULT 0,
    hostid            INT NOT NULL DEFAULT 0,
    userid            INT NOT NULL DEFAULT 0,
    report_deadline   INT NOT NULL DEFAULT 0,
    sent_time         INT NOT NULL DEFAULT 0,
    received_time     INT NOT NULL DEFAULT 0,
    name              VARCHAR(254) NOT NULL,
    cpu_time          DOUBLE NOT NULL DEFAULT 0,
    xml_doc_in        BLOB,
    xml_doc_out       BLOB,
    stderr_out        BLOB,
    batch             INT NOT NULL DEFAULT 0,
    file_delete_state INT NOT NULL DEFAULT 0,
    validate_state    INT NOT NULL DEFAULT 0,
    claimed_credit    DOUBLE NOT NULL DEFAULT 0,
    granted_credit    DOUBLE NOT NULL DEFAULT 0,
    opaque            DOUBLE NOT NULL DEFAULT 0,
    random            INT NOT NULL DEFAULT 0,
    app_version_num   INT NOT NULL DEFAULT 0,
    appid             INT NOT NULL DEFAULT 0,
    exit_status       INT NOT NULL DEFAULT 0,
    teamid            INT NOT NULL DEFAULT 0,
    priority          INT NOT NULL DEFAULT 0,
    mod_time          INT NOT NULL DEFAULT 0,
    elapsed_time      DOUBLE NOT NULL DEFAULT 0,
    app_version_id    INT NOT NULL DEFAULT 0,
    UNIQUE KEY result_name (name),
    KEY res_wuid (workunitid),
    KEY res_server_state (server_state, priority),
    -- the feeder's cursor over unsent results: server_state = ? AND id > ? ORDER BY id
    KEY res_feeder (server_state, id),
    KEY res_host_state (hostid, server_state),
    KEY res_file_delete (file_delete_state),
    KEY res_userid (userid)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

-- One row per (job, user) that has ever been sent an instance of the job. Its
-- primary key is what makes "never two instances of one job to the same user"
-- hold even when two hosts of one user ask at the same instant; BOINC checks
-- this with a SELECT, which races.
CREATE TABLE workunit_user (
    workunitid INT NOT NULL,
    userid     INT NOT NULL,
    resultid   INT NOT NULL,
    PRIMARY KEY (workunitid, userid)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;
