package ledger

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// Code is a stable, machine-readable error code. Adapters map codes to HTTP
// statuses and MCP tool errors; the strings are part of Ratchet's interface.
type Code string

// The error codes the engine returns, every one of them: an adapter maps
// each (HTTPStatus).
const (
	CodeInvalidArgument        Code = "invalid_argument"
	CodeIdempotencyKeyConflict Code = "idempotency_key_conflict"
	CodeDimensionRequired      Code = "dimension_required"
	CodeCostRequired           Code = "cost_required"
	// CodeConfirmationRequired: a rule's confirm_with: user applies and
	// the begin carries no user confirmation (only the MCP adapter, with a
	// client that shows forms, can obtain one).
	CodeConfirmationRequired   Code = "confirmation_required"
	CodeUnauthorized           Code = "unauthorized"
	CodeEffectNotFound         Code = "effect_not_found"
	CodeApprovalNotFound       Code = "approval_not_found"
	CodeInvalidStateTransition Code = "invalid_state_transition"
	CodeUnavailable            Code = "unavailable"
	CodeGroupNotFound          Code = "group_not_found"
	CodeInternal               Code = "internal"
	// CodeGrantNotFound: no grant has the id (admin API 404).
	CodeGrantNotFound Code = "grant_not_found"
	// CodeHalted refuses an approval or a recovery claim in a halted
	// scope (HTTP 409); CodeHaltNotFound: no active halt has the id (404).
	CodeHalted       Code = "halted"
	CodeHaltNotFound Code = "halt_not_found"
)

// Error is an engine error with a stable Code, a message that tells the
// caller what to do, and, for argument errors, the offending field.
type Error struct {
	Code    Code
	Field   string
	Message string
	Err     error
}

func (e *Error) Error() string {
	msg := string(e.Code) + ": " + e.Message
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same Code and no message,
// so that errors.Is(err, ledger.ErrEffectNotFound) matches every
// effect_not_found error, whatever its message. (ErrNotFound, a store's
// missing key, is a plain error and matches only itself.)
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == ""
}

// Sentinels for errors.Is; they match any *Error with the same code.
var (
	ErrInvalidArgument        = &Error{Code: CodeInvalidArgument}
	ErrIdempotencyKeyConflict = &Error{Code: CodeIdempotencyKeyConflict}
	ErrDimensionRequired      = &Error{Code: CodeDimensionRequired}
	ErrCostRequired           = &Error{Code: CodeCostRequired}
	ErrEffectNotFound         = &Error{Code: CodeEffectNotFound}
	ErrApprovalNotFound       = &Error{Code: CodeApprovalNotFound}
	ErrInvalidStateTransition = &Error{Code: CodeInvalidStateTransition}
	ErrUnavailable            = &Error{Code: CodeUnavailable}
)

// Errors that carry no code.
var (
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("ledger: engine closed")
	// ErrSecretMismatch is returned by New when the ledger was first
	// written with a different HMAC secret: every fingerprint, dimension
	// hash and vendor key in it would stop matching, so retries would look
	// like new actions.
	ErrSecretMismatch = errors.New("ledger: this ledger was written with a different HMAC secret")
	// ErrNotFound is returned by a Store for a missing key.
	ErrNotFound = errors.New("ledger: key not found")
)

// Classify turns any error an Engine call returned into the *Error an
// adapter answers with: the engine's own errors as they are; a closed
// engine, a cancelled or timed-out call as unavailable (nothing was
// decided: call again); anything else as internal, without its details
// (they go to the log, not to callers). It is the one classifier of the
// MCP tools, the proxy and the admin API; each words its next step in its
// own vocabulary and maps the Code with HTTPStatus or to a tool error.
func Classify(err error) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: CodeUnavailable, Message: "Ratchet is shutting down or the call was cancelled; nothing was decided: call again", Err: err}
	}
	return &Error{Code: CodeInternal, Message: "internal error; nothing was decided: call again later", Err: err}
}

// HTTPStatus is the HTTP status of an error code: the one mapping the
// admin API and the proxy share.
func HTTPStatus(code Code) int {
	switch code {
	case CodeInvalidArgument, CodeDimensionRequired, CodeCostRequired, CodeConfirmationRequired:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeEffectNotFound, CodeApprovalNotFound, CodeGroupNotFound, CodeGrantNotFound, CodeHaltNotFound:
		return http.StatusNotFound
	case CodeInvalidStateTransition, CodeIdempotencyKeyConflict, CodeHalted:
		return http.StatusConflict
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// CodeOf returns the Code of err, or CodeInternal for errors the engine did
// not classify.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

func invalidArg(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalidArgument, Field: field, Message: field + ": " + fmt.Sprintf(format, args...)}
}

func newErr(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
