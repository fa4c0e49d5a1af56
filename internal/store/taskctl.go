package store

import (
	"context"
	"fmt"

	"github.com/taskserver/taskserver/internal/row"
)

const platformGetByName = `SELECT ` + platformColumns + ` FROM platform WHERE name = ?`

// PlatformGetByName returns the platform called name, or ErrNotFound.
func (s *Store) PlatformGetByName(ctx context.Context, name string) (row.Platform, error) {
	var out []row.Platform
	if err := s.db.SelectContext(ctx, &out, platformGetByName, name); err != nil {
		return row.Platform{}, fmt.Errorf("get platform %q: %w", name, err)
	}
	if len(out) == 0 {
		return row.Platform{}, fmt.Errorf("platform %q: %w", name, ErrNotFound)
	}
	return out[0], nil
}
