// The vendor definitions Ratchet ships (configs/vendors/), each driven by
// its vendor's official Node SDK through a real "ratchet serve" in reverse
// proxy mode, against a fake upstream shaped after the vendor's docs
// (fakes.mjs): a create reaches the vendor once with Ratchet's key in the
// vendor's place; the same call again is replayed; a call over a ceiling is
// refused as the SDK's own error carrying Ratchet's message, and never sent;
// after an upstream 500, a hang or a dropped connection the effect's outcome
// is unknown and the next attempt (the SDK's own retry, then the
// application's) is blocked, the vendor having seen one request. Each test
// has a serve and a fake of its own, on Badger and on PostgreSQL where it
// answers. Run with "make interop-vendors" (it builds bin/ratchet first),
// or RATCHET_BIN=... node --test vendors.test.mjs.

import assert from 'node:assert/strict';
import { request } from 'node:http';
import { describe, test } from 'node:test';

import { startFake } from './fakes.mjs';
import { SDKS } from './sdks.mjs';
import { pgReachable, startServe } from './serve.mjs';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Per vendor: a policy with a ceiling, a call under it and one over it. */
const CASES = {
  // 10.00 EUR is 10.80 USD; 500.00 EUR (540 USD) is past the 200 USD ceiling.
  mollie: {
    policies: `  - match: "payment.*"
    vendor: mollie
    ceilings:
      - {name: mollie-daily, limit_micros: 200000000, window: 24h, per: global}`,
    ceiling: 'mollie-daily', small: 10, big: 500, effectType: 'payment.charge', operation: 'mollie.payments.create',
    // 500 EUR as an exponent: Ratchet reads no amount in it; a vendor's parser might.
    unreadAmount: '{"amount": {"currency": "EUR", "value": "5e2"}, "description": "x", "redirectUrl": "https://shop.example/r"}',
  },
  // 25.00 USD (2500 cents) under a 200 USD ceiling; 250.00 USD over it.
  increase: {
    policies: `  - match: "payment.*"
    vendor: increase
    ceilings:
      - {name: increase-daily, limit_micros: 200000000, window: 24h, per: global}`,
    ceiling: 'increase-daily', small: 25, big: 250, effectType: 'payment.payout', operation: 'increase.ach_transfers.create',
    // 250 USD as a float: 25000 to many JSON parsers, and no integer to Ratchet.
    unreadAmount: '{"account_id": "account_in71c4amph0vgo2qllky", "amount": 25000.0, "statement_descriptor": "x"}',
  },
  // 25.00 USD under a 200 USD ceiling; 250.00 USD over it.
  moderntreasury: {
    policies: `  - match: "payment.*"
    vendor: moderntreasury
    ceilings:
      - {name: mt-daily, limit_micros: 200000000, window: 24h, per: global}`,
    ceiling: 'mt-daily', small: 25, big: 250, effectType: 'payment.payout', operation: 'moderntreasury.payment_orders.create',
    // 250 USD with an exponent: no integer to Ratchet.
    unreadAmount: '{"type": "ach", "direction": "credit", "currency": "USD", "amount": 2.5e4, "originating_account_id": "x"}',
  },
  // Emails cost no money: a count ceiling. The over-ceiling test sends one
  // under a ceiling of one, then another.
  resend: {
    policies: `  - match: "email.send"
    vendor: resend
    ceilings:
      - {name: emails-hourly, limit_count: 100, window: 1h, per: global}`,
    overPolicies: `  - match: "email.send"
    vendor: resend
    ceilings:
      - {name: emails-hourly, limit_count: 1, window: 1h, per: global}`,
    ceiling: 'emails-hourly', small: 0, big: 0, countCeiling: true, effectType: 'email.send', operation: 'resend.emails.send',
  },
};

// Both ledgers: Badger always, PostgreSQL where it answers (as the Go
// suites: RATCHET_TEST_PG_DSN, and RATCHET_REQUIRE_PG makes its absence a
// failure, as CI sets it).
const PG = await pgReachable();
if (!PG && process.env.RATCHET_REQUIRE_PG) throw new Error('PostgreSQL is required (RATCHET_REQUIRE_PG) and does not answer');
const BACKENDS = PG ? ['badger', 'postgres'] : ['badger'];
if (!PG) console.log('PostgreSQL does not answer (RATCHET_TEST_PG_DSN): the vendors suite runs on Badger only');

/** A fake upstream and a serve in front of it, both stopped after the test. */
async function setup(t, vendor, backend, policies = CASES[vendor].policies) {
  const fake = await startFake(vendor);
  t.after(() => fake.close());
  const serve = await startServe(vendor, fake.url, policies, backend);
  t.after(() => serve.stop());
  const sdk = SDKS[vendor];
  const client = sdk.client(serve.proxy);
  const call = (args) => sdk.call(client, args);
  return { fake, serve, call, sdk };
}

/** The one request the vendor saw, with Ratchet's key in its place and not the caller's. */
function checkStamped(fake, sdk, callerKey) {
  assert.equal(fake.requests.length, 1, 'the vendor saw one request');
  const [req] = fake.requests;
  assert.equal(req.method, 'POST');
  assert.equal(req.path, sdk.path);
  const stamped = req.headers['idempotency-key'];
  assert.match(stamped ?? '', UUID, `Ratchet's key (a UUID) in Idempotency-Key, got ${stamped}`);
  assert.notEqual(stamped, callerKey, "the caller's key is not forwarded");
  return req;
}

/** A raw request to the proxy, headers as given (an array value is sent as that many lines). */
function raw(url, headers, body) {
  return new Promise((ok, fail) => {
    const req = request(url, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => ok({ status: res.statusCode, type: res.headers['content-type'], body: JSON.parse(text) }));
    });
    req.on('error', fail);
    req.end(body);
  });
}

/** The proxy's effects in the ledger, as the admin API lists them (serve has no admin tokens: loopback). */
async function effects(serve) {
  const res = await fetch(`${serve.admin}/v1/effects?namespace=${serve.namespace}`);
  assert.equal(res.status, 200, 'listing effects');
  return (await res.json()).effects;
}

/** The one effect of the test: its vendor, type, operation and state. */
async function checkEffect(serve, vendor, c, state) {
  const list = await effects(serve);
  assert.equal(list.length, 1, `one effect in the ledger: ${JSON.stringify(list)}`);
  const [e] = list;
  assert.deepEqual({ vendor: e.vendor, effect_type: e.effect_type, operation: e.operation, state: e.state },
    { vendor, effect_type: c.effectType, operation: c.operation, state });
}

/** An SDK error that says Ratchet blocked the call. */
function checkBlocked(r, sdk, what) {
  assert.equal(r.ok, false, `${what}: refused`);
  assert.ok(r.err.sdkError, `${what}: the SDK's own error (${sdk.errorClass}), got ${JSON.stringify(r.err)}`);
  assert.equal(r.err.code, 'ratchet_blocked', `${what}: code`);
  assert.match(r.err.message, /Ratchet: blocked/, `${what}: Ratchet's message`);
}

for (const backend of BACKENDS) for (const [vendor, c] of Object.entries(CASES)) {
  const sdk = SDKS[vendor];
  const up = (t, policies) => setup(t, vendor, backend, policies);
  describe(`${vendor} (${sdk.sdk}) on ${backend}`, () => {
    test('a create reaches the vendor once, with Ratchet\'s key in the vendor\'s Idempotency-Key header', async (t) => {
      const { fake, serve, call } = await up(t);
      const r = await call({ key: 'order-1001', major: c.small });
      assert.equal(r.ok, true, `the call succeeded: ${JSON.stringify(r.err)}`);
      const req = checkStamped(fake, sdk, 'order-1001');
      assert.equal(r.id, req.answer.id, "the SDK got the vendor's object");
      assert.deepEqual(Object.fromEntries(Object.keys(sdk.amount(c.small)).map((k) => [k, req.body[k]])), sdk.amount(c.small),
        'the amount reached the vendor as sent');
      if (r.headers) assert.equal(r.headers['ratchet-decision'], 'execute');
      await checkEffect(serve, vendor, c, 'succeeded');
    });

    test('the same call again with the same key is replayed; a new key is a new call', async (t) => {
      const { fake, call } = await up(t);
      const first = await call({ key: 'order-1002', major: c.small });
      assert.equal(first.ok, true, `first call: ${JSON.stringify(first.err)}`);
      const again = await call({ key: 'order-1002', major: c.small });
      assert.equal(again.ok, true, `replay: ${JSON.stringify(again.err)}`);
      assert.equal(again.id, first.id, 'the replay is the first answer');
      if (again.headers) assert.equal(again.headers['ratchet-replayed'], 'true');
      assert.equal(fake.requests.length, 1, 'the vendor saw the call once');
      const other = await call({ key: 'order-1003', major: c.small });
      assert.equal(other.ok, true, `new key: ${JSON.stringify(other.err)}`);
      assert.notEqual(other.id, first.id);
      assert.equal(fake.requests.length, 2, 'a new key reached the vendor');
    });

    test("over the ceiling: the SDK's own error with Ratchet's message, and the vendor never sees it", async (t) => {
      const { fake, call } = await up(t, c.overPolicies ?? c.policies);
      let sent = 0;
      if (c.countCeiling) {
        const first = await call({ key: 'mail-1' });
        assert.equal(first.ok, true, `the first send fits: ${JSON.stringify(first.err)}`);
        sent = 1;
      }
      const r = await call({ key: 'order-big', major: c.big, to: 'second@resend.dev' });
      assert.equal(r.ok, false, 'refused');
      assert.ok(r.err.sdkError, `the SDK's own error (${sdk.errorClass}), got ${JSON.stringify(r.err)}`);
      assert.equal(r.err.code, 'ratchet_denied');
      assert.match(r.err.message, new RegExp(`Ratchet: denied \\(budget_exceeded\\): Ceiling "${c.ceiling}" would be exceeded`));
      assert.equal(fake.requests.length, sent, 'the vendor never saw the refused call');
    });

    for (const [mode, what] of [[500, 'an upstream 500'], ['hang', 'an upstream that never answers'], ['drop', 'a dropped connection']]) {
      test(`after ${what} the outcome is unknown and the next attempt with the same key is blocked`, async (t) => {
        const { fake, serve, call } = await up(t);
        fake.next(mode);
        const r = await call({ key: 'order-2001', major: c.small });
        assert.equal(r.ok, false, `the call did not succeed: ${JSON.stringify(r)}`);
        if (vendor === 'resend') {
          // No retries of its own: the answer is the vendor's 500 or Ratchet's unknown outcome.
          assert.equal(r.err.code, mode === 500 ? 'internal_server_error' : 'ratchet_upstream_unknown');
        } else {
          // The SDK retried the 5xx with the same key itself: Ratchet blocked that retry.
          checkBlocked(r, sdk, "the SDK's own retry");
        }
        checkStamped(fake, sdk, 'order-2001');
        const again = await call({ key: 'order-2001', major: c.small });
        checkBlocked(again, sdk, "the application's retry");
        assert.equal(fake.requests.length, 1, 'the vendor saw one request in all');
        await checkEffect(serve, vendor, c, 'indeterminate');
      });
    }

    test('an attempt while the first is still in flight is refused and never sent', async (t) => {
      const { fake, call } = await up(t);
      fake.next('hang');
      const first = call({ key: 'order-4001', major: c.small });
      while (fake.requests.length === 0) await new Promise((ok) => setTimeout(ok, 20));
      // retries: 0, or the increase SDK would retry the 409 until the first attempt's outcome is known.
      const second = await call({ key: 'order-4001', major: c.small, retries: 0 });
      assert.equal(second.ok, false, 'refused');
      assert.ok(second.err.sdkError, `the SDK's own error (${sdk.errorClass}), got ${JSON.stringify(second.err)}`);
      assert.equal(second.err.code, 'ratchet_in_flight');
      assert.match(second.err.message, /Ratchet: in_flight/);
      assert.equal(fake.requests.length, 1, 'the vendor saw the first attempt only');
      await first; // Ratchet gives up on the hung call after proxy.upstream_timeout
      assert.equal(fake.requests.length, 1, 'and nothing after it');
    });

    test('a request the vendor could read otherwise than Ratchet is refused in the vendor\'s shape and never sent', async (t) => {
      const { fake, serve } = await up(t);
      const url = `${serve.proxy}/${vendor}${sdk.path}`;
      const auth = { Authorization: 'Bearer test_dHar4XY7LxsDOtmnkVtjNVWXLSlXsM' };
      const attempts = {
        // Which key is the call's? The vendor may read the other one.
        'two Idempotency-Key headers': [{ ...auth, 'Idempotency-Key': ['order-3001', 'order-3002'] }, JSON.stringify(sdk.amount(c.small))],
        // Which amount is spent? Ratchet would count one, the vendor might charge the other.
        'a field twice in the body': [{ ...auth, 'Idempotency-Key': 'order-3003' },
          `{"amount": ${JSON.stringify(sdk.amount(c.small).amount ?? 1)}, "amount": ${JSON.stringify(sdk.amount(c.big).amount ?? 2)}, "to": ["a@example.com"]}`],
        'two Authorization headers': [{ Authorization: ['Bearer test_a', 'Bearer test_b'], 'Idempotency-Key': 'order-3004' }, JSON.stringify(sdk.amount(c.small))],
        // Would the money pass the ceiling uncounted?
        ...(c.unreadAmount && { 'an amount written as Ratchet does not read it': [{ ...auth, 'Idempotency-Key': 'order-3005' }, c.unreadAmount] }),
      };
      for (const [what, [headers, body]] of Object.entries(attempts)) {
        const r = await raw(url, headers, body);
        assert.equal(r.status, 400, `${what}: status`);
        assert.equal(r.type, sdk.refusalType, `${what}: the definition's content type`);
        assert.equal(sdk.codeOf(r.body), 'ratchet_bad_request', `${what}: the code where the vendor's errors carry it: ${JSON.stringify(r.body)}`);
      }
      assert.equal(fake.requests.length, 0, 'the vendor saw none of them');
      assert.deepEqual(await effects(serve), [], 'nothing recorded');
    });

    if (vendor !== 'resend') {
      test("without a key of the application's, the key the SDK mints makes its own retry the same call", async (t) => {
        const { fake, call } = await up(t);
        fake.next(500);
        const r = await call({ major: c.small });
        checkBlocked(r, sdk, "the SDK's own retry");
        checkStamped(fake, sdk, undefined);
      });
    }
  });
}
