package ledger

import (
	"bytes"
	"context"
	"time"
)

// KeyKinds lists the kinds of keyLayouts.
func KeyKinds() []string {
	var ks []string
	for k := range keyLayouts {
		ks = append(ks, k)
	}
	return ks
}

// KeyLayoutError says why k fits no layout of keyLayouts ("" when it fits).
func KeyLayoutError(k []byte) string {
	if len(k) < 2 || k[1] != 0 {
		return "no kind and separator"
	}
	layouts, ok := keyLayouts[string(k[:1])]
	if !ok {
		return "unknown kind"
	}
	if layouts[0] == 0 { // a time index: kind, NUL, 8 bytes, NUL, an id
		if len(k) < 12 || k[10] != 0 {
			return "not a time index key"
		}
		return ""
	}
	parts := bytes.Count(k, []byte{0})
	for _, n := range layouts {
		if n == parts {
			return ""
		}
	}
	return "a layout's number of parts does not fit"
}

// AuditHashOf is r's hash by the documented rule.
func AuditHashOf(r AuditRecord) string {
	h, _ := r.computeHash()
	return h
}

// UseLegacyUndoKeys makes e hand out undo keys as versions before the
// derived ones did, to write a ledger as they left it.
func UseLegacyUndoKeys(e *Engine, on bool) { e.legacyUndoKeys = on }

// DeferredLeases is how many leases e's writer holds without their entries
// (leasemark.go), asked through the writer; 0 on a shared store.
func DeferredLeases(e *Engine) int {
	n, _ := submit(context.Background(), e, func(t *opTxn, _ time.Time) (int, error) {
		if t.lease == nil {
			return 0, nil
		}
		return len(t.lease.set) + len(t.lease.batch), nil
	})
	return n
}

// PendingLease decodes a stored effect record: whether it is pending, and
// its lease end.
func PendingLease(v []byte) (bool, time.Time, error) {
	var rec effectRec
	if err := decodeEffect(v, &rec); err != nil {
		return false, time.Time{}, err
	}
	if rec.State != StatePending || rec.LeaseExpiresAt == nil {
		return false, time.Time{}, nil
	}
	return true, *rec.LeaseExpiresAt, nil
}
