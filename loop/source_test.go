package loop_test

import "github.com/agentplane/agentplane/trace"

// testTenant is the tenant of every run the fixture starts.
const testTenant = "t1"

// source reads the fixture's runs as trace does: their logs and the blobs
// of their tenant.
func (f *fixture) source() trace.Source { return trace.SourceFor(f.p.Store, testTenant) }
