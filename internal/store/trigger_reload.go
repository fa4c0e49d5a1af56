package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MariaDB loads a table's triggers, parsing their bodies, each time it
// opens another instance of the table for its table cache. A statement
// killed while it does so (KILL QUERY, a max_statement_time, or on Galera
// a transaction aborted by a conflicting replicated write, which is
// routine when two nodes write the same rows) leaves that instance marked
// as holding an unparseable trigger. The instance goes back to the cache,
// and every later write that is handed it fails with 1064 "Trigger '…'
// has an error in its body: 'You have an error in your SQL syntax …'"
// (or "Unknown trigger has an error in its body") until the table is
// closed. Seen on 10.11 on a single server under KILL QUERY and in CI on
// a two-node cluster; the count triggers of schema 10 are on result and
// workunit, so one such instance stops a share of every daemon's writes.
//
// Such a write did nothing: the check comes before any row is touched. So
// failoverConn.refused treats it as a refusal: the connection is dropped,
// the statement or transaction runs again, and before that the node is
// told to close its cached instances of every table that has triggers
// (FLUSH LOCAL TABLES, which needs the RELOAD privilege), so that the next
// open parses them afresh.

// erParse is ER_PARSE_ERROR, which the server also answers for a table
// whose triggers did not load; erNoTable is ER_NO_SUCH_TABLE, which it
// answers for a table a trigger writes when that table's instance did not
// load.
const (
	erParse   = 1064
	erNoTable = 1146
)

// triggerTargets are the tables the schema's triggers write (schema 10's
// count tables). They exist in every database the programs run on
// (SchemaCheck), so a 1146 naming one is the fault, not a missing table.
var triggerTargets = []string{"result_count", "workunit_count"}

// reloadLockWait bounds how long the FLUSH waits for transactions that
// have the tables open; while it waits, new statements on them queue
// behind it. Every transaction here is short.
const reloadLockWait = 2 * time.Second

// brokenTables reports whether err is a statement refused because a table
// instance the node had cached failed to load: its triggers, or a table
// they write.
func brokenTables(err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case erParse:
		return strings.Contains(me.Message, "has an error in its body")
	case erNoTable:
		// "Table 'db.name' doesn't exist"
		name, _, ok := strings.Cut(strings.TrimPrefix(me.Message, "Table '"), "'")
		if i := strings.LastIndexByte(name, '.'); ok && i >= 0 {
			return slices.Contains(triggerTargets, name[i+1:])
		}
	}
	return false
}

// reloadTriggers has node idx close its cached instances of the tables
// of the connection's database, in the background: the connection that saw
// the error is in a transaction that holds the table (a FLUSH would wait
// for it until it ends, and if run on it would commit it), so the flush
// runs on a connection of its own once the caller has rolled back. Writes
// refused together start one flush; their retries wait behind it on the
// server. Store.Close waits for a flush under way.
func (c *connector) reloadTriggers(idx int) {
	if !c.reloading.CompareAndSwap(false, true) {
		return
	}
	c.reloads.Add(1)
	go func() {
		defer c.reloads.Done()
		defer c.reloading.Store(false)
		err := c.flushTables(idx)
		c.reloadMu.Lock()
		c.reloadErr = err
		c.reloadMu.Unlock()
	}()
}

// lastReloadError is the error of the last reloadTriggers flush, nil if
// it succeeded.
func (c *connector) lastReloadError() error {
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
	return c.reloadErr
}

// flushTables runs FLUSH LOCAL TABLES on every base table of the
// database on node idx. Every table, not only those with triggers: a
// statement killed while opening the tables a trigger writes can leave
// those broken too (1146, "doesn't exist").
func (c *connector) flushTables(idx int) error {
	ctx, cancel := context.WithTimeout(context.Background(), reloadLockWait+2*dialTimeout)
	defer cancel()
	conn, err := c.nodes[idx].Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var tables []string
	err = driverRows(ctx, conn,
		"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE = 'BASE TABLE'",
		func(row []driver.Value) {
			tables = append(tables, "`"+strings.ReplaceAll(asString(row[0]), "`", "``")+"`")
		})
	if err != nil || len(tables) == 0 {
		return err
	}
	exec := conn.(driver.ExecerContext)
	// The seconds of reloadLockWait.
	if _, err := exec.ExecContext(ctx, "SET SESSION lock_wait_timeout = 2", nil); err != nil {
		return err
	}
	// LOCAL: the broken instances are this node's; on a cluster the
	// statement is not replicated.
	_, err = exec.ExecContext(ctx, "FLUSH LOCAL TABLES "+strings.Join(tables, ", "), nil)
	return err
}
