package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// What the on-call sinks (PagerDuty, Microsoft Teams, email) say about an
// event, in plain text: a title and a few lines. Each value an agent or
// operator wrote (effect types, agent and run ids, reasons, notes) passes
// through inert, which removes control characters (so that no value starts
// a line, or a mail header, of its own) and clips it. Each sink then puts
// the text where its vendor renders no markup: PagerDuty's summary, an
// Adaptive Card's TextRun (which supports no Markdown), a text/plain mail.
// The events carry ids, types, costs and actors, never payloads,
// idempotency keys or dimension values (hashes only), and nor does this.

// inert makes a value safe to show as plain text: control characters
// become spaces, a URL's "://" and a "www." are defanged ("https[:]//",
// "www[.]"), and it is clipped to maxValueRunes. Mail clients, PagerDuty
// and Teams make links of URLs in plain text: found breaking the sinks,
// an agent named "https://ratchet.example.com.evil.test/approvals/…" was
// a link beside the console's real one, to a page that could ask for an
// admin token. A bare domain ("evil.test") may still be linked by some
// mail clients; defanging every dot would garble effect types and ids.
func inert(s string) string {
	if utf8.RuneCountInString(s) > maxValueRunes {
		s = string([]rune(s)[:maxValueRunes]) + "…"
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, s)
	return wwwRe.ReplaceAllString(strings.ReplaceAll(s, "://", "[:]//"), "${1}[.]")
}

var wwwRe = regexp.MustCompile(`(?i)\b(www)\.`)

// plainLabels is the namespace, agent and run of an event.
func plainLabels(ev ledger.Event) string {
	s := "namespace " + inert(ev.Namespace)
	if ev.AgentID != "" {
		s += ", agent " + inert(ev.AgentID)
	}
	if ev.RunID != "" {
		s += ", run " + inert(ev.RunID)
	}
	return s
}

// plainWho is an actor as people read it.
func plainWho(actor string) string {
	if actor == "" {
		return "an operator"
	}
	return inert(actor)
}

// plainText is an event's title (one line) and its detail lines.
func plainText(ev ledger.Event) (title string, lines []string) {
	switch ev.Type {
	case ledger.EventApprovalRequested:
		title = fmt.Sprintf("Approval requested: %s for %s", inert(ev.EffectType), money(ev.CostMicros))
		lines = []string{plainLabels(ev), "Approval " + inert(ev.ApprovalID) + ", effect " + inert(ev.EffectID)}
		if c := ev.Compensation; c != nil {
			lines = append(lines, "Undo declared: "+inert(c.EffectType))
		} else {
			lines = append(lines, "Undo declared: none (the step is permanent)")
		}
	case ledger.EventApprovalDecided, ledger.EventApprovalExpired:
		what := "Expired"
		switch {
		case ev.Type == ledger.EventApprovalDecided && ev.State == ledger.StateRejected:
			what = "Rejected by " + plainWho(ev.Actor)
		case ev.Type == ledger.EventApprovalDecided:
			what = "Approved by " + plainWho(ev.Actor)
		}
		title = fmt.Sprintf("%s: %s for %s", what, inert(ev.EffectType), money(ev.CostMicros))
		lines = []string{plainLabels(ev), "Approval " + inert(ev.ApprovalID) + ", effect " + inert(ev.EffectID)}
	case ledger.EventEffectIndeterminate:
		title = fmt.Sprintf("Unresolved effect: %s %s is indeterminate (%s)", inert(ev.EffectType), inert(ev.EffectID), inert(ev.Reason))
		lines = []string{plainLabels(ev), fmt.Sprintf("Attempt %d. Check at the vendor and resolve it: ratchet effects resolve %s", ev.Attempt, inert(ev.EffectID))}
	case ledger.EventEffectDetermined:
		title = fmt.Sprintf("Effect settled: %s %s is %s (%s by %s)", inert(ev.EffectType), inert(ev.EffectID), inert(string(ev.State)), inert(ev.Reason), plainWho(ev.Actor))
		lines = []string{plainLabels(ev), fmt.Sprintf("Attempt %d; it was indeterminate.", ev.Attempt)}
	case ledger.EventBudgetThreshold:
		b := ev.Budget
		if b == nil {
			b = &ledger.BudgetThreshold{}
		}
		title = fmt.Sprintf("Budget threshold: ceiling %s reached %.0f%% of its limit", inert(b.Ceiling), b.Threshold*100)
		lines = []string{plainLabels(ev), fmt.Sprintf("Per %s, window %s: %d of %d %s counted.", inert(b.Per), inert(b.Window), b.Counted, b.Limit, inert(b.Unit))}
	case ledger.EventHaltStarted:
		title = fmt.Sprintf("Halted by %s (%s)", plainWho(ev.Actor), inert(haltScope(ev)))
		lines = []string{"Note: " + inert(ev.Note), "New begins in this scope are denied until: ratchet resume " + inert(ev.HaltID)}
	case ledger.EventHaltLifted:
		title = fmt.Sprintf("Halt lifted by %s (%s)", plainWho(ev.Actor), inert(haltScope(ev)))
		lines = []string{"Begins in this scope are decided again."}
	case ledger.EventIntegrationWarning:
		title = fmt.Sprintf("Integration warning: agent %s has %d effects whose leases expired without a report", inert(ev.AgentID), ev.Count)
		lines = []string{plainLabels(ev)}
	default:
		title = inert(ev.Type) + " (" + plainLabels(ev) + ")"
		if ev.Reason != "" {
			lines = append(lines, "Reason: "+inert(ev.Reason))
		}
		if ev.EffectID != "" {
			lines = append(lines, "Effect "+inert(ev.EffectID))
		}
	}
	return title, lines
}

// ConsoleLink is the console page of an event under base (the console's
// address as people reach it, notify.console_url): the approval's page
// for an approval, the effect's for an effect, else the console's first
// page (which shows a banner while anything is halted). "" when base is.
func ConsoleLink(base string, ev ledger.Event) string {
	if base == "" {
		return ""
	}
	base = strings.TrimSuffix(base, "/")
	switch {
	case ev.ApprovalID != "":
		return base + "/approvals/" + url.PathEscape(ev.ApprovalID)
	case ev.EffectID != "":
		return base + "/effects/" + url.PathEscape(ev.EffectID)
	}
	return base + "/"
}

// postError is a failed POST's error without its URL: a Workflows URL
// carries the signature that lets anyone post to the channel, and the
// error is logged and kept in the outbox.
func postError(vendor string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("posting to %s: %w", vendor, err)
}

// postJSON POSTs body to u for an on-call sink named vendor (as its
// errors name it) with its User-Agent, and says what the answer means for
// the delivery (statusError; a 400 is a request no retry can fix, as
// PagerDuty and Teams document). No error quotes u: a Workflows URL is a
// secret.
func postJSON(ctx context.Context, c *http.Client, u string, body []byte, vendor, agent string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %s URL is not a URL", ErrPermanent, vendor)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", agent)
	resp, err := clientOf(c).Do(req)
	if err != nil {
		return postError(vendor, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return statusError(vendor, resp, http.StatusBadRequest)
}

// statusError is what a non-2xx answer means for a delivery: a redirect is
// never followed (a failed delivery); a status in permanent gives up at
// once (no retry can fix the request, as the vendor documents); anything
// else is tried again.
func statusError(vendor string, resp *http.Response, permanent ...int) error {
	code := resp.StatusCode
	switch {
	case code >= 200 && code <= 299:
		return nil
	case code >= 300 && code <= 399:
		return fmt.Errorf("%s answered %d, a redirect, which is not followed: configure the final URL", vendor, code)
	}
	for _, p := range permanent {
		if code == p {
			return fmt.Errorf("%w: %s answered %d", ErrPermanent, vendor, code)
		}
	}
	return fmt.Errorf("%s answered %d", vendor, code)
}
