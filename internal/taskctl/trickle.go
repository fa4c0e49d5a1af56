package taskctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/protocol"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// maxTrickleDownBody bounds a trickle-down's text, as the scheduler bounds
// a trickle-up's.
const maxTrickleDownBody = 64 << 10

func (t *tool) trickleCommand() *cli.Command {
	return &cli.Command{
		Name:  "trickle",
		Usage: "trickle messages between running applications and the project",
		Subcommands: []*cli.Command{{
			Name: "send",
			Usage: "queue a trickle-down message for the application of a task on a host; the scheduler delivers it " +
				"once, with the host's next request (BOINC's msg_to_host)",
			Flags: []cli.Flag{
				&cli.Int64Flag{Name: "host", Required: true, Usage: "host id"},
				&cli.StringFlag{Name: "result", Required: true, Usage: "name of the task (result) whose running application gets the message"},
				&cli.StringFlag{Name: "variety", Required: true, Usage: "the message's kind, for the project's own bookkeeping"},
				&cli.StringFlag{Name: "body", Required: true, Usage: "file holding the message's text (\"-\": standard input), at most 64 KiB"},
			},
			Action: func(c *cli.Context) error {
				body, err := t.readBody(c.String("body"))
				if err != nil {
					return err
				}
				variety := c.String("variety")
				if variety == "" || len(variety) > 254 {
					return fmt.Errorf("--variety %q: want 1 to 254 bytes", variety)
				}
				now := t.now().Unix()
				xml, err := protocol.TrickleDownXML(c.String("result"), now, body)
				if err != nil {
					return err
				}
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					host := c.Int64("host")
					if _, err := st.HostGet(ctx, host); err != nil {
						return fmt.Errorf("--host %d: %w", host, err)
					}
					id, err := st.MsgToHostInsert(ctx, row.MsgToHost{CreateTime: now, HostID: host, Variety: variety, XML: xml})
					if err != nil {
						return err
					}
					t.printf("trickle-down %d queued for host %d, task %s\n", id, host, c.String("result"))
					return nil
				})
			},
		}, {
			Name:  "list",
			Usage: "list recent trickle-up messages, newest first",
			Flags: []cli.Flag{
				&cli.Int64Flag{Name: "host", Usage: "only this host's messages"},
				&cli.IntFlag{Name: "limit", Value: 50, Usage: "most messages listed"},
				&cli.BoolFlag{Name: "json", Usage: "print JSON (with each message's XML) instead of a table"},
			},
			Action: func(c *cli.Context) error {
				if c.Int("limit") < 1 {
					return fmt.Errorf("--limit %d: want at least 1", c.Int("limit"))
				}
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					msgs, err := st.MsgFromHostListRecent(ctx, c.Int64("host"), c.Int("limit"))
					if err != nil {
						return err
					}
					if c.Bool("json") {
						enc := json.NewEncoder(t.stdout)
						enc.SetIndent("", "  ")
						return enc.Encode(msgs)
					}
					w := tabwriter.NewWriter(t.stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(w, "ID\tRECEIVED\tHOST\tTASK\tVARIETY\tHANDLED")
					for _, m := range msgs {
						fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\t%t\n", m.ID, time.Unix(m.CreateTime, 0).UTC().Format(time.RFC3339),
							m.HostID, m.ResultName, m.Variety, m.Handled)
					}
					return w.Flush()
				})
			},
		}},
	}
}

// readBody reads a message's text from path, or standard input for "-".
func (t *tool) readBody(path string) (string, error) {
	var r io.Reader = t.stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return "", fmt.Errorf("--body: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxTrickleDownBody+1))
	if err != nil {
		return "", fmt.Errorf("--body: %w", err)
	}
	if len(b) > maxTrickleDownBody {
		return "", fmt.Errorf("--body %s: more than %d bytes", path, maxTrickleDownBody)
	}
	return strings.TrimRight(string(b), "\n"), nil
}
