package jwtauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/internal/jwtauth"
	"github.com/ratchet-mcp/ratchet/internal/jwtauth/jwtauthtest"
)

// fakeTokenReview is a Kubernetes API server's TokenReview endpoint, shaped
// after the Kubernetes API reference ("TokenReview v1",
// authentication.k8s.io/v1): POST /apis/authentication.k8s.io/v1/tokenreviews
// with the caller's bearer token, a TokenReview whose spec holds the token
// and the audiences; 201 Created with status.authenticated, status.user
// (username system:serviceaccount:<ns>:<name>) and status.audiences, the
// spec's audiences the token was issued for. It knows the tokens in known
// (token → service account and the audience it was issued for) and counts
// the reviews.
type fakeTokenReview struct {
	*httptest.Server
	reviews atomic.Int64
}

func startTokenReview(t *testing.T, caller string, known map[string][2]string) *fakeTokenReview {
	f := &fakeTokenReview{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/apis/authentication.k8s.io/v1/tokenreviews" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+caller {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`))
			return
		}
		f.reviews.Add(1)
		var in struct {
			APIVersion, Kind string
			Spec             struct {
				Token     string   `json:"token"`
				Audiences []string `json:"audiences"`
			} `json:"spec"`
		}
		json.NewDecoder(r.Body).Decode(&in)
		status := map[string]any{"authenticated": false, "error": "invalid bearer token"}
		if sa, ok := known[in.Spec.Token]; ok {
			if slices.Contains(in.Spec.Audiences, sa[1]) {
				status = map[string]any{"authenticated": true, "audiences": []string{sa[1]},
					"user": map[string]any{"username": "system:serviceaccount:" + sa[0], "uid": "0a1b2c3d",
						"groups": []string{"system:serviceaccounts"}, "extra": map[string]any{"authentication.kubernetes.io/pod-name": []string{"agent-7d9f"}}}}
			} else {
				status = map[string]any{"authenticated": false, "error": "token audiences [" + sa[1] + "] is invalid for the target audiences"}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
			"spec": map[string]any{"token": in.Spec.Token, "audiences": in.Spec.Audiences}, "status": status})
	}))
	t.Cleanup(f.Close)
	return f
}

// TestTokenReviewDecidesWhereTheKeysCannotBeFetched: a Kubernetes issuer
// with token_review_url has the API server decide each token, sent with
// Ratchet's own token: a current projected token is an agent of its
// service account, answered once for its next calls; a token the cluster
// does not authenticate, one for another audience and one signed by
// another key are refused, each by the cluster.
func TestTokenReviewDecidesWhereTheKeysCannotBeFetched(t *testing.T) {
	is := jwtauthtest.New(t) // mints tokens shaped as the cluster's
	good := is.Sign(t, is.ServiceAccount("payments", "checkout-agent", "ratchet", time.Hour))
	revoked := is.Sign(t, is.ServiceAccount("payments", "deleted-agent", "ratchet", time.Hour))
	apiServer := is.Sign(t, is.ServiceAccount("payments", "checkout-agent", "https://kubernetes.default.svc", time.Hour))
	fake := startTokenReview(t, "ratchets-own-token", map[string][2]string{
		good: {"payments:checkout-agent", "ratchet"}, apiServer: {"payments:checkout-agent", "https://kubernetes.default.svc"}})
	own := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(own, []byte("ratchets-own-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := jwtauth.New(jwtauth.Options{
		Issuers: []jwtauth.Issuer{{Name: "cluster", Issuer: is.URL, Kubernetes: true, Audiences: []string{"ratchet"}, Algorithms: []string{"RS256"},
			TokenReviewURL: fake.URL + "/apis/authentication.k8s.io/v1/tokenreviews", BearerTokenFile: own}},
		AgentScope: "ratchet:agent", AdminScope: "ratchet:admin",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		p, err := v.Verify(ctx, good, jwtauth.RightAgent)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff("payments/checkout-agent", p.Namespace+"/"+p.AgentID); diff != "" {
			t.Errorf("identity (-want +got):\n%s", diff)
		}
	}
	if got := fake.reviews.Load(); got != 1 {
		t.Errorf("reviews for three calls with one token = %d, want 1", got)
	}
	for name, c := range map[string]struct{ token, reason string }{
		"not authenticated by the cluster": {revoked, "review_refused"},
		"the API server's audience":        {apiServer, "audience"}, // refused on its claims, before a review
		"signed by another key":            {jwtauthtest.New(t).Sign(t, is.ServiceAccount("payments", "checkout-agent", "ratchet", time.Hour)), "review_refused"},
	} {
		_, err := v.Verify(ctx, c.token, jwtauth.RightAgent)
		e, ok := errors.AsType[*jwtauth.Error](err)
		if !ok || e.Reason != c.reason || e.Status != 401 {
			t.Errorf("%s: %v, want 401 %s", name, err, c.reason)
		}
	}
	if _, err := v.Verify(ctx, good, jwtauth.RightAdmin); err == nil {
		t.Error("a service account token opened the admin API")
	}
}

// TestAFloodOfMadeUpTokensCostsTheAPIServerBoundedReviews: every token
// Ratchet has not reviewed costs a TokenReview, and whoever reaches /mcp
// may send any number of JWT-shaped tokens with the cluster's iss. An
// expired one, or one for another audience, is refused here without a
// review (a good token's claims say the same as the cluster would); past
// maxReviewsPerSecond new reviews in a second, a token is refused (401,
// try again) without one, and the next second reviews again.
func TestAFloodOfMadeUpTokensCostsTheAPIServerBoundedReviews(t *testing.T) {
	is := jwtauthtest.New(t)
	forger := jwtauthtest.New(t)
	good := is.Sign(t, is.ServiceAccount("payments", "checkout-agent", "ratchet", time.Hour))
	fake := startTokenReview(t, "own", map[string][2]string{good: {"payments:checkout-agent", "ratchet"}})
	own := filepath.Join(t.TempDir(), "token")
	os.WriteFile(own, []byte("own"), 0o600)
	// The verifier's clock stands still (reviews are counted per second),
	// a little ahead of the wall clock the tokens below are signed by, so
	// that a token signed past a second boundary is not "not yet valid".
	now := time.Now().Add(5 * time.Second)
	v, err := jwtauth.New(jwtauth.Options{
		Issuers: []jwtauth.Issuer{{Name: "cluster", Issuer: is.URL, Kubernetes: true, Audiences: []string{"ratchet"}, Algorithms: []string{"RS256"},
			TokenReviewURL: fake.URL + "/apis/authentication.k8s.io/v1/tokenreviews", BearerTokenFile: own}},
		AgentScope: "ratchet:agent", AdminScope: "ratchet:admin", Now: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	forge := func(i int, ttl time.Duration, aud string) string {
		c := is.ServiceAccount("payments", fmt.Sprintf("made-up-%d", i), aud, ttl)
		return forger.Sign(t, c)
	}
	reasons := map[string]int{}
	for i := range 5 {
		_, err := v.Verify(ctx, forge(i, -time.Hour, "ratchet"), jwtauth.RightAgent)
		reasons["expired: "+reasonOf(err)]++
		_, err = v.Verify(ctx, forge(i, time.Hour, "https://kubernetes.default.svc"), jwtauth.RightAgent)
		reasons["other audience: "+reasonOf(err)]++
	}
	if got := fake.reviews.Load(); got != 0 {
		t.Errorf("reviews for expired tokens and tokens of another audience = %d, want 0", got)
	}
	for i := range 100 {
		_, err := v.Verify(ctx, forge(i, time.Hour, "ratchet"), jwtauth.RightAgent)
		reasons["forged: "+reasonOf(err)]++
	}
	if got := fake.reviews.Load(); got != jwtauth.MaxReviewsPerSecond {
		t.Errorf("reviews for 100 forged tokens in one second = %d, want %d", got, jwtauth.MaxReviewsPerSecond)
	}
	want := map[string]int{"expired: expired": 5, "other audience: audience": 5,
		"forged: review_refused": jwtauth.MaxReviewsPerSecond, "forged: review_busy": 100 - jwtauth.MaxReviewsPerSecond}
	if diff := cmp.Diff(want, reasons); diff != "" {
		t.Errorf("decisions (-want +got):\n%s", diff)
	}
	now = now.Add(time.Second)
	if _, err := v.Verify(ctx, good, jwtauth.RightAgent); err != nil {
		t.Errorf("the good token a second later: %v", err)
	}
}
