package stripemock

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStopsWithItsTest: stripe-mock answers during the test that started
// it and no longer listens once that test ends. (Only a connection is
// tried afterwards: a request would make a leftover process log, and die
// writing to the closed pipe, hiding the leak.)
func TestStopsWithItsTest(t *testing.T) {
	var url string
	t.Run("running", func(t *testing.T) {
		url = Start(t)
		resp, err := http.Get(url + "/v1/customers")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	})
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), time.Second); err == nil {
		c.Close()
		t.Fatalf("stripe-mock at %s still listens after its test ended", url)
	}
}
