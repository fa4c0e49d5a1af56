-- Version 3: accounts as BOINC keeps them today, and submitters' own keys.
-- Who writes which column: db/schema/WRITERS.md.

-- passwd_hash now holds bcrypt of the client's md5 (60 characters, within
-- the column's 254); rows still holding the md5 itself are upgraded at the
-- next login (package passwd). api_key_hash: the SHA-256 hex of the
-- user's submission API key ('' for none); the key itself is shown once
-- and stored nowhere.
ALTER TABLE user
    ADD COLUMN api_key_hash CHAR(64) NOT NULL DEFAULT '',
    ADD KEY user_api_key_hash (api_key_hash);

-- Accounts made by the operator tool before this version have no
-- cross-project id; BOINC gives every account one (32 random hex).
UPDATE user SET cross_project_id = MD5(CONCAT(UUID(), RAND(), id, authenticator)) WHERE cross_project_id = '';
