package proxy

import "encoding/json"

// StoredAnswer is a vendor's answer in the form the proxy keeps for
// replaying to duplicates (a report's result), for what settles proxied
// effects from elsewhere: a vendor's event (package webhooks) or the
// answer to a resend (package recovery). It is kept without an owner, so
// it is never replayed to a caller whom only an OAuth token identifies
// (see storedResponse).
func StoredAnswer(status int, contentType string, body []byte, objectID string) json.RawMessage {
	return keep(status, contentType, body, vendorRef(objectID), "")
}
