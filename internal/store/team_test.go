package store_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// teamOf reads a team, failing the test if it cannot.
func teamOf(t *testing.T, st *store.Store, id int64) row.Team {
	t.Helper()
	tm, err := st.TeamGet(context.Background(), id)
	if err != nil {
		t.Fatalf("TeamGet(%d): %v", id, err)
	}
	return tm
}

// membersOf counts the users whose teamid is the team's: what nusers must
// equal.
func membersOf(t *testing.T, st *store.Store, id int64) int {
	t.Helper()
	var n int
	if err := st.DB().Get(&n, `SELECT COUNT(*) FROM user WHERE teamid = ?`, id); err != nil {
		t.Fatal(err)
	}
	return n
}

// A founder joins the team it makes; members join, move and leave, and
// nusers follows user.teamid; a closed team, a missing one and a name
// taken (in any case) are refused with nothing written.
func TestTeamMembership(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	users, _ := volunteers(t, st, "m", 3)
	red := storetest.Team(t, st, storetest.TeamOptions{CreateTime: vt0, Name: "Red", Founder: users[0]})
	blue := storetest.Team(t, st, storetest.TeamOptions{CreateTime: vt0, Name: "Blue"})
	closed := storetest.Team(t, st, storetest.TeamOptions{CreateTime: vt0, Name: "Closed", Closed: true})
	if red.NUsers != 1 || red.NameLC != "red" || red.UserID != users[0] {
		t.Fatalf("team made with a founder: %+v; want nusers 1, name_lc red, userid %d", red, users[0])
	}
	check := func(when string, want map[int64]int) {
		t.Helper()
		for id, n := range want {
			if got := teamOf(t, st, id).NUsers; got != n || membersOf(t, st, id) != n {
				t.Errorf("%s: team %d nusers %d, %d users in it; want %d", when, id, got, membersOf(t, st, id), n)
			}
		}
	}
	check("created", map[int64]int{red.ID: 1, blue.ID: 0, closed.ID: 0})

	steps := []struct {
		user, team, wantOld int64
		wantErr             error
	}{
		{users[1], red.ID, 0, nil},
		{users[1], red.ID, red.ID, nil}, // again: nothing changes
		{users[2], blue.ID, 0, nil},
		{users[1], blue.ID, red.ID, nil}, // moves
		{users[2], 0, blue.ID, nil},      // leaves
		{users[2], 0, 0, nil},            // leaves again: nothing
		{users[2], closed.ID, 0, store.ErrTeamClosed},
		{users[0], closed.ID, 0, store.ErrTeamClosed},
		{users[2], 1 << 40, 0, store.ErrNotFound},
		{1 << 40, red.ID, 0, store.ErrNotFound},
	}
	for _, s := range steps {
		old, err := st.UserSetTeam(ctx, s.user, s.team)
		if s.wantErr != nil {
			if !errors.Is(err, s.wantErr) {
				t.Errorf("UserSetTeam(%d, %d) = %d, %v; want %v", s.user, s.team, old, err, s.wantErr)
			}
			continue
		}
		if err != nil || old != s.wantOld {
			t.Errorf("UserSetTeam(%d, %d) = %d, %v; want old team %d", s.user, s.team, old, err, s.wantOld)
		}
	}
	check("after the moves", map[int64]int{red.ID: 1, blue.ID: 1, closed.ID: 0})

	// A founder of a closed team is in it; it leaves the team it was in.
	founded, err := st.TeamCreate(ctx, row.Team{CreateTime: vt0, Name: "Own", UserID: users[1]})
	if err != nil {
		t.Fatal(err)
	}
	check("a member founded a team", map[int64]int{blue.ID: 0, founded: 1})

	for _, name := range []string{"red", "RED"} {
		if _, err := st.TeamCreate(ctx, row.Team{CreateTime: vt0, Name: name, UserID: users[2]}); !errors.Is(err, store.ErrDuplicate) {
			t.Errorf("TeamCreate(%q) with team Red there = %v, want ErrDuplicate", name, err)
		}
	}
	if _, err := st.TeamCreate(ctx, row.Team{CreateTime: vt0, Name: "Orphan", UserID: 1 << 40}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TeamCreate with a missing founder = %v, want ErrNotFound", err)
	}
	if _, err := st.TeamGetByName(ctx, "Orphan"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a team whose founder was missing was written: %v", err)
	}
	if u, _ := st.UserGet(ctx, users[2]); u.TeamID != 0 {
		t.Errorf("a refused TeamCreate moved its founder to team %d", u.TeamID)
	}
	if got, err := st.TeamGetByName(ctx, "rEd"); err != nil || got.ID != red.ID {
		t.Errorf("TeamGetByName(rEd) = %+v, %v; want team %d (names compare ignoring case)", got, err, red.ID)
	}
	list, err := st.TeamList(ctx, red.ID, 2)
	if err != nil || len(list) != 2 || list[0].ID != blue.ID || list[1].ID != closed.ID {
		t.Errorf("TeamList(after %d, 2) = %+v, %v; want Blue, Closed", red.ID, list, err)
	}

	// A member cannot be deleted (its team counts it); a founder who left
	// can, and the team forgets it.
	lone := storetest.User(t, st, storetest.UserOptions{CreateTime: vt0})
	tid, err := st.TeamCreate(ctx, row.Team{CreateTime: vt0, Name: "Lone", UserID: lone.ID})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.UserDelete(ctx, lone.ID); !errors.Is(err, store.ErrInUse) {
		t.Errorf("UserDelete of a team member = %v, want ErrInUse", err)
	}
	if _, err := st.UserSetTeam(ctx, lone.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := st.UserDelete(ctx, lone.ID); err != nil {
		t.Fatalf("UserDelete after leaving: %v", err)
	}
	if tm := teamOf(t, st, tid); tm.UserID != 0 || tm.NUsers != 0 {
		t.Errorf("team of a deleted founder: userid %d nusers %d, want 0, 0", tm.UserID, tm.NUsers)
	}
}

// Credit granted to members goes to their team too, with the users' decay
// rule, and none is lost when validators (one job at a time and in
// batches) and the trickle handler grant to members of one team at once;
// a member's credit from before it joined, and a non-member's, stay out.
func TestTeamCreditUnderConcurrentGrants(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	users, hosts := volunteers(t, st, "g", 4) // 0-2 members, 3 not
	team := storetest.Team(t, st, storetest.TeamOptions{CreateTime: vt0, Founder: users[0]})
	for _, u := range users[1:3] {
		if _, err := st.UserSetTeam(ctx, u, team.ID); err != nil {
			t.Fatal(err)
		}
	}
	// The team earned 70 a day ago; a member earned 1000 before joining.
	storetest.Exec(t, st, `UPDATE team SET total_credit = 70, expavg_credit = 70, expavg_time = ? WHERE id = ?`, vt0-day, team.ID)
	storetest.Exec(t, st, `UPDATE user SET total_credit = 1000 WHERE id = ?`, users[1])

	const singles, batches, perBatch, trickles = 12, 4, 6, 6
	var wg sync.WaitGroup
	errs := make(chan error, singles+batches+trickles)
	memberCredit := 0.0
	// Single jobs: two instances, users i%4 and (i+1)%4, 3 credits each.
	for i := range singles {
		a, b := i%4, (i+1)%4
		f := newValidateFixture(t, st, fmt.Sprintf("single%d", i), 2, []int64{users[a], users[b]}, []int64{hosts[a], hosts[b]})
		for _, k := range []int{a, b} {
			if k != 3 {
				memberCredit += 3
			}
		}
		wg.Go(func() {
			errs <- st.WorkunitValidate(ctx, store.WorkunitValidateParams{ID: f.wuID, Now: vt0, CanonicalResultID: f.results[0].ID,
				CanonicalCredit: 3, Results: []store.ResultValidation{
					{ID: f.results[0].ID, UserID: users[a], HostID: hosts[a], ValidateState: state.ValidateValid, GrantedCredit: 3},
					{ID: f.results[1].ID, UserID: users[b], HostID: hosts[b], ValidateState: state.ValidateValid, GrantedCredit: 3},
				}})
		})
	}
	// Batches: each job credits two users 5 each, every batch all four.
	for bt := range batches {
		p := store.WorkunitValidateBatchParams{Now: vt0}
		for j := range perBatch {
			a, b := (bt+j)%4, (bt+j+2)%4
			f := newValidateFixture(t, st, fmt.Sprintf("batch%d_%d", bt, j), 2, []int64{users[a], users[b]}, []int64{hosts[a], hosts[b]})
			for _, k := range []int{a, b} {
				if k != 3 {
					memberCredit += 5
				}
			}
			p.Jobs = append(p.Jobs, store.WorkunitValidateParams{ID: f.wuID, CanonicalResultID: f.results[0].ID, CanonicalCredit: 5,
				Results: []store.ResultValidation{
					{ID: f.results[0].ID, UserID: users[a], HostID: hosts[a], ValidateState: state.ValidateValid, GrantedCredit: 5},
					{ID: f.results[1].ID, UserID: users[b], HostID: hosts[b], ValidateState: state.ValidateValid, GrantedCredit: 5},
				}})
		}
		wg.Go(func() {
			conflicts, err := st.WorkunitValidateBatch(ctx, p)
			if err == nil && len(conflicts) > 0 {
				err = fmt.Errorf("batch conflicts %v", conflicts)
			}
			errs <- err
		})
	}
	// Trickle credit: 2 to host i%4 per message.
	for i := range trickles {
		k := i % 4
		if _, err := st.MsgFromHostInsert(ctx, []row.MsgFromHost{{CreateTime: vt0, HostID: hosts[k], Variety: "credit",
			MD5: fmt.Sprintf("md5_%d", i), XML: "<x/>"}}); err != nil {
			t.Fatal(err)
		}
		if k != 3 {
			memberCredit += 2
		}
	}
	msgs, err := st.MsgFromHostListUnhandled(ctx, store.MsgFromHostListParams{Variety: "credit", Limit: 100})
	if err != nil || len(msgs) != trickles {
		t.Fatalf("MsgFromHostListUnhandled = %d messages, %v; want %d", len(msgs), err, trickles)
	}
	for _, m := range msgs {
		wg.Go(func() {
			_, err := st.MsgFromHostMarkHandled(ctx, store.MsgHandled{ID: m.ID, Now: vt0, Credit: 2})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent grant: %v", err)
		}
	}

	got := teamOf(t, st, team.ID)
	wantAvg := store.ExpavgCredit(70, vt0-day, memberCredit, vt0)
	if got.TotalCredit != 70+memberCredit || math.Abs(got.ExpavgCredit-wantAvg) > 1e-6 || got.ExpavgTime != vt0 {
		t.Errorf("team after concurrent grants: total %g, expavg %g at %g; want %g, %g at %d (members' grants, none lost)",
			got.TotalCredit, got.ExpavgCredit, got.ExpavgTime, 70+memberCredit, wantAvg, vt0)
	}
	var sum float64
	for _, u := range users[:3] {
		got, err := st.UserGet(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		sum += got.TotalCredit
	}
	if sum-1000 != memberCredit {
		t.Errorf("members' credit %g (less the 1000 from before joining), team's grants %g: want equal", sum-1000, memberCredit)
	}
}

// Volunteers moving between two teams while validators grant them credit:
// nothing deadlocks for good, nusers stays the count of members, and as
// everyone is always in one of the two, the teams' credit adds up to all
// that was granted.
func TestTeamCreditWhileMembersMove(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	users, hosts := volunteers(t, st, "mv", 4)
	a := storetest.Team(t, st, storetest.TeamOptions{CreateTime: vt0})
	b := storetest.Team(t, st, storetest.TeamOptions{CreateTime: vt0})
	for i, u := range users {
		if _, err := st.UserSetTeam(ctx, u, []int64{a.ID, b.ID}[i%2]); err != nil {
			t.Fatal(err)
		}
	}
	const jobs, moves = 16, 40
	var fixtures []validateFixture
	for i := range jobs {
		x, y := i%4, (i+1)%4
		fixtures = append(fixtures, newValidateFixture(t, st, fmt.Sprintf("mv%d", i), 2, []int64{users[x], users[y]},
			[]int64{hosts[x], hosts[y]}))
	}
	var wg sync.WaitGroup
	errs := make(chan error, jobs+moves)
	for i, f := range fixtures {
		x, y := i%4, (i+1)%4
		wg.Go(func() {
			errs <- st.WorkunitValidate(ctx, store.WorkunitValidateParams{ID: f.wuID, Now: vt0, CanonicalResultID: f.results[0].ID,
				CanonicalCredit: 1, Results: []store.ResultValidation{
					{ID: f.results[0].ID, UserID: users[x], HostID: hosts[x], ValidateState: state.ValidateValid, GrantedCredit: 1},
					{ID: f.results[1].ID, UserID: users[y], HostID: hosts[y], ValidateState: state.ValidateValid, GrantedCredit: 1},
				}})
		})
	}
	for i := range moves {
		wg.Go(func() {
			_, err := st.UserSetTeam(ctx, users[i%4], []int64{a.ID, b.ID}[(i/4)%2])
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent grant or move: %v", err)
		}
	}
	ta, tb := teamOf(t, st, a.ID), teamOf(t, st, b.ID)
	if ta.NUsers != membersOf(t, st, a.ID) || tb.NUsers != membersOf(t, st, b.ID) || ta.NUsers+tb.NUsers != 4 {
		t.Errorf("nusers %d and %d, members %d and %d: want equal, 4 in all", ta.NUsers, tb.NUsers,
			membersOf(t, st, a.ID), membersOf(t, st, b.ID))
	}
	if got, want := ta.TotalCredit+tb.TotalCredit, float64(2*jobs); got != want {
		t.Errorf("teams' credit %g + %g = %g, want %g: every grant went to a member of one of them", ta.TotalCredit,
			tb.TotalCredit, got, want)
	}
}

// The scheduler's reads of a user carry its team's name, in each of their
// forms; a user in no team, or in a team that no longer exists, has none.
func TestUserHostReadsCarryTeamName(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	member := storetest.User(t, st, storetest.UserOptions{CreateTime: vt0, Authenticator: "member_key"})
	storetest.User(t, st, storetest.UserOptions{CreateTime: vt0, Authenticator: "alone_key"})
	storetest.User(t, st, storetest.UserOptions{CreateTime: vt0, Authenticator: "gone_key", TeamID: 1 << 30})
	storetest.Team(t, st, storetest.TeamOptions{CreateTime: vt0, Name: "Crunchers <&>", Founder: member.ID})
	h := storetest.Host(t, st, storetest.HostOptions{CreateTime: vt0, User: member.ID})
	want := map[string]string{"member_key": "Crunchers <&>", "alone_key": "", "gone_key": ""}
	for key, name := range want {
		one, err := st.UserHostGet(ctx, key, h.ID)
		if err != nil || one.TeamName != name {
			t.Errorf("UserHostGet(%s) team name %q, %v; want %q", key, one.TeamName, err, name)
		}
		held, err := st.UserHostHeldGet(ctx, key, h.ID, 10)
		if err != nil || held.TeamName != name {
			t.Errorf("UserHostHeldGet(%s) team name %q, %v; want %q", key, held.TeamName, err, name)
		}
	}
	list, err := st.UserHostHeldList(ctx, []store.AuthHost{{Auth: "member_key", HostID: h.ID}, {Auth: "alone_key"},
		{Auth: "gone_key"}, {Auth: "MEMBER_KEY"}}, 10)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"Crunchers <&>", "", "", "Crunchers <&>"} {
		if list[i].TeamName != name || !list[i].UserFound {
			t.Errorf("UserHostHeldList[%d] team name %q (found %t), want %q", i, list[i].TeamName, list[i].UserFound, name)
		}
	}
}
