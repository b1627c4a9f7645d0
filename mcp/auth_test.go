package mcp_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/mcp"
)

// A refused credential is a 401 a client can show and act on: the
// challenge of RFC 6750 and the MCP authorization spec, and a JSON-RPC error
// for the request's id whose message says what to fix, missing and wrong
// token told apart.
func TestRefusedTokenSaysWhatToFix(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	url := serveHTTP(t, newEngine(t, c), &mcp.HTTPOptions{Agents: hashes(map[string]mcp.Identity{
		"tok-shop": {Namespace: "shop", AgentID: "checkout-bot"}})})
	init := `{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	for _, tc := range []struct {
		name, header, challenge, message string
	}{
		{"missing", "", `Bearer realm="ratchet"`, "no bearer token"},
		{"not bearer", "Basic dXNlcjpwYXNz", `Bearer realm="ratchet"`, "no bearer token"},
		{"wrong", "Bearer tok-wrong", `Bearer realm="ratchet", error="invalid_token", error_description="unknown token"`, "not one of Ratchet's agent tokens"},
	} {
		t.Run("raw HTTP "+tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", url, strings.NewReader(init))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("status %d, want 401", resp.StatusCode)
			}
			if got := resp.Header.Get("WWW-Authenticate"); got != tc.challenge {
				t.Errorf("WWW-Authenticate %q, want %q", got, tc.challenge)
			}
			if got := resp.Header.Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type %q, want application/json", got)
			}
			var body struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      json.RawMessage `json:"id"`
				Error   struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
					Data    struct {
						Code string `json:"code"`
					} `json:"data"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("body is not JSON: %v", err)
			}
			if body.JSONRPC != "2.0" || string(body.ID) != "7" {
				t.Errorf("jsonrpc %q id %s, want 2.0 and the request's id 7", body.JSONRPC, body.ID)
			}
			if body.Error.Code != -32001 || body.Error.Data.Code != "unauthorized" {
				t.Errorf("error code %d data.code %q, want -32001 and unauthorized", body.Error.Code, body.Error.Data.Code)
			}
			if !strings.Contains(body.Error.Message, tc.message) || !strings.Contains(body.Error.Message, "auth.agents") {
				t.Errorf("message %q does not say %q and name auth.agents", body.Error.Message, tc.message)
			}
		})
	}
	// The Go SDK's client shows the message (it reads the JSON-RPC error
	// of a refused request).
	for token, want := range map[string]string{"": "no bearer token", "tok-wrong": "not one of Ratchet's agent tokens"} {
		_, err := httpClient(t, url, token)
		if err == nil {
			t.Fatalf("token %q was accepted", token)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Go client's error for token %q: %v; want it to say %q", token, err, want)
		}
	}
	if _, err := httpClient(t, url, "tok-shop"); err != nil {
		t.Errorf("the right token: %v", err)
	}
}
