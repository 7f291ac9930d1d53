package api

import (
	"context"
	"crypto/tls"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Serving a Server: HTTPServer bounds header reads and idle connections,
// ServeHTTP bounds body reads and every write, Listener caps how many connections one client address holds
// (and how many of them have not authenticated), and ServeHTTP
// authenticates a request before anything reads its body. Together they
// keep slow or unauthenticated clients from holding the server's
// connections: see docs/design/api.md, "Serving".

// HTTPServer returns the http.Server to serve s with: the options' header
// read and idle timeouts and header size cap, and the connection context
// through which an authenticated request takes its connection out of the
// client's unauthenticated count. Serve it on s.Listener(ln). errorLog may
// be nil.
//
// It sets no http.Server WriteTimeout: that one runs from the end of the
// request's headers, so it counts the handler's own time (a decision
// waiting for a durable append under load). ServeHTTP bounds each write
// instead (writeDeadline).
func (s *Server) HTTPServer(errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.o.ReadHeaderTimeout,
		IdleTimeout:       s.o.IdleTimeout,
		MaxHeaderBytes:    s.o.MaxHeaderBytes,
		ConnContext:       connContext,
		ErrorLog:          errorLog,
	}
}

// writeDeadline gives every write of a response (its header, each body
// write and what net/http flushes after them) WriteTimeout from the moment
// it is made: a client that stops reading is cut, however long the handler
// worked first and however long a healthy response (an event stream) lasts.
type writeDeadline struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *writeDeadline) extend() { _ = w.rc.SetWriteDeadline(time.Now().Add(w.d)) }

func (w *writeDeadline) WriteHeader(code int) {
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

func (w *writeDeadline) Write(b []byte) (int, error) {
	w.extend()
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (Flush, deadlines).
func (w *writeDeadline) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Listener wraps ln so that one client address (an IPv4 address, or an
// IPv6 /64) holds at most MaxConnsPerClient connections, of which at most
// MaxUnauthenticatedConnsPerClient have not yet carried an authenticated
// request. A connection beyond either cap is answered 429 and closed
// before any of it is read.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, maxAll: s.o.MaxConnsPerClient, maxUnauth: s.o.MaxUnauthenticatedConnsPerClient,
		clients: map[netip.Prefix]*clientConns{}}
}

type limitListener struct {
	net.Listener
	maxAll, maxUnauth int // < 0: no cap

	mu      sync.Mutex
	clients map[netip.Prefix]*clientConns
}

type clientConns struct{ all, unauth int }

// clientKey groups a remote address: IPv4 by address, IPv6 by /64 (one
// host usually holds a whole /64).
func clientKey(a net.Addr) netip.Prefix {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Prefix{} // not IP (a Unix socket): one shared group
	}
	ip := ap.Addr().WithZone("").Unmap()
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}

const tooManyConns = "HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 1\r\n" +
	"Content-Length: 39\r\nConnection: close\r\n\r\ntoo many connections from this address\n"

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := clientKey(c.RemoteAddr())
		l.mu.Lock()
		cc := l.clients[key]
		if cc == nil {
			cc = &clientConns{}
			l.clients[key] = cc
		}
		if (l.maxAll >= 0 && cc.all >= l.maxAll) || (l.maxUnauth >= 0 && cc.unauth >= l.maxUnauth) {
			if cc.all == 0 {
				delete(l.clients, key)
			}
			l.mu.Unlock()
			// A fresh socket's send buffer is empty: this write does not
			// wait for the client, and the deadline makes sure of it.
			_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = c.Write([]byte(tooManyConns))
			_ = c.Close()
			continue
		}
		cc.all++
		cc.unauth++
		l.mu.Unlock()
		return &limitedConn{Conn: c, l: l, key: key}, nil
	}
}

// release gives back a connection's places in its client's counts.
func (l *limitListener) release(key netip.Prefix, all, unauth int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cc := l.clients[key]
	if cc == nil {
		return
	}
	cc.all -= all
	cc.unauth -= unauth
	if cc.all <= 0 {
		delete(l.clients, key)
	}
}

// limitedConn is a connection counted against its client.
type limitedConn struct {
	net.Conn
	l    *limitListener
	key  netip.Prefix
	auth atomic.Bool // out of the unauthenticated count (authenticated, or closed)
	done atomic.Bool // closed
}

// authenticated takes the connection out of its client's unauthenticated
// count; later requests on it are still authenticated each on their own.
func (c *limitedConn) authenticated() {
	if c.auth.CompareAndSwap(false, true) {
		c.l.release(c.key, 0, 1)
	}
}

func (c *limitedConn) Close() error {
	if c.done.CompareAndSwap(false, true) {
		unauth := 1
		if !c.auth.CompareAndSwap(false, true) {
			unauth = 0 // authenticated() gave it back already
		}
		c.l.release(c.key, 1, unauth)
	}
	return c.Conn.Close()
}

type connKey struct{}

func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if lc, ok := c.(*limitedConn); ok {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

// markAuthenticated records that r, on its connection, authenticated.
func markAuthenticated(r *http.Request) {
	if lc, ok := r.Context().Value(connKey{}).(*limitedConn); ok {
		lc.authenticated()
	}
}
