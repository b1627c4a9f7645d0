package jwtauth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"
)

// A Kubernetes issuer with a TokenReviewURL has each token decided by the
// API server (TokenReview, authentication.k8s.io/v1), for a cluster whose
// keys Ratchet cannot fetch. The request and answer are as the Kubernetes
// API reference gives them ("TokenReview v1", and "Webhook Token
// Authentication" in the authentication docs):
//
//	POST /apis/authentication.k8s.io/v1/tokenreviews
//	{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview",
//	 "spec":{"token":"<token>","audiences":["ratchet"]}}
//	→ {"status":{"authenticated":true,"audiences":["ratchet"],
//	   "user":{"username":"system:serviceaccount:<ns>:<name>","uid":"…",
//	   "groups":[…],"extra":{"authentication.kubernetes.io/pod-name":[…]}}}}
//
// Ratchet sends its own token (BearerTokenFile; its service account needs
// the system:auth-delegator role). An answer is kept for reviewTTL or until
// the token's exp, whichever is first, so that an agent's calls do not each
// cost a request to the API server.

// MaxReviewsPerSecond bounds the TokenReviews of tokens not yet reviewed
// that one issuer asks in a second.
const MaxReviewsPerSecond = 20

// reviewTTL bounds how long a TokenReview answer is used.
const reviewTTL = 30 * time.Second

// maxReviewed bounds the answers kept; past it, expired ones are dropped,
// and if none has expired, all.
const maxReviewed = 10_000

type review struct {
	ns, name string
	until    time.Time
}

type tokenReview struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Spec       tokenReviewSpec `json:"spec"`
	Status     struct {
		Authenticated bool     `json:"authenticated"`
		Audiences     []string `json:"audiences"`
		Error         string   `json:"error"`
		User          struct {
			Username string `json:"username"`
		} `json:"user"`
	} `json:"status"`
}

type tokenReviewSpec struct {
	Token     string   `json:"token"`
	Audiences []string `json:"audiences"`
}

func (v *Verifier) review(ctx context.Context, token string, k *issuerKeys, kid string, unverified jwt.Claims, want Right) (*Principal, *issuerKeys, error) {
	now := v.opts.Now()
	sum := sha256.Sum256([]byte(token))
	k.mu.Lock()
	r, ok := k.reviewed[sum]
	k.mu.Unlock()
	if !ok || !now.Before(r.until) {
		// Whoever reaches /mcp may send any number of tokens with the
		// cluster's iss, each a review. What the claims refuse (the
		// cluster would say the same of a good token's) is refused here,
		// and new reviews are bounded per second.
		skew := v.opts.ClockSkew
		switch {
		case unverified.Expiry == nil:
			return &Principal{KeyID: kid}, k, refuse("no_expiry", "the token has no exp claim: Ratchet accepts only tokens that expire")
		case now.After(unverified.Expiry.Time().Add(skew)):
			return &Principal{KeyID: kid}, k, refuse("expired", "the token expired at %s: the kubelet writes a new one before that; read the token file again",
				unverified.Expiry.Time().UTC().Format(time.RFC3339))
		case !slices.ContainsFunc(k.cfg.Audiences, func(a string) bool { return slices.Contains(unverified.Audience, a) }):
			return &Principal{KeyID: kid}, k, refuse("audience", "the token's audience %q is not Ratchet's (%s): mount a projected service account token with audience %s",
				truncate(strings.Join(unverified.Audience, " "), 200), strings.Join(k.cfg.Audiences, ", "), k.cfg.Audiences[0])
		}
		k.mu.Lock()
		if now.Sub(k.reviewWindow) >= time.Second || now.Before(k.reviewWindow) {
			k.reviewWindow, k.reviewsInWindow = now, 0
		}
		busy := k.reviewsInWindow >= MaxReviewsPerSecond
		if !busy {
			k.reviewsInWindow++
		}
		k.mu.Unlock()
		if busy {
			return &Principal{KeyID: kid}, k, &Error{Status: 401, Code: "invalid_token", Reason: "review_busy",
				Message: fmt.Sprintf("issuer %s's tokens are reviewed by the cluster at most %d a second, and more came: try again in a second", k.cfg.Name, MaxReviewsPerSecond)}
		}
		var err error
		if r, err = k.askReview(ctx, token, v.opts.Logger); err != nil {
			return &Principal{KeyID: kid}, k, err
		}
		r.until = now.Add(reviewTTL)
		if unverified.Expiry != nil && unverified.Expiry.Time().Before(r.until) {
			r.until = unverified.Expiry.Time()
		}
		k.mu.Lock()
		if k.reviewed == nil || len(k.reviewed) >= maxReviewed {
			kept := map[[32]byte]review{}
			for s, old := range k.reviewed {
				if now.Before(old.until) && len(kept) < maxReviewed/2 {
					kept[s] = old
				}
			}
			k.reviewed = kept
		}
		k.reviewed[sum] = r
		k.mu.Unlock()
	}
	p := &Principal{IssuerName: k.cfg.Name, Issuer: k.cfg.Issuer, Subject: "system:serviceaccount:" + r.ns + ":" + r.name, KeyID: kid}
	extra := map[string]any{"kubernetes.io": map[string]any{"namespace": r.ns, "serviceaccount": map[string]any{"name": r.name}}}
	return v.grant(p, k, extra, want)
}

// askReview posts one TokenReview.
func (k *issuerKeys) askReview(ctx context.Context, token string, log *slog.Logger) (review, error) {
	body, _ := json.Marshal(tokenReview{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview",
		Spec: tokenReviewSpec{Token: token, Audiences: k.cfg.Audiences}})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	unavailable := func(err error) (review, error) {
		// What failed (the API server's URL, Ratchet's own token file) is
		// in the log, not told to whoever sent a token.
		if log != nil {
			log.Warn("token issuer's TokenReview did not answer", "issuer", k.cfg.Name, "err", err)
		}
		return review{}, &Error{Status: 401, Code: "invalid_token", Reason: "review_unavailable",
			Message: fmt.Sprintf("the cluster's TokenReview for issuer %s did not answer, so the token cannot be verified: try again later", k.cfg.Name)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.cfg.TokenReviewURL, bytes.NewReader(body))
	if err != nil {
		return unavailable(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if f := k.cfg.BearerTokenFile; f != "" {
		tok, err := os.ReadFile(f)
		if err != nil {
			return unavailable(fmt.Errorf("reading bearer_token_file: %w", err))
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return unavailable(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxKeySetBytes))
	if err != nil {
		return unavailable(err)
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return unavailable(fmt.Errorf("POST %s: %s", k.cfg.TokenReviewURL, resp.Status))
	}
	var ans tokenReview
	if err := json.Unmarshal(data, &ans); err != nil {
		return unavailable(fmt.Errorf("the TokenReview answer is not JSON: %w", err))
	}
	st := ans.Status
	if !st.Authenticated {
		return review{}, refuse("review_refused", "the cluster did not authenticate the token (TokenReview: %s): mount a current projected service account token with audience %s",
			truncate(st.Error, 200), k.cfg.Audiences[0])
	}
	if !slices.ContainsFunc(k.cfg.Audiences, func(a string) bool { return slices.Contains(st.Audiences, a) }) {
		return review{}, refuse("audience", "the cluster authenticated the token for %q, not for Ratchet (%s)", strings.Join(st.Audiences, " "), strings.Join(k.cfg.Audiences, ", "))
	}
	rest, ok := strings.CutPrefix(st.User.Username, "system:serviceaccount:")
	ns, name, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || ns == "" || name == "" {
		return review{}, refuse("no_service_account", "the token is %q's, not a service account's", truncate(st.User.Username, 200))
	}
	return review{ns: ns, name: name}, nil
}
