// Approvals inside the conversation (issue 37), the operator deciding in
// the console in Debian's Chromium while the agent's client waits: a real
// "ratchet serve" whose notify.console_url is its own admin listener, the
// TypeScript v2 client (2026-07-28) beginning a payment that needs
// approval. Its elicitation handler hands the URL it was given to Chromium,
// which opens exactly that page, signs in as an operator there and decides;
// the client's own input_required retry then gets the decision. The SDK
// 1.x (2025-11-25) is sent elicitation/create while its call waits; the
// call answers the decision made meanwhile. Run by "make console-test" beside
// console.test.mjs.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { Client as Client1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as HTTP1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { chromium } from 'playwright-core';

import { CHROMIUM, serveWith, sha256 } from './serve.mjs';

const ADMIN_TOKEN = 'conversation-admin-token-3e8b';
const AGENT_TOKEN = 'conversation-agent-token-c51d';

const dir = mkdtempSync(join(tmpdir(), 'ratchet-console-conversation-'));
let serve; // {proc, admin, mcp, stop}
let browser;
const pageErrors = [];

/** A free loopback port: the console's public address must be known before serve starts. */
const freePort = () => new Promise((ok, failed) => {
  const s = createServer().once('error', failed).listen(0, '127.0.0.1', () => {
    const { port } = s.address();
    s.close(() => ok(port));
  });
});

before(async () => {
  assert.ok(CHROMIUM, 'Chromium is required (apt-get install chromium, or set CHROMIUM)');
  const admin = `127.0.0.1:${await freePort()}`;
  const config = join(dir, 'ratchet.yaml');
  writeFileSync(config, `listen: {mcp: '127.0.0.1:0', admin: '${admin}', proxy: '127.0.0.1:0'}
data_dir: ${join(dir, 'data')}
auth:
  agents:
    - {token_sha256: "${sha256(AGENT_TOKEN)}", namespace: shop, agent_id: checkout-bot}
  admins:
    - {token_sha256: "${sha256(ADMIN_TOKEN)}", name: ops-oncall}
notify:
  console_url: http://${admin}
policies:
  - match: "payment.*"
    approval_threshold_micros: 100000000
`);
  serve = await serveWith(config);
  assert.equal(serve.admin, `http://${admin}`);
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu'] });
});

after(async () => {
  await browser?.close();
  if (serve) {
    await serve.stop();
  }
  rmSync(dir, { recursive: true, force: true });
});

/**
 * The user's host: a fresh browser (no session yet) opens the URL the
 * elicitation names, the operator signs in on that page and presses
 * action (approve or reject) with a note. Returns what the page showed.
 */
async function decideInChromium(url, action, note) {
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  page.on('pageerror', (err) => pageErrors.push(String(err)));
  try {
    await page.goto(url);
    assert.equal(page.url(), url, 'the page opened is not the one the client was given');
    await page.fill('input[name=token]', ADMIN_TOKEN);
    await page.click('form.signin button[type=submit]');
    await page.getByText('Decide', { exact: true }).waitFor({ timeout: 5000 });
    assert.equal(page.url(), url, 'signing in left the approval page');
    const facts = await page.locator('dl.facts').textContent();
    await page.fill('input.note', note);
    await page.click(`button[data-action=${action}]`);
    const state = action === 'approve' ? 'approved' : 'rejected';
    await page.locator('dl.facts .badge', { hasText: state }).waitFor({ timeout: 5000 });
    await page.locator('dl.facts dd', { hasText: 'admin:ops-oncall' }).waitFor();
    return facts;
  } finally {
    await ctx.close();
  }
}

/**
 * A v2 client (2026-07-28, URL-mode elicitation, its own input_required
 * retry) whose handler decides in Chromium; begins a charge and returns the
 * call's result and the elicitations it was asked.
 */
async function beginDecidedInChromium(key, action, note) {
  const client = new Client({ name: 'console-conversation-host', version: '1' }, {
    capabilities: { elicitation: { url: {} } },
    versionNegotiation: { mode: { pin: '2026-07-28' } },
  });
  const asked = [];
  const seen = [];
  client.setRequestHandler('elicitation/create', async (req) => {
    asked.push(req.params);
    seen.push(await decideInChromium(req.params.url, action, note));
    return { action: 'accept' };
  });
  await client.connect(new StreamableHTTPClientTransport(new URL(serve.mcp), {
    requestInit: { headers: { Authorization: `Bearer ${AGENT_TOKEN}` } },
  }));
  try {
    const res = await client.callTool({ name: 'ratchet_begin_effect', arguments: {
      idempotency_key: key, effect_type: 'payment.charge', vendor: 'stripe', run_id: 'run-c37',
      estimated_cost_micros: 150_000_000 } });
    return { res, asked, seen };
  } finally {
    await client.close();
  }
}

test("the v2 client's elicitation opens the approval's page in Chromium; the operator signs in there and approves; the client's own retry gets execute", async () => {
  const { res, asked, seen } = await beginDecidedInChromium('order-c37-1', 'approve', 'ok from the chat');
  assert.equal(res.isError ?? false, false, JSON.stringify(res.content));
  assert.equal(res.structuredContent?.decision, 'execute', JSON.stringify(res));
  assert.equal(asked.length, 1);
  assert.equal(asked[0].mode, 'url');
  assert.match(asked[0].url, new RegExp(`^${serve.admin}/approvals/apr_[0-9A-Z]+$`));
  assert.match(seen[0], /payment\.charge/);
  assert.match(seen[0], /\$150\.00/);
  assert.match(seen[0], /checkout-bot/);
});

test('the operator rejects on the page the client opened; the retry gets denied, approval_rejected', async () => {
  const { res, asked } = await beginDecidedInChromium('order-c37-2', 'reject', 'not this supplier');
  assert.equal(res.isError ?? false, false, JSON.stringify(res.content));
  assert.equal(res.structuredContent?.decision, 'denied', JSON.stringify(res));
  assert.equal(res.structuredContent.reason, 'approval_rejected');
  assert.equal(asked.length, 1);
});

test('sdk1.x 2025-11-25: the operator approves in Chromium while the call waits on its elicitation; the call answers execute', async () => {
  const client = new Client1({ name: 'console-conversation-sdk1', version: '1' }, { capabilities: { elicitation: { url: {} } } });
  const asked = [];
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    asked.push(req.params);
    await decideInChromium(req.params.url, 'approve', 'ok from the chat');
    return { action: 'accept' };
  });
  await client.connect(new HTTP1(new URL(serve.mcp), { requestInit: { headers: { Authorization: `Bearer ${AGENT_TOKEN}` } } }));
  try {
    const args = { idempotency_key: 'order-c37-3', effect_type: 'payment.charge', vendor: 'stripe', run_id: 'run-c37', estimated_cost_micros: 150_000_000 };
    const res = await client.callTool({ name: 'ratchet_begin_effect', arguments: args });
    assert.equal(res.structuredContent?.decision, 'execute', JSON.stringify(res));
    assert.equal(asked.length, 1);
    assert.equal(asked[0].mode, 'url');
    assert.match(asked[0].elicitationId, /^apr_[0-9A-Z]+$/);
    assert.equal(asked[0].url, `${serve.admin}/approvals/${asked[0].elicitationId}`);
  } finally {
    await client.close();
  }
});

test('the pages raised no error', () => {
  assert.deepEqual(pageErrors, []);
});
