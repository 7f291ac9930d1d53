package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/agentplane/agentplane/retention"
)

// purge applies the tenants' retention policies now (agentplane serve
// does the same every --purge-interval).
func (c *command) purge(args []string) error {
	var cm common
	fs := c.flags("purge", &cm)
	config := fs.String("config", "", "API config YAML whose tenants' retention blocks are applied (default DATA/api.yaml when present)")
	dryRun := fs.Bool("dry-run", false, "count what would be removed and deleted; change nothing")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	clockOffset := fs.Duration("clock-offset", 0, "apply the policies as of now plus this much (drills and tests: see what a purge next month removes)")
	if _, err := parseInterleaved(fs, args); err != nil {
		return err
	}
	cfg, err := loadAPIConfig(*config, cm.data)
	if err != nil {
		return err
	}
	if cm.store == "" {
		cm.store = cfg.Store
	}
	pols := cfg.RetentionPolicies()
	if len(pols) == 0 {
		return errors.New("purge: no tenant has a retention block in the API config (tenants: NAME: retention: payload_ttl: 30d ...); nothing to apply")
	}
	p, err := c.open(&cm, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	rep, err := retention.Purge(c.ctx, retention.Options{Store: p.Store, Policies: pols, DryRun: *dryRun, Now: time.Now().Add(*clockOffset),
		Progress: func(pr retention.Progress) { printPurgeProgress(c.err, pr) }})
	if rep != nil {
		if *asJSON {
			b, _ := json.Marshal(rep)
			fmt.Fprintln(c.out, string(b))
		} else {
			printPurgeReport(c.out, rep)
		}
	}
	return err
}

func printPurgeProgress(w io.Writer, pr retention.Progress) {
	if pr.Of == 0 || (pr.Done != pr.Of && pr.Done%50 != 0) {
		return
	}
	fmt.Fprintf(w, "purge: tenant %s: %d/%d runs, %d blobs removed (%d bytes), %d runs deleted\n",
		pr.Tenant, pr.Done, pr.Of, pr.BlobsRemoved, pr.Bytes, pr.RunsDeleted)
}

func printPurgeReport(w io.Writer, rep *retention.Report) {
	verb := "purged"
	if rep.DryRun {
		verb = "dry run, nothing changed: would purge"
	}
	fmt.Fprintf(w, "%s: %d runs checked; payloads of %d runs expired: %d blobs removed (%d bytes), %d kept because another run keeps them; %d runs deleted past their metadata TTL\n",
		verb, rep.Runs, rep.PayloadsExpired, rep.BlobsRemoved, rep.Bytes, rep.BlobsShared, rep.RunsDeleted)
}

// erase erases one run, or everything about one user of a tenant.
func (c *command) erase(args []string) error {
	var cm common
	fs := c.flags("erase", &cm)
	runID := fs.String("run", "", "the run to erase")
	user := fs.String("user", "", "erase every run of this user (with --tenant)")
	tenant := fs.String("tenant", "", "the tenant (default: the run's, with --run)")
	by := fs.String("by", "", "who asked for the erasure, for the record (default: the operator's login)")
	reason := fs.String("reason", "", "why, for the record (a ticket, an article of law)")
	asJSON := fs.Bool("json", false, "print the erasure records as JSON")
	if _, err := parseInterleaved(fs, args); err != nil {
		return err
	}
	if (*runID == "") == (*user == "") {
		return exitCode{2, "usage: " + usageLines["erase"]}
	}
	if *user != "" && *tenant == "" {
		return exitCode{2, "erase --user needs --tenant"}
	}
	p, err := c.open(&cm, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	if *runID != "" {
		run, err := p.Store.GetRun(c.ctx, *runID)
		if err != nil {
			return fmt.Errorf("run %s: %w", *runID, err)
		}
		if *tenant == "" {
			*tenant = run.Tenant
		}
	}
	if *by == "" {
		*by = operator()
	}
	rep, err := retention.Erase(c.ctx, p.Store, retention.EraseRequest{Tenant: *tenant, RunID: *runID, User: *user,
		RequestedBy: "operator " + *by, Reason: *reason}, time.Now())
	if err != nil {
		return err
	}
	if *asJSON {
		b, _ := json.Marshal(rep)
		fmt.Fprintln(c.out, string(b))
		return nil
	}
	ids := make([]string, 0, len(rep.Erasures))
	for _, e := range rep.Erasures {
		ids = append(ids, e.RunID+" ("+e.ID+")")
	}
	sort.Strings(ids)
	fmt.Fprintf(c.out, "erased %d runs: %s; %d payload keys destroyed (%d bytes), %d payloads kept because runs not erased hold the same content\n",
		len(rep.Erasures), strings.Join(ids, ", "), rep.BlobsRemoved, rep.Bytes, rep.BlobsShared)
	return nil
}

// operator names who runs the command: $USER, or "unknown".
func operator() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "unknown"
}
