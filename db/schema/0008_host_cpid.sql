-- Version 8: host.host_cpid as BOINC keeps it, the md5 of the cpid the
-- client sends and the owner's e-mail address (hosts imported from a BOINC
-- project already hold that), so that a BOINC client moving over finds its
-- host by cpid and the statistics export's host_cpid is BOINC's. The
-- scheduler stores the hashed form from this version on; rows written
-- before hold the client's cpid and are hashed here.
UPDATE host h JOIN user u ON u.id = h.userid
SET h.host_cpid = MD5(CONCAT(h.host_cpid, u.email_addr))
WHERE h.host_cpid <> '';
