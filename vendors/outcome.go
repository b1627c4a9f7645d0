package vendors

import "net/http"

// Result is what a vendor's answer says about an effect.
type Result string

// Results.
const (
	// Succeeded: the vendor did it.
	Succeeded Result = "succeeded"
	// Failed: the vendor definitely did not do it (validation, auth, rate
	// limit, decline); a new attempt with a new key is safe.
	Failed Result = "failed"
	// Unknown: it may or may not have happened (5xx, timeouts, a request
	// still in progress); retrying blindly could do it twice.
	Unknown Result = "unknown"
)

// Response is what a vendor rule sees of an answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Outcome is a classified vendor answer.
type Outcome struct {
	Result Result
	// VendorReference is the vendor's id of the object, when present.
	VendorReference string
	// Reason is a short explanation for logs and reports.
	Reason string
}

// byStatus is the rule every vendor starts from: 2xx succeeded; 408 (the
// request may not have been read whole), 409 (a conflicting request in
// progress), 5xx and anything unexpected unknown; other 4xx failed, since
// vendors answer them before acting (validation, auth, rate limits) or after
// refusing (declines).
func ByStatus(status int) Result {
	switch {
	case status >= 200 && status < 300:
		return Succeeded
	case status == http.StatusRequestTimeout, status == http.StatusConflict:
		return Unknown
	case status >= 400 && status < 500:
		return Failed
	}
	return Unknown
}

// TransportFailure is the outcome of a request that got no answer: a
// timeout or a broken connection may come after the vendor acted.
func TransportFailure(err error) Outcome {
	return Outcome{Result: Unknown, Reason: "no answer from the vendor: " + err.Error()}
}

// Recoverable is a vendor whose lost calls same-key recovery may send
// again with their key (package recovery), within its key retention.
type Recoverable interface {
	// StoredFailure reports whether a failure answered to a resend under
	// the first request's key is the vendor's stored result of that
	// request (which frees the key), rather than an answer of its front
	// door (credentials, rate limits, validation) that says nothing of
	// the first request.
	StoredFailure(r *Response) bool
	// RequestIDHeader names the header of the vendor's id of an answer.
	RequestIDHeader() string
}
