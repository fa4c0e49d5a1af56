package taskctl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

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
			Usage: "change an account's permissions",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "email", Required: true, Usage: "e-mail address of the account"},
				&cli.BoolFlag{Name: "submit-allowed", Required: true,
					Usage: "let the account submit batches through the submission API (--submit-allowed=false to stop it)"},
			},
			Action: func(c *cli.Context) error {
				email := strings.TrimSpace(c.String("email"))
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					u, err := st.UserGetByEmail(ctx, email)
					if err != nil {
						return fmt.Errorf("user <%s>: %w", email, err)
					}
					if err := st.UserSetSubmitAllowed(ctx, u.ID, c.Bool("submit-allowed")); err != nil {
						return err
					}
					t.printf("user %d <%s> submit_allowed=%t\n", u.ID, u.EmailAddr, c.Bool("submit-allowed"))
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
