package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/taskserver/taskserver/internal/row"
)

const platformColumns = `id, create_time, name, user_friendly_name, deprecated`

const platformInsert = `INSERT INTO platform (create_time, name, user_friendly_name, deprecated)
VALUES (:create_time, :name, :user_friendly_name, :deprecated)`

// PlatformInsert adds a platform and returns its id.
func (s *Store) PlatformInsert(ctx context.Context, p row.Platform) (int64, error) {
	return s.insert(ctx, "platform", platformInsert, p)
}

// PlatformList returns every platform, deprecated ones included.
func (s *Store) PlatformList(ctx context.Context) ([]row.Platform, error) {
	var out []row.Platform
	err := s.db.SelectContext(ctx, &out, `SELECT `+platformColumns+` FROM platform ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list platforms: %w", err)
	}
	return out, nil
}

const appColumns = `id, create_time, name, user_friendly_name, min_version, deprecated, homogeneous_redundancy, weight,
adaptive_replication, credit_policy, hold_failed_jobs, known_answer_fraction, input_template_id, output_template_id, beta`

const appInsert = `INSERT INTO app (create_time, name, user_friendly_name, min_version, deprecated, homogeneous_redundancy, weight,
adaptive_replication, credit_policy, hold_failed_jobs, known_answer_fraction, input_template_id, output_template_id, beta)
VALUES (:create_time, :name, :user_friendly_name, :min_version, :deprecated, :homogeneous_redundancy, :weight,
:adaptive_replication, :credit_policy, :hold_failed_jobs, :known_answer_fraction, :input_template_id, :output_template_id, :beta)`

// AppInsert adds an app and returns its id.
func (s *Store) AppInsert(ctx context.Context, a row.App) (int64, error) {
	return s.insert(ctx, "app", appInsert, a)
}

// AppList returns every app, deprecated ones included.
func (s *Store) AppList(ctx context.Context) ([]row.App, error) {
	var out []row.App
	err := s.db.SelectContext(ctx, &out, `SELECT `+appColumns+` FROM app ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list apps: %w", err)
	}
	return out, nil
}

// AppGetByName returns the app called name, or ErrNotFound.
func (s *Store) AppGetByName(ctx context.Context, name string) (row.App, error) {
	var a row.App
	err := s.db.GetContext(ctx, &a, `SELECT `+appColumns+` FROM app WHERE name = ?`, name)
	if errors.Is(err, sql.ErrNoRows) {
		return a, fmt.Errorf("app %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return a, fmt.Errorf("get app %q: %w", name, err)
	}
	return a, nil
}

const appVersionColumns = `id, create_time, appid, version_num, platformid, plan_class, COALESCE(xml_doc, '') AS xml_doc, deprecated, beta`

const appVersionInsert = `INSERT INTO app_version (create_time, appid, version_num, platformid, plan_class, xml_doc, deprecated, beta)
VALUES (:create_time, :appid, :version_num, :platformid, :plan_class, :xml_doc, :deprecated, :beta)`

// AppVersionInsert adds an app version and returns its id.
func (s *Store) AppVersionInsert(ctx context.Context, v row.AppVersion) (int64, error) {
	return s.insert(ctx, "app_version", appVersionInsert, v)
}

// AppVersionList returns every app version, deprecated ones included.
func (s *Store) AppVersionList(ctx context.Context) ([]row.AppVersion, error) {
	var out []row.AppVersion
	err := s.db.SelectContext(ctx, &out, `SELECT `+appVersionColumns+` FROM app_version ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list app versions: %w", err)
	}
	return out, nil
}

// insert runs a named INSERT and returns the new row's id.
func (s *Store) insert(ctx context.Context, table, query string, arg any) (int64, error) {
	var id int64
	err := s.withRetry(ctx, func() error {
		res, err := s.db.NamedExecContext(ctx, query, arg)
		if err != nil {
			return err
		}
		id, err = res.LastInsertId()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("insert %s: %w", table, err)
	}
	return id, nil
}

// AppGet returns app id, or ErrNotFound.
func (s *Store) AppGet(ctx context.Context, id int64) (row.App, error) {
	var a row.App
	err := s.db.GetContext(ctx, &a, `SELECT `+appColumns+` FROM app WHERE id = ?`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return a, fmt.Errorf("app %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return a, fmt.Errorf("get app %d: %w", id, err)
	}
	return a, nil
}

const appUpdate = `UPDATE app SET user_friendly_name = :user_friendly_name, min_version = :min_version,
deprecated = :deprecated, homogeneous_redundancy = :homogeneous_redundancy, weight = :weight,
adaptive_replication = :adaptive_replication, credit_policy = :credit_policy,
hold_failed_jobs = :hold_failed_jobs, known_answer_fraction = :known_answer_fraction, beta = :beta
WHERE id = :id`

// AppUpdate writes the settings of app a.ID (everything but its id, name and
// creation time). Daemons read apps through caches, so a change reaches them
// within their refresh interval. A missing app is ErrNotFound.
func (s *Store) AppUpdate(ctx context.Context, a row.App) error {
	err := s.withRetry(ctx, func() error {
		_, err := s.db.NamedExecContext(ctx, appUpdate, a)
		return err
	})
	if err != nil {
		return fmt.Errorf("update app %d: %w", a.ID, err)
	}
	// Rows affected counts changed rows only: an update that changes
	// nothing looks like a miss, so check existence separately.
	if _, err := s.AppGet(ctx, a.ID); err != nil {
		return err
	}
	return nil
}

const appSetTemplates = `UPDATE app SET input_template_id = ?, output_template_id = ? WHERE id = ?`

// AppSetTemplates sets app id's default input and output templates
// (job_template ids; 0 for the built-in ones). The caller stores and checks
// the templates first (JobTemplatePut). Only jobs created afterwards use
// them: a job's documents are made when it is created. A missing app is
// ErrNotFound.
func (s *Store) AppSetTemplates(ctx context.Context, id, inputTemplateID, outputTemplateID int64) error {
	err := s.withRetry(ctx, func() error {
		_, err := s.db.ExecContext(ctx, appSetTemplates, inputTemplateID, outputTemplateID, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("set templates of app %d: %w", id, err)
	}
	// Rows affected counts changed rows only: check existence separately.
	_, err = s.AppGet(ctx, id)
	return err
}
