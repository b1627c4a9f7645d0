import { request } from 'node:http';
import { startFake } from './fakes.mjs';
import { startServe } from './serve.mjs';
function raw(url, headers, body) { return new Promise((ok, fail) => { const req = request(url, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers } }, (res) => { let t=''; res.on('data', c=>t+=c); res.on('end', ()=>ok({status: res.statusCode, h: res.headers, t})); }); req.on('error', fail); req.end(body); }); }
for (const [v, pol, path, bodies] of [
  ['increase', `  - match: "payment.*"\n    ceilings: [{name: cap, limit_micros: 200000000, window: 24h, per: global}]`, '/ach_transfers',
    ['{"account_id":"a","amount":25000.0}', '{"account_id":"a","amount":2.5e4}', '{"account_id":"a","amount":"25000"}', '{"account_id":"a","amount":-25000}']],
  ['mollie', `  - match: "payment.*"\n    ceilings: [{name: cap, limit_micros: 200000000, window: 24h, per: global}]`, '/v2/payments',
    ['{"amount":{"value":"5e2","currency":"EUR"}}', '{"amount":{"value":500,"currency":"EUR"}}', '{"amount":{"value":"500.00","currency":"eur"}}', '{"amount":{"value":" 500.00","currency":"EUR"}}', '{"amount":{"value":"500.001","currency":"EUR"}}']],
]) {
  const fake = await startFake(v);
  const serve = await startServe(v, fake.url, pol);
  let i = 0;
  for (const b of bodies) {
    const r = await raw(`${serve.proxy}/${v}${path}`, { Authorization: 'Bearer x', 'Idempotency-Key': `k${i++}` }, b);
    console.log(v, b, '->', r.status, r.h['ratchet-decision'], r.h['ratchet-budget-warning'] ?? '', r.t.slice(0, 160));
  }
  console.log('fake saw', fake.requests.length);
  await serve.stop(); await fake.close();
}
