package paypal

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// mapStore is a vendors.WebhookStore in memory, shared like a ledger.
type mapStore struct {
	mu   sync.Mutex
	m    map[string][]byte
	fail error
}

func (s *mapStore) Get(_ context.Context, ref string) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, false, s.fail
	}
	v, ok := s.m[ref]
	return v, ok, nil
}

func (s *mapStore) Put(_ context.Context, ref string, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string][]byte{}
	}
	s.m[ref] = v
	return nil
}

// TestAPayPalTransmissionIsAcceptedWithOneBodyOnly: PayPal's signature
// covers the body by its CRC32 only, so a transmission id accepted once is
// refused with another body (the same body again is a harmless replay),
// also by a receiver that restarted or another replica (the store), and
// ids are forgotten from memory once their signature is stale anyway. A
// store that cannot answer is an error (503), never an acceptance.
func TestAPayPalTransmissionIsAcceptedWithOneBodyOnly(t *testing.T) {
	ctx := context.Background()
	store := &mapStore{}
	p := &Webhook{Store: store}
	now, tol := time.Now(), 5*time.Minute
	for range 2 {
		if ok, err := p.remember(ctx, "t1", []byte("a"), now, now, tol); !ok || err != nil {
			t.Fatal("the same transmission again was refused", err)
		}
	}
	if ok, _ := p.remember(ctx, "t1", []byte("b"), now, now, tol); ok {
		t.Fatal("the same transmission with another body was accepted")
	}
	later := now.Add(2*tol + time.Second)
	p.remember(ctx, "t2", []byte("c"), later, later, tol)
	if _, kept := p.seen["t1"]; kept {
		t.Fatal("a stale transmission id was kept in memory")
	}
	restarted := &Webhook{Store: store}
	if ok, _ := restarted.remember(ctx, "t1", []byte("b"), now, now, tol); ok {
		t.Fatal("after a restart, the same transmission with another body was accepted")
	}
	if ok, _ := restarted.remember(ctx, "t1", []byte("a"), now, now, tol); !ok {
		t.Fatal("after a restart, the same transmission again was refused")
	}
	store.fail = errors.New("ledger closed")
	if ok, err := (&Webhook{Store: store}).remember(ctx, "t3", []byte("d"), now, now, tol); ok || err == nil {
		t.Fatalf("a store that cannot answer: %v %v", ok, err)
	}
}
