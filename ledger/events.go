package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	json "github.com/segmentio/encoding/json"
)

// Events. Every decision and operator action is an Event, recorded in the
// same store transaction as the change it records, so that a crash never
// loses one and never records one for a change that was not committed:
//
//   - the audit log (Options.Audit) keeps every event in a hash chain, each
//     record carrying the hash of the one before (see AuditRecord);
//   - the outbox (Options.Route) queues the events people must hear about
//     (NotifyTypes) once for each sink the route names, for a delivery
//     worker to send at least once (see OutboxEntry).
//
// Both are written by the writer after a batch's ops have run, from the
// events of the ops that succeeded, in the order the ops ran. An op emits
// its events through opTxn.emit; an op that fails emits nothing. Events
// hold ids, types, decisions, reasons, costs and actors: never payloads,
// idempotency keys, dimension values or tokens.

// Event types.
const (
	EventEffectBegun         = "effect.begun"    // a begin's decision (every decision)
	EventEffectReported      = "effect.reported" // a report settled or re-stated an effect
	EventEffectResolved      = "effect.resolved" // someone resolved an effect
	EventEffectIndeterminate = "effect.indeterminate"
	EventApprovalRequested   = "approval.requested"
	EventApprovalDecided     = "approval.decided"
	EventGroupUnwind         = "group.unwind"
	EventIntegrationWarning  = "agent.integration_warning"
	EventAuditChainStarted   = "audit.chain_started"
	EventPolicyObserved      = "policy.observed"  // what an observed rule would have answered (observe.go)
	EventBudgetThreshold     = "budget.threshold" // a ceiling crossed a configured fraction (thresholds.go)
	EventApprovalExpired     = "approval.expired" // a pending request ran out (the expiry sweep)
	// EventEffectDetermined: an indeterminate effect's outcome is known
	// again (a resolve, a late report or a vendor's record settled it);
	// Reason is how (resolve, report or settlement).
	EventEffectDetermined = "effect.determined"
	// EventApprovalPartiallyApproved: one person approved a request that
	// needs more (Approval.ApproversRequired); approval.decided follows
	// at the quorum or on a rejection.
	EventApprovalPartiallyApproved = "approval.partially_approved"
	// EventOutboxDropped: a sink's oldest dead letters were dropped at the
	// outbox's bound (outbox_bound.go); Sink and Count say whose and how many.
	EventOutboxDropped = "outbox.dropped"
)

// NotifyTypes are the event types queued in the outbox: what someone must
// act on or hear about. The others are recorded in the audit log only.
var NotifyTypes = map[string]bool{
	EventApprovalRequested:         true,
	EventApprovalDecided:           true,
	EventApprovalExpired:           true,
	EventApprovalPartiallyApproved: true,
	EventEffectIndeterminate:       true,
	EventEffectDetermined:          true,
	EventBudgetThreshold:           true,
	EventIntegrationWarning:        true,
	EventEffectContradicted:        true,
	EventHaltStarted:               true,
	EventHaltLifted:                true,
	EventOutboxDropped:             true,
}

// Event is one thing that happened in the ledger.
type Event struct {
	// ID is unique and stable: a receiver dedupes deliveries by it.
	ID         string    `json:"id"`
	Type       string    `json:"type"`
	At         time.Time `json:"at"`
	Namespace  string    `json:"namespace,omitempty"`
	EffectID   string    `json:"effect_id,omitempty"`
	EffectType string    `json:"effect_type,omitempty"`
	// Vendor and Operation are the effect's vendor and the vendor's own
	// operation (a proxied call's stripe.payment_intents.create).
	Vendor     string   `json:"vendor,omitempty"`
	Operation  string   `json:"operation,omitempty"`
	Attempt    int      `json:"attempt,omitempty"`
	AgentID    string   `json:"agent_id,omitempty"`
	RunID      string   `json:"run_id,omitempty"`
	GroupKey   string   `json:"group_key,omitempty"`
	ApprovalID string   `json:"approval_id,omitempty"`
	Decision   Decision `json:"decision,omitempty"`
	State      State    `json:"state,omitempty"`
	Reason     string   `json:"reason,omitempty"`
	// CostMicros is the cost the event is about: a begin's estimate, a
	// report's actual cost, an approval request's estimate.
	CostMicros *int64 `json:"cost_micros,omitempty"`
	// Actor is who caused it: "admin:<name>", "agent:<id>", "reaper", …
	Actor string `json:"actor,omitempty"`
	// Principal is the verified identity behind an agent's act, when its
	// credential was an OAuth (or Kubernetes service account) token:
	// "<issuer name>:<sub>". Empty for a static agent token, stdio and the
	// proxy, whose records stay as they were; set on every event the act
	// caused (a begin's begun and threshold events alike).
	Principal string `json:"principal,omitempty"`
	// Count is the agent's unreported expiries (integration warnings).
	Count int `json:"count,omitempty"`
	// Budget is the ceiling a budget.threshold event is about.
	Budget *BudgetThreshold `json:"budget,omitempty"`
	// GrantID is the grant that covered a begin, or that an operator
	// created or revoked (grants.go).
	GrantID string `json:"grant_id,omitempty"`
	// Dimensions are the keyed hashes of the effect's dimension values.
	Dimensions map[string]string `json:"dimensions,omitempty"`
	// Rule is the observed ceiling's name or the observed rule's match
	// (policy.observed).
	Rule string `json:"rule,omitempty"`
	// NotApplied names the ceilings per a dimension the begin did not
	// declare, which therefore did not apply to it (effect.begun; see
	// BeginResult.DimensionWarning).
	NotApplied []string `json:"ceilings_not_applied,omitempty"`
	// HaltID and Note: a halt's id and the operator's note (halt.go);
	// a halt's scope vendor is in Vendor.
	HaltID string `json:"halt_id,omitempty"`
	Note   string `json:"note,omitempty"`
	// Compensation is the undo an approval request's step declared,
	// without its payload: approving the step lets that undo skip the
	// threshold and ceilings up to the step's estimate, so the approver
	// is shown what it is.
	Compensation *Compensation `json:"compensation,omitempty"`
	// ApproversRequired and ApprovedBy: how many people an approval needs
	// when more than one, and who has approved it so far (approval.*).
	ApproversRequired int      `json:"approvers_required,omitempty"`
	ApprovedBy        []string `json:"approved_by,omitempty"`
	// Sink is the sink an outbox.dropped event is about; its Count is the
	// dead letters dropped.
	Sink string `json:"sink,omitempty"`
}

// withoutPayload is c for an event, which keeps no payload (nil for nil).
func (c *Compensation) withoutPayload() *Compensation {
	if c == nil {
		return nil
	}
	v := *c
	v.Payload = nil
	return &v
}

// emit records an event of this op; the writer journals it if the op
// succeeds.
func (t *opTxn) emit(ev Event) {
	if ev.Principal == "" {
		ev.Principal = t.principal
	}
	t.events = append(t.events, ev)
}

// effectEvent is an event about rec, with its labels.
func effectEvent(typ string, rec *effectRec) Event {
	return Event{Type: typ, Namespace: rec.Namespace, EffectID: rec.EffectID, EffectType: rec.EffectType,
		Vendor: rec.Vendor, Operation: rec.Operation, Attempt: rec.Attempt, AgentID: rec.owner(), RunID: rec.RunID, GroupKey: rec.GroupKey, State: rec.State,
		Reason: rec.Reason, Dimensions: rec.Dimensions}
}

// AuditRecord is one line of the audit log: an event, its place in its
// chain, and the chain's hashes. Hash is the SHA-256 (hex) of Prev, a
// newline, and the record's JSON with Hash empty; Prev is the hash of the
// record before it in the chain ("" for a chain's first). An engine on an
// exclusive store keeps one chain ("local") across restarts; on a shared
// store each replica keeps its own, named by its replica id and started
// with an audit.chain_started record, and an export holds every chain,
// each in order. Altering, inserting or removing a record breaks its
// chain at that record (VerifyAudit); removing a chain's last records is
// seen against its head (AuditHead), which an operator can keep elsewhere.
type AuditRecord struct {
	Chain string `json:"chain"`
	Seq   uint64 `json:"seq"`
	Prev  string `json:"prev"`
	Hash  string `json:"hash"`
	Event Event  `json:"event"`
}

// auditHead is the last record of a chain.
type auditHead struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
	// At is the last record's event time: a chain's times never go back,
	// so retention and an export from a time cut a chain at a point in its
	// order, never in its middle, even after the clock stepped back.
	At time.Time `json:"at,omitzero"`
}

func (r *AuditRecord) computeHash() (string, error) {
	c := *r
	c.Hash = ""
	b, _, err := appendAuditRecord(nil, &c)
	if err != nil {
		return "", err
	}
	return auditHash(r.Prev, b), nil
}

// auditHash is the hash of a record whose JSON with its hash empty is b
// and whose chain's previous hash is prev.
func auditHash(prev string, b []byte) string {
	in := make([]byte, 0, len(prev)+1+len(b))
	in = append(append(append(in, prev...), '\n'), b...)
	return hashedInput(in)
}

// hashedInput is the hash, in the hex that records and heads hold, of in:
// a record's Prev, a newline and its JSON with its hash empty.
// sha256.Sum256 keeps its digest on the stack; sha256.New's is allocated.
func hashedInput(in []byte) string {
	sum := sha256.Sum256(in)
	var hx [2 * sha256.Size]byte
	hex.Encode(hx[:], sum[:])
	return string(hx[:])
}

// auditChainName is this engine's chain.
func (e *Engine) auditChainName() string {
	if e.replica != "" {
		return e.replica
	}
	return "local"
}

// journal writes the events of a batch's successful ops: to the audit
// chain and, routed, to the outbox.
func (e *Engine) journal(tx Txn, events []Event, now time.Time) error {
	if len(events) == 0 || !e.audit && e.route == nil {
		return nil
	}
	for i := range events {
		events[i].ID, events[i].At = e.ids.next("evt_", now), now
	}
	if e.audit {
		if err := e.appendAudit(tx, events, now); err != nil {
			return err
		}
	}
	if e.route == nil {
		return nil
	}
	for i := range events {
		ev := &events[i]
		if !NotifyTypes[ev.Type] {
			continue
		}
		for _, sink := range e.route(*ev) {
			b, err := json.Marshal(&OutboxEntry{Sink: sink, Event: *ev, NextAt: ev.At})
			if err != nil {
				return fmt.Errorf("encoding outbox entry: %w", err)
			}
			if err := tx.Set(key(kindOutbox, sink, ev.ID), b); err != nil {
				return err
			}
			e.queued = true
		}
	}
	return nil
}

func (e *Engine) appendAudit(tx Txn, events []Event, now time.Time) error {
	chain := e.auditChainName()
	hk := key(kindAuditHead, chain)
	var head auditHead
	if e.cache != nil && e.cache.head != nil {
		head = *e.cache.head // as this writer last wrote it
	} else if err := getJSON(tx, hk, &head); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	if head.Seq == 0 && e.replica != "" {
		// A replica's chain starts with a record naming it, so that an
		// export shows every chain that ever started.
		start := Event{ID: e.ids.next("evt_", now), Type: EventAuditChainStarted, At: now, Actor: "replica:" + chain}
		events = append([]Event{start}, events...)
	}
	// A batch's records are one block under the seq of its first: one key
	// a batch, not one a decision (on PostgreSQL each key is a lock and a
	// row: a key a record cost the fleet a third of its throughput).
	// Each record is encoded once, its hash empty, hashed, and copied into
	// the block (the JSON array of the records) with its hash written in.
	first := head.Seq + 1
	// Room for the records at the last batch's average length, an eighth
	// more: 512 a record was too little for an effect.begun with its
	// dimensions, and the block grew, copied, once or twice a batch.
	block := make([]byte, 0, max(512, e.auditRecLen+e.auditRecLen/8)*len(events)+2)
	block = append(block, '[')
	// in is what a record's hash is of (auditHash): Prev, a newline, then
	// the record, encoded straight after them.
	in := make([]byte, 0, 576)
	for i, ev := range events {
		if ev.At.Before(head.At) {
			ev.At = head.At
		}
		r := AuditRecord{Chain: chain, Seq: head.Seq + 1, Prev: head.Hash, Event: ev}
		in = append(append(in[:0], r.Prev...), '\n')
		off := len(in)
		var at int
		var err error
		if in, at, err = appendAuditRecord(in, &r); err != nil {
			return err
		}
		h := hashedInput(in)
		if i > 0 {
			block = append(block, ',')
		}
		block = append(block, in[off:at]...)
		block = append(block, h...)
		block = append(block, in[at:]...)
		head = auditHead{Seq: r.Seq, Hash: h, At: ev.At}
	}
	block = append(block, ']')
	e.auditRecLen = len(block) / len(events)
	if err := tx.Set(auditKey(chain, first), block); err != nil {
		return err
	}
	hb, err := appendAuditHead(make([]byte, 0, 128), &head)
	if err != nil {
		return err
	}
	if e.cache != nil {
		e.cache.head = &head
	}
	return tx.Set(hk, hb)
}

// appendAuditHead appends h as json.Marshal (segmentio's, which writes a
// zero At despite omitzero) spells it (TestAuditHeadEncodingIsMarshals).
func appendAuditHead(b []byte, h *auditHead) ([]byte, error) {
	if !plainJSONString(h.Hash) {
		return nil, fmt.Errorf("encoding audit head: hash %q is not hex", h.Hash)
	}
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, h.Seq, 10)
	b = append(b, `,"hash":"`...)
	b = append(b, h.Hash...)
	b = append(b, `","at":`...)
	b, err := appendJSONTime(b, h.At)
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// auditKey is the key of a block of records: its first record's sequence
// number in 16 hex digits, so keys sort in chain order and hold no NUL.
func auditKey(chain string, seq uint64) []byte {
	var hx [16]byte
	var be [8]byte
	binary.BigEndian.PutUint64(be[:], seq)
	hex.Encode(hx[:], be[:])
	return key(kindAudit, chain, string(hx[:]))
}

// Audit calls fn for every audit record with an event at or after since
// and before until (zero: no bound), chain by chain, each in order.
func (e *Engine) Audit(ctx context.Context, since, until time.Time, fn func(AuditRecord) error) error {
	return e.view(ctx, func(r Reader) error {
		return r.Scan(prefix(kindAudit), nil, func(_, v []byte) (bool, error) {
			var block []AuditRecord
			if err := decodeJSON(v, &block); err != nil {
				return false, err
			}
			for _, rec := range block {
				if !since.IsZero() && rec.Event.At.Before(since) || !until.IsZero() && !rec.Event.At.Before(until) {
					continue
				}
				if err := fn(rec); err != nil {
					return false, err
				}
			}
			return true, nil
		})
	})
}

// AuditHeads returns each chain's last sequence number and hash, for an
// operator to keep outside the ledger and for VerifyAudit to check an
// export's ends against.
func (e *Engine) AuditHeads(ctx context.Context) (map[string]AuditHeadInfo, error) {
	heads := map[string]AuditHeadInfo{}
	err := e.view(ctx, func(r Reader) error {
		return r.Scan(prefix(kindAuditHead), nil, func(k, v []byte) (bool, error) {
			var h auditHead
			if err := decodeJSON(v, &h); err != nil {
				return false, err
			}
			heads[lastPart(k)] = AuditHeadInfo{Seq: h.Seq, Hash: h.Hash}
			return true, nil
		})
	})
	return heads, err
}

// AuditHeadInfo is a chain's last record.
type AuditHeadInfo struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
}

// AuditBreak says where a chain of audit records stops verifying.
type AuditBreak struct {
	// Line is the 1-based position of the offending record in what was
	// verified (0 when a chain's end is missing).
	Line    int
	Chain   string
	Seq     uint64
	Message string
}

func (b *AuditBreak) Error() string {
	return fmt.Sprintf("audit record %d (chain %s, seq %d): %s", b.Line, b.Chain, b.Seq, b.Message)
}

// VerifyAudit checks records as exported (each chain in order, chains
// one after another or interleaved): every record's hash, that each
// follows the one before in its chain, and, for each chain in heads, that
// the chain reaches its head. A chain may start after its first record (an
// export with since, or the audit retention): its first record's Prev is
// then taken as given. It returns the first break, or nil.
func VerifyAudit(records []AuditRecord, heads map[string]AuditHeadInfo) *AuditBreak {
	last := map[string]*AuditRecord{}
	for i := range records {
		r := &records[i]
		at := func(msg string, args ...any) *AuditBreak {
			return &AuditBreak{Line: i + 1, Chain: r.Chain, Seq: r.Seq, Message: fmt.Sprintf(msg, args...)}
		}
		h, err := r.computeHash()
		if err != nil {
			return at("%v", err)
		}
		if h != r.Hash {
			return at("its content does not match its hash: the record was altered")
		}
		if p := last[r.Chain]; p != nil {
			switch {
			case r.Seq != p.Seq+1:
				return at("follows seq %d: a record was removed or inserted before it", p.Seq)
			case r.Prev != p.Hash:
				return at("does not chain to the record before it: a record was removed, inserted or altered before it")
			}
		}
		last[r.Chain] = r
	}
	for chain, h := range heads {
		p := last[chain]
		if p == nil {
			continue // nothing of it in the range exported
		}
		if p.Seq < h.Seq {
			return &AuditBreak{Chain: chain, Seq: p.Seq, Message: "the chain ends at seq " + strconv.FormatUint(p.Seq, 10) +
				" but its head is seq " + strconv.FormatUint(h.Seq, 10) + ": its last records were removed (or the export stops early)"}
		}
		if p.Seq == h.Seq && p.Hash != h.Hash {
			return &AuditBreak{Chain: chain, Seq: p.Seq, Message: "the chain's last record does not match its head"}
		}
	}
	return nil
}

// OutboxEntry is an event waiting for delivery to one sink.
type OutboxEntry struct {
	Sink     string    `json:"sink"`
	Event    Event     `json:"event"`
	Attempts int       `json:"attempts,omitempty"`
	NextAt   time.Time `json:"next_at"`
	// ClaimedBy and ClaimedUntil: a delivery in progress (one replica of a
	// fleet delivers each entry).
	ClaimedBy    string    `json:"claimed_by,omitempty"`
	ClaimedUntil time.Time `json:"claimed_until,omitzero"`
	LastError    string    `json:"last_error,omitempty"`
	// Dead is set once delivery was given up: the entry stays, for the
	// operator to see, until retention.
	Dead bool `json:"dead,omitempty"`
}

// ClaimEvents claims up to limit outbox entries due now (not dead, not
// claimed by a live claim) for worker, for lease, and returns them. Claims
// go through the writer, so of several replicas' workers one gets each.
func (e *Engine) ClaimEvents(ctx context.Context, worker string, lease time.Duration, limit int) ([]OutboxEntry, error) {
	return e.claimOutbox(ctx, prefix(kindOutbox), worker, lease, limit)
}

// claimOutbox claims up to limit due entries under pfx (the whole outbox,
// or one sink's) for worker: found in a snapshot, then claimed through the
// writer, where each is checked again.
func (e *Engine) claimOutbox(ctx context.Context, pfx []byte, worker string, lease time.Duration, limit int) ([]OutboxEntry, error) {
	var due [][]byte
	now := e.clock.Now()
	err := e.view(ctx, func(r Reader) error {
		return r.Scan(pfx, nil, func(k, v []byte) (bool, error) {
			var en OutboxEntry
			if err := decodeJSON(v, &en); err != nil {
				return false, err
			}
			if en.claimable(now) {
				due = append(due, k)
			}
			return len(due) < limit, nil
		})
	})
	if err != nil || len(due) == 0 {
		return nil, err
	}
	claimed, err := submit(ctx, e, func(t *opTxn, now time.Time) ([]OutboxEntry, error) {
		var got []OutboxEntry
		for _, k := range due {
			var en OutboxEntry
			if err := getJSON(t, k, &en); errors.Is(err, ErrNotFound) {
				continue
			} else if err != nil {
				return nil, err
			}
			if !en.claimable(now) {
				continue
			}
			en.ClaimedBy, en.ClaimedUntil = worker, now.Add(lease)
			if err := setJSON(t, k, &en); err != nil {
				return nil, err
			}
			got = append(got, en)
		}
		return got, nil
	})
	if err != nil {
		return nil, err
	}
	return claimed, nil
}

func (en *OutboxEntry) claimable(now time.Time) bool {
	return !en.Dead && !now.Before(en.NextAt) && (en.ClaimedBy == "" || !now.Before(en.ClaimedUntil))
}

// EventDelivered removes a delivered entry.
func (e *Engine) EventDelivered(ctx context.Context, sink, eventID string) error {
	_, err := submit(ctx, e, func(t *opTxn, _ time.Time) (any, error) {
		return nil, t.Delete(key(kindOutbox, sink, eventID))
	})
	return err
}

// EventFailed records a failed delivery: the entry is tried again at next,
// or, when dead, kept for the operator and never tried again.
func (e *Engine) EventFailed(ctx context.Context, sink, eventID, reason string, next time.Time, dead bool) error {
	_, err := submit(ctx, e, func(t *opTxn, _ time.Time) (any, error) {
		k := key(kindOutbox, sink, eventID)
		var en OutboxEntry
		if err := getJSON(t, k, &en); err != nil {
			if errors.Is(err, ErrNotFound) {
				return nil, nil
			}
			return nil, err
		}
		en.Attempts++
		en.NextAt, en.Dead, en.LastError = next, dead, truncate(reason, 512)
		en.ClaimedBy, en.ClaimedUntil = "", time.Time{}
		return nil, setJSON(t, k, &en)
	})
	return err
}

// Outbox lists outbox entries (dead ones only when deadOnly), for the
// admin API and metrics.
func (e *Engine) Outbox(ctx context.Context, deadOnly bool) ([]OutboxEntry, error) {
	out := []OutboxEntry{}
	err := e.view(ctx, func(r Reader) error {
		return r.Scan(prefix(kindOutbox), nil, func(_, v []byte) (bool, error) {
			var en OutboxEntry
			if err := decodeJSON(v, &en); err != nil {
				return false, err
			}
			if !deadOnly || en.Dead {
				out = append(out, en)
			}
			return true, nil
		})
	})
	return out, err
}

// purgeJournal deletes audit records older than the audit retention (a
// chain then starts at its oldest kept record, whose Prev VerifyAudit takes
// as given) and dead outbox entries older than the effects' retention.
func (e *Engine) purgeJournal(ctx context.Context) error {
	now := e.clock.Now()
	var old [][]byte
	err := e.view(ctx, func(r Reader) error {
		if err := r.Scan(prefix(kindAudit), nil, func(k, v []byte) (bool, error) {
			var block []AuditRecord
			if err := decodeJSON(v, &block); err != nil {
				return false, err
			}
			// A block goes once its last record is past the retention:
			// records are kept at least that long, some a batch longer.
			if len(block) > 0 && block[len(block)-1].Event.At.Before(now.Add(-e.auditRetention)) {
				old = append(old, k)
			}
			return true, nil
		}); err != nil {
			return err
		}
		return r.Scan(prefix(kindOutbox), nil, func(k, v []byte) (bool, error) {
			var en OutboxEntry
			if err := decodeJSON(v, &en); err != nil {
				return false, err
			}
			if en.Dead && en.Event.At.Before(now.Add(-e.defaults.Retention)) {
				old = append(old, k)
			}
			return true, nil
		})
	})
	if err != nil {
		return err
	}
	return e.deleteKeys(ctx, old)
}
