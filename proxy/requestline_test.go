package proxy_test

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestOddRequestLinesNeverReachTheVendor: request lines a hostile local
// process writes on a raw socket to get a payment past the gate (a method
// in another case or of no RFC, odd whitespace around the method or the
// target, HTTP/2's preface on the HTTP/1 listener, an absolute-form target
// naming the proxy itself) are refused, each with a 4xx or 5xx status,
// and none reaches the vendor or the ledger.
func TestOddRequestLinesNeverReachTheVendor(t *testing.T) {
	up, hits := fixedAnswer(200, "application/json", []byte(`{"id":"pi_1","object":"payment_intent","status":"succeeded"}`))
	defer up.Close()
	e := newEnv(t, map[string]string{"stripe": up.URL}, nil)
	addr := strings.TrimPrefix(e.url, "http://")
	const path = "/stripe/v1/payment_intents"
	lines := []string{
		"PoSt " + path + " HTTP/1.1",
		"QUERY " + path + " HTTP/1.1",
		"POST  " + path + " HTTP/1.1",
		"POST\t" + path + " HTTP/1.1",
		" POST " + path + " HTTP/1.1",
		"POST " + path + " HTTP/1.1 ",
		"POST " + path + "  HTTP/1.1",
		"POST " + path + " http/1.1",
		"POST\x00 " + path + " HTTP/1.1",
		"POST http://" + addr + path + " HTTP/1.1",
		"POST https://" + addr + path + " HTTP/1.1",
	}
	body := "amount=100&currency=usd"
	for _, line := range lines {
		status := rawStatus(t, addr, line+"\r\nHost: "+addr+"\r\nAuthorization: Bearer sk_test_123\r\n"+
			"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 23\r\n\r\n"+body)
		if status < 400 {
			t.Errorf("%q: status %d, want a refusal", line, status)
		}
	}
	if status := rawStatus(t, addr, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); status < 400 {
		t.Errorf("HTTP/2 preface: status %d, want a refusal", status)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the vendor saw %d of these requests", n)
	}
	if effs := e.effects(t); len(effs) != 0 {
		t.Errorf("%d effects recorded for refused requests", len(effs))
	}
}

// rawStatus writes req on a new connection to addr and returns the status
// of the answer (0 when the connection closes without one).
func rawStatus(t *testing.T, addr, req string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
