package mcp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// Bridge returns a server that offers the tools of a remote Ratchet and
// forwards every call to it unchanged. "ratchet mcp --stdio --server URL"
// uses it so a local MCP client can reach a running sidecar, since only one
// process may open a Badger ledger. connect opens a session to the remote;
// it is called once here and again for the first call after a session
// broke.
//
// The bridge never dies with a call. Arguments larger than the sidecar
// accepts (DefaultMaxBodyBytes, less room for the request around them) are
// refused here as invalid_argument, as the sidecar itself would refuse them
// over stdio. A call the remote did not answer (its session closed, the
// sidecar restarting) is a tool error with code unavailable, which the
// agent can act on, and the next call opens a new session. The returned
// func closes the remote session.
func Bridge(ctx context.Context, connect func(context.Context) (*sdk.ClientSession, error), version string) (*sdk.Server, func(), error) {
	b := &bridge{connect: connect}
	cs, err := b.session(ctx)
	if err != nil {
		return nil, nil, err
	}
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		b.close()
		return nil, nil, fmt.Errorf("listing the remote tools: %w", err)
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "ratchet-bridge", Version: version}, &sdk.ServerOptions{Instructions: instructions})
	for _, tool := range list.Tools {
		s.AddTool(tool, b.call)
	}
	return s, b.close, nil
}

// bridgeArgsLimit is the largest arguments the bridge forwards: the
// sidecar's body limit less room for the JSON-RPC request around them.
const bridgeArgsLimit = DefaultMaxBodyBytes - 4<<10

type bridge struct {
	connect func(context.Context) (*sdk.ClientSession, error)
	mu      sync.Mutex
	cs      *sdk.ClientSession // nil after a call broke it
}

// session is the open remote session, opened anew if the last one broke.
func (b *bridge) session(ctx context.Context) (*sdk.ClientSession, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cs == nil {
		cs, err := b.connect(ctx)
		if err != nil {
			return nil, err
		}
		b.cs = cs
	}
	return b.cs, nil
}

// drop closes cs if it is still the open session, so the next call opens a
// new one.
func (b *bridge) drop(cs *sdk.ClientSession) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cs == cs {
		b.cs = nil
		cs.Close()
	}
}

// close closes the remote session.
func (b *bridge) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cs != nil {
		b.cs.Close()
		b.cs = nil
	}
}

func (b *bridge) call(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	if n := len(req.Params.Arguments); n > bridgeArgsLimit {
		return errorResult(&ledger.Error{Code: ledger.CodeInvalidArgument, Message: fmt.Sprintf(
			"arguments are %d bytes; the sidecar accepts at most %d", n, bridgeArgsLimit)}), nil
	}
	cs, err := b.session(ctx)
	if err != nil {
		return errorResult(&ledger.Error{Code: ledger.CodeUnavailable, Message: "the Ratchet sidecar cannot be reached (" + err.Error() + "); nothing was decided: call again"}), nil
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: req.Params.Name, Arguments: req.Params.Arguments, Meta: traceMeta(req.Params)})
	if err != nil {
		b.drop(cs)
		return errorResult(&ledger.Error{Code: ledger.CodeUnavailable, Message: "the Ratchet sidecar did not answer (" + err.Error() +
			"); it may or may not have recorded the call: call again with the same arguments"}), nil
	}
	return res, nil
}

// Connect opens a client session to a Ratchet MCP endpoint over streamable
// HTTP, sending token (if any) as a bearer token on every request. The
// session's transport keeps up to 64 idle connections to the server:
// with net/http's default of 2 per host, a session whose requests overlap
// (a call starts while the last answer's connection is still being read,
// the server's stream is open) closed and reopened a connection on most
// calls (measured: 16 sessions making 50 calls each opened 112-141
// connections; now 32).
func Connect(ctx context.Context, url, token, version string) (*sdk.ClientSession, error) {
	if token == "" {
		return ConnectWith(ctx, url, nil, version)
	}
	return ConnectWith(ctx, url, func() (string, error) { return token, nil }, version)
}

// ConnectWith is Connect with the token read from token before every
// request (nil sends none), so that a token the kubelet rotates is sent
// as soon as it is on disk (TokenFile).
func ConnectWith(ctx context.Context, url string, token func() (string, error), version string) (*sdk.ClientSession, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	hc := &http.Client{Transport: tr}
	if token != nil {
		hc.Transport = bearer{token: token, rt: tr}
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
	token func() (string, error)
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	tok, err := b.token()
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+tok)
	return b.rt.RoundTrip(r)
}

// TokenFile reads a token from path on every call: a projected service
// account token, which the kubelet replaces (an atomic rename of its
// directory) before it expires. A file of at most 16 KiB, trimmed of
// white space; while the file cannot be read, the last token read is used
// (a rotation caught between rename and write), and the first read must
// succeed.
func TokenFile(path string) (func() (string, error), error) {
	var mu sync.Mutex
	var last string
	read := func() (string, error) {
		b, err := readTokenFile(path)
		tok := strings.TrimSpace(string(b))
		if err == nil && tok == "" {
			err = fmt.Errorf("the token file %s is empty", path)
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if last != "" {
				return last, nil
			}
			return "", fmt.Errorf("reading the token: %w", err)
		}
		last = tok
		return tok, nil
	}
	if _, err := read(); err != nil {
		return nil, err
	}
	return read, nil
}

// maxTokenFile bounds a token file.
const maxTokenFile = 16 << 10

// readTokenFile reads a regular file of at most maxTokenFile bytes. The
// path is a symlink the kubelet swaps; one swapped to a FIFO or a device
// (/dev/zero) is refused before it is opened, and at most maxTokenFile+1
// bytes are read of any file (os.ReadFile read an endless one until memory
// ran out).
func readTokenFile(path string) ([]byte, error) {
	if fi, err := os.Stat(path); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("the token file %s is not a regular file (%s)", path, fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err == nil && len(b) > maxTokenFile {
		err = fmt.Errorf("the token file %s is larger than 16 KiB", path)
	}
	return b, err
}
