package taskctl

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// teamTypes are BOINC's team types (html/inc/team_types.inc), by number;
// 0 is none.
var teamTypes = []string{"None", "Other", "Company", "Primary school", "Secondary school", "Junior college",
	"University or department", "Government agency", "Non-profit organization", "National", "Local/regional",
	"Computer type", "Social/political/religious"}

// maxTeamName is the team.name column's size.
const maxTeamName = 191

func (t *tool) teamCommand() *cli.Command {
	return &cli.Command{
		Name: "team",
		Usage: "manage teams: volunteers' groups, whose members' credit adds up to the team's " +
			"(granted while they are members, as in BOINC)",
		Subcommands: []*cli.Command{{
			Name:  "create",
			Usage: "create a team; prints its id. A founder joins it at once (leaving any team it was in)",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "name", Required: true, Usage: "team name (unique, ignoring case)"},
				&cli.StringFlag{Name: "founder", Usage: "e-mail address of the founding member"},
				&cli.StringFlag{Name: "url", Usage: "the team's web site"},
				&cli.StringFlag{Name: "country", Value: "International", Usage: "country, as BOINC's web site lists them"},
				&cli.IntFlag{Name: "type", Usage: "BOINC's team type: " + teamTypeUsage()},
				&cli.StringFlag{Name: "description", Usage: "text shown on the team's page"},
				&cli.BoolFlag{Name: "joinable", Value: true, Usage: "let volunteers join (--joinable=false: only the founder)"},
			},
			Action: func(c *cli.Context) error {
				name, err := teamName(c.String("name"))
				if err != nil {
					return fmt.Errorf("--name: %w", err)
				}
				if typ := c.Int("type"); typ < 0 || typ >= len(teamTypes) {
					return fmt.Errorf("--type %d: want 0 to %d (%s)", typ, len(teamTypes)-1, teamTypeUsage())
				}
				for _, f := range []string{"url", "country"} {
					if v := c.String(f); utf8.RuneCountInString(v) > 254 || !utf8.ValidString(v) {
						return fmt.Errorf("--%s: want at most 254 characters of UTF-8", f)
					}
				}
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					team := row.Team{CreateTime: t.now().Unix(), Name: name, URL: c.String("url"), Type: c.Int("type"),
						NameHTML: name, Description: row.Text(c.String("description")), Country: c.String("country"),
						Joinable: c.Bool("joinable")}
					if email := strings.TrimSpace(c.String("founder")); email != "" {
						u, err := st.UserGetByEmail(ctx, email)
						if err != nil {
							return fmt.Errorf("--founder <%s>: %w", email, err)
						}
						team.UserID = u.ID
					}
					id, err := st.TeamCreate(ctx, team)
					if errors.Is(err, store.ErrDuplicate) {
						return fmt.Errorf("a team named %q exists already (names are compared ignoring case): %w", name, err)
					}
					if err != nil {
						return err
					}
					t.notef("created team %d %q\n", id, name)
					t.printf("%d\n", id)
					return nil
				})
			},
		}, {
			Name:      "show",
			Usage:     "print a team's fields: members, credit, founder",
			ArgsUsage: "NAME|ID",
			Action: func(c *cli.Context) error {
				if err := oneArg(c, "the team's name or id"); err != nil {
					return err
				}
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					team, err := findTeam(ctx, st, c.Args().First())
					if err != nil {
						return err
					}
					founder := "-"
					if team.UserID != 0 {
						if u, err := st.UserGet(ctx, team.UserID); err == nil {
							founder = fmt.Sprintf("%d <%s>", u.ID, u.EmailAddr)
						} else if errors.Is(err, store.ErrNotFound) {
							founder = fmt.Sprintf("%d (no such user)", team.UserID)
						} else {
							return err
						}
					}
					t.printf("id: %d\nname: %s\ncreated: %s\nfounder: %s\nmembers: %d\njoinable: %t\ntype: %d (%s)\n"+
						"country: %s\nurl: %s\ntotal_credit: %.2f\nexpavg_credit: %.2f\n",
						team.ID, team.Name, utc(team.CreateTime), founder, team.NUsers, team.Joinable, team.Type,
						teamTypeName(team.Type), team.Country, team.URL, team.TotalCredit, team.ExpavgCredit)
					return nil
				})
			},
		}, {
			Name:  "list",
			Usage: "list teams in id order: id, members, total credit, recent average credit, joinable, name",
			Flags: []cli.Flag{
				&cli.IntFlag{Name: "limit", Value: 100, Usage: "most teams listed"},
				&cli.Int64Flag{Name: "after", Usage: "only teams with a larger id (paging)"},
			},
			Action: func(c *cli.Context) error {
				if c.Int("limit") < 1 {
					return fmt.Errorf("--limit %d: want at least 1", c.Int("limit"))
				}
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					teams, err := st.TeamList(ctx, c.Int64("after"), c.Int("limit"))
					if err != nil {
						return err
					}
					for _, tm := range teams {
						t.printf("%d\t%d\t%.2f\t%.2f\t%t\t%s\n", tm.ID, tm.NUsers, tm.TotalCredit, tm.ExpavgCredit, tm.Joinable, tm.Name)
					}
					return nil
				})
			},
		}, {
			Name: "join",
			Usage: "put an account in a team, leaving the one it was in; credit granted from now on counts for the new team " +
				"(a team made --joinable=false refuses)",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "email", Required: true, Usage: "e-mail address of the account"},
				&cli.StringFlag{Name: "team", Required: true, Usage: "the team's name or id"},
			},
			Action: func(c *cli.Context) error {
				email := strings.TrimSpace(c.String("email"))
				return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
					u, err := st.UserGetByEmail(ctx, email)
					if err != nil {
						return fmt.Errorf("user <%s>: %w", email, err)
					}
					team, err := findTeam(ctx, st, c.String("team"))
					if err != nil {
						return err
					}
					old, err := st.UserSetTeam(ctx, u.ID, team.ID)
					if errors.Is(err, store.ErrTeamClosed) {
						return fmt.Errorf("team %d %q takes no new members; nothing changed", team.ID, team.Name)
					}
					if err != nil {
						return err
					}
					switch old {
					case team.ID:
						t.printf("user %d <%s> is in team %d %q already\n", u.ID, u.EmailAddr, team.ID, team.Name)
					case 0:
						t.printf("user %d <%s> joined team %d %q\n", u.ID, u.EmailAddr, team.ID, team.Name)
					default:
						t.printf("user %d <%s> left team %d and joined team %d %q\n", u.ID, u.EmailAddr, old, team.ID, team.Name)
					}
					return nil
				})
			},
		}, {
			Name:  "leave",
			Usage: "take an account out of its team; the team keeps the credit the account earned in it",
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
					old, err := st.UserSetTeam(ctx, u.ID, 0)
					if err != nil {
						return err
					}
					if old == 0 {
						t.printf("user %d <%s> is in no team\n", u.ID, u.EmailAddr)
					} else {
						t.printf("user %d <%s> left team %d\n", u.ID, u.EmailAddr, old)
					}
					return nil
				})
			},
		}},
	}
}

// teamName checks a team name as given: not blank, one line, and short
// enough for its column. Surrounding spaces are dropped.
func teamName(s string) (string, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return "", errors.New("a team name must not be blank")
	case !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl):
		return "", fmt.Errorf("%q: want printable UTF-8 on one line", s)
	case utf8.RuneCountInString(s) > maxTeamName:
		return "", fmt.Errorf("want at most %d characters, got %d", maxTeamName, utf8.RuneCountInString(s))
	}
	return s, nil
}

// findTeam returns the team called s or, failing that, the team whose id
// s is: a name wins, so a team named "42" stays reachable by its name.
func findTeam(ctx context.Context, st *store.Store, s string) (row.Team, error) {
	s = strings.TrimSpace(s)
	team, err := st.TeamGetByName(ctx, s)
	if !errors.Is(err, store.ErrNotFound) {
		return team, err
	}
	if id, perr := strconv.ParseInt(s, 10, 64); perr == nil && id > 0 {
		return st.TeamGet(ctx, id)
	}
	return team, err
}

// teamTypeName is the name of BOINC team type n.
func teamTypeName(n int) string {
	if n > 0 && n < len(teamTypes) {
		return teamTypes[n]
	}
	return teamTypes[0]
}

// teamTypeUsage lists the team types for a flag's help.
func teamTypeUsage() string {
	var b strings.Builder
	for i, n := range teamTypes {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d %s", i, n)
	}
	return b.String()
}
