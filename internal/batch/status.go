package batch

import (
	"context"
	"fmt"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// Status is a batch with its counts, as taskctl and the API show it.
type Status struct {
	ID             int64  `json:"id"`
	Name           string `json:"name"`
	App            string `json:"app"`
	Description    string `json:"description"`
	UserID         int64  `json:"user_id"`
	State          string `json:"state"`
	CreateTime     int64  `json:"create_time"`
	CompletionTime int64  `json:"completion_time"`
	CancelTime     int64  `json:"cancel_time"`
	Counts         Counts `json:"counts"`
}

// Counts are a batch's jobs by outcome and its instances by state. Each job
// is in exactly one of Done, Errored, Held and Pending.
type Counts struct {
	Jobs int64 `json:"jobs"`
	// Done jobs have an agreed result.
	Done int64 `json:"done"`
	// Errored jobs failed for good; Cancelled ones are among them.
	Errored   int64 `json:"errored"`
	Cancelled int64 `json:"cancelled"`
	// Held jobs exhausted their limits and wait for a requeue.
	Held int64 `json:"held"`
	// Pending jobs are still being worked on.
	Pending int64 `json:"pending"`
	// Assimilated jobs were handed to the project (outputs available).
	Assimilated int64 `json:"assimilated"`
	// Credit sums the credit each done job granted per valid result.
	Credit float64 `json:"credit"`
	// Instances by server state.
	Unsent     int64 `json:"unsent_instances"`
	InProgress int64 `json:"in_progress_instances"`
	Over       int64 `json:"over_instances"`
}

// Status returns batch b with its counts.
func (s *Service) Status(ctx context.Context, b row.Batch) (Status, error) {
	list, err := s.statuses(ctx, []row.Batch{b})
	if err != nil {
		return Status{}, err
	}
	return list[0], nil
}

// ListParams select batches for List.
type ListParams = store.BatchListParams

// List returns the batches p selects with their counts; the counts of all
// of them come from two queries.
func (s *Service) List(ctx context.Context, p ListParams) ([]Status, error) {
	bs, err := s.st.BatchList(ctx, p)
	if err != nil {
		return nil, err
	}
	return s.statuses(ctx, bs)
}

func (s *Service) statuses(ctx context.Context, bs []row.Batch) ([]Status, error) {
	out := make([]Status, 0, len(bs))
	if len(bs) == 0 {
		return out, nil
	}
	ids := make([]int64, len(bs))
	for i, b := range bs {
		ids[i] = b.ID
	}
	counts, err := s.st.BatchCountJobs(ctx, ids)
	if err != nil {
		return nil, err
	}
	apps, err := s.st.AppList(ctx)
	if err != nil {
		return nil, err
	}
	appName := make(map[int64]string, len(apps))
	for _, a := range apps {
		appName[a.ID] = a.Name
	}
	for _, b := range bs {
		c := counts[b.ID]
		name, ok := appName[b.AppID]
		if !ok {
			name = fmt.Sprintf("app#%d", b.AppID)
		}
		out = append(out, Status{ID: b.ID, Name: b.Name, App: name, Description: b.Description, UserID: b.UserID,
			State: b.State.String(), CreateTime: b.CreateTime, CompletionTime: b.CompletionTime, CancelTime: b.CancelTime,
			Counts: Counts{Jobs: c.Jobs, Done: c.Done, Errored: c.Errored, Cancelled: c.Cancelled, Held: c.Held,
				Pending: c.Pending, Assimilated: c.Assimilated, Credit: c.Credit, Unsent: c.Unsent,
				InProgress: c.InProgress, Over: c.Over}})
	}
	return out, nil
}
