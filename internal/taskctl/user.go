package taskctl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/store"
)

func (t *tool) userCommand() *cli.Command {
	return &cli.Command{
		Name:  "user",
		Usage: "manage volunteer accounts",
		Subcommands: []*cli.Command{{
			Name:  "create",
			Usage: "create an account; prints its authenticator (the account key) on standard output, once",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "email", Required: true, Usage: "e-mail address (unique)"},
				&cli.StringFlag{Name: "name", Required: true, Usage: "name shown to others"},
				&cli.BoolFlag{Name: "submit-allowed", Usage: "let the account submit batches through the submission API (its authenticator is the API key)"},
			},
			Action: func(c *cli.Context) error {
				email := strings.TrimSpace(c.String("email"))
				if !strings.Contains(email, "@") {
					return fmt.Errorf("--email %q: not an e-mail address", email)
				}
				auth, err := NewAuthenticator()
				if err != nil {
					return err
				}
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					id, err := st.UserInsert(ctx, store.User{CreateTime: t.now().Unix(), EmailAddr: email,
						Name: c.String("name"), Authenticator: auth, SubmitAllowed: c.Bool("submit-allowed")})
					if err != nil {
						return err
					}
					t.notef("created user %d <%s>; its authenticator follows on standard output\n", id, email)
					t.printf("%s\n", auth)
					return nil
				})
			},
		}, {
			Name:  "set",
			Usage: "change an account's e-mail address, name or permissions; only the flags given change",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "email", Required: true, Usage: "e-mail address of the account"},
				&cli.StringFlag{Name: "new-email", Usage: "new e-mail address (unique)"},
				&cli.StringFlag{Name: "name", Usage: "new name shown to others"},
				&cli.BoolFlag{Name: "submit-allowed",
					Usage: "let the account submit batches through the submission API (--submit-allowed=false to stop it)"},
			},
			Action: func(c *cli.Context) error {
				email := strings.TrimSpace(c.String("email"))
				newEmail := strings.TrimSpace(c.String("new-email"))
				if c.IsSet("new-email") && !strings.Contains(newEmail, "@") {
					return fmt.Errorf("--new-email %q: not an e-mail address", newEmail)
				}
				if c.IsSet("name") && strings.TrimSpace(c.String("name")) == "" {
					return errors.New("--name is empty")
				}
				if !c.IsSet("new-email") && !c.IsSet("name") && !c.IsSet("submit-allowed") {
					return errors.New("nothing to change: give --new-email, --name or --submit-allowed")
				}
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					u, err := st.UserGetByEmail(ctx, email)
					if err != nil {
						return fmt.Errorf("user <%s>: %w", email, err)
					}
					if c.IsSet("new-email") || c.IsSet("name") {
						if c.IsSet("new-email") {
							u.EmailAddr = newEmail
						}
						if c.IsSet("name") {
							u.Name = strings.TrimSpace(c.String("name"))
						}
						if err := st.UserSetProfile(ctx, u.ID, u.EmailAddr, u.Name); err != nil {
							return err
						}
					}
					if c.IsSet("submit-allowed") {
						u.SubmitAllowed = c.Bool("submit-allowed")
						if err := st.UserSetSubmitAllowed(ctx, u.ID, u.SubmitAllowed); err != nil {
							return err
						}
					}
					t.printf("user %d <%s> name=%q submit_allowed=%t\n", u.ID, u.EmailAddr, u.Name, u.SubmitAllowed)
					return nil
				})
			},
		}, {
			Name:  "list",
			Usage: "list accounts in id order: id, e-mail address, created (UTC), submit_allowed, total credit, name",
			Flags: []cli.Flag{
				&cli.IntFlag{Name: "limit", Value: 100, Usage: "most accounts listed"},
				&cli.Int64Flag{Name: "after", Usage: "only accounts with a larger id (paging)"},
			},
			Action: func(c *cli.Context) error {
				if c.Int("limit") < 1 {
					return fmt.Errorf("--limit %d: want at least 1", c.Int("limit"))
				}
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					users, err := st.UserList(ctx, c.Int64("after"), c.Int("limit"))
					if err != nil {
						return err
					}
					for _, u := range users {
						t.printf("%d\t%s\t%s\t%t\t%.2f\t%s\n", u.ID, u.EmailAddr, utc(u.CreateTime), u.SubmitAllowed,
							u.TotalCredit, u.Name)
					}
					return nil
				})
			},
		}, {
			Name:      "show",
			Usage:     "print an account's fields (not its authenticator)",
			ArgsUsage: "EMAIL",
			Action: func(c *cli.Context) error {
				if err := oneArg(c, "the account's e-mail address"); err != nil {
					return err
				}
				email := strings.TrimSpace(c.Args().First())
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					u, err := st.UserGetByEmail(ctx, email)
					if err != nil {
						return fmt.Errorf("user <%s>: %w", email, err)
					}
					t.printf("id: %d\nemail: %s\nname: %s\ncreated: %s\nsubmit_allowed: %t\n"+
						"total_credit: %.2f\nexpavg_credit: %.2f\nteam: %d\n",
						u.ID, u.EmailAddr, u.Name, utc(u.CreateTime), u.SubmitAllowed, u.TotalCredit, u.ExpavgCredit, u.TeamID)
					return nil
				})
			},
		}, {
			Name: "delete",
			Usage: "delete an account that never attached a host, ran an instance or submitted a batch " +
				"(one that did keeps its row: its hosts, results and credit refer to it)",
			ArgsUsage: "EMAIL",
			Action: func(c *cli.Context) error {
				if err := oneArg(c, "the account's e-mail address"); err != nil {
					return err
				}
				email := strings.TrimSpace(c.Args().First())
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					u, err := st.UserGetByEmail(ctx, email)
					if err != nil {
						return fmt.Errorf("user <%s>: %w", email, err)
					}
					if err := st.UserDelete(ctx, u.ID); err != nil {
						return err
					}
					t.printf("deleted user %d <%s>\n", u.ID, u.EmailAddr)
					return nil
				})
			},
		}},
	}
}

// NewAuthenticator returns a fresh account key: 32 hex characters from
// crypto/rand, as BOINC's are.
func NewAuthenticator() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("make authenticator: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// utc formats a Unix time for a listing; 0 is "-".
func utc(sec int64) string {
	if sec == 0 {
		return "-"
	}
	return time.Unix(sec, 0).UTC().Format(time.RFC3339)
}
