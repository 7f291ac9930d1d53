package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsPath serves the platform's Prometheus metrics
// (trace/runmetrics). It is outside the route table and the OpenAPI
// document: it is the operator's, not a tenant's. Its labels name every
// tenant, agent and version and their costs, so a tenant's API key or
// JWT, even with tenant:admin, never opens it; only the operator's token
// (Options.MetricsToken, `agentplane serve --metrics-token-file`) does,
// compared in constant time. Without a token configured it answers 404.
const metricsPath = "/metrics"

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if s.o.MetricsToken == "" || s.p.Telemetry == nil {
		refuse(w, r, http.StatusNotFound, "not_found", "metrics are off: start agentplane serve with --metrics-token-file FILE")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		refuse(w, r, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed here")
		return
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	want := sha256.Sum256([]byte(s.o.MetricsToken))
	got := sha256.Sum256([]byte(tok))
	if !ok || subtle.ConstantTimeCompare(want[:], got[:]) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentplane-metrics"`)
		w.Header().Set("Connection", "close")
		refuse(w, r, http.StatusUnauthorized, "unauthenticated", "the operator's metrics token is required")
		return
	}
	markAuthenticated(r)
	promhttp.HandlerFor(s.p.Telemetry.Metrics.Registry(), promhttp.HandlerOpts{MaxRequestsInFlight: 4}).ServeHTTP(w, r)
}
