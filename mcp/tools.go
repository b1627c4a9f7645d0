package mcp

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

type tools struct {
	eng      Engine
	fallback Identity
	leases   ledger.Defaults   // for the lease bounds in the begin schema
	reserved map[Identity]bool // Options.Reserved
	console  string            // Options.ConsoleURL, without a trailing slash
	log      *slog.Logger      // Options.Logger, or discard
	// listed are the tools as tools/list shows them, by name; the SDK
	// holds each with a stand-in input schema (addTool, listFull).
	listed map[string]*sdk.Tool
}

// field documents and bounds one input property.
type field struct {
	desc     string
	min, max int // string length bounds; zero max means none
	enum     []any
	minimum  *float64
	maximum  *float64
	// props documents and bounds an object's properties, as the tool's
	// fields do its arguments (every property must be listed).
	props map[string]field
	// maxProps and valuesMax bound a map: how many entries, and the
	// length of its string values.
	maxProps  int
	valuesMax int
}

// applyField puts f's description and bounds on the property schema p.
func applyField(p *jsonschema.Schema, f field, path string) {
	p.Description = f.desc
	if f.max > 0 {
		p.MaxLength = &f.max
	}
	if f.min > 0 {
		p.MinLength = &f.min
	}
	p.Enum, p.Minimum, p.Maximum = f.enum, f.minimum, f.maximum
	if f.maxProps > 0 {
		p.MaxProperties = &f.maxProps
	}
	if f.valuesMax > 0 && p.AdditionalProperties != nil {
		p.AdditionalProperties.MaxLength = &f.valuesMax
	}
	if f.props != nil {
		applyFields(p, f.props, path)
	}
}

// applyFields documents and bounds every property of the object schema s,
// panicking (at start, and so in every test) when one is undocumented or a
// documented one is missing.
func applyFields(s *jsonschema.Schema, fields map[string]field, path string) {
	for name, f := range fields {
		p, ok := s.Properties[name]
		if !ok {
			panic(fmt.Sprintf("%s: no property %q", path, name))
		}
		applyField(p, f, path+"."+name)
	}
	for name := range s.Properties {
		if _, ok := fields[name]; !ok {
			panic(fmt.Sprintf("%s: property %q is undocumented", path, name))
		}
	}
}

func num(v float64) *float64 { return &v }

// toolSpec is everything about one tool but its handler.
type toolSpec struct {
	name, title, desc string
	readOnly          bool
	idempotent        bool
	fields            map[string]field
	// output lists the result fields the output schema names (schema.go).
	output fields
}

// addTool registers a tool whose arguments decode into In and whose answer
// is Out, with a one-line summary.
func addTool[In, Out any](s *sdk.Server, t *tools, spec toolSpec, call func(context.Context, Identity, *In) (*Out, string, error)) {
	in := inputSchema[In]()
	applyFields(in, spec.fields, "tool "+spec.name)
	openWorld := !spec.readOnly
	destructive := false
	tool := &sdk.Tool{
		Name: spec.name, Title: spec.title, Description: spec.desc,
		// The schemas are their JSON, encoded once here: a
		// *jsonschema.Schema encodes through a MarshalJSON per subschema,
		// each of whose output encoding/json compacts again.
		InputSchema: schemaJSON(in), OutputSchema: schemaJSON(outputSchema[Out](spec.output)),
		// The title is the tool's own; annotations.title would repeat it.
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: spec.readOnly,
			IdempotentHint: spec.idempotent, OpenWorldHint: &openWorld},
	}
	if !spec.readOnly { // destructiveHint means nothing for a read-only tool
		tool.Annotations.DestructiveHint = &destructive
	}
	// For every tools/call of the 2026-07-28 protocol the SDK encodes the
	// tool's input schema and decodes it again to find x-mcp-header
	// annotations (go-sdk v1.8.0 validateParamHeaders): the begin schema's
	// 3.5 KB, a ninth of an MCP begin+report pair's instructions
	// (docs/design.md, "What an MCP pair hands the SDK"). Ratchet's
	// schemas carry no such annotation, so the SDK holds a stand-in with
	// none either, which is all it reads the schema for after AddTool, and
	// listFull puts the whole tool back into tools/list.
	if t.listed == nil {
		t.listed = map[string]*sdk.Tool{}
	}
	t.listed[spec.name] = tool
	s.AddTool(held(tool), func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		ctx, span := startToolSpan(ctx, spec.name, req) // trace.go
		defer span.End()
		var args In
		if err := decodeArgs(req.Params.Arguments, &args); err != nil {
			toolFailed(span, err)
			return errorResult(err), nil
		}
		out, summary, err := call(context.WithValue(ctx, callKey{}, req), t.identity(req), &args)
		var ready *readyResult
		if errors.As(err, &ready) { // an answer other than the tool's result (input_required)
			return ready.res, nil
		}
		if err != nil {
			toolFailed(span, err)
			return errorResult(err), nil
		}
		js, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("encoding %s result: %w", spec.name, err)
		}
		return &sdk.CallToolResult{StructuredContent: json.RawMessage(js), Content: []sdk.Content{
			&sdk.TextContent{Text: summary}, &sdk.TextContent{Text: string(js)},
		}}, nil
	})
}

// standInSchema is the input schema the SDK holds for every tool (addTool).
var standInSchema = json.RawMessage(`{"type":"object"}`)

// held is tool as the SDK holds it, with the stand-in input schema. It
// panics (at start) for a schema with an x-mcp-header annotation, which the
// stand-in would hide from the SDK's check.
func held(tool *sdk.Tool) *sdk.Tool {
	if schema, _ := tool.InputSchema.(json.RawMessage); bytes.Contains(schema, []byte(`"x-mcp-header"`)) {
		panic(fmt.Sprintf("tool %s: an x-mcp-header annotation, which the SDK's stand-in schema would hide from its check", tool.Name))
	}
	h := *tool
	h.InputSchema = standInSchema
	return &h
}

// listFull is the server's middleware that answers tools/list with the
// tools as Ratchet describes them (t.listed) in place of the SDK's
// stand-ins, after the SDK has paginated them.
func (t *tools) listFull(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		res, err := next(ctx, method, req)
		list, ok := res.(*sdk.ListToolsResult)
		if !ok || err != nil {
			return res, err
		}
		out := *list
		out.Tools = make([]*sdk.Tool, len(list.Tools))
		for i, tool := range list.Tools {
			out.Tools[i] = cmp.Or(t.listed[tool.Name], tool)
		}
		return &out, nil
	}
}

// callKey holds a tool call's request in its handler's context.
type callKey struct{}

// readyResult is a handler's answer that is not its tool's result (an
// input_required result), passed through addTool as an error.
type readyResult struct{ res *sdk.CallToolResult }

func (*readyResult) Error() string { return "a ready result" }

// decodeArgs decodes tool arguments strictly: unknown fields and wrong types
// are invalid_argument errors naming the field.
func decodeArgs(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = json.RawMessage(`{}`)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, err := dec.Token(); err != io.EOF {
			return &ledger.Error{Code: ledger.CodeInvalidArgument, Message: "arguments must be one JSON object"}
		}
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" { // the arguments themselves
			return &ledger.Error{Code: ledger.CodeInvalidArgument, Field: "arguments",
				Message: fmt.Sprintf("arguments must be a JSON object, got a JSON %s", te.Value)}
		}
		return &ledger.Error{Code: ledger.CodeInvalidArgument, Field: te.Field,
			Message: fmt.Sprintf("%s: expected %s, got a JSON %s", te.Field, jsonKind(te.Type), te.Value)}
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return &ledger.Error{Code: ledger.CodeInvalidArgument, Field: strings.Trim(name, `"`),
			Message: "unknown argument " + name + "; see the tool's input schema"}
	}
	return &ledger.Error{Code: ledger.CodeInvalidArgument, Message: "arguments are not a valid JSON object: " + err.Error()}
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice:
		return "an array"
	case reflect.Bool:
		return "a boolean"
	}
	return t.String()
}

// toolError is the JSON of a failed call, the second text item of its
// result.
type toolError struct {
	Error struct {
		Code    ledger.Code `json:"code"`
		Message string      `json:"message"`
		Field   string      `json:"field,omitempty"`
	} `json:"error"`
}

// errorResult turns an error into a tool result an agent can act on (see
// "Errors" in the package doc). Errors the engine did not classify are
// reported without their details.
func errorResult(err error) *sdk.CallToolResult {
	var te toolError
	le := ledger.Classify(err)
	te.Error.Code, te.Error.Message, te.Error.Field = le.Code, le.Message, le.Field
	js, _ := json.Marshal(te)
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{
		&sdk.TextContent{Text: string(te.Error.Code) + ": " + te.Error.Message},
		&sdk.TextContent{Text: string(js)},
	}}
}

// ErrorOf returns the error a tool result reports, or nil if the call
// succeeded: Go clients of Ratchet (and of the bridge) read the code here
// rather than from the text. A failed result Ratchet did not shape, such as
// one from an SDK, reports CodeInternal with the result's first text.
func ErrorOf(res *sdk.CallToolResult) *ledger.Error {
	if res == nil || !res.IsError {
		return nil
	}
	first := ""
	for i, c := range res.Content {
		t, ok := c.(*sdk.TextContent)
		if !ok {
			continue
		}
		if i == 0 {
			first = t.Text
		}
		var te toolError
		if json.Unmarshal([]byte(t.Text), &te) == nil && te.Error.Code != "" {
			return &ledger.Error{Code: te.Error.Code, Message: te.Error.Message, Field: te.Error.Field}
		}
	}
	return &ledger.Error{Code: ledger.CodeInternal, Message: first}
}

func unauthorized(format string, args ...any) error {
	return &ledger.Error{Code: ledger.CodeUnauthorized, Message: fmt.Sprintf(format, args...)}
}

// agentFor returns the agent_id a call acts as: the one its token fixes, or
// the one it names, unless a credential fixes that one (Options.Reserved).
func (t *tools) agentFor(id Identity, claimed string) (string, error) {
	switch {
	case id.AgentID == "" && t.reserved[Identity{Namespace: id.Namespace, AgentID: claimed}]:
		return "", unauthorized("agent_id %q is fixed by a credential (an agent token, or the proxy's proxy.agent_id), and yours fixes no agent: "+
			"name an agent_id of your own", claimed)
	case id.AgentID == "":
		return claimed, nil
	case claimed == "" || claimed == id.AgentID:
		return id.AgentID, nil
	}
	return "", unauthorized("agent_id %q does not match the agent your credentials belong to (%q); omit agent_id or send your own", claimed, id.AgentID)
}

// reservedIn returns, for a caller whose identity fixes no agent, the
// agents a credential fixes in its namespace (Options.Reserved), whose
// attempts it may not report or resolve; else nil.
func (t *tools) reservedIn(id Identity) []string {
	if id.AgentID != "" {
		return nil
	}
	var out []string
	for r := range t.reserved {
		if r.Namespace == id.Namespace {
			out = append(out, r.AgentID)
		}
	}
	return out
}

// resolvedBy is what an agent's resolution records as its author: the
// agent_id its credentials fix or, when they fix none (a token without
// agent_id, stdio, unauthenticated loopback), the namespace, the one thing
// known of the caller ("agent:" alone said nothing).
func resolvedBy(id Identity) string {
	if id.AgentID != "" {
		return "agent:" + id.AgentID
	}
	return "agent:namespace=" + id.Namespace
}

func (t *tools) register(s *sdk.Server) {
	addTool(s, t, withLeases(beginSpec, t.leases), func(ctx context.Context, id Identity, in *ledger.BeginRequest) (*ledger.BeginResult, string, error) {
		fp := argsHash(in) // before the identity is filled in: what the caller sent
		agent, err := t.agentFor(id, in.AgentID)
		if err != nil {
			return nil, "", err
		}
		req, _ := ctx.Value(callKey{}).(*sdk.CallToolRequest)
		var prior *sealed
		// A retry after input_required (conversation.go). States are issued
		// only to 2026-07-28 clients; an older one's requestState (not a
		// field of its protocol) is ignored, as before issue 37.
		if req != nil && req.Params.RequestState != "" && statelessClient(req) {
			if prior, err = t.redeem(ctx, req.Params.RequestState, id.Namespace, agent, fp, in); err != nil {
				return nil, "", err
			}
		}
		redeemed := prior != nil
		in.Namespace, in.AgentID = id.Namespace, agent
		in.AgentClaimed = id.AgentID == "" // a label, not a principal
		in.Principal = id.Principal
		res, err := t.eng.Begin(ctx, *in)
		if le := (*ledger.Error)(nil); errors.As(err, &le) && le.Code == ledger.CodeConfirmationRequired && req != nil {
			conf, ready, cerr := t.confirmation(ctx, req, prior, id.Namespace, agent, fp, in)
			switch {
			case cerr != nil:
				return nil, "", cerr
			case ready != nil:
				return nil, "", &readyResult{ready}
			case conf != nil:
				in.Confirmation = conf
				res, err = t.eng.Begin(ctx, *in)
			}
		}
		if err != nil {
			return nil, "", err
		}
		// A redeemed retry still waiting gets today's answer, not a new
		// input request: a client retrying at once would loop.
		if t.withPage(res) && req != nil && !redeemed {
			r, again := t.askToOpen(ctx, req, res, id.Namespace, agent, fp, in)
			if r != nil {
				return nil, "", &readyResult{r}
			}
			if again {
				res = t.lookAgain(ctx, in, res)
			}
		}
		text := string(res.Decision) + ": " + res.Message
		if res.ApprovalURL != "" {
			text += " Show the user where an operator decides: " + res.ApprovalURL
		}
		if w := res.DimensionWarning; w != nil { // a limit that did not apply is said where the agent reads
			text += " Warning: " + w.Message
		}
		return res, text, nil
	})
	addTool(s, t, reportSpec, func(ctx context.Context, id Identity, in *ledger.ReportRequest) (*reported, string, error) {
		in.Namespace, in.AgentID = id.Namespace, id.AgentID // a fixed agent settles only its own attempts
		in.NotAgents = t.reservedIn(id)                     // and one that fixes none, no credential's
		in.Principal = id.Principal
		eff, err := t.eng.Report(ctx, *in)
		if err != nil {
			return nil, "", err
		}
		return &reported{EffectID: eff.EffectID, IdempotencyKey: eff.IdempotencyKey, State: eff.State, Attempt: eff.Attempt,
			Reason: eff.Reason, Result: eff.Result, VendorReference: eff.VendorReference, ResultNote: eff.ResultNote}, effectSummary(eff), nil
	})
	addTool(s, t, resolveSpec, func(ctx context.Context, id Identity, in *ledger.ResolveRequest) (*ledger.Effect, string, error) {
		in.Namespace, in.AgentID = id.Namespace, id.AgentID
		in.NotAgents = t.reservedIn(id)
		in.ResolvedBy = resolvedBy(id)
		in.Principal = id.Principal
		eff, err := t.eng.Resolve(ctx, *in)
		return eff, effectSummary(eff), err
	})
	addTool(s, t, unwindSpec, func(ctx context.Context, id Identity, in *ledger.UnwindRequest) (*ledger.UnwindResult, string, error) {
		in.Namespace, in.AgentID, in.Principal = id.Namespace, id.AgentID, id.Principal
		res, err := t.eng.Unwind(ctx, *in)
		if err != nil {
			return nil, "", err
		}
		return res, fmt.Sprintf("group %s is %s: %d compensations to perform, %d permanent, %d unresolved. %s",
			res.GroupKey, res.State, len(res.Compensations), len(res.Permanent), len(res.Unresolved), res.Message), nil
	})
	addTool(s, t, getSpec, func(ctx context.Context, id Identity, in *getInput) (*ledger.Effect, string, error) {
		if in.EffectID == "" && in.IdempotencyKey == "" {
			return nil, "", &ledger.Error{Code: ledger.CodeInvalidArgument, Field: "effect_id", Message: "effect_id or idempotency_key is required"}
		}
		eff, err := t.eng.Get(ctx, id.Namespace, in.EffectID, in.IdempotencyKey)
		return eff, effectSummary(eff), err
	})
	addTool(s, t, listSpec, func(ctx context.Context, id Identity, in *ledger.Filter) (*ledger.Page, string, error) {
		in.Namespace = id.Namespace
		page, err := t.eng.List(ctx, *in)
		if err != nil {
			return nil, "", err
		}
		summary := fmt.Sprintf("%d effects", len(page.Effects))
		if page.NextCursor != "" {
			summary += "; more with cursor " + page.NextCursor
		}
		return page, summary, nil
	})
}

// reported is a report's answer: the effect's fields its output schema
// lists (settledOutput), what an agent acts on after reporting. It sent the
// rest itself a moment ago, and ratchet_get_effect returns the whole
// record; the whole effect, about 600 bytes written twice (structured and
// as text), was 7% of an MCP begin+report pair's instructions in the
// SDK's encoding and the client's decoding (docs/design.md, "What an MCP
// pair hands the SDK").
type reported struct {
	EffectID        string          `json:"effect_id"`
	IdempotencyKey  string          `json:"idempotency_key"`
	State           ledger.State    `json:"state"`
	Attempt         int             `json:"attempt"`
	Reason          string          `json:"reason,omitempty"`
	Result          json.RawMessage `json:"result,omitempty"`
	VendorReference string          `json:"vendor_reference,omitempty"`
	ResultNote      string          `json:"result_note,omitempty"`
}

type getInput struct {
	EffectID       string `json:"effect_id,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

func effectSummary(e *ledger.Effect) string {
	if e == nil {
		return ""
	}
	s := fmt.Sprintf("effect %s (%s) is %s, attempt %d", e.EffectID, e.IdempotencyKey, e.State, e.Attempt)
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	if e.ResultNote != "" {
		s += ". " + e.ResultNote
	}
	return s
}
