// Package web is agentplane's run viewer: plain HTML, CSS and JavaScript
// embedded in the binary (no build step, no remote asset) and served by
// `agentplane serve` at /ui/ (api.Options.UI). The pages hold no data:
// they sign in with an API key (POST /v1/session turns it into an HttpOnly
// session cookie), then read everything from the API, scoped to the
// caller's tenant, and follow running runs over the event stream
// (EventSource with the cookie). Text from models and tools is requested
// in the render package's safe form and put in the page with textContent
// only. See docs/design/viewer.md.
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// ContentSecurityPolicy is sent with every page and file of the viewer:
// nothing but its own files load, no inline script or style runs, no
// remote image, font, frame or connection is possible, and no other site
// may frame it.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Handler serves the viewer's files under /ui/, each with the policy
// above, no caching of index.html (so a new binary's pages are seen at
// once), and no referrer sent anywhere.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if r.URL.Path == "/ui/" || strings.HasSuffix(r.URL.Path, ".html") {
			h.Set("Cache-Control", "no-cache")
		}
		files.ServeHTTP(w, r)
	})
}
