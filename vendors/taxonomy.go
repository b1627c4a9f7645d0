package vendors

// The effect-type taxonomy. A proxied call that moves money gets a
// vendor-neutral effect type, the same an MCP agent declares for the same
// action (payment.charge, payment.refund, …), so that one rule
// (match: "payment.*") governs both. The vendor is in the begin's vendor
// and the vendor's own operation (stripe.payment_intents.create, as the
// proxy named the effect type before the taxonomy) in its operation, which
// the ledger keeps, the audit log, metrics and logs show, and rules may
// narrow by (ledger.Rule's vendor and operation). A call that moves no
// money (customers, products, webhook endpoints, checkout sessions,
// payment links, orders) keeps its operation as its effect type: outside
// payment.*, gated as before.
//
// The table below is the one reference: docs/proxy.md starts with it
// (one row per operation, with the SDK-shaped request that lands there)
// and TestEffectTypeTable classifies every row of that page and checks
// it against this map, so the page and the code cannot disagree.
//
// The types, designed from the five vendors' payment APIs (Stripe
// PaymentIntents and Charges, Square Payments and Orders, Adyen Checkout
// payments and modifications, PayPal Orders v2 and Payments v2,
// Checkout.com Payments; sources in each vendor's file):
//
//	payment.charge        a payment that sets an amount to take from a payer (create a PaymentIntent, Charge, Square or Adyen or Checkout.com payment, PayPal order)
//	payment.confirm       completes a payment whose amount was set when it was created (confirm, 3-D Secure details, PayPal authorize)
//	payment.capture       takes money a payment authorized (capture, Square complete or order pay)
//	payment.cancel        releases a payment before it is captured (cancel, void, technical cancel)
//	payment.update        changes a payment's amount or authorization (update, amount updates, incremental authorizations, reauthorize)
//	payment.refund        returns captured money to the payer (refunds; Adyen reversals, which refund once captured)
//	payment.payout        sends money to a third party or a bank account (payouts, outbound payments)
//	payment.transfer      moves money between accounts of the platform (transfers, outbound transfers)
//	payment.invoice_pay   charges an invoice (Stripe pay, Square publish, which charges a card on file)
//	payment.subscription  starts recurring charges
//
// Counting. A confirm, capture or cancel counts zero against money
// ceilings and approval thresholds (FollowUp): its payment's amount was
// counted, and approved above a threshold, when the payment was created,
// so counting it again would spend a ceiling twice and ask a human twice
// for one payment. (A payment created elsewhere, such as in the browser,
// and captured through the proxy counts nothing: gate its create too.)
// An update counts the amount it names, the payment's new total, so
// raising a payment after its create still meets the threshold.
var operationTypes = map[string]string{
	// Stripe (v1 paths; the namespace joins its resource: treasury_…)
	"stripe.payment_intents.create":                     TypeCharge,
	"stripe.charges.create":                             TypeCharge,
	"stripe.payment_intents.confirm":                    TypeConfirm,
	"stripe.payment_intents.capture":                    TypeCapture,
	"stripe.charges.capture":                            TypeCapture,
	"stripe.payment_intents.cancel":                     TypeCancel,
	"stripe.payment_intents.update":                     TypeUpdate,
	"stripe.payment_intents.increment_authorization":    TypeUpdate,
	"stripe.refunds.create":                             TypeRefund,
	"stripe.charges.refunds.create":                     TypeRefund,
	"stripe.payouts.create":                             TypePayout,
	"stripe.treasury_outbound_payments.create":          TypePayout,
	"stripe.money_management_outbound_payments.create":  TypePayout,
	"stripe.transfers.create":                           TypeTransfer,
	"stripe.treasury_outbound_transfers.create":         TypeTransfer,
	"stripe.money_management_outbound_transfers.create": TypeTransfer,
	"stripe.invoices.pay":                               TypeInvoicePay,
	"stripe.subscriptions.create":                       TypeSubscription,
	// Square
	"square.payments.create":                    TypeCharge,
	"square.payments.complete":                  TypeCapture,
	"square.orders.pay":                         TypeCapture,
	"square.payments.cancel":                    TypeCancel,
	"square.payments.cancel_by_idempotency_key": TypeCancel,
	"square.payments.update":                    TypeUpdate,
	"square.refunds.create":                     TypeRefund,
	"square.invoices.publish":                   TypeInvoicePay,
	"square.subscriptions.post":                 TypeSubscription,
	// Adyen (Checkout API)
	"adyen.payments.create":           TypeCharge,
	"adyen.payments.details":          TypeConfirm,
	"adyen.payments.capture":          TypeCapture,
	"adyen.payments.cancel":           TypeCancel,
	"adyen.payments.technical_cancel": TypeCancel,
	"adyen.cancels.create":            TypeCancel,
	"adyen.payments.amount_update":    TypeUpdate,
	"adyen.payments.refund":           TypeRefund,
	"adyen.payments.reverse":          TypeRefund,
	// PayPal
	"paypal.orders.create":                 TypeCharge,
	"paypal.orders.authorize":              TypeConfirm,
	"paypal.orders.confirm_payment_source": TypeConfirm,
	"paypal.orders.capture":                TypeCapture,
	"paypal.authorizations.capture":        TypeCapture,
	"paypal.authorizations.void":           TypeCancel,
	"paypal.authorizations.reauthorize":    TypeUpdate,
	"paypal.captures.refund":               TypeRefund,
	"paypal.payments_payouts.create":       TypePayout,
	"paypal.billing_subscriptions.create":  TypeSubscription,
	// Checkout.com
	"checkout.payments.create":        TypeCharge,
	"checkout.payments.capture":       TypeCapture,
	"checkout.payments.void":          TypeCancel,
	"checkout.payments.authorization": TypeUpdate,
	"checkout.payments.refund":        TypeRefund,
	"checkout.transfers.create":       TypeTransfer,
}

// The vendor-neutral effect types of money-moving calls.
const (
	TypeCharge       = "payment.charge"
	TypeConfirm      = "payment.confirm"
	TypeCapture      = "payment.capture"
	TypeCancel       = "payment.cancel"
	TypeUpdate       = "payment.update"
	TypeRefund       = "payment.refund"
	TypePayout       = "payment.payout"
	TypeTransfer     = "payment.transfer"
	TypeInvoicePay   = "payment.invoice_pay"
	TypeSubscription = "payment.subscription"
)

// followUp types move no money beyond what their payment's create
// declared (see "Counting" above).
var followUp = map[string]bool{TypeConfirm: true, TypeCapture: true, TypeCancel: true}

// TypeOf returns the effect type of a vendor operation: its taxonomy type
// when it moves money, else the operation itself.
func TypeOf(operation string) string {
	if t, ok := operationTypes[operation]; ok {
		return t
	}
	return operation
}

// Operations returns every money-moving operation the proxy classifies
// and its type, for the docs test and config validation.
func Operations() map[string]string {
	out := make(map[string]string, len(operationTypes))
	for op, t := range operationTypes {
		out[op] = t
	}
	return out
}

// typed completes what a vendor's classify returned: the effect type from
// the operation, and FollowUp.
func Typed(e Effect, ok bool) (Effect, bool) {
	if ok {
		e.EffectType = TypeOf(e.Operation)
		e.FollowUp = followUp[e.EffectType]
	}
	return e, ok
}
