package webhooks

import (
	"testing"
	"time"
)

// TestAPayPalTransmissionIsAcceptedWithOneBodyOnly: PayPal's signature
// covers the body by its CRC32 only, so a transmission id accepted once is
// refused with another body (the same body again is a harmless replay),
// and ids are forgotten once their signature is stale anyway.
func TestAPayPalTransmissionIsAcceptedWithOneBodyOnly(t *testing.T) {
	p := &PayPal{}
	now, tol := time.Now(), 5*time.Minute
	for range 2 {
		if !p.remember("t1", []byte("a"), now, now, tol) {
			t.Fatal("the same transmission again was refused")
		}
	}
	if p.remember("t1", []byte("b"), now, now, tol) {
		t.Fatal("the same transmission with another body was accepted")
	}
	later := now.Add(2*tol + time.Second)
	p.remember("t2", []byte("c"), later, later, tol)
	if _, kept := p.seen["t1"]; kept {
		t.Fatal("a stale transmission id was kept")
	}
}
