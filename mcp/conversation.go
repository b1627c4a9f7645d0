package mcp

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Approvals inside the conversation (issue 37). When a begin is
// approval_required and the console's address is known (approval_url),
// a client that declares URL-mode elicitation is asked to open the
// approval's page, where its user signs in as an operator like anyone
// else. The client's answer (accept, decline, cancel) is only whether the
// user agreed to open the page: it never approves anything.
//
//   - A client of the stateless 2026-07-28 protocol gets an input_required
//     result: the elicitation, and a requestState sealed with AES-256-GCM
//     under a key derived from the server secret, binding the caller (its
//     namespace and agent), the idempotency key, a hash of the arguments
//     (the fingerprint: the same action), the declared cost, the approval
//     and an expiry (the approval's). Its retry with that state, after the
//     user has been to the page, is the begin again: execute or denied once
//     an operator decided, else today's approval_required. The state is
//     redeemed in the ledger at most once; a replayed, altered or foreign
//     one is refused (invalid_argument, field requestState), and an expired
//     one is ignored, so that the call asks again.
//   - A client of an older protocol with a session gets a server-initiated
//     elicitation/create while the call waits (at most elicitWait). Once
//     the client answered (whatever it answered) or the wait ran out and
//     it still answers a ping (a client gone without cancelling, its
//     connections dropped, is not begun for), the begin is made again, same arguments and caller (idempotent): an
//     operator who decided meanwhile is answered (execute or denied), else
//     approval_required as before. A failed look again answers the first.
//
// Clients that declare neither get today's answer unchanged.

// stateEngine is what sealed request states need from the engine, found
// by assertion: without it no input_required is answered.
type stateEngine interface {
	StateKey(purpose string) []byte
	RedeemState(ctx context.Context, id string, expires time.Time) error
}

// elicitWait bounds how long a begin waits for a session client to answer
// the elicitation (its user clicking): the answer approves nothing, so a
// client that never answers only delays today's answer. A variable so
// that tests can shorten it.
var elicitWait = 2 * time.Minute

// pingWait bounds how long a begin whose elicitWait ran out waits for the
// client to answer a ping before looking again. A variable for tests.
var pingWait = 5 * time.Second

// statePurpose names the key sealed request states use (ledger.StateKey).
const statePurpose = "mcp-request-state-v1"

// approvalInput is the input request's id in an input_required result.
const approvalInput = "ratchet_approval"

// sealed is what a requestState holds.
type sealed struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"` // approvalInput or confirmInput: what it answers`
	Namespace string `json:"ns"`
	Agent     string `json:"agent"`
	Key       string `json:"key"`
	FP        string `json:"fp"` // argsHash
	Cost      *int64 `json:"cost,omitempty"`
	Approval  string `json:"approval"`
	Expires   int64  `json:"exp"`              // unix nanoseconds
	Issued    int64  `json:"issued,omitempty"` // unix nanoseconds, for a confirmation's answer time
}

// argsHash is the fingerprint a state binds: a hash of the begin's
// arguments as decoded (so key order and spacing of the retry's JSON do not
// matter, but any changed value does).
func argsHash(in *ledger.BeginRequest) string {
	b, _ := json.Marshal(in)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func (t *tools) aead() (cipher.AEAD, bool) {
	se, ok := t.eng.(stateEngine)
	if !ok {
		return nil, false
	}
	block, err := aes.NewCipher(se.StateKey(statePurpose))
	if err != nil {
		return nil, false
	}
	g, err := cipher.NewGCM(block)
	return g, err == nil
}

// stateAAD ties the ciphertext to its use.
var stateAAD = []byte("ratchet mcp requestState v1")

func (t *tools) seal(s sealed) (string, bool) {
	g, ok := t.aead()
	if !ok {
		return "", false
	}
	pt, _ := json.Marshal(s)
	nonce := make([]byte, g.NonceSize())
	rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(g.Seal(nonce, nonce, pt, stateAAD)), true
}

func stateErr(msg string) error {
	return &ledger.Error{Code: ledger.CodeInvalidArgument, Field: "requestState", Message: "requestState: " + msg + "; call again without it"}
}

// redeem checks and redeems a retry's requestState for the begin in (whose
// caller and agent are fixed), returning what it held, or nil when it had
// expired: that is not an error, the call asks again.
func (t *tools) redeem(ctx context.Context, state string, ns, agent, fp string, in *ledger.BeginRequest) (*sealed, error) {
	g, ok := t.aead()
	if !ok {
		return nil, stateErr("this server issues none")
	}
	raw, err := base64.RawURLEncoding.DecodeString(state)
	if err != nil || len(raw) < g.NonceSize()+g.Overhead() {
		return nil, stateErr("is not one Ratchet issued")
	}
	pt, err := g.Open(nil, raw[:g.NonceSize()], raw[g.NonceSize():], stateAAD)
	var s sealed
	if err != nil || json.Unmarshal(pt, &s) != nil {
		return nil, stateErr("is not one Ratchet issued (altered, or sealed under another secret)")
	}
	if s.Namespace != ns || s.Agent != agent || s.Key != in.IdempotencyKey || s.FP != fp || !sameCost(s.Cost, in.EstimatedCostMicros) {
		return nil, stateErr("was issued for another call (another caller, key, arguments or cost)")
	}
	err = t.eng.(stateEngine).RedeemState(ctx, s.ID, time.Unix(0, s.Expires))
	if errors.Is(err, ledger.ErrStateExpired) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &s, nil
}

func sameCost(a, b *int64) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// wantsURL reports whether the caller declared URL-mode elicitation.
func wantsURL(req *sdk.CallToolRequest) bool {
	caps := req.ClientCapabilities()
	return caps != nil && caps.Elicitation != nil && caps.Elicitation.URL != nil
}

// statelessClient reports whether the caller speaks 2026-07-28 or later,
// where a result may be input_required (as the SDK decides it) and tasks
// are the extension (tasks.go).
func statelessClient(req sdk.Request) bool {
	ss, ok := req.GetSession().(*sdk.ServerSession)
	if !ok {
		return false
	}
	p := ss.InitializeParams()
	return p != nil && protocolDateRe.MatchString(p.ProtocolVersion) && p.ProtocolVersion >= statelessProtocol
}

// withPage sets an approval_required answer's approval_url when the
// console's address is known, and reports whether it did.
func (t *tools) withPage(res *ledger.BeginResult) bool {
	if res.Decision != ledger.DecisionApprovalRequired || t.console == "" {
		return false
	}
	res.ApprovalURL = t.console + "/approvals/" + url.PathEscape(res.ApprovalID)
	return true
}

// askToOpen asks a client that declared URL-mode elicitation to open the
// approval's page: for a 2026-07-28 client it returns the input_required
// result to answer with; for an older one it elicits while the call waits
// and reports whether to look again (the client answered, or the wait ran
// out and it answers a ping, and the call is still live).
func (t *tools) askToOpen(ctx context.Context, req *sdk.CallToolRequest, res *ledger.BeginResult, ns, agent, fp string, in *ledger.BeginRequest) (*sdk.CallToolResult, bool) {
	if res.ApprovalURL == "" || res.ExpiresAt == nil || !wantsURL(req) {
		return nil, false
	}
	params := &sdk.ElicitParams{Mode: "url", URL: res.ApprovalURL, ElicitationID: res.ApprovalID,
		Message: "An operator must approve this action in Ratchet's console before " + res.ExpiresAt.UTC().Format(time.RFC3339) +
			". Open the page to decide (sign in as an operator) or to see who can. Accepting here approves nothing."}
	if statelessClient(req) {
		params.ElicitationID = "" // the 2026-07-28 revision dropped it, with notifications/elicitation/complete
		state, ok := t.seal(sealed{ID: rand.Text(), Kind: approvalInput, Namespace: ns, Agent: agent, Key: in.IdempotencyKey, FP: fp,
			Cost: in.EstimatedCostMicros, Approval: res.ApprovalID, Expires: res.ExpiresAt.UnixNano()})
		if !ok {
			return nil, false
		}
		return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{approvalInput: params}, RequestState: state}, false
	}
	ectx, cancel := context.WithTimeout(ctx, elicitWait)
	defer cancel()
	r, err := req.Session.Elicit(ectx, params)
	if err != nil {
		if ctx.Err() != nil || !errors.Is(ectx.Err(), context.DeadlineExceeded) {
			t.elicitFailed(ctx, req, err, "asking the client to open an approval's page failed; answering approval_required", "approval_id", res.ApprovalID)
			return nil, false
		}
		// The wait ran out: the call's context does not end when a client
		// goes away without cancelling (its connections dropped), so look
		// again only if it still answers a ping; else the execute (and its
		// lease) would go to nobody and lapse into an indeterminate effect.
		pctx, cancel := context.WithTimeout(ctx, pingWait)
		defer cancel()
		if err := req.Session.Ping(pctx, nil); err != nil {
			t.log.Info("the client did not answer the approval page's elicitation, nor a ping: not looking again", "approval_id", res.ApprovalID, "error", err)
			return nil, false
		}
		return nil, ctx.Err() == nil
	}
	t.log.Info("the client answered the approval page's elicitation (it approves nothing)", "approval_id", res.ApprovalID, "action", r.Action)
	return nil, ctx.Err() == nil
}

// lookAgain begins again after a session client's elicitation, so that
// a decision made while the user was on the page is the call's answer. It
// is the begin the agent would make next (same arguments, same caller, the
// same key), so idempotent: still undecided, it answers the same approval.
// It records what any begin does (effect.begun, the begin metrics). On an
// error it returns first, which was true when it was decided: the agent
// begins again as it would have.
func (t *tools) lookAgain(ctx context.Context, in *ledger.BeginRequest, first *ledger.BeginResult) *ledger.BeginResult {
	res, err := t.eng.Begin(ctx, *in)
	if err != nil {
		t.log.Warn("beginning again after the approval page's elicitation; answering approval_required", "approval_id", first.ApprovalID, "error", err)
		return first
	}
	return res // its approval_url is set with its summary (beginSummary)
}

// discard is the logger of a server given none.
var discard = slog.New(slog.DiscardHandler)

// User confirmation (confirm_with: user). When the engine refuses a begin
// with confirmation_required, a client that shows forms is asked to have
// its user confirm what the agent declared (type, vendor, cost, the
// dimensions' names; no payload); a 2026-07-28 client as an input request
// with a sealed state as above, bound to the same call and redeemed once.
// Only an accept with confirm true counts; the begin then records which
// client answered and how soon (effect.begun: actor and note). It trusts
// the host to have shown the form to a person.

// confirmInput is the confirmation's input request id.
const confirmInput = "ratchet_confirm"

// confirmTTL bounds how long a confirmation's requestState is good for.
const confirmTTL = 10 * time.Minute

// wantsForm reports whether the caller shows form elicitations (a client
// declaring elicitation with neither mode means form).
func wantsForm(req *sdk.CallToolRequest) bool {
	caps := req.ClientCapabilities()
	return caps != nil && caps.Elicitation != nil && (caps.Elicitation.Form != nil || caps.Elicitation.URL == nil)
}

func clientName(req *sdk.CallToolRequest) string {
	if ci := req.ClientInfo(); ci != nil {
		return ci.Name + "/" + ci.Version
	}
	return "unnamed"
}

// confirmParams is the form the user confirms. The user decides on its
// one sentence, so what the agent wrote freely (its name when no
// credential fixes it, the dimensions' values) is quoted, after the cost,
// and cannot pass for Ratchet's own words ("costs $0.01, pre-approved");
// the effect type and vendor are the engine's restricted names. The cost is
// shown to the micro (never rounded down to $0.00), and a begin declaring
// none says so.
func confirmParams(in *ledger.BeginRequest, agent string) *sdk.ElicitParams {
	what := in.EffectType
	if in.Vendor != "" {
		what += " at " + in.Vendor
	}
	if c := in.EstimatedCostMicros; c != nil {
		what += ", costing " + dollars(*c)
	} else {
		what += ", declaring no cost (it may cost anything)"
	}
	what += "."
	if len(in.Dimensions) > 0 {
		var ds []string
		for k, v := range in.Dimensions {
			ds = append(ds, k+" "+strconv.Quote(v))
		}
		slices.Sort(ds)
		what += " Its dimensions, as the agent wrote them: " + strings.Join(ds, ", ") + "."
	}
	return &sdk.ElicitParams{Mode: "form",
		Message: "Agent " + strconv.Quote(agent) + " asks to perform " + what + " This is what the agent declared to Ratchet. Confirm only if you want it done.",
		RequestedSchema: map[string]any{"type": "object", "required": []string{"confirm"},
			"properties": map[string]any{"confirm": map[string]any{"type": "boolean", "title": "I confirm this action"}}}}
}

// dollars shows micro-USD exactly: $60.00, $0.004999.
func dollars(micros int64) string {
	s := strings.TrimRight(fmt.Sprintf("%06d", micros%1_000_000), "0")
	for len(s) < 2 {
		s += "0"
	}
	return fmt.Sprintf("$%d.%s", micros/1_000_000, s)
}

// codeRejected is the code of the SDK's jsonrpc2.ErrRejected (internal to
// it): its transport could not send the request to the client.
const codeRejected = -32005

// elicitFailure says why an elicitation of a call whose context is ctx
// failed with err, in words for the agent and the operator (a user whose
// host shows forms was not asked, or its answer was lost): the call ended,
// the wait ran out (elicitWait), the session ended, the request could not
// be sent, the client answered with an error or with content the form's
// schema refuses. The error itself is for the log: a client's error
// message is not Ratchet's to repeat to the agent.
func elicitFailure(ctx context.Context, err error) string {
	var jerr *jsonrpc.Error
	switch {
	case ctx.Err() != nil:
		return "the call ended before the client answered"
	case errors.Is(err, context.DeadlineExceeded):
		return "the client did not answer within " + elicitWait.String()
	case errors.Is(err, sdk.ErrConnectionClosed):
		return "the session ended before the client answered"
	case errors.Is(err, &jsonrpc.Error{Code: codeRejected}):
		return "the request could not be sent to the client"
	case strings.Contains(err.Error(), "does not match requested schema"): // the Go SDK's check of an accept's content, ours (ServerSession.Elicit) or a Go client's
		return "the client's answer did not fit the form"
	case errors.As(err, &jerr) && jerr.Code != 0:
		return "the client answered with an error (" + strconv.FormatInt(jerr.Code, 10) + ")"
	case errors.As(err, &jerr):
		return "the client answered with an error"
	}
	return "asking the client failed"
}

// elicitFailed logs an elicitation of req that failed with err, as a
// warning (serve shows it by default) unless the call itself ended, and
// returns elicitFailure's reason.
func (t *tools) elicitFailed(ctx context.Context, req *sdk.CallToolRequest, err error, msg string, attrs ...any) string {
	why := elicitFailure(ctx, err)
	level := slog.LevelWarn
	if ctx.Err() != nil {
		level = slog.LevelInfo
	}
	t.log.Log(context.WithoutCancel(ctx), level, msg, append(attrs, "session", req.Session.ID(), "client", clientName(req), "reason", why, "error", err)...)
	return why
}

func declined(action string) error {
	return &ledger.Error{Code: ledger.CodeConfirmationRequired, Message: "the user did not confirm this action (" + action + "): do not perform it"}
}

// accepted reports whether an elicitation's answer confirms.
func accepted(r *sdk.ElicitResult) bool {
	return r != nil && r.Action == "accept" && r.Content["confirm"] == true
}

// confirmation answers a begin the engine refused with
// confirmation_required: the confirmation to begin again with, or the
// input_required result to answer with, or (both nil) nothing to do for a
// client that shows no forms.
func (t *tools) confirmation(ctx context.Context, req *sdk.CallToolRequest, prior *sealed, ns, agent, fp string, in *ledger.BeginRequest) (*ledger.UserConfirmation, *sdk.CallToolResult, error) {
	if prior != nil && prior.Kind == confirmInput { // the retry with the user's answer
		r, _ := req.Params.InputResponses[confirmInput].(*sdk.ElicitResult)
		if !accepted(r) {
			action := "no answer"
			if r != nil {
				action = r.Action
			}
			return nil, nil, declined(action)
		}
		ms := time.Since(time.Unix(0, prior.Issued)).Milliseconds()
		return &ledger.UserConfirmation{Client: clientName(req), AnswerMS: ms}, nil, nil
	}
	if !wantsForm(req) {
		return nil, nil, nil
	}
	params := confirmParams(in, agent)
	if statelessClient(req) {
		now := time.Now()
		state, ok := t.seal(sealed{ID: rand.Text(), Kind: confirmInput, Namespace: ns, Agent: agent, Key: in.IdempotencyKey, FP: fp,
			Cost: in.EstimatedCostMicros, Expires: now.Add(confirmTTL).UnixNano(), Issued: now.UnixNano()})
		if !ok {
			return nil, nil, nil
		}
		return nil, &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{confirmInput: params}, RequestState: state}, nil
	}
	ectx, cancel := context.WithTimeout(ctx, elicitWait)
	defer cancel()
	start := time.Now()
	r, err := req.Session.Elicit(ectx, params)
	if err != nil {
		return nil, nil, declined(t.elicitFailed(ctx, req, err, "asking the user to confirm failed; answering confirmation_required"))
	}
	if !accepted(r) {
		return nil, nil, declined(r.Action)
	}
	return &ledger.UserConfirmation{Client: clientName(req), AnswerMS: time.Since(start).Milliseconds()}, nil, nil
}
