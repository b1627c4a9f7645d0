// Fake upstreams for the declared vendors, each shaped after its vendor's
// public API reference (the same pages configs/vendors/<vendor>.yaml cites):
// the endpoint the suite drives, its success answer, the vendor's own
// idempotency (a repeated key answers the first response) and its error
// shape. No real peer can be reached from CI, so these are the vendors' side.
//
// Every fake records what reached it (method, path, headers, JSON body) and
// answers the next request as told: 'ok', 500 (the vendor's own error),
// 'hang' (never answers) or 'drop' (closes the connection unanswered).

import { randomBytes, randomUUID } from 'node:crypto';
import { createServer } from 'node:http';

const id = (prefix, n = 10) => prefix + randomBytes(n).toString('base64url').slice(0, n);

/** The vendors: what a success looks like and how an error reads. */
const SHAPES = {
  // https://docs.mollie.com/reference/v2/payments-api/create-payment (201, a payment object,
  // application/hal+json) and https://docs.mollie.com/overview/handling-errors (the error body).
  mollie: {
    ok: (req, _key, pid = id('tr_')) => ({
      status: 201,
      type: 'application/hal+json',
      body: {
        resource: 'payment', id: pid, mode: 'test', createdAt: new Date().toISOString(),
        amount: req.body.amount, description: req.body.description, method: null, metadata: null,
        status: 'open', isCancelable: false, profileId: 'pfl_QkEhN94Ba', sequenceType: 'oneoff',
        redirectUrl: req.body.redirectUrl, customerId: req.body.customerId ?? null,
        _links: {
          self: { href: `https://api.mollie.com/v2/payments/${pid}`, type: 'application/hal+json' },
          checkout: { href: `https://www.mollie.com/checkout/select-method/${pid.slice(3)}`, type: 'text/html' },
        },
      },
    }),
    error: (status) => ({
      status,
      type: 'application/hal+json',
      body: { status, title: 'Internal Server Error', detail: 'Something went wrong on our side.',
        _links: { documentation: { href: 'https://docs.mollie.com/overview/handling-errors', type: 'text/html' } } },
    }),
  },
  // https://increase.com/documentation/api/ach-transfers (the ACH Transfer object) and
  // https://increase.com/documentation/errors (RFC 9457 errors with a type).
  increase: {
    ok: (req, key) => ({
      status: 200,
      type: 'application/json',
      body: {
        type: 'ach_transfer', id: id('ach_transfer_', 20), account_id: req.body.account_id, amount: req.body.amount,
        currency: 'USD', statement_descriptor: req.body.statement_descriptor,
        external_account_id: req.body.external_account_id ?? null, status: 'pending_approval',
        network: 'ach', idempotency_key: key ?? null, created_at: new Date().toISOString(),
      },
    }),
    error: (status) => ({
      status,
      type: 'application/json',
      body: { type: 'internal_server_error', status, title: 'Something went wrong on our end.', detail: null },
    }),
  },
  // https://docs.moderntreasury.com/reference/status-codes (201 created) and
  // https://docs.moderntreasury.com/reference/errors ({"errors": {code, message, parameter}}).
  moderntreasury: {
    ok: (req) => ({
      status: 201,
      type: 'application/json',
      body: {
        id: randomUUID(), object: 'payment_order', live_mode: false, type: req.body.type, amount: req.body.amount,
        direction: req.body.direction, currency: req.body.currency ?? 'USD', status: 'approved',
        originating_account_id: req.body.originating_account_id, receiving_account_id: req.body.receiving_account_id ?? null,
        created_at: new Date().toISOString(), updated_at: new Date().toISOString(),
      },
    }),
    error: (status) => ({
      status,
      type: 'application/json',
      body: { errors: { code: 'internal_server_error', message: 'Something went wrong', parameter: null } },
    }),
  },
  // https://resend.com/docs/api-reference/emails/send-email ({"id": ...}) and the
  // resend SDK's ErrorResponse ({"statusCode", "message", "name"}).
  resend: {
    ok: () => ({ status: 200, type: 'application/json', body: { id: randomUUID() } }),
    error: (status) => ({
      status,
      type: 'application/json',
      body: { statusCode: status, message: 'An unexpected error occurred.', name: 'internal_server_error' },
    }),
  },
};

/** Starts a fake of vendor on a free loopback port: {url, requests, next(mode), close()}. */
export async function startFake(vendor) {
  const shape = SHAPES[vendor];
  const requests = [];
  const modes = [];
  const byKey = new Map(); // the vendor's own idempotency: key -> the first answer
  const sockets = new Set();
  const server = createServer((req, res) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (c) => { raw += c; });
    req.on('end', () => {
      let body = null;
      try { body = raw ? JSON.parse(raw) : null; } catch { body = raw; }
      const rec = { method: req.method, path: req.url, headers: req.headers, body };
      requests.push(rec);
      const mode = modes.shift() ?? 'ok';
      if (mode === 'hang') return; // the socket is destroyed at close()
      if (mode === 'drop') return req.socket.destroy();
      const key = req.headers['idempotency-key'];
      let answer = key && byKey.get(key);
      const replayed = Boolean(answer);
      if (!answer) answer = typeof mode === 'number' ? shape.error(mode) : shape.ok(rec, key);
      if (key && !replayed && answer.status < 500) byKey.set(key, answer);
      rec.answer = answer.body;
      const headers = { 'Content-Type': answer.type };
      if (replayed) headers['Idempotent-Replayed'] = 'true'; // as Increase marks a replay
      res.writeHead(answer.status, headers);
      res.end(JSON.stringify(answer.body));
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    requests,
    /** The next request is answered so: 'ok', a status, 'hang' or 'drop'. */
    next: (mode) => modes.push(mode),
    close: () => new Promise((ok) => {
      for (const s of sockets) s.destroy();
      server.close(() => ok());
    }),
  };
}
