package storetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
)

// testConnectors checks store.ConnectorStore, for stores that implement it.
func testConnectors(t *testing.T, s store.Store) {
	cs, isCS := s.(store.ConnectorStore)
	if !isCS {
		t.Skip("the store does not implement store.ConnectorStore")
	}
	ctx := t.Context()
	_, err := cs.GetConnector(ctx, "bank", "core-banking")
	wantErr(t, "GetConnector(never stored)", err, store.ErrNotFound)

	c := &store.Connector{Tenant: "bank", Name: "core-banking", Spec: []byte(`{"transport":"http"}`), Overlays: []byte("name: x\n"),
		CreatedAt: Base, UpdatedAt: Base}
	ok(t, "PutConnector", cs.PutConnector(ctx, c))
	got, err := cs.GetConnector(ctx, "bank", "core-banking")
	ok(t, "GetConnector", err)
	if !bytes.Equal(got.Spec, c.Spec) || !bytes.Equal(got.Overlays, c.Overlays) || got.Snapshot != nil || got.SnapshotHash != "" ||
		!got.CreatedAt.Equal(Base) || !got.ReviewedAt.IsZero() {
		t.Fatalf("GetConnector = %+v, want what was put, unreviewed", got)
	}

	// Another tenant neither sees nor takes the name.
	_, err = cs.GetConnector(ctx, "hospital", "core-banking")
	wantErr(t, "GetConnector(other tenant)", err, store.ErrNotFound)
	err = cs.PutConnector(ctx, &store.Connector{Tenant: "hospital", Name: "core-banking", Spec: []byte(`{}`), CreatedAt: Base, UpdatedAt: Base})
	wantErr(t, "PutConnector(name of another tenant)", err, store.ErrConflict)
	wantErr(t, "DeleteConnector(other tenant)", cs.DeleteConnector(ctx, "hospital", "core-banking"), store.ErrNotFound)

	// A review replaces the snapshot and keeps the creation time.
	rev := *got
	rev.Snapshot, rev.SnapshotHash, rev.ReviewedBy, rev.ReviewedAt, rev.UpdatedAt = []byte(`{"tools":[]}`), "ab12", "priya", Base.Add(time.Hour), Base.Add(time.Hour)
	ok(t, "PutConnector(review)", cs.PutConnector(ctx, &rev))
	got, err = cs.GetConnector(ctx, "bank", "core-banking")
	ok(t, "GetConnector(reviewed)", err)
	if string(got.Snapshot) != `{"tools":[]}` || got.SnapshotHash != "ab12" || got.ReviewedBy != "priya" ||
		!got.ReviewedAt.Equal(Base.Add(time.Hour)) || !got.CreatedAt.Equal(Base) {
		t.Fatalf("reviewed connector = %+v", got)
	}

	ok(t, "PutConnector(email)", cs.PutConnector(ctx, &store.Connector{Tenant: "bank", Name: "email", Spec: []byte(`{}`), CreatedAt: Base, UpdatedAt: Base}))
	ok(t, "PutConnector(hospital)", cs.PutConnector(ctx, &store.Connector{Tenant: "hospital", Name: "desk", Spec: []byte(`{}`), CreatedAt: Base, UpdatedAt: Base}))
	list, err := cs.ListConnectors(ctx, "bank")
	ok(t, "ListConnectors(bank)", err)
	if len(list) != 2 || list[0].Name != "core-banking" || list[1].Name != "email" {
		t.Fatalf("ListConnectors(bank) = %d connectors, want core-banking and email in order", len(list))
	}
	all, err := cs.ListConnectors(ctx, "")
	ok(t, "ListConnectors(all)", err)
	if len(all) != 3 {
		t.Fatalf("ListConnectors(all) = %d, want 3", len(all))
	}

	ok(t, "DeleteConnector", cs.DeleteConnector(ctx, "bank", "core-banking"))
	wantErr(t, "DeleteConnector(again)", cs.DeleteConnector(ctx, "bank", "core-banking"), store.ErrNotFound)
	// Once deleted, the name is free for anyone.
	ok(t, "PutConnector(freed name)", cs.PutConnector(ctx, &store.Connector{Tenant: "hospital", Name: "core-banking", Spec: []byte(`{}`), CreatedAt: Base, UpdatedAt: Base}))
}
