package api_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"mime"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/api/apitest"
)

// The OpenAPI document is kept true to the handlers two ways:
// TestOpenAPIMatchesRoutes compares its operations with the route table,
// and TestMain records every request the package's tests make and checks,
// after they all ran, that each answer's status is documented for its
// operation and each JSON body (answers, and accepted requests) validates
// against the documented schema, whose objects allow no undocumented field.
// A full run also requires every operation to have answered 2xx at least
// once, so no part of the document goes untested.

var (
	recordedMu sync.Mutex
	recorded   []apitest.Exchange
)

func TestMain(m *testing.M) {
	flag.Parse()
	if flag.Lookup("test.bench").Value.String() == "" { // benchmarks measure the server alone
		apitest.Record = func(e apitest.Exchange) {
			recordedMu.Lock()
			recorded = append(recorded, e)
			recordedMu.Unlock()
		}
	}
	code := m.Run()
	if code == 0 {
		full := flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.skip").Value.String() == ""
		if problems := checkExchanges(recorded, full); len(problems) > 0 {
			fmt.Fprintf(os.Stderr, "--- FAIL: OpenAPI conformance of %d recorded exchanges\n", len(recorded))
			for _, p := range problems {
				fmt.Fprintln(os.Stderr, "    "+p)
			}
			fmt.Println("FAIL")
			code = 1
		}
	}
	os.Exit(code)
}

type openapiDoc struct {
	Paths      map[string]map[string]operation `json:"paths"`
	Components struct {
		Responses map[string]docResponse `json:"responses"`
	} `json:"components"`
	raw any
}

type operation struct {
	OperationID string                              `json:"operationId"`
	Scope       string                              `json:"x-required-scope"`
	Security    []map[string]any                    `json:"security"`
	Parameters  []map[string]any                    `json:"parameters"`
	RequestBody *struct{ Content map[string]media } `json:"requestBody"`
	Responses   map[string]docResponse              `json:"responses"`
}

type docResponse struct {
	Ref     string           `json:"$ref"`
	Content map[string]media `json:"content"`
}

type media struct {
	Schema map[string]any `json:"schema"`
}

func loadDoc(t testing.TB) *openapiDoc {
	var d openapiDoc
	if err := json.Unmarshal(api.OpenAPI(), &d); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if err := json.Unmarshal(api.OpenAPI(), &d.raw); err != nil {
		t.Fatal(err)
	}
	return &d
}

// TestOpenAPIMatchesRoutes: the document has exactly the routes' operations,
// with their operation ids, scopes and path parameters.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	d := loadDoc(t)
	var raw map[string]any
	_ = json.Unmarshal(api.OpenAPI(), &raw)
	if raw["openapi"] != "3.1.0" {
		t.Fatalf("openapi = %v, want 3.1.0", raw["openapi"])
	}
	seen := map[string]bool{}
	for _, rt := range api.Routes() {
		key := strings.ToLower(rt.Method) + " " + rt.Pattern
		seen[key] = true
		op, ok := d.Paths[rt.Pattern][strings.ToLower(rt.Method)]
		if !ok {
			t.Errorf("%s is served but not documented", key)
			continue
		}
		if op.OperationID != rt.Operation {
			t.Errorf("%s: operationId %q, the route says %q", key, op.OperationID, rt.Operation)
		}
		if op.Scope != rt.Scope {
			t.Errorf("%s: x-required-scope %q, the route needs %q", key, op.Scope, rt.Scope)
		}
		// A secured route takes either credential: a bearer token or
		// the browser's session cookie; a public one takes none.
		if secured := len(op.Security) == 2 && op.Security[0]["bearer"] != nil && op.Security[1]["session"] != nil; (rt.Scope != "") != secured {
			t.Errorf("%s: security %v for scope %q (want bearer or session)", key, op.Security, rt.Scope)
		}
		var params []string
		for _, p := range op.Parameters {
			name := p["$ref"].(string)
			name = name[strings.LastIndexByte(name, '/')+1:]
			params = append(params, name)
		}
		for _, m := range regexp.MustCompile(`\{([a-z_0-9]+)\}`).FindAllStringSubmatch(rt.Pattern, -1) {
			found := false
			for _, p := range params {
				found = found || p == m[1]
			}
			if !found {
				t.Errorf("%s: path parameter %s is not documented", key, m[1])
			}
		}
		if len(op.Responses) == 0 {
			t.Errorf("%s documents no response", key)
		}
	}
	for path, ops := range d.Paths {
		for method := range ops {
			if !seen[method+" "+path] {
				t.Errorf("%s %s is documented but not served", method, path)
			}
		}
	}
	// The document is served as is.
	s := apitest.Start(t, apitest.Options{API: func(o *api.Options) { o.NoWorkers = true }})
	resp, err := http.Get(s.HTTP.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	if resp.StatusCode != 200 || !bytes.Equal(buf.Bytes(), api.OpenAPI()) {
		t.Fatalf("GET /v1/openapi.json: %d, %d bytes", resp.StatusCode, buf.Len())
	}
}

// schemaSet compiles the document's schemas on demand.
type schemaSet struct {
	c     *jsonschema.Compiler
	cache map[string]*jsonschema.Schema
}

const docURL = "mem://agentplane/openapi.json"

func newSchemaSet() (*schemaSet, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(api.OpenAPI()))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(docURL, doc); err != nil {
		return nil, err
	}
	return &schemaSet{c: c, cache: map[string]*jsonschema.Schema{}}, nil
}

// validate checks body against a schema object of the document (a $ref to
// a component, or anything else given by its JSON pointer).
func (s *schemaSet) validate(schema map[string]any, pointer string, body []byte) error {
	loc := docURL + "#" + pointer
	if ref, ok := schema["$ref"].(string); ok {
		loc = docURL + ref
	}
	sch, ok := s.cache[loc]
	if !ok {
		var err error
		if sch, err = s.c.Compile(loc); err != nil {
			return fmt.Errorf("compile %s: %w", loc, err)
		}
		s.cache[loc] = sch
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return sch.Validate(v)
}

func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1", "{", "%7B", "}", "%7D").Replace(s)
}

func checkExchanges(exs []apitest.Exchange, requireCoverage bool) []string {
	var problems []string
	var d openapiDoc
	if err := json.Unmarshal(api.OpenAPI(), &d); err != nil {
		return []string{err.Error()}
	}
	ss, err := newSchemaSet()
	if err != nil {
		return []string{"schemas: " + err.Error()}
	}
	succeeded := map[string]bool{}
	seenProblem := map[string]bool{}
	add := func(p string) {
		if !seenProblem[p] {
			seenProblem[p] = true
			problems = append(problems, p)
		}
	}
	for _, ex := range exs {
		rt, ok := api.RouteFor(ex.Method, ex.Path)
		if !ok {
			continue // a test probing a path the API does not have
		}
		method := strings.ToLower(rt.Method)
		op := d.Paths[rt.Pattern][method]
		name := op.OperationID
		if name == "" {
			add(fmt.Sprintf("%s %s has no documented operation", ex.Method, rt.Pattern))
			continue
		}
		code := strconv.Itoa(ex.Status)
		resp, ok := op.Responses[code]
		if !ok {
			add(fmt.Sprintf("%s answered %d, which is not documented (body %.200s)", name, ex.Status, ex.Body))
			continue
		}
		pointer := "/paths/" + escapePointer(rt.Pattern) + "/" + method + "/responses/" + code
		if resp.Ref != "" {
			pointer = strings.TrimPrefix(resp.Ref, "#")
			resp = d.Components.Responses[pointer[strings.LastIndexByte(pointer, '/')+1:]]
		}
		if ex.Status < 300 {
			succeeded[name] = true
		}
		if len(resp.Content) == 0 {
			if len(ex.Body) > 0 {
				add(fmt.Sprintf("%s %d: a body where none is documented", name, ex.Status))
			}
			continue
		}
		mt, _, _ := mime.ParseMediaType(ex.ContentType)
		m, ok := resp.Content[mt]
		if !ok {
			add(fmt.Sprintf("%s %d: content type %q is not documented", name, ex.Status, ex.ContentType))
			continue
		}
		if mt == "application/json" {
			if err := ss.validate(m.Schema, pointer+"/content/application~1json/schema", ex.Body); err != nil {
				add(fmt.Sprintf("%s %d: the answer does not match the document: %#v\n      body: %.300s", name, ex.Status, err, ex.Body))
			}
		}
		rmt, _, _ := mime.ParseMediaType(ex.ReqContentType)
		if ex.Status < 300 && op.RequestBody != nil && rmt == "application/json" && len(ex.ReqBody) > 0 {
			rm, ok := op.RequestBody.Content["application/json"]
			if !ok {
				add(fmt.Sprintf("%s accepted a JSON body, which is not documented", name))
				continue
			}
			if err := ss.validate(rm.Schema, "/paths/"+escapePointer(rt.Pattern)+"/"+method+"/requestBody/content/application~1json/schema", ex.ReqBody); err != nil {
				add(fmt.Sprintf("%s accepted a request body the document does not allow: %#v\n      body: %.300s", name, err, ex.ReqBody))
			}
		}
	}
	if requireCoverage {
		var missing []string
		for _, rt := range api.Routes() {
			if !succeeded[rt.Operation] {
				missing = append(missing, rt.Operation)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			problems = append(problems, "operations no test saw succeed (add a test): "+strings.Join(missing, ", "))
		}
	}
	return problems
}
