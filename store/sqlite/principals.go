package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentplane/agentplane/store"
)

var _ store.PrincipalStore = (*Store)(nil)

// PutPrincipal implements store.PrincipalStore.
func (s *Store) PutPrincipal(ctx context.Context, p *store.Principal) error {
	scopes, groups := sortedCopy(p.Scopes), sortedCopy(p.Groups)
	bindings := p.Bindings
	if bindings == nil {
		bindings = map[string]string{}
	}
	sj, _ := json.Marshal(scopes)
	gj, _ := json.Marshal(groups)
	bj, err := json.Marshal(bindings)
	if err != nil {
		return err
	}
	if p.UpdatedAt.IsZero() {
		p.UpdatedAt = time.Now().UTC()
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO principals(tenant, user_id, scopes, groups_, bindings, updated_at) VALUES (?,?,?,?,?,?)
		ON CONFLICT(tenant, user_id) DO UPDATE SET scopes = excluded.scopes, groups_ = excluded.groups_,
		bindings = excluded.bindings, updated_at = excluded.updated_at`,
		p.Tenant, p.User, string(sj), string(gj), string(bj), micros(p.UpdatedAt))
	return err
}

func sortedCopy(ss []string) []string {
	out := slices.Clone(ss)
	if out == nil {
		out = []string{}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func scanPrincipal(sc scanner) (*store.Principal, error) {
	var (
		p          store.Principal
		sj, gj, bj string
		updated    int64
	)
	if err := sc.Scan(&p.Tenant, &p.User, &sj, &gj, &bj, &updated); err != nil {
		return nil, err
	}
	if err := errors.Join(json.Unmarshal([]byte(sj), &p.Scopes), json.Unmarshal([]byte(gj), &p.Groups), json.Unmarshal([]byte(bj), &p.Bindings)); err != nil {
		return nil, fmt.Errorf("principal %s/%s: %w", p.Tenant, p.User, err)
	}
	p.UpdatedAt = fromMicros(updated)
	return &p, nil
}

// GetPrincipal implements store.PrincipalStore.
func (s *Store) GetPrincipal(ctx context.Context, tenant, user string) (*store.Principal, error) {
	p, err := scanPrincipal(s.reads.principal.QueryRowContext(ctx, tenant, user))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("principal %s/%s: %w", tenant, user, store.ErrNotFound)
	}
	return p, err
}

// ListPrincipals implements store.PrincipalStore.
func (s *Store) ListPrincipals(ctx context.Context, tenant string) ([]*store.Principal, error) {
	q := "SELECT tenant, user_id, scopes, groups_, bindings, updated_at FROM principals"
	var args []any
	if tenant != "" {
		q += " WHERE tenant = ?"
		args = append(args, tenant)
	}
	rows, err := s.r.QueryContext(ctx, q+" ORDER BY tenant, user_id", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Principal
	for rows.Next() {
		p, err := scanPrincipal(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// DeletePrincipal implements store.PrincipalStore.
func (s *Store) DeletePrincipal(ctx context.Context, tenant, user string) error {
	res, err := s.w.ExecContext(ctx, "DELETE FROM principals WHERE tenant = ? AND user_id = ?", tenant, user)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("principal %s/%s: %w", tenant, user, store.ErrNotFound)
	}
	return nil
}
