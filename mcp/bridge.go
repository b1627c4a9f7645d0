package mcp

import (
	"context"
	"fmt"
	"net/http"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Bridge returns a server that offers the tools of a remote Ratchet (reached
// through remote) and forwards every call to it unchanged. "ratchet mcp
// --stdio --server URL" uses it so a local MCP client can reach a running
// sidecar, since only one process may open a Badger ledger.
func Bridge(ctx context.Context, remote *sdk.ClientSession, version string) (*sdk.Server, error) {
	list, err := remote.ListTools(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("listing the remote tools: %w", err)
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "ratchet-bridge", Version: version}, &sdk.ServerOptions{Instructions: instructions})
	for _, tool := range list.Tools {
		s.AddTool(tool, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return remote.CallTool(ctx, &sdk.CallToolParams{Name: req.Params.Name, Arguments: req.Params.Arguments})
		})
	}
	return s, nil
}

// Connect opens a client session to a Ratchet MCP endpoint over streamable
// HTTP, sending token (if any) as a bearer token on every request.
func Connect(ctx context.Context, url, token, version string) (*sdk.ClientSession, error) {
	hc := &http.Client{}
	if token != "" {
		hc.Transport = bearer{token: token, rt: http.DefaultTransport}
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "ratchet-client", Version: version}, nil).
		Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", url, err)
	}
	return cs, nil
}

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}
