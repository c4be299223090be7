// Tests of the metadata endpoint as a host serves it: a request is known
// by its source address; an address nobody holds, or an instance that does
// not run, gets nothing; one token request per instance at a time.

package metadata

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type owners map[string]string

func (o owners) Owner(addr string) (string, bool) { id, ok := o[addr]; return id, ok }

type running map[string]bool

func (r running) Running(id string) bool { return r[id] }

type seeds struct{}

func (seeds) Seed(id string) ([]byte, []byte, error) {
	return []byte("user data of " + id), []byte("instance-id: " + id + "\n"), nil
}

// tokens says a request entered, blocks until release is closed, then
// names the instance.
type tokens struct{ entered, release chan struct{} }

func (t tokens) WorkloadToken(_ context.Context, id, audience string) (string, error) {
	t.entered <- struct{}{}
	<-t.release
	return "token-of-" + id + "-for-" + audience, nil
}

func get(t *testing.T, h http.Handler, from, path string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://169.254.169.254"+path, nil)
	req.RemoteAddr = from + ":40000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

func TestAGuestGetsItsOwnMetadataOnly(t *testing.T) {
	tok := tokens{entered: make(chan struct{}, 1), release: make(chan struct{})}
	h := Handler(Config{Instances: running{"vm1": true, "vm2": true}, Seeds: seeds{}, Tokens: tok,
		Identify: ByAddress(owners{"169.254.10.2": "vm1", "169.254.10.3": "vm2", "169.254.10.4": "vm-off"})})
	if code, body := get(t, h, "169.254.10.2", "/nocloud/meta-data"); code != 200 || body != "instance-id: vm1\n" {
		t.Fatalf("%d %q", code, body)
	}
	if code, body := get(t, h, "169.254.10.3", "/nocloud/user-data"); code != 200 || body != "user data of vm2" {
		t.Fatalf("%d %q", code, body)
	}
	for _, from := range []string{"169.254.99.99", "169.254.10.4"} {
		if code, body := get(t, h, from, "/nocloud/meta-data"); code != 404 || strings.Contains(body, "instance-id") {
			t.Fatalf("%s: %d %q", from, code, body)
		}
	}
	// A token request on its way holds off the instance's next one.
	done := make(chan string)
	go func() {
		_, body := get(t, h, "169.254.10.2", "/v1/token?audience=a")
		done <- body
	}()
	<-tok.entered
	if code, _ := get(t, h, "169.254.10.2", "/v1/token?audience=a"); code != http.StatusTooManyRequests {
		t.Fatalf("a second token request: %d", code)
	}
	close(tok.release)
	if body := <-done; body != "token-of-vm1-for-a" {
		t.Fatalf("%q", body)
	}
	if code, _ := get(t, h, "169.254.10.2", "/v1/token?audience="+strings.Repeat("x", MaxAudience+1)); code != 400 {
		t.Fatalf("a long audience: %d", code)
	}
}
