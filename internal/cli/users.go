package cli

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/agentplane/agentplane/authz"
)

// users manages the directory of users the broker authorises against:
//
//	agentplane users set TENANT USER --scopes a:b,c:d [--groups g1,g2] [--bind arg=value,...]
//	agentplane users list [TENANT]
//	agentplane users delete TENANT USER
//
// and, under the same command, the connector secrets credentials are
// minted from:
//
//	agentplane users secret set TENANT CONNECTOR (--random | value on stdin)
//	agentplane users secret list TENANT
//	agentplane users secret delete TENANT CONNECTOR
func (c *command) users(args []string) error {
	const usage = "usage: agentplane users set TENANT USER --scopes S1,S2 [--groups G1,G2] [--bind ARG=VALUE,...] | list [TENANT] | delete TENANT USER | secret set|list|delete ..."
	if len(args) == 0 {
		return exitCode{2, usage}
	}
	if args[0] == "secret" {
		return c.secretCmd(args[1:])
	}
	var cm common
	fs := c.flags("users "+args[0], &cm)
	scopes := fs.String("scopes", "", "comma-separated scopes, resource:action (set)")
	groups := fs.String("groups", "", "comma-separated groups (set)")
	bind := fs.String("bind", "", "comma-separated ARG=VALUE: the user's calls may pass only VALUE for ARG (set)")
	pos, p, err := c.parseAndOpen(fs, &cm, args[1:])
	if err != nil {
		return err
	}
	defer p.Close()
	switch args[0] {
	case "set":
		if len(pos) != 2 {
			return exitCode{2, usage}
		}
		bindings := map[string]string{}
		for _, kv := range splitList(*bind) {
			k, v, ok := splitAssign(kv)
			if !ok {
				return exitCode{2, fmt.Sprintf("users set: --bind wants ARG=VALUE, got %q", kv)}
			}
			bindings[k] = v
		}
		pr, err := authz.New(pos[0], pos[1], splitList(*scopes), splitList(*groups), bindings)
		if err != nil {
			return err
		}
		if err := p.SetUser(c.ctx, pr); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "user %s of tenant %s: scopes [%s] groups [%s]%s\n", pr.User, pr.Tenant,
			strings.Join(pr.Scopes, " "), strings.Join(pr.Groups, " "), describeBindings(pr.Bindings))
		return nil
	case "list":
		tenant := ""
		if len(pos) > 0 {
			tenant = pos[0]
		}
		ps, err := p.Store.ListPrincipals(c.ctx, tenant)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(c.out, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, "TENANT\tUSER\tSCOPES\tGROUPS\tBINDINGS")
		for _, pr := range ps {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", pr.Tenant, pr.User, strings.Join(pr.Scopes, ","), strings.Join(pr.Groups, ","),
				strings.TrimPrefix(describeBindings(pr.Bindings), " bound to "))
		}
		return tw.Flush()
	case "delete":
		if len(pos) != 2 {
			return exitCode{2, usage}
		}
		if err := p.Store.DeletePrincipal(c.ctx, pos[0], pos[1]); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "user %s of tenant %s deleted\n", pos[1], pos[0])
		return nil
	default:
		return exitCode{2, usage}
	}
}

func (c *command) secretCmd(args []string) error {
	const usage = "usage: agentplane users secret set TENANT CONNECTOR (--random | value on stdin) | list TENANT | delete TENANT CONNECTOR"
	if len(args) == 0 {
		return exitCode{2, usage}
	}
	var cm common
	fs := c.flags("users secret "+args[0], &cm)
	random := fs.Bool("random", false, "generate a random 32-byte secret instead of reading one from stdin (set)")
	pos, p, err := c.parseAndOpen(fs, &cm, args[1:])
	if err != nil {
		return err
	}
	defer p.Close()
	switch {
	case args[0] == "set" && len(pos) == 2:
		var value []byte
		if *random {
			value = make([]byte, 32)
			if _, err := rand.Read(value); err != nil {
				return err
			}
			value = []byte(base64.RawURLEncoding.EncodeToString(value))
		} else {
			line, err := bufio.NewReader(io.LimitReader(os.Stdin, 64<<10+1)).ReadString('\n')
			if err != nil && err != io.EOF {
				return err
			}
			value = []byte(strings.TrimRight(line, "\r\n"))
		}
		if err := p.Secrets.Put(c.ctx, pos[0], pos[1], value); err != nil {
			return err
		}
		// The value is never printed.
		fmt.Fprintf(c.out, "secret for connector %s of tenant %s stored (sealed)\n", pos[1], pos[0])
		return nil
	case args[0] == "list" && len(pos) == 1:
		names, err := p.Secrets.List(c.ctx, pos[0])
		if err != nil {
			return err
		}
		for _, n := range names {
			fmt.Fprintln(c.out, n)
		}
		return nil
	case args[0] == "delete" && len(pos) == 2:
		if err := p.Secrets.Delete(c.ctx, pos[0], pos[1]); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "secret for connector %s of tenant %s deleted\n", pos[1], pos[0])
		return nil
	default:
		return exitCode{2, usage}
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func describeBindings(b map[string]string) string {
	if len(b) == 0 {
		return ""
	}
	ks := make([]string, 0, len(b))
	for k := range b {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = k + "=" + b[k]
	}
	return " bound to " + strings.Join(parts, ",")
}
