package hostfs

import (
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/sandbox"
)

// wrapperSide plays the wrapper's end of a channel: it reads the request
// and writes report (nil: writes nothing, as a killed wrapper).
func wrapperSide(t *testing.T, c *Channel, report []byte) []byte {
	t.Helper()
	reqR, repW := c.GuestEnds()
	// The runtime's copies: the wrapper holds them, the host drops its own.
	r, err := os.Open("/proc/self/fd/" + strconv.Itoa(int(reqR.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(repW.Fd())), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	c.Started()
	req, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	if report != nil {
		go func() {
			_, _ = w.Write(report)
			w.Close()
		}()
	} else {
		w.Close()
	}
	return req
}

func TestChannelCarriesRequestAndReport(t *testing.T) {
	good, _ := json.Marshal(sandbox.Sidecar{Version: sandbox.SidecarVersion, StartedAt: time.Now().UTC(), EndedAt: time.Now().UTC(),
		ExitCode: 3, Files: []sandbox.SidecarFile{}, Network: []sandbox.SidecarNet{}, Packages: []sandbox.SidecarPackage{}})
	for _, c := range []struct {
		name    string
		report  []byte
		clean   bool
		errText string
	}{
		{"Report", good, true, ""},
		{"WrapperKilled", nil, false, "no report from the wrapper"},
		{"Oversized", []byte(`{"version":1,"pad":"` + strings.Repeat("a", 2*sandbox.MaxSidecarBytes) + `"}`), false, "larger than the limit"},
		{"Forged", []byte(`{"version":1,"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}`), false, "unknown field"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ch, err := newChannel([]byte(`{"argv":["true"]}`))
			if err != nil {
				t.Fatal(err)
			}
			if req := wrapperSide(t, ch, c.report); string(req) != `{"argv":["true"]}` {
				t.Fatalf("the wrapper read %q", req)
			}
			var res sandbox.Result
			ch.Finish(&res)
			if c.clean != (res.Unclean == "") || c.clean != (res.Sidecar != nil) {
				t.Fatalf("unclean %q sidecar %+v error %q", res.Unclean, res.Sidecar, res.SidecarError)
			}
			if !strings.Contains(res.SidecarError, c.errText) {
				t.Fatalf("sidecar error %q, want %q", res.SidecarError, c.errText)
			}
		})
	}
}
