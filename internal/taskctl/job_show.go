package taskctl

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// jobShowCommand prints a job's state and each of its instances, the
// operator's first look when a job seems stuck.
func (t *tool) jobShowCommand() *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "print a job's state and its instances (id, name, server state, outcome, validate state, host, sent, received, deadline)",
		ArgsUsage: "NAME",
		Action: func(c *cli.Context) error {
			if err := oneArg(c, "the job name"); err != nil {
				return err
			}
			return t.withStore(c, false, func(ctx context.Context, st *store.Store, _ config.Common) error {
				wu, err := st.WorkunitGetByName(ctx, c.Args().First())
				if err != nil {
					return fmt.Errorf("job %q: %w", c.Args().First(), err)
				}
				rs, err := st.ResultListByWorkunit(ctx, wu.ID)
				if err != nil {
					return err
				}
				t.printJob(wu, rs)
				return nil
			})
		},
	}
}

func (t *tool) printJob(wu row.Workunit, rs []row.Result) {
	t.printf("job %d %s\n", wu.ID, wu.Name)
	t.printf("app: %d\nbatch: %d\ncreated: %s\n", wu.AppID, wu.Batch, utc(wu.CreateTime))
	t.printf("error_mask: %s\nhold_reason: %s\n", wu.ErrorMask, wu.HoldReason)
	t.printf("canonical_result: %d\nneed_validate: %t\nassimilate_state: %s\nfile_delete_state: %s\n",
		wu.CanonicalResultID, wu.NeedValidate, wu.AssimilateState, wu.FileDeleteState)
	t.printf("transition_time: %s\nquorum: min %d, target %d, max errors %d, max total %d, max success %d\n",
		utc(wu.TransitionTime), wu.MinQuorum, wu.TargetNResults, wu.MaxErrorResults, wu.MaxTotalResults, wu.MaxSuccessResults)
	t.printf("instances: %d\n", len(rs))
	for _, r := range rs {
		t.printf("  %d\t%s\t%s\t%s\t%s\thost %d\tsent %s\treceived %s\tdeadline %s\n", r.ID, r.Name, r.ServerState,
			r.Outcome, r.ValidateState, r.HostID, utc(r.SentTime), utc(r.ReceivedTime), utc(r.ReportDeadline))
	}
}
