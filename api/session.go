package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/agentplane/agentplane/store"
)

// Browser sessions (docs/design/viewer.md). A browser cannot put an
// Authorization header on an EventSource, so the run viewer signs in once
// (POST /v1/session with an API key, or an identity provider's JWT, in the
// Authorization header) and is given a session cookie: HttpOnly, so page
// script never reads it; SameSite=Strict, so no other site's page makes
// the browser send it; Secure (and named with the __Host- prefix) when the
// server is reached over TLS or is told it is (Options.SecureCookies).
//
// Sessions are kept server-side (store.SessionStore), not as signed
// stateless cookies: signing out ends a session at once, a revoked API key
// ends every session it opened at its next request, and several server
// processes on one store share them without sharing a signing key. The
// cookie carries 256 random bits; the store keeps their hash.
//
// CSRF: every request authenticated by the cookie whose method may change
// state must carry X-CSRF-Token, a value derived from the session's secret
// (so it is bound to the session and needs no storage) and handed to the
// page in the session's JSON, which other origins cannot read. Requests
// authenticated by an Authorization header are not affected: a browser
// never adds that header on its own.

// Cookie names: __Host- requires Secure, Path=/ and no Domain, so a
// sibling subdomain cannot plant or shadow the cookie.
const (
	sessionCookie       = "agentplane_session"
	secureSessionCookie = "__Host-agentplane_session"
	csrfHeader          = "X-CSRF-Token"
)

// defaultSessionTTL bounds a session's life from sign-in (a working day).
const defaultSessionTTL = 12 * time.Hour

// session is what a cookie-authenticated principal carries.
type session struct {
	idHash [32]byte
	csrf   string
	rec    *store.Session
}

func sessionIDHash(secret string) [32]byte {
	return sha256.Sum256([]byte("agentplane session v1\x00" + secret))
}

func sessionCSRF(secret string) string {
	sum := sha256.Sum256([]byte("agentplane csrf v1\x00" + secret))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// secureRequest reports whether cookies set for r must be Secure.
func (s *Server) secureRequest(r *http.Request) bool { return r.TLS != nil || s.o.SecureCookies }

func (s *Server) cookieName(r *http.Request) string {
	if s.secureRequest(r) {
		return secureSessionCookie
	}
	return sessionCookie
}

// sessionPrincipal authenticates r by its session cookie. A session that
// expired, or whose credential was revoked since, is refused (and removed).
func (s *Server) sessionPrincipal(r *http.Request) (*Principal, error) {
	c, err := r.Cookie(s.cookieName(r))
	if err != nil || c.Value == "" || len(c.Value) > 128 {
		return nil, ErrUnauthenticated
	}
	h := sessionIDHash(c.Value)
	rec, err := s.st.GetSession(r.Context(), h)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrUnauthenticated
	}
	if err != nil {
		return nil, err
	}
	if !s.clock().Before(rec.ExpiresAt) || !s.credentialLive(r.Context(), rec.Via) {
		if err := s.st.DeleteSession(context.WithoutCancel(r.Context()), h); err != nil {
			s.log.Warn("delete ended session", "err", err)
		}
		return nil, ErrUnauthenticated
	}
	return &Principal{Tenant: rec.Tenant, User: rec.User, Scopes: slices.Clone(rec.Scopes), Via: "session:" + rec.Via,
		session: &session{idHash: h, csrf: sessionCSRF(c.Value), rec: rec}}, nil
}

// credentialLive reports whether the credential a session was opened with
// still holds: an API key not revoked, an issuer still trusted (a JWT's
// expiry already bounds the session).
func (s *Server) credentialLive(ctx context.Context, via string) bool {
	if id, ok := strings.CutPrefix(via, "api_key:"); ok {
		k, err := s.st.GetAPIKey(ctx, id)
		return err == nil && k.RevokedAt.IsZero()
	}
	if iss, ok := strings.CutPrefix(via, "jwt:"); ok {
		return s.auth.issuers[iss] != nil
	}
	return false
}

// safeMethod reports whether a method changes nothing (RFC 9110).
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// checkCSRF refuses a state-changing request made with a session cookie
// unless it carries the session's token and, when the browser names its
// origin, comes from this server's origin or a configured one.
func (s *Server) checkCSRF(r *http.Request, p *Principal) error {
	if p.session == nil || safeMethod(r.Method) {
		return nil
	}
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) && !s.corsAllowed(o) {
		return &httpError{http.StatusForbidden, "csrf_refused", "a request from origin " + o + " may not use this session"}
	}
	got := r.Header.Get(csrfHeader)
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(p.session.csrf)) != 1 {
		return &httpError{http.StatusForbidden, "csrf_refused",
			"a request made with a session cookie must carry the session's X-CSRF-Token (GET /v1/session returns it)"}
	}
	return nil
}

func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && strings.EqualFold(u.Host, host)
}

func toSession(p *Principal, rec *store.Session, csrf string) Session {
	return Session{Tenant: p.Tenant, User: p.User, Scopes: p.Scopes, Via: p.Via, CSRFToken: csrf, ExpiresAt: rec.ExpiresAt}
}

// handleCreateSession signs a browser in: the credential in the
// Authorization header (an API key or a trusted issuer's JWT, as for any
// request) becomes a session cookie with the same tenant, user and scopes.
// A session cannot make another session.
func handleCreateSession(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, _ map[string]string) {
	if p.session != nil {
		s.fail(w, r, badRequest("sign in with an API key or a token in the Authorization header, not with a session"))
		return
	}
	now := s.clock().UTC()
	exp := now.Add(s.o.SessionTTL)
	if p.expires != nil && p.expires.Before(exp) {
		exp = *p.expires // a session outlives no JWT it was made from
	}
	if n, err := s.st.DeleteExpiredSessions(r.Context(), now); err != nil {
		s.log.Warn("delete expired sessions", "err", err)
	} else if n > 0 {
		s.log.Debug("deleted expired sessions", "n", n)
	}
	secret := randomToken(32)
	rec := &store.Session{IDHash: sessionIDHash(secret), Tenant: p.Tenant, User: p.User, Scopes: slices.Clone(p.Scopes),
		Via: p.Via, CreatedAt: now, ExpiresAt: exp}
	if err := s.st.PutSession(r.Context(), rec); err != nil {
		s.fail(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: s.cookieName(r), Value: secret, Path: "/", HttpOnly: true, Secure: s.secureRequest(r),
		SameSite: http.SameSiteStrictMode, MaxAge: int(exp.Sub(now) / time.Second)})
	w.Header().Set("Cache-Control", "no-store")
	sp := *p
	sp.Via = "session:" + p.Via
	writeJSON(w, http.StatusCreated, toSession(&sp, rec, sessionCSRF(secret)))
}

// errNoSession answers session routes called without a session cookie.
var errNoSession = notFound("session (this request carries no session cookie)")

func handleGetSession(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, _ map[string]string) {
	if p.session == nil {
		s.fail(w, r, errNoSession)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, toSession(p, p.session.rec, p.session.csrf))
}

// handleDeleteSession signs out: the session is deleted from the store (so
// a copy of the cookie is worthless too) and the cookie cleared.
func handleDeleteSession(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, _ map[string]string) {
	if p.session == nil {
		s.fail(w, r, errNoSession)
		return
	}
	if err := s.st.DeleteSession(r.Context(), p.session.idHash); err != nil {
		s.fail(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: s.cookieName(r), Value: "", Path: "/", HttpOnly: true, Secure: s.secureRequest(r),
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	w.WriteHeader(http.StatusNoContent)
}

// CORS (off unless origins are configured): an allowed origin gets
// Access-Control-Allow-Origin naming it (never *), with credentials, and
// its preflights are answered; any other origin gets no CORS header at
// all, so its browser withholds the answer.

var (
	corsAllowHeaders  = "Authorization, Content-Type, Idempotency-Key, Last-Event-ID, " + csrfHeader
	corsExposeHeaders = "Location, X-Run-Id, Idempotent-Replayed, Retry-After"
)

func (s *Server) corsAllowed(origin string) bool {
	return origin != "" && slices.Contains(s.corsOrigins, origin)
}

// cors sets the CORS headers of r's answer; it reports true when r was a
// preflight and has been answered.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	if len(s.corsOrigins) == 0 {
		return false
	}
	h := w.Header()
	h.Add("Vary", "Origin")
	origin := r.Header.Get("Origin")
	if !s.corsAllowed(origin) {
		return false
	}
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Credentials", "true")
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
		return false
	}
	_, _, allow := s.router.lookup("\x00", r.URL.EscapedPath()) // every method the path has
	if len(allow) == 0 {
		refuse(w, r, http.StatusNotFound, "not_found", "no such route")
		return true
	}
	h.Set("Access-Control-Allow-Methods", strings.Join(allow, ", "))
	h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
	h.Set("Access-Control-Max-Age", "600")
	h.Add("Vary", "Access-Control-Request-Method, Access-Control-Request-Headers")
	w.WriteHeader(http.StatusNoContent)
	return true
}

// validateOrigins checks configured CORS origins: scheme://host[:port],
// nothing else, and never "*" (credentials are sent to each origin named).
func validateOrigins(origins []string) error {
	for _, o := range origins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" ||
			u.User != nil || u.Fragment != "" || u.Scheme+"://"+u.Host != o {
			return errors.New("cors_origins: " + o + " is not an origin (want scheme://host[:port], e.g. https://console.example-bank.in)")
		}
	}
	return nil
}

// authenticate finds the request's principal: the Authorization header
// when there is one (a session cookie beside it is ignored), else the
// session cookie.
func (s *Server) authenticate(r *http.Request) (*Principal, error) {
	if r.Header.Get("Authorization") != "" {
		return s.auth.authenticate(r)
	}
	return s.sessionPrincipal(r)
}

// serveUI serves the run viewer's static files (Options.UI) for GET and
// HEAD; / redirects to /ui/. The files hold no data: every datum the pages
// show comes from the API, authenticated and scoped to the tenant.
func (s *Server) serveUI(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		refuse(w, r, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed here")
		return
	}
	if r.URL.Path == "/" || r.URL.Path == "/ui" {
		http.Redirect(w, r, "/ui/", http.StatusFound)
		return
	}
	s.o.UI.ServeHTTP(w, r)
}
