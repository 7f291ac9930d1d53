package cli

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/agentplane/agentplane/render"
	"github.com/agentplane/agentplane/store"
)

// tenants shows and changes a tenant's own settings:
//
//	agentplane tenants show TENANT
//	agentplane tenants set TENANT [--link-domains a.example,b.example] [--require-alias=true|false]
//
// Link domains are where model text shown to the tenant's users may link
// (package render makes every other link inert); require-alias makes
// callers without the admin scope start runs only through aliases.
func (c *command) tenants(args []string) error {
	usage := "usage: " + usageLines["tenants"]
	if len(args) == 0 {
		return exitCode{2, usage}
	}
	var cm common
	fs := c.flags("tenants "+args[0], &cm)
	domains := optString{}
	fs.Var(&domains, "link-domains", "comma-separated domains model text may link to, with their subdomains (set; \"\" lists none)")
	require := optBool{}
	fs.Var(&require, "require-alias", "true: callers without the admin scope start runs only through an alias (set)")
	pos, p, err := c.parseAndOpen(fs, &cm, args[1:])
	if err != nil {
		return err
	}
	defer p.Close()
	if len(pos) != 1 || (args[0] != "show" && args[0] != "set") {
		if isHelp(args[0]) {
			fmt.Fprintln(c.out, usage)
			return nil
		}
		return exitCode{2, usage}
	}
	ts, err := p.TenantSettings(c.ctx, pos[0])
	if err != nil {
		return err
	}
	if args[0] == "set" {
		if !domains.set && !require.set {
			return exitCode{2, "tenants set: give --link-domains or --require-alias"}
		}
		if domains.set {
			ts.LinkDomains = splitList(domains.v)
		}
		if require.set {
			ts.RequireAlias = require.v
		}
		if ts, err = p.PutTenantSettings(c.ctx, ts); err != nil {
			return err
		}
	}
	printTenantSettings(c, ts)
	return nil
}

func printTenantSettings(c *command, ts store.TenantSettings) {
	ds := strings.Join(ts.LinkDomains, ", ")
	if ds == "" {
		ds = "(none: every link in model text is shown inert)"
	}
	fmt.Fprintf(c.out, "tenant %s\n  link domains   %s\n  require alias  %v\n", ts.Tenant, ds, ts.RequireAlias)
}

// optString and optBool are flags that remember whether they were given.
type optString struct {
	v   string
	set bool
}

func (o *optString) String() string     { return o.v }
func (o *optString) Set(s string) error { o.v, o.set = s, true; return nil }

type optBool struct {
	v, set bool
}

func (o *optBool) String() string   { return strconv.FormatBool(o.v) }
func (o *optBool) IsBoolFlag() bool { return true }
func (o *optBool) Set(s string) error {
	b, err := strconv.ParseBool(s)
	o.v, o.set = b, true
	return err
}

var _ flag.Value = (*optBool)(nil)

// policyCache is the render policy of each tenant whose runs are shown.
type policyCache struct {
	get  func(tenant string) (*render.Policy, error)
	seen map[string]*render.Policy
}

func (pc *policyCache) of(tenant string) *render.Policy {
	if p, ok := pc.seen[tenant]; ok {
		return p
	}
	p, err := pc.get(tenant)
	if err != nil {
		p = &render.Policy{} // unreadable settings: list nothing, every link inert
	}
	if pc.seen == nil {
		pc.seen = map[string]*render.Policy{}
	}
	pc.seen[tenant] = p
	return p
}

// writeFlags says what showing a run's model text neutralised.
func writeFlags(w io.Writer, flags render.Flags) {
	if names := flags.Names(); len(names) > 0 {
		fmt.Fprintf(w, "  output flags: %s (shown neutralised; the log keeps the model's exact bytes)\n", strings.Join(names, ", "))
	}
}
