package taskctl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/passwd"
	"github.com/taskserver/taskserver/internal/store"
)

// userSetPasswordCommand sets an account's password without it ever
// being an argument (which other local users can read while the command
// runs): it is typed at a prompt, twice, or read from standard input.
func (t *tool) userSetPasswordCommand() *cli.Command {
	return &cli.Command{
		Name: "set-password",
		Usage: "set the password a volunteer attaches with (BOINC Manager's e-mail and password), read from a prompt or, " +
			"when standard input is not a terminal, from its first line; stored as bcrypt of the client's md5, " +
			"as BOINC's web code stores it",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "email", Required: true, Usage: "e-mail address of the account"},
		},
		Action: func(c *cli.Context) error {
			email := strings.TrimSpace(c.String("email"))
			return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
				u, err := st.UserGetByEmail(ctx, email)
				if err != nil {
					return fmt.Errorf("user <%s>: %w", email, err)
				}
				pw, err := t.readPassword()
				if err != nil {
					return err
				}
				// The client hashes with the address as the account has it
				// (lowercased), whatever case --email was given in.
				hash, err := passwd.Hash(passwd.ClientHash(pw, u.EmailAddr), passwd.DefaultCost)
				if err != nil {
					return err
				}
				set, err := st.UserSetPasswdHash(ctx, u.ID, u.PasswdHash, hash)
				if err != nil {
					return err
				}
				if !set {
					return fmt.Errorf("user %d <%s>: its password changed meanwhile; nothing set, run the command again", u.ID, u.EmailAddr)
				}
				t.notef("password set: the volunteer can attach with <%s> and this password\n", u.EmailAddr)
				return nil
			})
		},
	}
}

// readPassword reads a new password: at a prompt without echo, typed
// twice, when standard input is a terminal; else the first line of
// standard input. It must be as long as the client asks for.
func (t *tool) readPassword() (string, error) {
	var pw string
	if f, ok := t.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		first, err := t.prompt(f, "New password: ")
		if err != nil {
			return "", err
		}
		again, err := t.prompt(f, "Same password again: ")
		if err != nil {
			return "", err
		}
		if first != again {
			return "", errors.New("the two passwords differ; nothing set")
		}
		pw = first
	} else {
		line, err := bufio.NewReader(t.stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("read the password from standard input: %w", err)
		}
		pw = strings.TrimRight(line, "\r\n")
	}
	if pw == "" {
		return "", errors.New("no password given (type it at the prompt or give it on standard input); nothing set")
	}
	if utf8.RuneCountInString(pw) < minPasswdLength {
		return "", fmt.Errorf("password: want at least %d characters, as the client does; nothing set", minPasswdLength)
	}
	return pw, nil
}

// prompt asks for a password on the terminal f without echoing it.
func (t *tool) prompt(f *os.File, what string) (string, error) {
	t.notef("%s", what)
	b, err := term.ReadPassword(int(f.Fd()))
	t.notef("\n")
	if err != nil {
		return "", fmt.Errorf("read the password: %w", err)
	}
	return string(b), nil
}
