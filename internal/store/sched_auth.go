package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// userHostColumns is hostColumns read through a LEFT JOIN as h: each column
// named "host.<column>" (sqlx's nested struct form) and never NULL.
var userHostColumns = func() string {
	var cols []string
	for _, c := range strings.Split(hostColumns, ",") {
		c = strings.TrimSpace(c)
		zero := "0"
		switch c {
		case "domain_name", "last_ip_addr", "host_cpid", "p_vendor", "p_model", "os_name", "os_version":
			zero = "''"
		}
		cols = append(cols, fmt.Sprintf("COALESCE(h.%s, %s) AS `host.%s`", c, zero, c))
	}
	return strings.Join(cols, ", ")
}()

// userHostRow is a user and the host a request named, if it exists.
type userHostRow struct {
	User
	Host      Host `db:"host"`
	HostFound bool `db:"host_found"`
}

var userHostGet = `SELECT ` + prefixed("u.", userColumns) + `, ` + userHostColumns +
	`, h.id IS NOT NULL AS host_found
FROM user u LEFT JOIN host h ON h.id = ? WHERE u.authenticator = ?`

// UserHostGet returns, in one query, the user whose account key is auth
// (ErrNotFound if none) and host hostID whoever owns it (found false if
// there is no such host). Callers compare the key and the host's owner
// themselves.
func (s *Store) UserHostGet(ctx context.Context, auth string, hostID int64) (u User, h Host, found bool, err error) {
	var row userHostRow
	err = s.db.GetContext(ctx, &row, userHostGet, hostID, auth)
	if errors.Is(err, sql.ErrNoRows) {
		return u, h, false, ErrNotFound
	}
	if err != nil {
		return u, h, false, fmt.Errorf("get user by authenticator and host %d: %w", hostID, err)
	}
	return row.User, row.Host, row.HostFound, nil
}

// prefixed is the column list cols with each column qualified by p.
func prefixed(p, cols string) string {
	var out []string
	for _, c := range strings.Split(cols, ",") {
		out = append(out, p+strings.TrimSpace(c))
	}
	return strings.Join(out, ", ")
}
