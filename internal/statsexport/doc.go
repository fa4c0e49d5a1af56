// Package statsexport writes the project's statistics in the format of
// BOINC's db_dump, which the volunteer statistics sites (BOINCstats, Free-DC
// and the others) download from every BOINC project each day; db_dump (the
// daemon) and `taskctl stats export` run it.
//
// Reads: user (id, name, create_time, credit and recent average,
// cross_project_id and e-mail for the public id, teamid, country, url,
// has_profile), team (its exported columns and the founder's name), host
// (credit, hardware record, host_cpid) with its owner's show_hosts and
// e-mail, and every app's user-friendly name.
// Writes: files in the dump directory, nothing in the database.
//
// # The dump
//
// The files and elements of BOINC's default db_dump_spec.xml, which every
// BOINC project ships and the sites read:
//
//	user.gz          <users>, a <user> per volunteer with credit
//	team.gz          <teams>, a <team> per team with credit
//	host.gz          <hosts>, a <host> per computer with credit, with its
//	                 hardware record; <userid> only when the owner shows
//	                 their computers
//	user_deleted.gz  <users_deleted>, empty: this server deletes no account
//	host_deleted.gz  <hosts_deleted>, empty: nor any host
//	tables.xml       update_time, nusers_total, nteams_total, nhosts_total,
//	                 total_credit (the users' sum), the apps
//
// Rows are written by id. As in BOINC, a row without credit is left out,
// and so are accounts whose authenticator starts with "deleted", hosts
// whose domain name is "deleted" and hosts of no user; the totals count
// what the files hold. Text is escaped byte by byte as BOINC's xml_escape
// does, numbers written as C's %f. The volunteer's public id (<cpid>) is
// md5(cross_project_id + e-mail) and a host's (<host_cpid>) md5(the
// client's host_cpid + the owner's e-mail), as BOINC computes them (the
// scheduler stores the host's so): the
// sites add up a volunteer's credit over projects by the first and a
// computer's by the second.
//
// # Atomic replacement
//
// A dump is written into a new directory beside the published one and
// swapped in whole with one rename once every file is complete and
// synced; the previous dump stays in place until then, untouched by a
// failure or a kill at any point. See Export.
package statsexport
