package vendors

import (
	"math"
	"math/big"
	"testing"
)

// TestMicrosIsExactAtEveryBoundary: Micros is minor units × the rate ÷
// 10^exponent, floored, and declares no cost (false) exactly when that
// does not fit an int64, for the currencies of every exponent and the
// amounts and rates at the edges of 64 bits.
func TestMicrosIsExactAtEveryBoundary(t *testing.T) {
	amounts := []int64{0, 1, 9, 10, 999, 1000, 123456789, 1 << 31, 1<<32 + 7, 1 << 53, math.MaxInt64 / 1_000_000, math.MaxInt64/1000 + 1, math.MaxInt64 - 1, math.MaxInt64}
	rates := []int64{1, 7, 1_000_000, 1_080_000, 1 << 32, math.MaxInt64 / 3, math.MaxInt64}
	for _, cur := range []string{"JPY", "USD", "KWD"} {
		exp := big.NewInt(int64(exponent(cur)))
		for _, a := range amounts {
			for _, r := range rates {
				want := new(big.Int).Mul(big.NewInt(a), big.NewInt(r))
				want.Quo(want, new(big.Int).Exp(big.NewInt(10), exp, nil))
				got, ok := Money{Minor: a, Currency: cur}.Micros(map[string]int64{"jpy": r, "usd": r, "kwd": r})
				if ok != want.IsInt64() || (ok && got != want.Int64()) {
					t.Errorf("%d %s at %d: got %d, %v; want %s, fits %v", a, cur, r, got, ok, want, want.IsInt64())
				}
			}
		}
	}
}
