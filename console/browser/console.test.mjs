// The operator console in a real browser: Debian's Chromium driven by
// playwright-core against a real "ratchet serve", with an agent on the
// other side speaking MCP through the TypeScript SDK. Run with
// "make console-test" (it builds bin/ratchet first), or
// RATCHET_BIN=... CHROMIUM=... node --test console.test.mjs.
// RATCHET_SCREENSHOT_DIR names where the screenshots of the approvals and
// budgets pages go ("make console-screenshots" puts them in docs/).

import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { chromium } from 'playwright-core';

import { CHROMIUM, serveWith, sha256 } from './serve.mjs';

const SHOTS = process.env.RATCHET_SCREENSHOT_DIR;

const ADMIN_TOKEN = 'console-admin-token-4f1c';
const AGENT_TOKEN = 'console-agent-token-9b2e';
const SECOND_ADMIN_TOKEN = 'console-second-admin-token-7d0a';
const XSS_KEY = '<img src=x onerror=alert(1)>';

const dir = mkdtempSync(join(tmpdir(), 'ratchet-console-'));
let serve; // {proc, admin, mcp, stop}
let browser;
let page;
let agent; // MCP client
const dialogs = [];
const pageErrors = [];

/**
 * Starts "ratchet serve" with an admin and an agent token (or, open, with
 * no tokens at all); resolves once it listens.
 */
async function startServe({ open = false } = {}) {
  const name = open ? 'open' : 'main';
  const config = join(dir, `ratchet-${name}.yaml`);
  writeFileSync(config, `listen: {mcp: '127.0.0.1:0', admin: '127.0.0.1:0', proxy: '127.0.0.1:0'}
data_dir: ${join(dir, `data-${name}`)}
${open ? '' : `auth:
  agents:
    - {token_sha256: "${sha256(AGENT_TOKEN)}", namespace: shop, agent_id: checkout-bot}
  admins:
    - {token_sha256: "${sha256(ADMIN_TOKEN)}", name: ops-oncall}
    - {token_sha256: "${sha256(SECOND_ADMIN_TOKEN)}", name: finance-lead}`}
policies:
  - match: "payment.payout"
    approval_threshold_micros: 1000000
    approvers_required: 2
  - match: "payment.*"
    approval_threshold_micros: 100000000
    require_dimensions: [counterparty]
    ceilings:
      - {name: daily-spend, limit_micros: 500000000, window: 24h, per: global}
      - {name: per-counterparty, limit_micros: 200000000, window: 24h, per: "dimension:counterparty"}
  - match: "email.*"
    ceilings:
      - {name: emails-per-run, limit_count: 20, window: 1h, per: run}
`);
  return serveWith(config);
}

/** The agent's begin, through the MCP endpoint; returns the structured answer. */
async function begin(args) {
  const res = await agent.callTool({ name: 'ratchet_begin_effect', arguments: args });
  assert.equal(res.isError ?? false, false, JSON.stringify(res.content));
  return res.structuredContent;
}

async function report(args) {
  const res = await agent.callTool({ name: 'ratchet_report_effect', arguments: args });
  assert.equal(res.isError ?? false, false, JSON.stringify(res.content));
  return res.structuredContent;
}

const charge = (key, dollars, counterparty, run) => ({
  idempotency_key: key, effect_type: 'payment.charge', vendor: 'stripe', run_id: run,
  estimated_cost_micros: dollars * 1_000_000, dimensions: { counterparty },
});

async function shot(name) {
  if (!SHOTS) return;
  mkdirSync(SHOTS, { recursive: true });
  const bottom = await page.evaluate(() => Math.ceil(document.querySelector('main').getBoundingClientRect().bottom));
  await page.screenshot({ path: join(SHOTS, name), animations: 'disabled', clip: { x: 0, y: 0, width: 1280, height: Math.min(640, bottom) } });
}

/** Screenshots of the other pages, for looking at while changing them (not in docs/). */
const peek = (name) => (process.env.RATCHET_SCREENSHOT_ALL && SHOTS ? page.screenshot({ path: join(SHOTS, name), fullPage: true }) : undefined);

/** Goes to a console page through its navigation, as an operator would. */
async function open(label) {
  await page.getByRole('link', { name: label }).first().click();
  await page.waitForSelector('main [data-loaded]');
}

before(async () => {
  assert.ok(CHROMIUM, 'Chromium is required (apt-get install chromium, or set CHROMIUM)');
  serve = await startServe();
  agent = new Client({ name: 'console-test-agent', version: '1' });
  await agent.connect(new StreamableHTTPClientTransport(new URL(serve.mcp), {
    requestInit: { headers: { Authorization: `Bearer ${AGENT_TOKEN}` } },
  }));
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu'] });
  const context = await browser.newContext({ viewport: { width: 1280, height: 640 }, deviceScaleFactor: 1 });
  page = await context.newPage();
  page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss(); });
  page.on('pageerror', (err) => pageErrors.push(String(err)));
  // A CSP violation shows here; refused requests (the tests make some) do too, and are expected.
  page.on('console', (m) => { if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) pageErrors.push(m.text()); });
});

after(async () => {
  await browser?.close();
  await agent?.close().catch(() => {});
  if (serve) {
    await serve.stop();
  }
  rmSync(dir, { recursive: true, force: true });
});

test('an agent token cannot sign in, and is answered as an unknown one', async () => {
  await page.goto(serve.admin + '/');
  await page.fill('input[name=token]', AGENT_TOKEN);
  await page.click('form.signin button[type=submit]');
  await page.getByRole('alert').filter({ hasText: 'not an admin token' }).waitFor();
  const alert = await page.getByRole('alert').textContent();
  assert.match(alert, /agent tokens cannot sign in/);
  await peek('console-signin.png');
  assert.deepEqual(await page.context().cookies(), []);
  assert.equal(await page.locator('#nav').isVisible(), false);
});

test('sign in with an admin token: a session cookie, HttpOnly, SameSite=Strict, expiring', async () => {
  const first = await page.getByRole('alert').textContent();
  await page.fill('input[name=token]', 'not-a-token');
  await page.click('form.signin button[type=submit]');
  await page.getByRole('alert').filter({ hasText: 'not an admin token' }).waitFor();
  assert.equal(await page.getByRole('alert').textContent(), first, 'an agent token and an unknown one are answered alike');
  await page.fill('input[name=token]', ADMIN_TOKEN);
  await page.click('form.signin button[type=submit]');
  await page.getByText('Signed in as').waitFor();
  assert.equal(await page.locator('.who strong').textContent(), 'ops-oncall');
  const cookies = await page.context().cookies();
  assert.equal(cookies.length, 1);
  const [c] = cookies;
  assert.equal(c.httpOnly, true);
  assert.equal(c.sameSite, 'Strict');
  assert.ok(c.expires > Date.now() / 1000 && c.expires < Date.now() / 1000 + 9 * 3600, `expires ${c.expires}`);
  assert.ok(!c.value.includes(ADMIN_TOKEN));
  assert.equal(await page.evaluate(() => document.cookie), '', 'the session cookie is not readable by script');
});

test("an agent's begin appears as a pending approval within 2 s; approving it in the page lets the next begin execute", async () => {
  await page.waitForSelector('main [data-loaded]');
  const t0 = Date.now();
  const first = await begin({ ...charge('order-1001', 150, 'acme-supplies', 'run-7f3a'), group_key: 'order-1001',
    compensation: { effect_type: 'payment.refund', vendor: 'stripe', estimated_cost_micros: 150_000_000, description: 'refund <b>order</b> 1001' } });
  assert.equal(first.decision, 'approval_required');
  const row = page.locator('table.approvals tbody tr', { hasText: 'payment.charge' }).filter({ hasText: 'run-7f3a' });
  await row.waitFor({ timeout: 2000 });
  const seen = Date.now() - t0;
  assert.ok(seen < 2000, `shown after ${seen} ms`);
  const cells = await row.locator('td').allTextContents();
  assert.equal(cells[1], 'checkout-bot');
  assert.equal(cells[3], '$150.00');
  assert.equal(cells[4], '$100.00');

  // Two more waiting, for the screenshot.
  assert.equal((await begin(charge('order-1002', 120, 'globex', 'run-81c2'))).decision, 'approval_required');
  assert.equal((await begin({ ...charge('refund-77', 180, 'initech', 'run-9d01'), effect_type: 'payment.refund' })).decision, 'approval_required');
  await page.locator('table.approvals tbody tr').nth(2).waitFor({ timeout: 2000 });
  await shot('console-approvals.png');

  // The deep link a notification points at.
  await page.goto(`${serve.admin}/approvals/${first.approval_id}`);
  await page.getByText('Decide', { exact: true }).waitFor();
  // The approver sees the undo approving it allows, the agent's words as text.
  assert.equal(await page.locator('dl.facts dd .undo').textContent(), 'payment.refund at stripe for $150.00: refund <b>order</b> 1001');
  await page.fill('input.note', 'ok: Q4 restock');
  await page.click('button[data-action=approve]');
  await page.locator('dl.facts .badge', { hasText: 'approved' }).waitFor({ timeout: 3000 });
  await page.locator('dl.facts dd', { hasText: 'ok: Q4 restock' }).waitFor();
  await page.locator('dl.facts dd', { hasText: 'admin:ops-oncall' }).waitFor();
  await peek('console-approval.png');

  const again = await begin({ ...charge('order-1001', 150, 'acme-supplies', 'run-7f3a'), group_key: 'order-1001',
    compensation: { effect_type: 'payment.refund', vendor: 'stripe', estimated_cost_micros: 150_000_000, description: 'refund <b>order</b> 1001' } });
  assert.equal(again.decision, 'execute');
  await report({ effect_id: again.effect_id, outcome: 'succeeded', actual_cost_micros: 150_000_000, vendor_reference: 'ch_3Pq' });
});

test('an unknown outcome, its key escaped, resolved in the page: the next begin is a duplicate', async () => {
  const ex = await begin({ idempotency_key: XSS_KEY, effect_type: 'email.send', vendor: 'sendgrid', run_id: 'run-7f3a' });
  assert.equal(ex.decision, 'execute');
  await report({ effect_id: ex.effect_id, outcome: 'unknown', error: '<b>502</b> from upstream' });
  assert.equal((await begin({ idempotency_key: XSS_KEY, effect_type: 'email.send', vendor: 'sendgrid', run_id: 'run-7f3a' })).decision, 'blocked');

  await page.goto(serve.admin + '/approvals');
  await open('Needs attention');
  const row = page.locator('table.attention tbody tr').first();
  await row.waitFor({ timeout: 2000 });
  assert.equal(await row.locator('td.key a').textContent(), XSS_KEY);
  assert.equal(await row.locator('td.err').textContent(), '<b>502</b> from upstream');
  assert.equal(await page.locator('main img, main b').count(), 0, 'what an agent wrote became markup');
  assert.match(await row.textContent(), /reported unknown/);
  assert.deepEqual(dialogs, []);
  await peek('console-attention.png');

  // Resolving asks first, in the page, naming the consequence; Cancel
  // changes nothing.
  await row.locator('button[data-action=failed]').click();
  assert.match(await row.locator('.confirm').textContent(), /frees the idempotency key.*second charge/);
  await row.locator('button[data-action=cancel]').click();
  assert.equal(await row.locator('.confirm').isHidden(), true);
  assert.equal((await begin({ idempotency_key: XSS_KEY, effect_type: 'email.send', vendor: 'sendgrid', run_id: 'run-7f3a' })).decision, 'blocked');
  await row.locator('input.note').fill('delivered: seen in the SendGrid activity feed');
  await row.locator('button[data-action=succeeded]').click();
  assert.match(await row.locator('.confirm').textContent(), /never executes/);
  await row.locator('button[data-action=confirm-succeeded]').click();
  await page.getByText('Nothing needs attention.').waitFor({ timeout: 3000 });
  const dup = await begin({ idempotency_key: XSS_KEY, effect_type: 'email.send', vendor: 'sendgrid', run_id: 'run-7f3a' });
  assert.equal(dup.decision, 'duplicate');

  // The effect's page: its history, who decided, the key still text.
  await page.goto(`${serve.admin}/effects/${ex.effect_id}`);
  await page.locator('table.history tbody tr').nth(2).waitFor({ timeout: 3000 });
  assert.equal(await page.locator('dl.facts .key').textContent(), XSS_KEY);
  await page.locator('dl.facts dd', { hasText: 'admin:ops-oncall' }).waitFor();
  // The vendor key of the attempt, to search the vendor by: the one the
  // agent was handed.
  assert.equal(await page.locator('dl.facts code.vkey').textContent(), ex.vendor_idempotency_key.value);
  const events = await page.locator('table.history tbody tr td:nth-child(2)').allTextContents();
  assert.ok(events.includes('effect.begun') && events.includes('effect.resolved'), events.join(','));
  await peek('console-effect.png');

  // Found by its key in the effects search.
  await page.goto(`${serve.admin}/effects?key=${encodeURIComponent(XSS_KEY)}`);
  await page.locator('table.effects tbody tr').first().waitFor({ timeout: 3000 });
  assert.equal(await page.locator('table.effects td.key a').first().textContent(), XSS_KEY);
  assert.equal(await page.locator('main img').count(), 0);
  assert.deepEqual(dialogs, []);
  await peek('console-effects.png');
});

test('the budgets page shows the counted amount', async () => {
  await page.goto(serve.admin + '/approvals');
  await open('Budgets');
  const daily = page.locator('section.budget', { hasText: 'daily-spend' });
  await daily.waitFor({ timeout: 3000 });
  assert.equal(await daily.locator('.counted').textContent(), '$150.00 counted');
  assert.match(await daily.textContent(), /\$350\.00 remaining/);
  assert.match(await daily.textContent(), /of \$500\.00/);
  const fill = await daily.locator('.fill').evaluate((el) => el.style.width);
  assert.equal(fill, '30%');
  const emails = page.locator('section.budget', { hasText: 'emails-per-run' });
  assert.equal(await emails.locator('.counted').textContent(), '1 counted');
  await shot('console-budgets.png');

  // A counterparty's scope is a labelled hash; looked up by its value, only
  // its ceiling is shown, under the value.
  const perCp = page.locator('section.budget', { hasText: 'per-counterparty' });
  assert.match(await perCp.first().locator('.scope-hash').textContent(), /^hash [0-9a-f]{10}…$/);
  await page.locator('form.lookup input[name=dimension]').fill('counterparty');
  await page.locator('form.lookup input[name=value]').fill('acme-supplies');
  await page.locator('form.lookup button[type=submit]').click();
  await page.locator('section.budget .scope-value', { hasText: 'acme-supplies' }).waitFor({ timeout: 3000 });
  assert.equal(await page.locator('section.budget').count(), 1);
  assert.equal(await page.locator('section.budget .counted').textContent(), '$150.00 counted');
  await page.locator('form.lookup input[name=value]').fill('nobody');
  await page.locator('form.lookup button[type=submit]').click();
  await page.getByText('No live ceiling counts counterparty nobody.').waitFor({ timeout: 3000 });
  await page.locator('form.lookup button[data-action=clear]').click();
  await daily.waitFor({ timeout: 3000 });
});

test("the groups page shows an unwinding group's compensations, permanent and unresolved steps", async () => {
  const step = async (key, type, extra, outcome) => {
    const r = await begin({ idempotency_key: key, effect_type: type, group_key: 'trip-42', run_id: 'run-trip', ...extra });
    assert.equal(r.decision, 'execute');
    if (outcome) await report({ effect_id: r.effect_id, outcome });
  };
  await step('book-hotel-42', 'travel.book', { compensation: { effect_type: 'travel.cancel', description: 'cancel the hotel booking' } }, 'succeeded');
  await step('sms-guest-42', 'notify.sms', {}, 'succeeded');
  await step('book-car-42', 'travel.book', {}, undefined);
  const res = await agent.callTool({ name: 'ratchet_unwind_group', arguments: { group_key: 'trip-42', reason: 'the guest cancelled' } });
  assert.equal(res.isError ?? false, false, JSON.stringify(res.content));

  await page.goto(serve.admin + '/approvals');
  await open('Groups');
  const card = page.locator('section.group', { hasText: 'trip-42' });
  await card.waitFor({ timeout: 3000 });
  const text = await card.textContent();
  assert.match(text, /unwinding/);
  assert.match(text, /the guest cancelled/);
  assert.match(text, /Compensations to perform \(1\)book-hotel-42.*travel\.cancel: cancel the hotel booking/);
  assert.match(text, /Permanent: cannot be undone \(1\)sms-guest-42/);
  assert.match(text, /Unresolved: outcome not known yet \(1\)book-car-42/);
  await peek('console-groups.png');
});

test('a request without the CSRF token is refused', async () => {
  const [id] = await page.evaluate(async () => {
    const r = await fetch('/console/api/v1/approvals?state=pending');
    return (await r.json()).approvals.map((a) => a.approval_id);
  });
  const answer = (headers) => page.evaluate(async ([path, headers]) => {
    const r = await fetch(path, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body: '{"note":"forged"}' });
    return { status: r.status, body: await r.json() };
  }, [`/console/api/v1/approvals/${id}/approve`, headers]);
  const none = await answer({});
  assert.equal(none.status, 403);
  assert.equal(none.body.error.code, 'csrf_token_required');
  const wrong = await answer({ 'X-Ratchet-CSRF': 'guessed' });
  assert.equal(wrong.status, 403);
  assert.equal(wrong.body.error.code, 'csrf_token_invalid');
  const pending = await page.evaluate(async () => (await (await fetch('/console/api/v1/approvals?state=pending')).json()).approvals.length);
  assert.equal(pending, 2, 'a refused request decided nothing');
});

test('rejecting in the list, with a note: the next begin is denied', async () => {
  await open('Approvals');
  const row = page.locator('table.approvals tbody tr', { hasText: 'run-81c2' });
  await row.waitFor({ timeout: 2000 });
  await row.locator('input.note').fill('globex is on hold');
  await row.locator('button[data-action=reject]').click();
  await row.waitFor({ state: 'detached', timeout: 3000 });
  const denied = await begin(charge('order-1002', 120, 'globex', 'run-81c2'));
  assert.equal(denied.decision, 'denied');
  assert.equal(denied.reason, 'approval_rejected');
});

test('a grant made in the page lets begins inside it execute without asking; revoked, they ask again', async () => {
  // From the approval's own link, the form comes filled in.
  await page.goto(serve.admin + '/approvals');
  await page.waitForSelector('main [data-loaded]');
  await page.locator('table.approvals tbody tr', { hasText: 'run-9d01' }).getByRole('link', { name: 'or grant a scope…' }).click();
  const form = page.locator('form.grant-form');
  await form.waitFor();
  assert.equal(await form.locator('input[name=namespace]').inputValue(), 'shop');
  assert.equal(await form.locator('input[name=effect_type]').inputValue(), 'payment.refund');
  assert.equal(await form.locator('input[name=run_id]').inputValue(), 'run-9d01');
  await form.locator('input[name=effect_type]').fill('payment.*');
  await form.locator('input[name=run_id]').fill('');
  await form.locator('input[name=max_cost]').fill('300');
  await form.locator('input[name=max_effects]').fill('2');
  await form.locator('input[name=note]').fill('restock week');
  await form.locator('button[type=submit]').click();
  const row = page.locator('table.grants-list tbody tr', { hasText: 'restock week' });
  await row.waitFor({ timeout: 3000 });
  assert.match(await row.textContent(), /active.*shop.*payment\.\*.*checkout-bot.*\$0\.00 of \$300\.00.*0 of 2 effects.*admin:ops-oncall/);

  const covered = await begin(charge('order-2001', 110, 'umbrella', 'run-a1'));
  assert.equal(covered.decision, 'execute');
  assert.ok(covered.grant_id, JSON.stringify(covered));
  await row.getByText('$110.00 of $300.00').waitFor({ timeout: 3000 });
  await row.getByText('1 of 2 effects').waitFor();
  await peek('console-grants.png');

  await row.locator('button[data-action=revoke]').click();
  await page.getByText('No live grants.').waitFor({ timeout: 3000 });
  await page.getByLabel('show ended grants').check();
  await page.locator('table.grants-list tbody tr', { hasText: 'restock week' }).getByText('revoked', { exact: true }).waitFor({ timeout: 3000 });
  assert.equal((await begin(charge('order-2002', 110, 'hooli', 'run-a1'))).decision, 'approval_required');
});

test('a link fills in only the scope of a grant; a malformed deep link is not found', async () => {
  await page.goto(`${serve.admin}/grants?namespace=shop&effect_type=payment.*&agent_id=checkout-bot&run_id=run-x` +
    '&max_cost=1000000&max_effects=1000000&note=approved+by+ops&ttl=720h');
  const form = page.locator('form.grant-form');
  await form.waitFor();
  assert.equal(await form.locator('input[name=namespace]').inputValue(), 'shop');
  assert.equal(await form.locator('input[name=effect_type]').inputValue(), 'payment.*');
  assert.equal(await form.locator('input[name=agent_id]').inputValue(), 'checkout-bot');
  assert.equal(await form.locator('input[name=run_id]').inputValue(), 'run-x');
  assert.equal(await form.locator('input[name=max_cost]').inputValue(), '');
  assert.equal(await form.locator('input[name=max_effects]').inputValue(), '');
  assert.equal(await form.locator('input[name=note]').inputValue(), '');
  assert.equal(await form.locator('select[name=ttl]').inputValue(), '8h');

  for (const bad of ['/approvals/%E0%A4', '/effects/%C3']) {
    await page.goto(serve.admin + bad);
    await page.getByRole('heading', { name: 'Not found' }).waitFor({ timeout: 3000 });
  }
});

test('while anything is halted every page shows a banner, and the agent is denied with the note', async () => {
  const admin = (path, body) => fetch(serve.admin + path, {
    method: body ? 'POST' : 'GET',
    headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, 'Content-Type': 'application/json' },
    body: body ? JSON.stringify(body) : undefined,
  }).then(async (r) => ({ status: r.status, body: await r.json() }));
  const halted = await admin('/v1/halts', { namespace: 'shop', effect_type: 'payment.*', note: 'chargebacks <b>spiking</b>' });
  assert.equal(halted.status, 201, JSON.stringify(halted.body));
  await page.goto(serve.admin + '/budgets');
  const banner = page.locator('#halts');
  await banner.getByText('chargebacks <b>spiking</b>').waitFor({ timeout: 4000 });
  assert.match(await banner.textContent(), /Halted: namespace=shop effect_type=payment\.\*.*admin:ops-oncall/);
  assert.match(await banner.textContent(), new RegExp(`ratchet resume ${halted.body.halt_id}`));
  await open('Approvals');
  assert.equal(await banner.isVisible(), true, 'the banner stays on every page');
  const denied = await begin(charge('order-halt-1', 5, 'initech', 'run-h1'));
  assert.equal(denied.decision, 'denied');
  assert.equal(denied.reason, 'halted');
  assert.match(denied.message, /chargebacks <b>spiking<\/b>/);
  const lifted = await admin(`/v1/halts/${halted.body.halt_id}/lift`, {});
  assert.equal(lifted.status, 200, JSON.stringify(lifted.body));
  await banner.waitFor({ state: 'hidden', timeout: 4000 });
  assert.equal((await begin(charge('order-halt-1', 5, 'initech', 'run-h1'))).decision, 'execute');
});

test('a payout needing two approvers shows its progress; one person approving twice counts once', async () => {
  await open('Approvals');
  const asked = await begin({ ...charge('payout-1', 2, 'acme-supplies', 'run-q2'), effect_type: 'payment.payout' });
  assert.equal(asked.decision, 'approval_required');
  const row = page.locator('table.approvals tbody tr', { hasText: 'run-q2' });
  await row.locator('.progress', { hasText: '0 of 2' }).waitFor({ timeout: 2000 });
  assert.equal(await row.getByText('or grant').count(), 0, 'a grant is not offered for what needs two people');
  for (let i = 0; i < 2; i++) {
    await row.locator('button[data-action=approve]').click();
    await page.locator('#flash', { hasText: `Counted for ${asked.approval_id}: 1 of 2: approved by admin:ops-oncall` }).waitFor({ timeout: 3000 });
    await row.locator('.progress', { hasText: '1 of 2: approved by admin:ops-oncall' }).waitFor({ timeout: 3000 });
  }
  assert.equal((await begin({ ...charge('payout-1', 2, 'acme-supplies', 'run-q2'), effect_type: 'payment.payout' })).decision, 'approval_required');
  await page.goto(`${serve.admin}/approvals/${asked.approval_id}`);
  await page.locator('dl.facts dd .progress', { hasText: '1 of 2: approved by admin:ops-oncall' }).waitFor({ timeout: 3000 });
  const second = await fetch(`${serve.admin}/v1/approvals/${asked.approval_id}/approve`, {
    method: 'POST', headers: { Authorization: `Bearer ${SECOND_ADMIN_TOKEN}`, 'Content-Type': 'application/json' }, body: '{}',
  });
  assert.equal(second.status, 200);
  await page.locator('dl.facts .badge', { hasText: 'approved' }).waitFor({ timeout: 3000 });
  await page.locator('dl.facts dd .progress', { hasText: '2 of 2: approved by admin:ops-oncall, admin:finance-lead' }).waitFor();
  assert.equal((await begin({ ...charge('payout-1', 2, 'acme-supplies', 'run-q2'), effect_type: 'payment.payout' })).decision, 'execute');
});

test('without admin tokens the page takes its session with a POST; a GET makes none', async () => {
  const open = await startServe({ open: true });
  const ctx = await browser.newContext(); // its own cookies: cookies ignore ports
  const p2 = await ctx.newPage();
  p2.on('pageerror', (err) => pageErrors.push(String(err)));
  try {
    const direct = await ctx.request.get(open.admin + '/console/session');
    assert.equal((await direct.json()).signed_in, false);
    assert.deepEqual(await ctx.cookies(), []);
    await p2.goto(open.admin + '/approvals');
    await p2.getByText('No admin tokens: open on loopback').waitFor({ timeout: 3000 });
    await p2.waitForSelector('main [data-loaded]');
    assert.equal(await p2.locator('.load-err').isVisible(), false);
    assert.equal((await ctx.cookies()).length, 1);
  } finally {
    await ctx.close();
    await open.stop();
  }
});

test('the page raised no error and no dialog', () => {
  assert.deepEqual(pageErrors, []);
  assert.deepEqual(dialogs, []);
});
