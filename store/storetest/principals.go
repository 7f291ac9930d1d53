package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
)

// testPrincipals checks store.PrincipalStore, for stores that implement it.
func testPrincipals(t *testing.T, s store.Store) {
	ps, isPS := s.(store.PrincipalStore)
	if !isPS {
		t.Skip("the store does not implement store.PrincipalStore")
	}
	ctx := t.Context()
	_, err := ps.GetPrincipal(ctx, "bank", "priya")
	wantErr(t, "GetPrincipal(missing)", err, store.ErrNotFound)

	priya := &store.Principal{Tenant: "bank", User: "priya", Scopes: []string{"refunds:write", "customers:read", "refunds:write"},
		Groups: []string{"card-ops-agents"}, UpdatedAt: Base}
	ok(t, "PutPrincipal", ps.PutPrincipal(ctx, priya))
	asha := &store.Principal{Tenant: "bank", User: "asha", Scopes: []string{"tickets:read"},
		Bindings: map[string]string{"customer_id": "c_88213"}, UpdatedAt: Base}
	ok(t, "PutPrincipal", ps.PutPrincipal(ctx, asha))
	other := &store.Principal{Tenant: "hospital", User: "priya", UpdatedAt: Base}
	ok(t, "PutPrincipal", ps.PutPrincipal(ctx, other))

	got, err := ps.GetPrincipal(ctx, "bank", "priya")
	ok(t, "GetPrincipal", err)
	want := &store.Principal{Tenant: "bank", User: "priya", Scopes: []string{"customers:read", "refunds:write"},
		Groups: []string{"card-ops-agents"}, Bindings: map[string]string{}, UpdatedAt: Base}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("GetPrincipal = %+v, want %+v (scopes sorted, repeats dropped)", got, want)
	}
	// The same user name in another tenant is another principal.
	if got, err := ps.GetPrincipal(ctx, "hospital", "priya"); err != nil || len(got.Scopes) != 0 || len(got.Groups) != 0 {
		t.Fatalf("hospital/priya = %+v, %v", got, err)
	}
	// Put replaces.
	ok(t, "PutPrincipal(replace)", ps.PutPrincipal(ctx, &store.Principal{Tenant: "bank", User: "priya", Scopes: []string{"tickets:read"}, UpdatedAt: Base.Add(time.Hour)}))
	got, _ = ps.GetPrincipal(ctx, "bank", "priya")
	if !reflect.DeepEqual(got.Scopes, []string{"tickets:read"}) || len(got.Groups) != 0 || !got.UpdatedAt.Equal(Base.Add(time.Hour)) {
		t.Fatalf("after replace: %+v", got)
	}
	list, err := ps.ListPrincipals(ctx, "bank")
	ok(t, "ListPrincipals", err)
	if len(list) != 2 || list[0].User != "asha" || list[1].User != "priya" || list[0].Bindings["customer_id"] != "c_88213" {
		t.Fatalf("ListPrincipals(bank) = %+v", list)
	}
	all, err := ps.ListPrincipals(ctx, "")
	ok(t, "ListPrincipals(all)", err)
	if len(all) != 3 || all[2].Tenant != "hospital" {
		t.Fatalf("ListPrincipals(\"\") has %d principals", len(all))
	}
	ok(t, "DeletePrincipal", ps.DeletePrincipal(ctx, "bank", "asha"))
	wantErr(t, "DeletePrincipal(again)", ps.DeletePrincipal(ctx, "bank", "asha"), store.ErrNotFound)
	_, err = ps.GetPrincipal(ctx, "bank", "asha")
	wantErr(t, "GetPrincipal(deleted)", err, store.ErrNotFound)
}
