// An MCP session that expired (mcp.session_idle) is answered as the
// streamable HTTP transport prescribes: HTTP 404 to a request carrying its
// Mcp-Session-Id, on which a client starts a new session with a new
// initialize. The TypeScript SDK 1.x and the v2 client against a real
// "ratchet serve" with a 2 s idle (issue 32.2). Run by "make interop".

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { sdk1, v2 } from './lib/clients.mjs';
import { startServe } from './lib/ratchet.mjs';

const IDLE_MS = 2000;
const TOKEN = 'tok-sessions';

let serve;
before(async () => {
  serve = await startServe({ [TOKEN]: 'sessions' }, `mcp:\n  session_idle: ${IDLE_MS / 1000}s\n`);
});
after(async () => { await serve?.stop(); });

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

for (const [name, open] of [['sdk1.x', (t) => sdk1(t)], ['v2 legacy', (t) => v2(t)]]) {
  test(`${name}: an expired session is answered 404, and a new session works`, async () => {
    const target = { kind: 'http', url: serve.mcp, token: TOKEN };
    const c = await open(target);
    try {
      const first = await c.call('ratchet_list_effects', {});
      assert.equal(first.isError, false, `a call on a live session: ${JSON.stringify(first)}`);
      await sleep(IDLE_MS * 2.5);
      const err = await c.call('ratchet_list_effects', {}).then(
        (res) => assert.fail(`a call on an expired session answered ${JSON.stringify(res)}, want the transport's 404`),
        (e) => e);
      // Both SDKs raise the transport's HTTP error with its status: 1.x's
      // StreamableHTTPError as its code, v2's SdkHttpError as status.
      assert.equal(typeof err.status === 'number' ? err.status : err.code, 404, `the error for an expired session: ${err.stack}`);
    } finally {
      await c.close().catch(() => {});
    }
    const again = await open(target);
    try {
      const res = await again.call('ratchet_list_effects', {});
      assert.equal(res.isError, false, `a new session after the expiry: ${JSON.stringify(res)}`);
    } finally {
      await again.close();
    }
  });
}
