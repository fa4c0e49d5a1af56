package taskctl

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/passwd"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/submitapi"
)

func (t *tool) userCommand() *cli.Command {
	return &cli.Command{
		Name:  "user",
		Usage: "manage volunteer accounts",
		Subcommands: []*cli.Command{{
			Name:  "create",
			Usage: "create an account; prints its authenticator (the account key) on standard output, once",
			Flags: append([]cli.Flag{
				&cli.StringFlag{Name: "email", Required: true, Usage: "e-mail address (unique)"},
				&cli.StringFlag{Name: "name", Required: true, Usage: "name shown to others"},
				&cli.BoolFlag{Name: "submit-allowed", Usage: "let the account submit batches through the submission API (with its own key: taskctl user apikey)"},
			}, passwordFlags()...),
			Action: func(c *cli.Context) error {
				email := strings.TrimSpace(c.String("email"))
				if !strings.Contains(email, "@") {
					return fmt.Errorf("--email %q: not an e-mail address", email)
				}
				auth, err := NewAuthenticator()
				if err != nil {
					return err
				}
				// BOINC gives every account a cross-project id: 32 random hex.
				cpid, err := NewAuthenticator()
				if err != nil {
					return err
				}
				hash, err := t.passwordHash(c, email)
				if err != nil {
					return err
				}
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					id, err := st.UserInsert(ctx, row.User{CreateTime: t.now().Unix(), EmailAddr: email,
						Name: c.String("name"), Authenticator: auth, PasswdHash: hash, CrossProjectID: cpid,
						SubmitAllowed: c.Bool("submit-allowed")})
					if err != nil {
						return err
					}
					t.notef("created user %d <%s>; its authenticator follows on standard output\n", id, email)
					if c.Bool("submit-allowed") {
						t.notef("for the submission API it needs a key of its own: taskctl user apikey --email %s\n", email)
					}
					t.printf("%s\n", auth)
					return nil
				})
			},
		}, {
			Name:  "set",
			Usage: "change an account's e-mail address, name, password or permissions; only the flags given change",
			Flags: append([]cli.Flag{
				&cli.StringFlag{Name: "email", Required: true, Usage: "e-mail address of the account"},
				&cli.StringFlag{Name: "new-email", Usage: "new e-mail address (unique; the password is hashed with the address, so give it again with --password)"},
				&cli.StringFlag{Name: "name", Usage: "new name shown to others"},
				&cli.BoolFlag{Name: "submit-allowed",
					Usage: "let the account submit batches through the submission API (--submit-allowed=false to stop it)"},
			}, passwordFlags()...),
			Action: func(c *cli.Context) error {
				email := strings.TrimSpace(c.String("email"))
				newEmail := strings.TrimSpace(c.String("new-email"))
				if c.IsSet("new-email") && !strings.Contains(newEmail, "@") {
					return fmt.Errorf("--new-email %q: not an e-mail address", newEmail)
				}
				if c.IsSet("name") && strings.TrimSpace(c.String("name")) == "" {
					return errors.New("--name is empty")
				}
				setPassword := c.IsSet("password") || c.Bool("password-stdin")
				if !c.IsSet("new-email") && !c.IsSet("name") && !c.IsSet("submit-allowed") && !setPassword {
					return errors.New("nothing to change: give --new-email, --name, --password or --submit-allowed")
				}
				// The client hashes the password with the address it will
				// have, so the hash is made for the new one.
				hashEmail := email
				if c.IsSet("new-email") {
					hashEmail = newEmail
				}
				hash, err := t.passwordHash(c, hashEmail)
				if err != nil {
					return err
				}
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					u, err := st.UserGetByEmail(ctx, email)
					if err != nil {
						return fmt.Errorf("user <%s>: %w", email, err)
					}
					if c.IsSet("new-email") && !setPassword && u.PasswdHash != "" {
						t.notef("the account's password was hashed with its old address and no longer works; set it again with --password\n")
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
					if setPassword {
						set, err := st.UserSetPasswdHash(ctx, u.ID, u.PasswdHash, hash)
						if err != nil {
							return err
						}
						if !set {
							return fmt.Errorf("user %d <%s>: its password changed meanwhile; nothing set, run the command again", u.ID, u.EmailAddr)
						}
						t.notef("password set: the volunteer can attach with <%s> and this password\n", u.EmailAddr)
					}
					t.printf("user %d <%s> name=%q submit_allowed=%t\n", u.ID, u.EmailAddr, u.Name, u.SubmitAllowed)
					return nil
				})
			},
		}, t.userSetPasswordCommand(), {
			Name: "apikey",
			Usage: "make the account a new submission API key and print it on standard output, once; the database keeps only its SHA-256, " +
				"and the previous key stops working (the API also needs --submit-allowed)",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "email", Required: true, Usage: "e-mail address of the account"},
			},
			Action: func(c *cli.Context) error {
				email := strings.TrimSpace(c.String("email"))
				key, hash, err := submitapi.NewKey()
				if err != nil {
					return err
				}
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					u, err := st.UserGetByEmail(ctx, email)
					if err != nil {
						return fmt.Errorf("user <%s>: %w", email, err)
					}
					if err := st.UserSetAPIKeyHash(ctx, u.ID, hash); err != nil {
						return err
					}
					t.notef("new submission API key of user %d <%s> follows on standard output; it is not stored and cannot be shown again\n", u.ID, u.EmailAddr)
					if !u.SubmitAllowed {
						t.notef("the account may not submit yet: taskctl user set --email %s --submit-allowed\n", u.EmailAddr)
					}
					t.printf("%s\n", key)
					return nil
				})
			},
		}, {
			Name: "rehash-passwords",
			Usage: "replace every stored password that is still the client's md5 (accounts made before schema version 3, or imported " +
				"from BOINC) by its bcrypt hash, as a login would; prints how many",
			Action: func(c *cli.Context) error {
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					n, err := rehashPasswords(ctx, st)
					if n > 0 || err == nil {
						t.printf("%d legacy password hashes replaced by bcrypt\n", n)
					}
					return err
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
		}, t.userPrefsCommand(), {
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
			Usage: "delete an account that never attached a host, ran an instance or submitted a batch, and is in no team " +
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

// minPasswdLength is the shortest password the client accepts (the
// scheduler's get_project_config says 6).
const minPasswdLength = 6

// passwordFlags give an account a password, with which the volunteer can
// attach by e-mail address and password (lookup_account).
func passwordFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "password", Usage: "password the volunteer attaches with (visible to other local users while the command runs; see --password-stdin)"},
		&cli.BoolFlag{Name: "password-stdin", Usage: "read the password from the first line of standard input"},
	}
}

// passwordHash returns what passwd_hash stores for the password the
// command was given, hashed as the client hashes it with email; "" if
// none was given.
func (t *tool) passwordHash(c *cli.Context, email string) (string, error) {
	if c.IsSet("password") && c.Bool("password-stdin") {
		return "", errors.New("give --password or --password-stdin, not both")
	}
	var pw string
	switch {
	case c.IsSet("password"):
		pw = c.String("password")
	case c.Bool("password-stdin"):
		line, err := bufio.NewReader(t.stdin).ReadString('\n')
		if err != nil && line == "" {
			return "", fmt.Errorf("--password-stdin: read the password: %w", err)
		}
		pw = strings.TrimRight(line, "\r\n")
	default:
		return "", nil
	}
	if utf8.RuneCountInString(pw) < minPasswdLength {
		return "", fmt.Errorf("password: want at least %d characters, as the client does", minPasswdLength)
	}
	return passwd.Hash(passwd.ClientHash(pw, strings.TrimSpace(email)), passwd.DefaultCost)
}

// rehashPasswords replaces each legacy (md5) passwd_hash by its bcrypt
// hash, page by page; a row changed meanwhile is left as it now is.
func rehashPasswords(ctx context.Context, st *store.Store) (int, error) {
	n := 0
	var after int64
	for {
		users, err := st.UserList(ctx, after, 500)
		if err != nil {
			return n, err
		}
		if len(users) == 0 {
			return n, nil
		}
		for _, u := range users {
			after = u.ID
			if !passwd.IsClientHash(u.PasswdHash) {
				continue
			}
			h, err := passwd.Hash(u.PasswdHash, passwd.DefaultCost)
			if err != nil {
				return n, err
			}
			set, err := st.UserSetPasswdHash(ctx, u.ID, u.PasswdHash, h)
			if err != nil {
				return n, err
			}
			if set {
				n++
			}
		}
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
