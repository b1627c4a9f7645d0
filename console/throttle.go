package console

import (
	"math"
	"net"
	"sync"
	"time"
)

// Sign-in attempts are limited per remote address and for all addresses
// together (token buckets): a burst, then a few a second. A successful
// sign-in gives its attempt back, so only failures use the budget up.
const (
	signInBurstPerAddr = 5
	signInRatePerAddr  = 1.0 // attempts a second, per address
	signInBurstGlobal  = 20
	signInRateGlobal   = 5.0 // attempts a second, all addresses
	// maxThrottled bounds the addresses remembered; full buckets are
	// forgotten first.
	maxThrottled = 4096
)

type bucket struct {
	tokens float64
	at     time.Time
}

// fill refills b to now and reports its tokens.
func (b *bucket) fill(now time.Time, burst, rate float64) float64 {
	if d := now.Sub(b.at).Seconds(); d > 0 {
		b.tokens = math.Min(burst, b.tokens+d*rate)
	}
	b.at = now
	return b.tokens
}

// throttle limits failed sign-ins.
type throttle struct {
	mu     sync.Mutex
	global bucket
	addrs  map[string]*bucket
}

func newThrottle(now time.Time) *throttle {
	return &throttle{global: bucket{tokens: signInBurstGlobal, at: now}, addrs: map[string]*bucket{}}
}

// addrOf is the IP of a RemoteAddr (the port changes per connection).
func addrOf(remote string) string {
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return host
	}
	return remote
}

// take spends one attempt of remote's and of the global budget; when
// either is spent it returns how long to wait instead.
func (t *throttle) take(now time.Time, remote string) (ok bool, wait time.Duration) {
	key := addrOf(remote)
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.addrs[key]
	if b == nil {
		if len(t.addrs) >= maxThrottled {
			for k, o := range t.addrs {
				if o.fill(now, signInBurstPerAddr, signInRatePerAddr) >= signInBurstPerAddr {
					delete(t.addrs, k)
				}
			}
		}
		b = &bucket{tokens: signInBurstPerAddr, at: now}
	}
	own := b.fill(now, signInBurstPerAddr, signInRatePerAddr)
	all := t.global.fill(now, signInBurstGlobal, signInRateGlobal)
	if own < 1 || all < 1 {
		wait = time.Duration(math.Max((1-own)/signInRatePerAddr, (1-all)/signInRateGlobal) * float64(time.Second))
		return false, wait
	}
	if len(t.addrs) < maxThrottled || t.addrs[key] != nil {
		t.addrs[key] = b
	}
	b.tokens--
	t.global.tokens--
	return true, 0
}

// refund gives back the attempt of a sign-in that succeeded.
func (t *throttle) refund(now time.Time, remote string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b := t.addrs[addrOf(remote)]; b != nil {
		b.fill(now, signInBurstPerAddr, signInRatePerAddr)
		b.tokens = math.Min(signInBurstPerAddr, b.tokens+1)
	}
	t.global.fill(now, signInBurstGlobal, signInRateGlobal)
	t.global.tokens = math.Min(signInBurstGlobal, t.global.tokens+1)
}
