package recovery

import "testing"

func TestAFailureAnsweredToAResendIsBelievedOnlyWhereItMeansSo(t *testing.T) {
	for _, c := range []struct {
		vendor, body string
		want         bool
	}{
		{"stripe", `{"error":{"type":"card_error","code":"card_declined"}}`, true},
		{"stripe", `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters"}}`, false},
		{"square", `{"errors":[{"category":"INVALID_REQUEST_ERROR","code":"IDEMPOTENCY_KEY_REUSED"}]}`, false},
		{"paypal", `{"name":"UNPROCESSABLE_ENTITY","details":[{"issue":"PAYPAL_REQUEST_ID_PREVIOUSLY_USED"}]}`, false},
		{"paypal", `{"name":"UNPROCESSABLE_ENTITY","details":[{"issue":"INSTRUMENT_DECLINED"}]}`, false},
		{"adyen", `{"status":422,"errorCode":"101","message":"Invalid card number"}`, true},
	} {
		if got := trustsFailure(c.vendor, []byte(c.body)); got != c.want {
			t.Errorf("%s %s: %v, want %v", c.vendor, c.body, got, c.want)
		}
	}
}
