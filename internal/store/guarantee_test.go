package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

// TestInstanceSentOnceWhenSchedulersRace: several schedulers may hold the
// same unsent instance in their caches (a feeder restarted while a send was
// being committed, or two feeder/scheduler pairs). Racing to send it to
// different users, each in its own batch, exactly one wins; the others get
// ErrConflict and leave no workunit_user row behind, so each of them can
// still be sent another instance of the job.
func TestInstanceSentOnceWhenSchedulersRace(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	const racers = 8
	appID := storetest.App(t, st, storetest.AppOptions{CreateTime: 1, Name: "demo", UserFriendlyName: "Demo", Weight: 1}).ID
	wuID := storetest.Job(t, st, storetest.JobOptions{CreateTime: 1, App: appID, Name: "wu",
		TransitionTime: state.NoTransition, DelayBound: 100, RscFpopsEst: 1e9}).ID
	var instances []int64
	for i := range racers {
		instances = append(instances, storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: 1, Job: wuID,
			ServerState: state.ServerUnsent, Name: fmt.Sprintf("wu_%d", i)}).ID)
	}
	users, hosts := make([]int64, racers), make([]int64, racers)
	for i := range racers {
		users[i] = storetest.User(t, st, storetest.UserOptions{CreateTime: 1, EmailAddr: fmt.Sprintf("u%d@example.com", i),
			Name: fmt.Sprintf("u%d", i), Authenticator: fmt.Sprintf("key%d", i)}).ID
		hosts[i] = storetest.Host(t, st, storetest.HostOptions{CreateTime: 1, User: users[i]}).ID
	}
	send := func(i int, res int64) store.SchedSend {
		return store.SchedSend{ResultID: res, WorkunitID: wuID, HostID: hosts[i], UserID: users[i],
			ReportDeadline: 1100, Now: 1000}
	}

	errs := make([]error, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out, err := st.SchedulerCommit(ctx, store.SchedBatch{Sends: []store.SchedSend{send(i, instances[0])}})
			if err == nil {
				err = out.Sends[0]
			}
			errs[i] = err
		}()
	}
	close(start)
	wg.Wait()

	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("users %d and %d were both sent instance %d", users[winner], users[i], instances[0])
		case err == nil:
			winner = i
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("racer %d: send = %v, want nil or ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no racer sent the instance: %v", errs)
	}
	r, err := st.ResultGet(ctx, instances[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.ServerState != state.ServerInProgress || r.HostID != hosts[winner] || r.UserID != users[winner] {
		t.Fatalf("raced instance = state %v host %d user %d, want in progress on the winner's host %d (user %d)",
			r.ServerState, r.HostID, r.UserID, hosts[winner], users[winner])
	}
	var rows []struct {
		UserID   int64 `db:"userid"`
		ResultID int64 `db:"resultid"`
	}
	if err := st.DB().SelectContext(ctx, &rows, `SELECT userid, resultid FROM workunit_user WHERE workunitid = ?`, wuID); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].UserID != users[winner] || rows[0].ResultID != instances[0] {
		t.Fatalf("workunit_user rows = %+v, want only the winner's (user %d, result %d)", rows, users[winner], instances[0])
	}

	// The losers left no trace: each still gets its own instance of the job.
	next := 1
	for i := range racers {
		if i == winner {
			continue
		}
		out, err := st.SchedulerCommit(ctx, store.SchedBatch{Sends: []store.SchedSend{send(i, instances[next])}})
		if err == nil {
			err = out.Sends[0]
		}
		if err != nil {
			t.Fatalf("user %d after losing the race: send of instance %d = %v, want nil", users[i], instances[next], err)
		}
		next++
	}
	var perUser int
	if err := st.DB().GetContext(ctx, &perUser, `SELECT COUNT(*) FROM (SELECT userid FROM result WHERE workunitid = ?
		AND server_state = ? GROUP BY userid HAVING COUNT(*) > 1) d`, wuID, state.ServerInProgress); err != nil {
		t.Fatal(err)
	}
	if perUser != 0 {
		t.Fatalf("%d users hold two instances of the job", perUser)
	}
}
