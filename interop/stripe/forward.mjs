// stripe-node (the official SDK, pinned in package.json) through Ratchet's
// forward proxy, as an application configures it: api.stripe.com, an HTTPS
// proxy agent, and Ratchet's CA trusted (NODE_EXTRA_CA_CERTS, as
// docs/proxy.md says). One call per run, named by the
// first argument; it prints one JSON line: the HTTP status, the
// Ratchet-Decision header and the object's id.
//
//   PROXY=http://127.0.0.1:8789 NODE_EXTRA_CA_CERTS=ratchet-ca.pem node forward.mjs charge 15000 cus_1
//   ... node forward.mjs refund pi_123 8000

import { HttpsProxyAgent } from 'https-proxy-agent';
import Stripe from 'stripe';

const agent = new HttpsProxyAgent(process.env.PROXY);
const stripe = new Stripe('sk_test_123', { httpAgent: agent, maxNetworkRetries: 0 });
const [what, a, b] = process.argv.slice(2);

try {
  const obj = what === 'charge'
    ? await stripe.paymentIntents.create({ amount: Number(a), currency: 'usd', customer: b })
    : await stripe.refunds.create({ payment_intent: a, amount: Number(b) });
  console.log(JSON.stringify({ status: 200, decision: obj.lastResponse.headers['ratchet-decision'], id: obj.id }));
} catch (err) {
  console.log(JSON.stringify({ status: err.statusCode, decision: err.headers?.['ratchet-decision'], error: err.message, detail: String(err.detail?.message ?? err.detail ?? '') }));
}
