package ledger

import (
	"time"
)

// Clock tells the engine the time; tests inject one they control so leases,
// windows and expiry are tested without sleeping.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
