package statsexport

import (
	"crypto/md5"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/taskserver/taskserver/internal/row"
)

// The records below are laid out as BOINC's db_dump lays them out, element
// for element and space for space: statistics sites have parsed these
// files for two decades, some with line-oriented scripts, so the safest
// file is one they cannot tell from BOINC's.

// appendEscaped appends s as BOINC's xml_escape writes text: '<' and '&'
// as entities, "]]>" as "]]&gt;", tab, newline and carriage return as
// character references, other control characters dropped, and every byte
// above 127 as its own character reference ("é", UTF-8 C3 A9, becomes
// "&#195;&#169;"). Statistics sites undo that byte-wise escaping to get the
// UTF-8 back; escaping whole characters instead would hand them different
// names from the same database.
func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '<':
			b = append(b, "&lt;"...)
		case c == '&':
			b = append(b, "&amp;"...)
		case c > 127, c == '\t', c == '\n', c == '\r':
			b = append(b, "&#"...)
			b = strconv.AppendInt(b, int64(c), 10)
			b = append(b, ';')
		case c < 32:
			// Not allowed in XML 1.0 even as a reference: dropped.
		case c == ']' && strings.HasPrefix(s[i:], "]]>"):
			b = append(b, "]]&gt;"...)
			i += 2
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendFloat appends v as C's "%f": fixed point, six decimals.
func appendFloat(b []byte, v float64) []byte {
	return strconv.AppendFloat(b, v, 'f', 6, 64)
}

// element appends indent<name>value</name>\n for the value written by put.
func element(b []byte, indent, name string, put func([]byte) []byte) []byte {
	b = append(b, indent...)
	b = append(b, '<')
	b = append(b, name...)
	b = append(b, '>')
	b = put(b)
	b = append(b, "</"...)
	b = append(b, name...)
	b = append(b, ">\n"...)
	return b
}

func intElem(b []byte, indent, name string, v int64) []byte {
	return element(b, indent, name, func(b []byte) []byte { return strconv.AppendInt(b, v, 10) })
}

func floatElem(b []byte, indent, name string, v float64) []byte {
	return element(b, indent, name, func(b []byte) []byte { return appendFloat(b, v) })
}

func textElem(b []byte, indent, name, v string) []byte {
	return element(b, indent, name, func(b []byte) []byte { return appendEscaped(b, v) })
}

// md5Hex is BOINC's md5_block: the lower-case hex MD5 of s.
func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// userCPID is the user's public cross-project id: the MD5 of the private
// cross_project_id followed by the e-mail address, as BOINC computes it.
// Statistics sites add up a volunteer's credit over projects by it; the
// private id itself is never published (it would let anyone claim the
// volunteer's hosts).
func userCPID(u row.StatsUser) string {
	return md5Hex(u.CrossProjectID + u.EmailAddr)
}

// hostCPID is the host's public cross-project id: host.host_cpid as the
// scheduler keeps it, as BOINC's does (the md5 of the id the client
// reports followed by the owner's e-mail address), and as BOINC's db_dump
// writes it. A host whose owner's row is gone is written without one.
func hostCPID(h row.StatsHost) string {
	if !h.OwnerFound {
		return ""
	}
	return h.HostCPID
}

// appendUser appends the <user> record BOINC's db_dump writes. Country and
// URL are written when set (BOINC's default config.xml exports both);
// teamid only for a team member; <has_profile/> only for a volunteer with
// a profile.
func appendUser(b []byte, u row.StatsUser) []byte {
	b = append(b, "<user>\n"...)
	b = intElem(b, " ", "id", u.ID)
	b = textElem(b, " ", "name", u.Name)
	b = intElem(b, " ", "create_time", u.CreateTime)
	b = floatElem(b, " ", "total_credit", u.TotalCredit)
	b = floatElem(b, " ", "expavg_credit", u.ExpavgCredit)
	b = floatElem(b, " ", "expavg_time", u.ExpavgTime)
	b = element(b, " ", "cpid", func(b []byte) []byte { return append(b, userCPID(u)...) })
	if u.Country != "" {
		// BOINC writes the country unescaped; its country names need no
		// escaping, and escaping keeps a hand-edited one from breaking
		// the file.
		b = textElem(b, " ", "country", u.Country)
	}
	if u.URL != "" {
		b = textElem(b, " ", "url", u.URL)
	}
	if u.TeamID != 0 {
		b = intElem(b, " ", "teamid", u.TeamID)
	}
	if u.HasProfile {
		b = append(b, " <has_profile/>\n"...)
	}
	return append(b, "</user>\n"...)
}

// appendTeam appends the <team> record BOINC's db_dump writes (without the
// member list its "detail" output adds, which the default export does not
// ask for).
func appendTeam(b []byte, t row.StatsTeam) []byte {
	b = append(b, "<team>\n"...)
	b = intElem(b, " ", "id", t.ID)
	b = intElem(b, " ", "type", int64(t.Type))
	b = textElem(b, " ", "name", t.Name)
	b = intElem(b, " ", "userid", t.UserID)
	b = floatElem(b, " ", "total_credit", t.TotalCredit)
	b = floatElem(b, " ", "expavg_credit", t.ExpavgCredit)
	b = floatElem(b, " ", "expavg_time", t.ExpavgTime)
	if t.FounderFound {
		b = textElem(b, "  ", "founder_name", t.FounderName)
	}
	b = intElem(b, " ", "create_time", t.CreateTime)
	if t.URL != "" {
		b = textElem(b, " ", "url", t.URL)
	}
	if t.NameHTML != "" {
		b = textElem(b, "", "name_html", t.NameHTML)
	}
	if t.Description != "" {
		b = textElem(b, "", "description", string(t.Description))
	}
	b = textElem(b, " ", "country", t.Country)
	return append(b, "</team>\n"...)
}

// appendHost appends the <host> record of BOINC's db_dump with "detail"
// (the default export's host file): the owner's id only when the owner
// shows their computers, and the hardware record. <misc> is BOINC's JSON
// summary of GPUs and virtualisation, a column this server does not keep:
// it is written empty, as BOINC writes it for a host that never sent it.
func appendHost(b []byte, h row.StatsHost) []byte {
	b = append(b, "<host>\n"...)
	b = intElem(b, "    ", "id", h.ID)
	if h.OwnerFound && h.OwnerShowHosts {
		b = intElem(b, "    ", "userid", h.UserID)
	}
	b = floatElem(b, "    ", "total_credit", h.TotalCredit)
	b = floatElem(b, "    ", "expavg_credit", h.ExpavgCredit)
	b = floatElem(b, "    ", "expavg_time", h.ExpavgTime)
	b = textElem(b, "    ", "p_vendor", h.PVendor)
	b = textElem(b, "    ", "p_model", h.PModel)
	b = textElem(b, "    ", "os_name", h.OSName)
	b = textElem(b, "    ", "os_version", h.OSVersion)
	b = append(b, "    <misc><![CDATA[]]></misc>\n"...)
	b = intElem(b, "  ", "create_time", h.CreateTime)
	b = intElem(b, "  ", "rpc_time", h.RPCTime)
	b = intElem(b, "  ", "timezone", int64(h.Timezone))
	b = intElem(b, "  ", "ncpus", int64(h.PNCPUs))
	b = floatElem(b, "  ", "p_fpops", h.PFpops)
	b = floatElem(b, "  ", "p_iops", h.PIops)
	b = floatElem(b, "  ", "p_membw", h.PMembw)
	b = floatElem(b, "  ", "m_nbytes", h.MNbytes)
	b = floatElem(b, "  ", "m_cache", h.MCache)
	b = floatElem(b, "  ", "m_swap", h.MSwap)
	b = floatElem(b, "  ", "d_total", h.DTotal)
	b = floatElem(b, "  ", "d_free", h.DFree)
	b = floatElem(b, "  ", "n_bwup", h.NBwup)
	b = floatElem(b, "  ", "n_bwdown", h.NBwdown)
	b = floatElem(b, "  ", "avg_turnaround", h.AvgTurnaround)
	b = floatElem(b, "  ", "credit_per_cpu_sec", h.CreditPerCPUSec)
	b = element(b, "  ", "host_cpid", func(b []byte) []byte { return append(b, hostCPID(h)...) })
	return append(b, "</host>\n"...)
}

// Totals are the counts tables.xml carries: the users, teams and hosts the
// dump holds and the users' total credit.
type Totals struct {
	// UpdateTime is when the dump was made, Unix seconds.
	UpdateTime  int64
	Users       int64
	Teams       int64
	Hosts       int64
	TotalCredit float64
}

// appendTables appends tables.xml (BOINC writes it uncompressed): the
// update time, the totals (each only when not zero, as BOINC writes
// them), every app's user-friendly name, and an empty badge list (this
// server awards no badges, so there are no badge_user or badge_team
// files).
func appendTables(b []byte, t Totals, apps []row.App) []byte {
	b = append(b, header...)
	b = append(b, "<tables>\n"...)
	b = intElem(b, "    ", "update_time", t.UpdateTime)
	if t.Users != 0 {
		b = intElem(b, "    ", "nusers_total", t.Users)
	}
	if t.Teams != 0 {
		b = intElem(b, "    ", "nteams_total", t.Teams)
	}
	if t.Hosts != 0 {
		b = intElem(b, "    ", "nhosts_total", t.Hosts)
	}
	if t.TotalCredit != 0 {
		b = floatElem(b, "    ", "total_credit", t.TotalCredit)
	}
	b = append(b, "    <applications>\n"...)
	for _, a := range apps {
		b = append(b, "        <application>\n"...)
		b = textElem(b, "            ", "name", a.UserFriendlyName)
		b = append(b, "        </application>\n"...)
	}
	b = append(b, "    </applications>\n"...)
	b = append(b, "    <badges>\n    </badges>\n"...)
	return append(b, "</tables>\n"...)
}

// header opens every file of the dump.
const header = `<?xml version="1.0" encoding="utf-8"?>` + "\n"
