package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
)

// testTenantSettings checks store.TenantStore, for stores that implement it.
func testTenantSettings(t *testing.T, s store.Store) {
	ts, isTS := s.(store.TenantStore)
	if !isTS {
		t.Skip("the store does not implement store.TenantStore")
	}
	ctx := t.Context()
	_, err := ts.GetTenantSettings(ctx, "bank")
	wantErr(t, "GetTenantSettings(never stored)", err, store.ErrNotFound)

	bank := &store.TenantSettings{Tenant: "bank", LinkDomains: []string{"docs.bank.example", "bank.example", "bank.example"},
		RequireAlias: true, UpdatedAt: Base}
	ok(t, "PutTenantSettings", ts.PutTenantSettings(ctx, bank))
	ok(t, "PutTenantSettings(other tenant)", ts.PutTenantSettings(ctx, &store.TenantSettings{Tenant: "hospital", UpdatedAt: Base}))

	got, err := ts.GetTenantSettings(ctx, "bank")
	ok(t, "GetTenantSettings", err)
	want := &store.TenantSettings{Tenant: "bank", LinkDomains: []string{"bank.example", "docs.bank.example"}, RequireAlias: true, UpdatedAt: Base}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("GetTenantSettings = %+v, want %+v (domains sorted, repeats dropped)", got, want)
	}
	if got, err := ts.GetTenantSettings(ctx, "hospital"); err != nil || got.RequireAlias || len(got.LinkDomains) != 0 {
		t.Fatalf("hospital settings = %+v, %v; want the zero settings it stored", got, err)
	}

	// Replacing keeps nothing of the old settings.
	later := &store.TenantSettings{Tenant: "bank", UpdatedAt: Base.Add(time.Hour)}
	ok(t, "PutTenantSettings(replace)", ts.PutTenantSettings(ctx, later))
	got, err = ts.GetTenantSettings(ctx, "bank")
	ok(t, "GetTenantSettings(replaced)", err)
	if got.RequireAlias || len(got.LinkDomains) != 0 || !got.UpdatedAt.Equal(later.UpdatedAt) {
		t.Fatalf("replaced settings = %+v, want %+v", got, later)
	}
	if err := ts.PutTenantSettings(ctx, &store.TenantSettings{}); err == nil {
		t.Fatal("PutTenantSettings without a tenant succeeded")
	}
}
