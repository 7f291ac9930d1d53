package api_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
)

// dialRaw opens a TCP connection to the test server and writes head.
func dialRaw(t *testing.T, addr, head string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if head != "" {
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// readAnswer reads what the server sends within d: the status line (""
// when none came), whether the server closed the connection, and how long
// it took. A read that times out means the server is still holding the
// connection.
func readAnswer(c net.Conn, d time.Duration) (status string, closed bool, took time.Duration) {
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(d))
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	status = strings.TrimSpace(line)
	if err == nil {
		// The answer came; read on to see the connection close.
		_, err = io.Copy(io.Discard, br)
		if err == nil {
			err = io.EOF
		}
	}
	var ne net.Error
	timedOut := errors.As(err, &ne) && ne.Timeout()
	return status, !timedOut, time.Since(start)
}

// drip writes one byte of s every interval until s ends or the
// connection fails: a client that keeps a read alive without finishing it.
func drip(c net.Conn, s string, interval time.Duration) {
	go func() {
		for i := range len(s) {
			if _, err := c.Write([]byte{s[i]}); err != nil {
				return
			}
			time.Sleep(interval)
		}
	}()
}

// TestClass12SlowClients (issue 15, class 12): every read the server makes
// is bounded and authentication comes before the body. A client that
// drips its headers is cut after ReadHeaderTimeout; a request without valid
// credentials is answered 401 at once and its connection closed, with the
// body never read (the client's deadline is shorter than BodyTimeout, so a
// server that waited for the body fails); an authenticated body that drips
// is cut after BodyTimeout with a 408; an oversized header block is
// refused.
func TestClass12SlowClients(t *testing.T) {
	const bodyTimeout = 2 * time.Second
	f := newFixture(t, fixtureOptions{apiOptions: func(o *api.Options) {
		o.ReadHeaderTimeout = 300 * time.Millisecond
		o.BodyTimeout = bodyTimeout
		o.MaxHeaderBytes = 4 << 10
	}})
	addr := f.http.Listener.Addr().String()

	t.Run("SlowHeaders", func(t *testing.T) {
		c := dialRaw(t, addr, "GET /v1/tenant HTTP/1.1\r\n")
		drip(c, "Host: x\r\nX-Pad: "+strings.Repeat("a", 200)+"\r\n\r\n", 50*time.Millisecond)
		if _, closed, took := readAnswer(c, 5*time.Second); !closed {
			t.Fatalf("a client dripping its headers still held its connection after %v", took)
		}
	})

	t.Run("UnauthenticatedBodyNotRead", func(t *testing.T) {
		for name, auth := range map[string]string{"none": "", "invalid": "Authorization: Bearer ap_nosuchkey_secret\r\n"} {
			c := dialRaw(t, addr, "POST /v1/runs HTTP/1.1\r\nHost: x\r\n"+auth+
				"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
			drip(c, strings.Repeat(" ", 1000), 100*time.Millisecond)
			status, closed, took := readAnswer(c, bodyTimeout*3/4)
			if !strings.HasPrefix(status, "HTTP/1.1 401") || !closed {
				t.Errorf("%s credentials with a slow body: status %q, closed %v after %v; want 401 and a closed connection before the body timeout",
					name, status, closed, took)
			}
		}
	})

	t.Run("AuthenticatedSlowBody", func(t *testing.T) {
		c := dialRaw(t, addr, "POST /v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+f.keys[priya]+
			"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
		drip(c, strings.Repeat(" ", 1000), 100*time.Millisecond)
		status, closed, took := readAnswer(c, 3*bodyTimeout)
		if !strings.HasPrefix(status, "HTTP/1.1 408") || !closed {
			t.Fatalf("an authenticated slow body: status %q, closed %v after %v; want 408 after the body timeout", status, closed, took)
		}
		if took < bodyTimeout/2 {
			t.Fatalf("cut after %v, before the body timeout %v", took, bodyTimeout)
		}
	})

	t.Run("HeaderCap", func(t *testing.T) {
		c := dialRaw(t, addr, "GET /v1/tenant HTTP/1.1\r\nHost: x\r\nX-Pad: "+strings.Repeat("a", 8<<10)+"\r\n\r\n")
		if status, _, _ := readAnswer(c, 5*time.Second); !strings.HasPrefix(status, "HTTP/1.1 431") {
			t.Fatalf("an 8 KiB header with a 4 KiB cap: %q, want 431", status)
		}
	})
}

// TestClass12ConnectionCaps (issue 15, class 12): 20 slow unauthenticated
// clients from one address hold no more connections than the cap, the
// rest are refused at once; authenticated connections do not use up the
// unauthenticated places but count toward the overall cap; places come
// back when connections close.
func TestClass12ConnectionCaps(t *testing.T) {
	const maxUnauth, maxAll = 4, 6
	f := newFixture(t, fixtureOptions{apiOptions: func(o *api.Options) {
		o.MaxUnauthenticatedConnsPerClient, o.MaxConnsPerClient = maxUnauth, maxAll
		o.ReadHeaderTimeout = time.Minute // the slow clients are held, not timed out, while the test looks
	}})
	addr := f.http.Listener.Addr().String()

	// slow opens 20 connections that start a request and stall, and
	// returns how many the server still holds after a moment, and them.
	slow := func() (int, []net.Conn) {
		conns := make([]net.Conn, 20)
		for i := range conns {
			conns[i] = dialRaw(t, addr, "POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n")
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		held := 0
		for _, c := range conns {
			wg.Go(func() {
				status, closed, _ := readAnswer(c, 1500*time.Millisecond)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case !closed:
					held++
				case status != "" && !strings.HasPrefix(status, "HTTP/1.1 429"):
					t.Errorf("a refused connection was answered %q, want 429 or a close", status)
				}
			})
		}
		wg.Wait()
		return held, conns
	}
	// authed sends an authenticated request; keep leaves its connection
	// open. It reports whether the server answered it.
	authed := func(keep bool) (bool, net.Conn) {
		c := dialRaw(t, addr, "GET /v1/tenant HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+f.keys[priya]+"\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false, nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if !keep {
			c.Close()
		}
		return resp.StatusCode == http.StatusOK, c
	}
	// holds checks that slow clients get exactly want connections: more is
	// a failure at once; fewer may be places the server has not given
	// back yet from closed connections, so it looks again.
	holds := func(want int, what string) {
		deadline := time.Now().Add(15 * time.Second)
		for {
			held, conns := slow()
			for _, c := range conns {
				c.Close()
			}
			if held > want {
				t.Fatalf("%s: 20 slow clients hold %d connections, want the cap %d", what, held, want)
			}
			if held == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: 20 slow clients hold %d connections, want %d", what, held, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	holds(maxUnauth, "unauthenticated cap")
	// Places come back: an authenticated request gets through again, and
	// three authenticated keep-alive connections leave room for three
	// more of any kind under the overall cap of six.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < 3; {
		if ok, _ := authed(true); ok {
			i++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatal("the caps did not give their places back after the slow connections closed")
		}
		time.Sleep(20 * time.Millisecond) // closed slow connections not given back yet
	}
	holds(maxAll-3, "overall cap with 3 authenticated connections open")
}

// TestClass12StreamOutlivesWriteTimeout (issue 15, class 12): every write
// has the write timeout from the moment it is made, so a healthy event
// stream lasts many write timeouts and still ends with the run (a deadline
// counted from the request, not moved by each write, would cut it).
func TestClass12StreamOutlivesWriteTimeout(t *testing.T) {
	const writeTimeout = time.Second
	f := newFixture(t, fixtureOptions{apiOptions: func(o *api.Options) {
		o.WriteTimeout = writeTimeout
		o.Heartbeat = 50 * time.Millisecond
	}})
	id := f.startAsync(priya)
	f.waitPending(priya, id, "issue_refund")
	req, _ := http.NewRequest("GET", f.http.URL+"/v1/runs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+f.keys[priya])
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start := time.Now()
	type line struct {
		text string
		at   time.Duration
	}
	lines := make(chan line, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		for sc.Scan() {
			lines <- line{sc.Text(), time.Since(start)}
		}
	}()
	cancelled := false
	var last line
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the stream ended after %v without an end event (last line %q at %v)", time.Since(start), last.text, last.at)
			}
			last = l
			if l.text == "event: "+api.StreamEnd {
				if l.at < 3*writeTimeout {
					t.Fatalf("end after %v, before the test cancelled the run", l.at)
				}
				return
			}
			if !cancelled && l.at > 3*writeTimeout {
				// Three write timeouts in, the stream is alive: end the run.
				cancelled = true
				if r := f.do(priya, "POST", "/v1/runs/"+id+":cancel", nil); r.status != http.StatusAccepted {
					t.Fatalf("cancel: %s", r)
				}
			}
		case <-timeout:
			t.Fatal("no end event within 30s")
		}
	}
}
