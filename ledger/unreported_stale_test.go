package ledger_test

import (
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestAConvertedOldMapDropsAnEffectItsRecordCountsAgainstAnotherAgent:
// before 2026-12-04 an expiry did not clear an earlier attempt's mark, so
// an old ledger's map can hold an effect whose record now counts it
// against another agent (re-attempted by it after a late failed report).
// No clear ever reaches that entry (clears follow the record), so once
// converted it would count against the first agent for good: conversion
// keeps only the effects whose records count them against this agent.
func TestAConvertedOldMapDropsAnEffectItsRecordCountsAgainstAnotherAgent(t *testing.T) {
	h := newHarness(t, testRules())
	r := h.beginWant(ledger.BeginRequest{IdempotencyKey: "stale", EffectType: "task.run", AgentID: "alice", LeaseSeconds: 5}, ledger.DecisionExecute)
	first := h.clock.Now().Add(5 * time.Second)
	h.clock.Advance(10 * time.Second)
	h.reapAll()
	h.report(r.EffectID, ledger.OutcomeFailed, func(q *ledger.ReportRequest) { q.Attempt = 1 })
	h.beginWant(ledger.BeginRequest{IdempotencyKey: "stale", EffectType: "task.run", AgentID: "bob", LeaseSeconds: 5}, ledger.DecisionExecute)
	h.clock.Advance(10 * time.Second)
	h.reapAll()
	// What the old code left: alice's map still names the effect.
	h.toOldMap("alice", unreportedModel{r.EffectID: first})
	h.report(r.EffectID, ledger.OutcomeFailed, func(q *ledger.ReportRequest) { q.Attempt = 2 })
	h.operatorResolve(r.EffectID, ledger.OutcomeFailed)
	h.checkWarning("bob", unreportedModel{}, "resolved: bob")
	// Alice's next expiry converts her map.
	x := h.beginWant(ledger.BeginRequest{IdempotencyKey: "alice-next", EffectType: "task.run", AgentID: "alice", LeaseSeconds: 5}, ledger.DecisionExecute)
	at := h.clock.Now().Add(5 * time.Second)
	h.clock.Advance(10 * time.Second)
	h.reapAll()
	h.checkWarning("alice", unreportedModel{x.EffectID: at}, "converted: alice")
	h.operatorResolve(x.EffectID, ledger.OutcomeFailed)
	h.checkWarning("alice", unreportedModel{}, "all cleared: alice")
}
