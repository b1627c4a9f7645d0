// Ratchet against the MCP clients agents run: the TypeScript SDK 1.x, the v2
// client and the Inspector CLI, each over streamable HTTP with a bearer
// token, over "ratchet mcp --stdio" and through the --server bridge, at the
// newest and the oldest protocol versions the Go SDK serves. Run with
// "make interop" (it builds bin/ratchet first), or RATCHET_BIN=... node --test.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { inspector, sdk1, v2 } from './lib/clients.mjs';
import { approve, bridgeServer, startServe, stdioServer } from './lib/ratchet.mjs';
import { checkTools, fullScenario, shortScenario } from './lib/scenario.mjs';

// The protocol versions of github.com/modelcontextprotocol/go-sdk v1.8.0,
// newest first (mcp.TestProtocolVersions covers the list the SDK reports).
const NEWEST = '2026-07-28';
const LEGACY = ['2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05'];
const OLDEST = LEGACY.at(-1);
const MAX_TOOLS_LIST_BYTES = 14_500; // as mcp.TestToolsListSchemas

const TRANSPORTS = ['http', 'stdio', 'bridge'];

/** Every run: a client, how it is set up, the scenario, the protocol it must negotiate. */
const RUNS = [
  ...TRANSPORTS.map((tr) => ({ name: `sdk1.x ${tr}`, tr, open: (t) => sdk1(t), scenario: fullScenario, want: '2025-11-25' })),
  ...TRANSPORTS.map((tr) => ({ name: `sdk1.x ${tr} ${OLDEST}`, tr, open: (t) => sdk1(t, { version: OLDEST }), scenario: shortScenario, want: OLDEST })),
  ...LEGACY.slice(1, -1).map((v) => ({ name: `sdk1.x http ${v}`, tr: 'http', open: (t) => sdk1(t, { version: v }), scenario: shortScenario, want: v })),
  ...TRANSPORTS.map((tr) => ({ name: `v2 ${tr} ${NEWEST}`, tr, open: (t) => v2(t, { pin: NEWEST }), scenario: fullScenario, want: NEWEST })),
  ...TRANSPORTS.map((tr) => ({ name: `v2 ${tr} legacy`, tr, open: (t) => v2(t), scenario: shortScenario, want: '2025-11-25' })),
  // The era shows in results, except through the bridge: it passes on the
  // results of its own (2026-era) session with the sidecar as they are.
  ...TRANSPORTS.map((tr) => ({ name: `inspector ${tr}`, tr, open: (t) => inspector(t), scenario: inspectorScenario,
    wantAfter: tr === 'bridge' ? undefined : '2025 era' })),
  { name: `inspector http modern`, tr: 'http', open: (t) => inspector(t, { era: 'modern' }), scenario: shortScenario, wantAfter: '2026 era' },
];

const slug = (s) => s.replace(/[^a-z0-9]+/gi, '-');
const tokenOf = (run) => `tok-${slug(run.name)}`;

let serve;
const rows = [];
let listBytes;

before(async () => {
  serve = await startServe(Object.fromEntries(RUNS.filter((r) => r.tr !== 'stdio').map((r) => [tokenOf(r), slug(r.name)])));
});

after(async () => {
  await serve?.stop();
  console.log(`\ntools/list: ${listBytes} bytes on the wire (bound ${MAX_TOOLS_LIST_BYTES})`);
  console.log(`${'run'.padEnd(32)}${'protocol'.padEnd(12)}${'tools'.padEnd(7)}${'decisions'.padEnd(11)}${'errors'.padEnd(8)}ms`);
  for (const r of rows) {
    console.log(`${r.name.padEnd(32)}${String(r.protocol ?? '-').padEnd(12)}${String(r.tools).padEnd(7)}${String(r.decisions).padEnd(11)}${String(r.errors).padEnd(8)}${r.ms}`);
  }
});

function target(run) {
  switch (run.tr) {
    case 'http': return { kind: 'http', url: serve.mcp, token: tokenOf(run) };
    case 'stdio': return { kind: 'stdio', ...stdioServer(slug(run.name)) };
    case 'bridge': return { kind: 'stdio', ...bridgeServer(serve.mcp, tokenOf(run)) };
  }
}

/** The Inspector runs the whole scenario, after its schema portability check (--strict) finds no error. */
async function inspectorScenario(driver, opts) {
  const strict = await driver.strict();
  assert.equal(strict.code, 0, `mcp-inspector --strict found schema errors: ${JSON.stringify(strict.out)}`);
  return fullScenario(driver, opts);
}

test('clients', { concurrency: true }, async (t) => {
  await Promise.all(RUNS.map((run) =>
    t.test(run.name, async () => {
      const start = Date.now();
      const driver = await run.open(target(run));
      try {
        if (run.want) assert.equal(driver.protocol, run.want, 'negotiated protocol version');
        const approveFn = run.tr === 'stdio' ? null : (id) => approve(serve.admin, id);
        const cov = await run.scenario(driver, { prefix: slug(run.name), approve: approveFn });
        if (run.wantAfter) assert.equal(driver.protocol, run.wantAfter, 'protocol era');
        rows.push({ name: run.name, protocol: driver.protocol, tools: cov.tools.size, decisions: cov.decisions.size, errors: cov.errors.size, ms: Date.now() - start });
      } finally {
        await driver.close();
      }
    })));
});

const headers = (extra = {}) => ({ 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', ...extra });
const rpc = (id, method, params) => JSON.stringify({ jsonrpc: '2.0', id, method, ...(params && { params }) });
const initParams = (v) => ({ protocolVersion: v, capabilities: {}, clientInfo: { name: 'raw', version: '1' } });

test('raw HTTP: every protocol version, tools/list size, bearer tokens', async (t) => {
  const token = tokenOf(RUNS[0]);
  const auth = { Authorization: `Bearer ${token}` };
  for (const v of LEGACY) {
    await t.test(`initialize ${v}`, async () => {
      const res = await fetch(serve.mcp, { method: 'POST', headers: headers(auth), body: rpc(1, 'initialize', initParams(v)) });
      assert.equal(res.status, 200);
      assert.equal((await res.json()).result.protocolVersion, v);
      const session = res.headers.get('mcp-session-id');
      await fetch(serve.mcp, { method: 'POST', headers: headers({ ...auth, 'Mcp-Session-Id': session, 'Mcp-Protocol-Version': v }),
        body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) });
      const list = await fetch(serve.mcp, { method: 'POST', headers: headers({ ...auth, 'Mcp-Session-Id': session, 'Mcp-Protocol-Version': v }),
        body: rpc(2, 'tools/list') });
      const body = await list.text();
      checkTools(JSON.parse(body).result.tools);
      if (v === LEGACY[0]) listBytes = Buffer.byteLength(body);
    });
  }
  await t.test(`server/discover ${NEWEST}`, async () => {
    const meta = { 'io.modelcontextprotocol/protocolVersion': NEWEST, 'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' },
      'io.modelcontextprotocol/clientCapabilities': {} };
    const res = await fetch(serve.mcp, { method: 'POST', headers: headers({ ...auth, 'Mcp-Protocol-Version': NEWEST, 'Mcp-Method': 'server/discover' }),
      body: rpc(1, 'server/discover', { _meta: meta }) });
    const body = await res.json();
    assert.ok(body.result?.supportedVersions?.includes(NEWEST), JSON.stringify(body));
  });
  await t.test('tools/list size', () => {
    assert.ok(listBytes > 0);
    assert.ok(listBytes <= MAX_TOOLS_LIST_BYTES, `tools/list is ${listBytes} bytes`);
  });
  await t.test('no token, wrong token: 401 that says what to fix, and no client connects', async () => {
    const cases = [
      { h: {}, challenge: 'Bearer realm="ratchet"', says: 'no bearer token' },
      { h: { Authorization: 'Bearer wrong' }, challenge: 'Bearer realm="ratchet", error="invalid_token", error_description="unknown token"',
        says: "not one of Ratchet's agent tokens" },
    ];
    for (const { h, challenge, says } of cases) {
      const res = await fetch(serve.mcp, { method: 'POST', headers: headers(h), body: rpc(1, 'initialize', initParams(LEGACY[0])) });
      assert.equal(res.status, 401);
      assert.equal(res.headers.get('www-authenticate'), challenge);
      const body = await res.json();
      assert.equal(body.id, 1);
      assert.equal(body.error.data.code, 'unauthorized');
      assert.match(body.error.message, new RegExp(says));
    }
    // Each client's error carries the server's message: 1.x and a pinned
    // v2 in their message, v2's version negotiation in the body it keeps
    // (data.text) under its own "the server requires authorization".
    const wrong = { kind: 'http', url: serve.mcp, token: 'wrong' };
    const says = (err) => /not one of Ratchet's agent tokens/.test(`${err.message} ${err.data?.text ?? ''}`);
    await assert.rejects(sdk1(wrong), says);
    await assert.rejects(v2(wrong), says);
    await assert.rejects(v2(wrong, { pin: NEWEST }), says);
  });
});
