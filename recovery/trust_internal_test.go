package recovery

import (
	"net/http"
	"testing"

	"github.com/ratchet-mcp/ratchet/vendors"
)

// TestAFailureAnsweredToAResendIsBelievedOnlyWhereItIsTheKeysStoredResult:
// a resend's failure frees the key only when the vendor documents it as
// the stored result of the request under that key (storedFailure cites
// each); a front-door refusal (auth, permissions, rate limit, not found),
// a 5xx, a key refusal and anything from PayPal are not.
func TestAFailureAnsweredToAResendIsBelievedOnlyWhereItIsTheKeysStoredResult(t *testing.T) {
	replayed := http.Header{"Idempotent-Replayed": {"true"}}
	for _, c := range []struct {
		vendor string
		status int
		header http.Header
		body   string
		want   bool
	}{
		{"stripe", 402, nil, `{"error":{"type":"card_error","code":"card_declined"}}`, true},
		{"stripe", 400, replayed, `{"error":{"type":"invalid_request_error","code":"parameter_invalid_integer"}}`, true},
		{"stripe", 400, nil, `{"error":{"type":"invalid_request_error","code":"resource_missing"}}`, false},
		{"stripe", 401, nil, `{"error":{"message":"Invalid API Key provided","type":"invalid_request_error"}}`, false},
		{"stripe", 403, nil, `{"error":{"type":"invalid_request_error","message":"does not have the required permissions"}}`, false},
		{"stripe", 404, nil, `{"error":{"type":"invalid_request_error","message":"Unrecognized request URL"}}`, false},
		{"stripe", 429, nil, `{"error":{"type":"invalid_request_error","code":"rate_limit"}}`, false},
		{"stripe", 400, nil, `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters"}}`, false},
		{"square", 400, nil, `{"errors":[{"category":"INVALID_REQUEST_ERROR","code":"IDEMPOTENCY_KEY_REUSED"}]}`, false},
		{"square", 402, nil, `{"errors":[{"category":"PAYMENT_METHOD_ERROR","code":"CARD_DECLINED"}]}`, false},
		{"paypal", 422, nil, `{"name":"UNPROCESSABLE_ENTITY","details":[{"issue":"PAYPAL_REQUEST_ID_PREVIOUSLY_USED"}]}`, false},
		{"paypal", 422, nil, `{"name":"UNPROCESSABLE_ENTITY","details":[{"issue":"INSTRUMENT_DECLINED"}]}`, false},
		{"adyen", 200, nil, `{"pspReference":"P1","resultCode":"Refused","refusalReason":"Refused"}`, true},
		{"adyen", 422, nil, `{"status":422,"errorCode":"101","message":"Invalid card number"}`, false},
		{"adyen", 401, nil, `{"status":401,"errorCode":"000","message":"HTTP Status Response - Unauthorized"}`, false},
		{"adyen", 503, nil, `{"status":503,"errorCode":"703","message":"required resource temporarily unavailable"}`, false},
		{"checkout", 201, nil, `{"id":"pay_1","approved":false,"status":"Declined"}`, true},
		{"checkout", 422, nil, `{"error_type":"request_invalid","error_codes":["card_number_invalid"]}`, false},
		{"checkout", 401, nil, ``, false},
	} {
		r := &vendors.Response{Status: c.status, Header: c.header, Body: []byte(c.body)}
		if r.Header == nil {
			r.Header = http.Header{}
		}
		if got := storedFailure(c.vendor, r); got != c.want {
			t.Errorf("%s %d %s: %v, want %v", c.vendor, c.status, c.body, got, c.want)
		}
	}
}
