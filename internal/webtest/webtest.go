// Package webtest sends the requests a browser or a hostile page would to
// a real listener, for tests of the admin API's guards from the attacker's
// side. It is used by tests only.
package webtest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Send sends one request (a "Host" entry in header sets the Host line) and
// returns the status and the code of a JSON error answer ("" for none). An
// answer of 300 or more that is not a JSON error with a code and a message
// fails the test: every refusal must say what was refused.
func Send(t testing.TB, method, url, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if resp.StatusCode >= 300 && (json.Unmarshal(b, &e) != nil || e.Error.Code == "" || e.Error.Message == "") {
		t.Errorf("%s %s: %d answer is not a JSON error: %s", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode, e.Error.Code
}
