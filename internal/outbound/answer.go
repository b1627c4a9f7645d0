// Package outbound holds what the proxy, webhooks and recovery share about
// calls to vendors without importing one another: the attempt a request
// carries out (in its context), the form a vendor's answer is kept in for
// replays, and the HTTP transport vendor calls go through.
package outbound

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"unicode"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// MaxAnswerBytes bounds a vendor's answer read for classification, by the
// proxy and by recovery's resends; a longer one is passed on unclassified.
const MaxAnswerBytes = 16 << 20

// StoredAnswer is a vendor's answer in the form the proxy keeps for
// replaying to duplicates (a report's result), for what settles proxied
// effects from elsewhere: a vendor's event (package webhooks) or the
// answer to a resend (package recovery). It is kept without an owner, so
// it is never replayed to a caller whom only an OAuth token identifies
// (see Stored).
func StoredAnswer(status int, contentType string, body []byte, objectID string) json.RawMessage {
	return Keep(status, contentType, body, VendorRef(objectID), "")
}

// Stored is a vendor answer kept for replay to duplicates, its
// body in base64 (a third larger) as it always was. An answer that does not fit the
// ledger's result limit once encoded is kept without its body, with its
// size and the vendor's object id; a duplicate then gets 409 naming that
// id. Owner, when only an OAuth credential said whose call it was, is
// that credential's hash: the answer is replayed to it alone.
type Stored struct {
	Status      int    `json:"status"`
	ContentType string `json:"content_type,omitempty"`
	Body        []byte `json:"body,omitempty"`
	Omitted     bool   `json:"body_omitted,omitempty"`
	Size        int    `json:"body_bytes,omitempty"`
	ObjectID    string `json:"object_id,omitempty"`
	Owner       string `json:"owner,omitempty"`
}

// Keep returns the stored form of a vendor answer, always within
// ledger.MaxResultBytes as encoded: the report of an answer the vendor
// gave must never be refused for its size.
func Keep(status int, contentType string, body []byte, objectID, owner string) []byte {
	k := Stored{Status: status, ContentType: contentType, Owner: owner}
	if base64.StdEncoding.EncodedLen(len(body)) <= ledger.MaxResultBytes {
		k.Body = body
		if b := encodeJSON(k); len(b) <= ledger.MaxResultBytes {
			return b
		}
	}
	k.Body, k.Omitted, k.Size, k.ObjectID = nil, true, len(body), objectID
	if b := encodeJSON(k); len(b) <= ledger.MaxResultBytes {
		return b
	}
	k.ContentType = "" // a header value that long is not worth keeping
	return encodeJSON(k)
}

// encodeJSON is json.Marshal without HTML escaping (which turns each <, >
// and & into six bytes), as the ledger's canonical form writes it.
func encodeJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // plain data always encodes
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// VendorRef returns the vendor's object id if the ledger accepts it as
// is; one that is not a plain id is dropped rather than altered.
func VendorRef(ref string) string {
	if ref != Printable(ref, ledger.MaxIDLen) {
		return ""
	}
	return ref
}

// Printable returns s as text the ledger accepts: valid UTF-8, control
// characters as spaces, at most max characters.
func Printable(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if r := []rune(s); len(r) > max {
		s = string(r[:max])
	}
	return s
}

// NewTransport returns the Transport vendor calls go through: net/http's default
// (proxy settings from the environment, timeouts, HTTP/2) keeping up to
// 128 idle connections per host. Nearly every request goes to one of a few
// vendor hosts, and with net/http's default of 2 idle connections per
// host most of those sent at once opened a connection of their own, with
// its TLS handshake.
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 256, 128
	return t
}
