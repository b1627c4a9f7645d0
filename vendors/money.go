package vendors

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strings"
)

// Money is an amount in a currency's minor units (cents for USD, yen for
// JPY, fils for KWD), as vendors send it.
type Money struct {
	Minor    int64
	Currency string // ISO 4217, uppercase
}

// exponent is the number of minor-unit digits of a currency: ISO 4217's
// values, with Stripe's list of zero-decimal currencies
// (https://stripe.com/docs/currencies#zero-decimal, which counts MGA and
// UGX as zero-decimal) and Stripe's three-decimal currencies (BHD, JOD,
// KWD, OMR, TND). Every other currency has two.
func exponent(currency string) int {
	switch strings.ToUpper(currency) {
	case "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "UGX", "VND", "VUV", "XAF", "XOF", "XPF":
		return 0
	case "BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND":
		return 3
	}
	return 2
}

// Micros converts m to micro-USD with a table of micro-USD per major unit,
// keyed by lowercase currency code (the config's proxy.currency_micros). It
// reports false when the currency has no rate, the amount is negative, or
// the result would not fit: then no cost is declared rather than a wrong one.
func (m Money) Micros(rates map[string]int64) (int64, bool) {
	rate, ok := rates[strings.ToLower(m.Currency)]
	if !ok || rate <= 0 || m.Minor < 0 {
		return 0, false
	}
	// Minor × rate in 128 bits, then divided by 10^exponent (both are
	// non-negative, so the quotient is the floor): exact, as big.Int was,
	// without its allocations on every gated request.
	hi, lo := bits.Mul64(uint64(m.Minor), uint64(rate))
	div := uint64(pow10[exponent(m.Currency)])
	if hi >= div { // the quotient needs more than 64 bits
		return 0, false
	}
	q, _ := bits.Div64(hi, lo, div)
	if q > math.MaxInt64 {
		return 0, false
	}
	return int64(q), true
}

// pow10 are the divisors of exponent's values.
var pow10 = [...]int64{1, 10, 100, 1000}

// TooLarge reports whether m has a rate in rates but its micro-USD value
// does not fit in an int64, so Micros declares no cost for it: such an
// amount must not pass a money ceiling uncounted.
func (m Money) TooLarge(rates map[string]int64) bool {
	rate, ok := rates[strings.ToLower(m.Currency)]
	if !ok || rate <= 0 || m.Minor < 0 {
		return false
	}
	_, fits := m.Micros(rates)
	return !fits
}

// ParseDecimal reads a decimal string amount ("10.00", "1234", "0.5") as
// minor units of currency, as PayPal sends amounts. It refuses signs,
// exponents, more fraction digits than the currency has, and values that do
// not fit.
func ParseDecimal(s, currency string) (Money, error) {
	exp := exponent(currency)
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" && frac == "" || len(frac) > exp || dot && frac == "" {
		return Money{}, fmt.Errorf("amount %q is not a decimal with at most %d fraction digits", s, exp)
	}
	digits := whole + frac + strings.Repeat("0", exp-len(frac))
	for _, r := range digits {
		if r < '0' || r > '9' {
			return Money{}, fmt.Errorf("amount %q is not a plain decimal", s)
		}
	}
	v, ok := new(big.Int).SetString(digits, 10)
	if !ok || !v.IsInt64() {
		return Money{}, fmt.Errorf("amount %q is out of range", s)
	}
	return Money{Minor: v.Int64(), Currency: strings.ToUpper(currency)}, nil
}
