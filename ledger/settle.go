package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Settlement: the vendor's own record of an action (a signed webhook
// event, or its answer to the same request sent again with the same key)
// settles the effect the action belongs to without a human. The vendor key
// Ratchet handed out for each attempt is indexed (kindVendorKey) when the
// attempt is granted, so an event that echoes the key (Stripe's
// request.idempotency_key) finds its effect and attempt; an adapter that
// matched the event another way names the effect instead.
//
// The rules keep today's guarantee, never a second execution:
//   - an event about the current attempt settles it while its outcome is
//     open (pending, whether or not its lease ran out, or indeterminate):
//     succeeded keeps the spend (settled to the event's amount when
//     given), failed frees the key and releases the spend;
//   - an event that agrees with how the effect was already settled changes
//     nothing;
//   - an event that contradicts a settled outcome, or says an earlier
//     attempt (settled failed) succeeded, changes nothing and is flagged:
//     an effect.contradicted event for the operator, and the answer says so;
//   - the unreported-expiry mark of a lease that ran out stays (it is about
//     the agent, which did not report): an operator clears it.

// Settlement event types.
const (
	EventEffectSettled      = "effect.settled"      // a vendor's record settled an effect
	EventEffectContradicted = "effect.contradicted" // a vendor's record contradicts a settled outcome
)

// SettleRequest is a vendor's record of one action.
type SettleRequest struct {
	Namespace string
	// Vendor and VendorKey: the idempotency key the vendor echoed, which
	// Ratchet handed out for one attempt. Or EffectID (and Attempt, 0 for
	// the current one) when the adapter matched the record otherwise.
	Vendor    string
	VendorKey string
	EffectID  string
	Attempt   int
	// Outcome is succeeded or failed: a vendor's record is definite.
	Outcome          Outcome
	VendorReference  string
	ActualCostMicros *int64
	// Result is the vendor's answer, kept for duplicates as a report's
	// (the proxy's stored form); it fills in a settled effect that has none.
	Result json.RawMessage
	// Source names who settled it, e.g. "webhook:stripe" or
	// "recovery:stripe"; EventID is the vendor's id of the record.
	Source  string
	EventID string
}

// SettleResult says what a settlement did.
type SettleResult struct {
	Effect *Effect
	// Applied: this record settled the effect.
	Applied bool
	// Contradicts: the effect was settled the other way (or the record
	// says an attempt Ratchet took as failed succeeded); nothing changed.
	Contradicts bool
}

// Settle applies a vendor's record of an action (see "Settlement").
// effect_not_found means no effect has that vendor key or id: a record of
// something that did not go through Ratchet, or an effect already purged.
func (e *Engine) Settle(ctx context.Context, req SettleRequest) (*SettleResult, error) {
	var err *Error
	if req.Namespace != "" {
		if req.Namespace, err = checkNamespace(req.Namespace); err != nil {
			return nil, err
		}
	}
	if req.Outcome != OutcomeSucceeded && req.Outcome != OutcomeFailed {
		return nil, invalidArg("outcome", "%q must be succeeded or failed", truncate(string(req.Outcome), 32))
	}
	if req.EffectID == "" && (req.Vendor == "" || req.VendorKey == "") {
		return nil, invalidArg("vendor_key", "a vendor and its key, or an effect_id, is required")
	}
	for _, f := range []struct{ name, val string }{
		{"vendor", req.Vendor}, {"vendor_key", req.VendorKey}, {"effect_id", req.EffectID},
		{"vendor_reference", req.VendorReference}, {"source", req.Source}, {"event_id", req.EventID},
	} {
		if err = checkText(f.name, f.val, MaxIDLen, false); err != nil {
			return nil, err
		}
	}
	if err = checkCost("actual_cost_micros", req.ActualCostMicros); err != nil {
		return nil, err
	}
	if req.Result, err = checkJSON("result", req.Result, MaxResultBytes); err != nil {
		return nil, err
	}
	res, serr := submit(ctx, e, func(t *opTxn, now time.Time) (*SettleResult, error) { return e.settle(t, &req, now) })
	if serr != nil {
		return nil, serr
	}
	e.log.Info("settle", "source", req.Source, "event_id", req.EventID, "effect_id", res.Effect.EffectID,
		"applied", res.Applied, "contradicts", res.Contradicts)
	return res, nil
}

func (e *Engine) settle(t *opTxn, req *SettleRequest, now time.Time) (*SettleResult, error) {
	id, attempt := req.EffectID, req.Attempt
	if id == "" {
		v, err := t.Get(key(kindVendorKey, req.Vendor, req.VendorKey))
		if err != nil {
			return nil, notFound(err, req.VendorKey)
		}
		var ok bool
		if id, attempt, ok = parseVendorKeyIndex(v); !ok {
			return nil, fmt.Errorf("vendor key index of %q: unreadable value", req.VendorKey)
		}
	}
	rec, err := e.effectByID(t, req.Namespace, id)
	if err != nil {
		return nil, notFound(err, id)
	}
	if attempt == 0 {
		attempt = rec.Attempt
	}
	if err := e.expireLapsed(t, rec, now); err != nil {
		return nil, err
	}
	want := outcomeState(req.Outcome)
	res := &SettleResult{}
	switch {
	case attempt != rec.Attempt:
		// An earlier attempt: Ratchet went on only after it failed
		// definitely, so a record that it succeeded contradicts that.
		res.Contradicts = want == StateSucceeded
	case rec.State == StatePending || rec.State == StateIndeterminate:
		rec.ResolvedBy, rec.ResolutionNote = req.Source, "vendor record "+req.EventID
		o := outcome{state: want, result: req.Result, vendorRef: req.VendorReference, actual: req.ActualCostMicros}
		if _, err := e.settleOutcome(t, rec, o, "settlement", now); err != nil {
			return nil, err
		}
		res.Applied = true
		ev := effectEvent(EventEffectSettled, rec)
		ev.Actor, ev.CostMicros = req.Source, req.ActualCostMicros
		t.emit(ev)
	case rec.State == want, rec.State == StateCompensated && want == StateSucceeded:
		// Already settled that way: nothing to do, but for the answer
		// of a success settled without one.
		if err := e.fillResult(t, rec, want, req.Result, now); err != nil {
			return nil, err
		}
	default:
		res.Contradicts = true
	}
	if res.Contradicts {
		ev := effectEvent(EventEffectContradicted, rec)
		ev.Actor, ev.Attempt, ev.Reason = req.Source, attempt, "vendor record "+req.EventID+" says "+string(req.Outcome)
		t.emit(ev)
	}
	view := rec.view(now)
	res.Effect = &view
	return res, nil
}

// indexVendorKey records which effect and attempt a vendor key was handed
// out for, when the attempt is granted.
func indexVendorKey(t *opTxn, rec *effectRec, value string) error {
	return t.Set(key(kindVendorKey, rec.Vendor, value), []byte(rec.EffectID+"\x00"+strconv.Itoa(rec.Attempt)))
}

func parseVendorKeyIndex(v []byte) (id string, attempt int, ok bool) {
	i := bytes.IndexByte(v, 0)
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(string(v[i+1:]))
	return string(v[:i]), n, err == nil && n > 0
}

// vendorKeyIndexes are the index keys of every attempt's vendor key, for
// the purge.
func (e *Engine) vendorKeyIndexes(rec *effectRec) [][]byte {
	var ks [][]byte
	for _, k := range e.attemptKeys(rec) { // attempts.go
		ks = append(ks, key(kindVendorKey, rec.Vendor, k.Value))
	}
	return ks
}
