package api

import (
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
)

// Route is one operation of the API. The route table is the single list of
// what the server answers: the router matches it, the OpenAPI test checks it
// against the document, and the tenant-isolation test enumerates it.
type Route struct {
	Method string
	// Pattern is a path whose segments are literals or {name}, optionally
	// followed by a custom method, as in /v1/runs/{run_id}:cancel.
	Pattern string
	// Operation is the operationId in the OpenAPI document.
	Operation string
	// Scope is what the caller must hold; "" marks a public route.
	Scope string

	handle handlerFunc
}

type handlerFunc func(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string)

// segment is one parsed pattern segment.
type segment struct {
	literal string // when param is ""
	param   string
	suffix  string // ":cancel"
}

func parsePattern(p string) []segment {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	out := make([]segment, len(parts))
	for i, s := range parts {
		if strings.HasPrefix(s, "{") {
			end := strings.IndexByte(s, '}')
			out[i] = segment{param: s[1:end], suffix: s[end+1:]}
		} else {
			out[i] = segment{literal: s}
		}
	}
	return out
}

// match reports whether path (already split and unescaped) fits the
// pattern, filling params.
func match(pat []segment, parts []string, params map[string]string) bool {
	if len(pat) != len(parts) {
		return false
	}
	for i, sg := range pat {
		p := parts[i]
		if sg.param == "" {
			if p != sg.literal {
				return false
			}
			continue
		}
		v, ok := strings.CutSuffix(p, sg.suffix)
		if !ok || v == "" || (sg.suffix == "" && strings.Contains(v, ":")) {
			return false
		}
		params[sg.param] = v
	}
	return true
}

type router struct {
	routes []Route
	pats   [][]segment
}

func newRouter(routes []Route) *router {
	r := &router{routes: routes}
	for _, rt := range routes {
		r.pats = append(r.pats, parsePattern(rt.Pattern))
	}
	return r
}

// lookup finds the route for method and path. It returns the allowed
// methods when the path matches only other methods.
func (rt *router) lookup(method, escapedPath string) (*Route, map[string]string, []string) {
	raw := strings.Split(strings.TrimPrefix(escapedPath, "/"), "/")
	parts := make([]string, len(raw))
	for i, p := range raw {
		u, err := url.PathUnescape(p)
		if err != nil {
			return nil, nil, nil
		}
		parts[i] = u
	}
	var allow []string
	for i := range rt.routes {
		params := map[string]string{}
		if !match(rt.pats[i], parts, params) {
			continue
		}
		if rt.routes[i].Method == method || (method == http.MethodHead && rt.routes[i].Method == http.MethodGet) {
			return &rt.routes[i], params, nil
		}
		allow = append(allow, rt.routes[i].Method)
	}
	sort.Strings(allow)
	return nil, nil, allow
}

var defaultRouter = sync.OnceValue(func() *router { return newRouter(Routes()) })

// RouteFor returns the route that answers method and (escaped) path.
func RouteFor(method, path string) (Route, bool) {
	rt, _, _ := defaultRouter().lookup(method, path)
	if rt == nil {
		return Route{}, false
	}
	return *rt, true
}
