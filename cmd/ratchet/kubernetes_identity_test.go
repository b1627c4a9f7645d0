package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/internal/jwtauth/jwtauthtest"
)

// TestTheBridgeSendsTheRotatedServiceAccountToken: an agent pod with no
// Secret. "ratchet serve" trusts a cluster's service account issuer (a
// test issuer minting tokens shaped as Kubernetes does, audience ratchet);
// the stdio bridge reads the projected token from its file, and when the
// kubelet replaces it mid-session (the old one then expired) the next call
// carries the new one. Each call is the service account's: namespace
// payments, agent checkout-agent. A bridge that read the token once sent
// the expired one and was refused.
func TestTheBridgeSendsTheRotatedServiceAccountToken(t *testing.T) {
	is := jwtauthtest.New(t)
	s := startServe(t, filepath.Join(t.TempDir(), "data"), "auth:\n  oauth:\n    resource: https://ratchet.test/mcp\n    clock_skew: 1s\n    issuers:\n"+
		"      - {name: cluster, issuer: '"+is.URL+"', discovery_url: '"+is.DiscoveryURL()+"', kubernetes: true}\n")
	dir := t.TempDir()
	tokenPath := filepath.Join(dir, "token")
	rotate := func(tok string) { // as the kubelet: write aside, rename over
		t.Helper()
		writeFile(t, filepath.Join(dir, ".token.new"), tok)
		if err := os.Rename(filepath.Join(dir, ".token.new"), tokenPath); err != nil {
			t.Fatal(err)
		}
	}
	first := is.ServiceAccount("payments", "checkout-agent", "ratchet", 2*time.Second)
	rotate(is.Sign(t, first))

	cmd := exec.Command(binary, "mcp", "--stdio", "--server", s.mcp, "--token-file", tokenPath)
	cmd.Env = append(os.Environ(), "RATCHET_TOKEN=")
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).
		Connect(context.Background(), &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	one := begin(t, cs, "sa:1")

	time.Sleep(time.Until(time.Unix(first["exp"].(int64), 0).Add(2 * time.Second))) // the first token is past exp and skew
	rotate(is.Sign(t, is.ServiceAccount("payments", "checkout-agent", "ratchet", time.Hour)))
	two := begin(t, cs, "sa:2")

	var got []string
	for _, r := range []map[string]any{one, two} {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_get_effect", Arguments: map[string]any{"effect_id": r["effect_id"]}})
		if err != nil || res.IsError {
			t.Fatalf("get %v: %v %+v", r["effect_id"], err, res)
		}
		eff := res.StructuredContent.(map[string]any)
		got = append(got, eff["namespace"].(string)+"/"+eff["agent_id"].(string))
	}
	if diff := cmp.Diff([]string{"payments/checkout-agent", "payments/checkout-agent"}, got); diff != "" {
		t.Errorf("identities (-want +got):\n%s", diff)
	}
}
