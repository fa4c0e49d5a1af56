// Package dsnlist reads a program's list of database addresses: one
// comma-separated string of go-sql-driver/mysql DSNs, the form --db-dsn,
// its environment variable and the configuration file all take. It is the
// one place that splits the list, so the store that connects and the
// configuration that validates agree on what an address is.
package dsnlist

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// Split parses list, DSNs separated by commas, into one driver
// configuration per address, in the order given (the order in which a
// store tries them). A DSN inside a list cannot hold a comma of its own: a
// parameter value that needs one writes it %2C, which the driver decodes.
// A single DSN whose password holds a comma, so that what comes before
// its first comma is no DSN, is read whole, as before lists existed.
// Errors name an address by its position, not its text, which may hold a
// password.
func Split(list string) ([]*mysql.Config, error) {
	cfgs, err := split(list)
	first, _, _ := strings.Cut(list, ",")
	if _, ferr := mysql.ParseDSN(strings.TrimSpace(first)); err != nil && ferr != nil && !hasEmpty(list) {
		if cfg, werr := mysql.ParseDSN(strings.TrimSpace(list)); werr == nil {
			return []*mysql.Config{cfg}, nil
		}
	}
	return cfgs, err
}

// hasEmpty reports whether list has an empty entry, which a DSN never
// explains: "a,", ",a" and "a,,b" are mistakes, not passwords.
func hasEmpty(list string) bool {
	for _, p := range strings.Split(list, ",") {
		if strings.TrimSpace(p) == "" {
			return true
		}
	}
	return false
}

func split(list string) ([]*mysql.Config, error) {
	parts := strings.Split(list, ",")
	out := make([]*mysql.Config, 0, len(parts))
	var errs []error
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			errs = append(errs, fmt.Errorf("address %d of %d is empty", i+1, len(parts)))
			continue
		}
		cfg, err := mysql.ParseDSN(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("address %d of %d: %w", i+1, len(parts), err))
			continue
		}
		out = append(out, cfg)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// Join is the inverse of Split for DSNs given one by one (a repeated flag,
// a YAML list): the comma-separated string the store opens.
func Join(dsns []string) string { return strings.Join(dsns, ",") }
