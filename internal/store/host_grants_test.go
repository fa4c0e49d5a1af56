package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestResultListHostGrants(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	appID := storetest.App(t, st, storetest.AppOptions{CreateTime: vt0, Name: "demo", UserFriendlyName: "Demo"}).ID
	// Host 1: four credited valid instances, one valid without credit, one
	// invalid; host 2: one; host 3: none.
	add := func(host int64, i int, vs state.ValidateState, granted float64) {
		t.Helper()
		name := fmt.Sprintf("h%d_%d", host, i)
		wuID := storetest.Job(t, st, storetest.JobOptions{CreateTime: vt0, App: appID, Name: name,
			RscFpopsEst: float64(i+1) * 1e12, TransitionTime: state.NoTransition}).ID
		storetest.Instance(t, st, storetest.InstanceOptions{CreateTime: vt0, Job: wuID, Name: name + "_0",
			ServerState: state.ServerOver, Outcome: state.OutcomeSuccess, ValidateState: vs, Host: host,
			App: appID, GrantedCredit: granted})
	}
	for i := range 4 {
		add(1, i, state.ValidateValid, float64(10*(i+1)))
	}
	add(1, 4, state.ValidateValid, 0)
	add(1, 5, state.ValidateInvalid, 99)
	add(2, 0, state.ValidateValid, 7)

	got, err := st.ResultListHostGrants(ctx, []int64{1, 2, 3}, 3)
	if err != nil {
		t.Fatalf("ResultListHostGrants: %v", err)
	}
	want := []row.HostGrant{{HostID: 1, GrantedCredit: 40, RscFpopsEst: 4e12}, {HostID: 1, GrantedCredit: 30, RscFpopsEst: 3e12}, {HostID: 1, GrantedCredit: 20, RscFpopsEst: 2e12}, {HostID: 2, GrantedCredit: 7, RscFpopsEst: 1e12}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ResultListHostGrants(hosts 1 2 3, 3 each) = %v; want host 1's newest three credited valid grants and host 2's one: %v", got, want)
	}
	if got, err := st.ResultListHostGrants(ctx, nil, 3); err != nil || len(got) != 0 {
		t.Errorf("ResultListHostGrants(no hosts) = %v, %v; want nothing", got, err)
	}
}
