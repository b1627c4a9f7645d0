// Approvals inside the conversation (issue 37) from the TypeScript side: a
// real "ratchet serve" with the console's public address set, the
// TypeScript SDK 1.x (2025-11-25: URL-mode elicitation, a server-initiated
// elicitation/create, whose call answers the decision made while it
// waited) and the v2 client (2026-07-28: an input_required result, retried
// by the client's own driver), the operator approving through the admin API
// meanwhile; the v2 client's raw retries (its manual mode hands back the
// requestState): replayed, altered, expired; and tasks: the 1.x
// experimental tasks client (2025-11-25) and ext-tasks with the v2 client
// (2026-07-28), each a begin that waits for the operator in a task. Run by
// "make interop".

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Client as Client1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as HTTP1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { Client as Client2, StreamableHTTPClientTransport as HTTP2 } from '@modelcontextprotocol/client';
import { createTaskSessionFromClient, resultFromTaskOutcome } from '@modelcontextprotocol/ext-tasks/client';

import { approve, auditEvents, startServe } from './lib/ratchet.mjs';

const CONSOLE = 'https://ratchet.example.com';
const TOKEN = 'tok-conversation';
let serve;

before(async () => {
  serve = await startServe({ [TOKEN]: 'conversation' }, `notify:\n  console_url: ${CONSOLE}\n`);
});
after(async () => serve?.stop());

const headers = { requestInit: { headers: { Authorization: `Bearer ${TOKEN}` } } };
const pay = (key) => ({ name: 'ratchet_begin_effect', arguments: {
  idempotency_key: key, effect_type: 'payment.charge', estimated_cost_micros: 150_000_000, dimensions: { counterparty: 'acct_1' } } });

test('sdk1.x 2025-11-25 with URL elicitation is asked to open the approval page; its accept approves nothing; approved while the call waits, the call answers execute', async () => {
  const client = new Client1({ name: 'interop-conversation-sdk1', version: '1' }, { capabilities: { elicitation: { url: {} } } });
  const asked = [];
  let operatorDecides = false;
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    asked.push(req.params);
    if (operatorDecides) await approve(serve.admin, req.params.elicitationId); // the user went to the page; an operator approved there
    return { action: 'accept' };
  });
  await client.connect(new HTTP1(new URL(serve.mcp), headers));
  try {
    const res = await client.callTool(pay('sdk1:big'));
    const out = res.structuredContent;
    assert.equal(out.decision, 'approval_required');
    assert.equal(out.approval_url, `${CONSOLE}/approvals/${out.approval_id}`);
    assert.deepEqual(asked.map((p) => [p.mode, p.url, p.elicitationId]), [['url', out.approval_url, out.approval_id]]);
    const again = await client.callTool(pay('sdk1:big'));
    assert.equal(again.structuredContent.decision, 'approval_required', 'an accept is not an approval');

    operatorDecides = true;
    const approved = await client.callTool(pay('sdk1:approved'));
    assert.equal(approved.structuredContent?.decision, 'execute', JSON.stringify(approved));
    assert.equal(asked.length, 3);
  } finally {
    await client.close();
  }
});

test('v2 2026-07-28: input_required, the operator approves, the client\'s own retry gets execute', async () => {
  const client = new Client2({ name: 'interop-conversation-v2', version: '1' }, {
    capabilities: { elicitation: { url: {} } },
    versionNegotiation: { mode: { pin: '2026-07-28' } },
    inputRequired: { autoFulfill: true },
  });
  const asked = [];
  client.setRequestHandler('elicitation/create', async (req) => {
    asked.push(req.params);
    await approve(serve.admin, req.params.url.split('/').at(-1)); // the user went to the page; an operator approved there
    return { action: 'accept' };
  });
  await client.connect(new HTTP2(new URL(serve.mcp), headers));
  try {
    const res = await client.callTool(pay('v2:big'));
    assert.equal(res.structuredContent?.decision, 'execute', JSON.stringify(res));
    assert.equal(asked.length, 1);
    assert.equal(asked[0].mode, 'url');
    assert.equal(asked[0].elicitationId, undefined, 'the 2026-07-28 revision has no elicitationId');
    assert.match(asked[0].url, new RegExp(`^${CONSOLE}/approvals/apr_`));
  } finally {
    await client.close();
  }
});

test('sdk1.x 2025-11-25 tasks: a task-augmented begin waits for the operator; the task\'s result is execute', async () => {
  const client = new Client1({ name: 'interop-tasks-sdk1', version: '1' }, { capabilities: { tasks: { list: {}, cancel: {} } } });
  await client.connect(new HTTP1(new URL(serve.mcp), headers));
  try {
    assert.deepEqual(client.getServerCapabilities()?.tasks, { list: {}, cancel: {}, requests: { tools: { call: {} } } });
    const tools = await client.listTools(); // the client learns which tools run as tasks
    assert.equal(tools.tools.find((t) => t.name === 'ratchet_begin_effect').execution?.taskSupport, 'optional');
    const statuses = [];
    let result;
    for await (const msg of client.experimental.tasks.callToolStream(pay('sdk1:task'), undefined, { task: { ttl: 600_000 } })) {
      if (msg.type === 'error') throw msg.error;
      if (msg.type === 'result') result = msg.result;
      if (msg.type === 'taskCreated' || msg.type === 'taskStatus') {
        statuses.push(msg.task.status);
        if (statuses.length === 2) { // the client polled once and saw it waiting: the operator approves
          assert.equal(msg.task.status, 'working');
          assert.match(msg.task.statusMessage, new RegExp(`${CONSOLE}/approvals/apr_`));
          await approve(serve.admin, msg.task.statusMessage.match(/apr_[^\s()]+/)[0]);
        }
      }
    }
    assert.equal(result?.structuredContent?.decision, 'execute', JSON.stringify(result));
    assert.deepEqual([statuses[0], statuses.at(-1)], ['working', 'completed']);
    const { tasks } = await client.experimental.tasks.listTasks();
    assert.equal(tasks.length, 1);
    assert.equal(tasks[0].status, 'completed');
  } finally {
    await client.close();
  }
});

/** A v2 client in manual mode: callTool hands back the input_required result. */
async function manualClient(server) {
  const client = new Client2({ name: 'interop-conversation-manual', version: '1' }, {
    capabilities: { elicitation: { url: {} } },
    versionNegotiation: { mode: { pin: '2026-07-28' } },
    inputRequired: { autoFulfill: false },
  });
  await client.connect(new HTTP2(new URL(server.mcp), headers));
  const call = (params) => client.callTool(params, { allowInputRequired: true });
  return {
    client,
    /** The begin; asserts it answered input_required and returns its approval's id and url, and the state. */
    async ask(key) {
      const res = await call(pay(key));
      assert.equal(res.resultType, 'input_required', JSON.stringify(res));
      const { url } = res.inputRequests.ratchet_approval.params;
      return { res, url, approval: url.split('/').at(-1), state: res.requestState };
    },
    /** The retry of the same call with state, the user having opened the page. */
    retry: (key, state) => call({ ...pay(key), requestState: state, inputResponses: { ratchet_approval: { action: 'accept' } } }),
  };
}

/** The ledger error of a tool result, from its JSON text. */
function errorOf(res) {
  assert.equal(res.isError, true, JSON.stringify(res));
  return JSON.parse(res.content.find((c) => c.text.startsWith('{"error"')).text).error;
}

/** How many events the audit holds (the tests of a file run one at a time). */
const eventCount = async (server) => (await auditEvents(server.admin)).length;

test('v2 2026-07-28: a requestState replayed after it was redeemed is refused (invalid_argument, requestState) and decides nothing', async () => {
  const m = await manualClient(serve);
  try {
    const { approval, state } = await m.ask('v2:replay');
    await approve(serve.admin, approval);
    const done = await m.retry('v2:replay', state);
    assert.equal(done.structuredContent?.decision, 'execute', JSON.stringify(done));
    const before = await eventCount(serve);
    assert.ok(before > 0);
    const err = errorOf(await m.retry('v2:replay', state));
    assert.deepEqual([err.code, err.field], ['invalid_argument', 'requestState']);
    assert.match(err.message, /already used/);
    assert.equal(await eventCount(serve), before, 'the replay recorded something');
    const got = await m.client.callTool({ name: 'ratchet_get_effect', arguments: { effect_id: done.structuredContent.effect_id } });
    assert.deepEqual([got.structuredContent.state, got.structuredContent.attempt], ['pending', 1], 'the replay began another attempt');
  } finally {
    await m.client.close();
  }
});

test('v2 2026-07-28: an altered requestState (one byte flipped) is refused and spends nothing; the genuine one then gets execute', async () => {
  const m = await manualClient(serve);
  try {
    const { approval, state } = await m.ask('v2:altered');
    await approve(serve.admin, approval);
    const raw = Buffer.from(state, 'base64url');
    raw[raw.length >> 1] ^= 1;
    const altered = raw.toString('base64url');
    assert.notEqual(altered, state);
    const before = await eventCount(serve);
    assert.ok(before > 0);
    const err = errorOf(await m.retry('v2:altered', altered));
    assert.deepEqual([err.code, err.field], ['invalid_argument', 'requestState']);
    assert.match(err.message, /altered/);
    assert.equal(await eventCount(serve), before, 'the altered state recorded something');
    const done = await m.retry('v2:altered', state);
    assert.equal(done.structuredContent?.decision, 'execute', JSON.stringify(done));
  } finally {
    await m.client.close();
  }
});

test('v2 2026-07-28: a requestState past its expiry asks again, a new input_required for a new approval', async () => {
  const short = await startServe({ [TOKEN]: 'conversation' }, `notify:\n  console_url: ${CONSOLE}\ndefaults:\n  approval_ttl: 2s\n`);
  const m = await manualClient(short);
  try {
    const first = await m.ask('v2:late');
    await new Promise((ok) => setTimeout(ok, 2500)); // the approval, and the state, lapse
    const again = await m.retry('v2:late', first.state);
    assert.equal(again.resultType, 'input_required', JSON.stringify(again));
    assert.notEqual(again.requestState, first.state);
    const url = again.inputRequests.ratchet_approval.params.url;
    assert.match(url, new RegExp(`^${CONSOLE}/approvals/apr_`));
    assert.notEqual(url, first.url, 'asked again for the lapsed approval');
    await approve(short.admin, url.split('/').at(-1));
    const done = await m.retry('v2:late', again.requestState);
    assert.equal(done.structuredContent?.decision, 'execute', JSON.stringify(done));
  } finally {
    await m.client.close();
    await short.stop();
  }
});

test('v2 2026-07-28 with the tasks extension (ext-tasks): the begin is a task; the operator approves; its outcome is execute', async () => {
  const clientInfo = { name: 'interop-tasks-v2', version: '1' };
  const clientCapabilities = { extensions: { 'io.modelcontextprotocol/tasks': {} } };
  const client = new Client2(clientInfo, { capabilities: clientCapabilities, versionNegotiation: { mode: { pin: '2026-07-28' } } });
  await client.connect(new HTTP2(new URL(serve.mcp), headers));
  // The package's raw path for the extension's shapes, which the v2 client's codecs refuse.
  let next = 0;
  const rawDispatch = async (request) => {
    const name = request.method === 'tools/call' ? request.params.name : request.params?.taskId;
    const res = await fetch(serve.mcp, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${TOKEN}`,
        'Mcp-Protocol-Version': '2026-07-28', 'Mcp-Method': request.method, ...(name ? { 'Mcp-Name': name } : {}) },
      body: JSON.stringify({ jsonrpc: '2.0', id: `raw-${++next}`, ...request }),
    });
    const body = await res.json();
    return body.error ? { kind: 'error', error: body.error } : { kind: 'result', result: body.result };
  };
  const session = createTaskSessionFromClient(client, { endpointId: 'interop-ratchet', rawDispatch,
    v2RequestFraming: { protocolVersion: '2026-07-28', clientInfo, clientCapabilities } });
  const plain = new Client2({ name: 'interop-tasks-v2-plain', version: '1' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
  await plain.connect(new HTTP2(new URL(serve.mcp), headers));
  try {
    const execution = await session.callTool('ratchet_begin_effect', pay('v2:task').arguments);
    assert.equal(execution.kind, 'task');
    const waiting = (await plain.callTool(pay('v2:task'))).structuredContent; // the same key: the same approval
    assert.equal(waiting.decision, 'approval_required');
    await approve(serve.admin, waiting.approval_id);
    const { outcome } = await execution.settle();
    const result = resultFromTaskOutcome(outcome);
    assert.equal(result?.structuredContent?.decision, 'execute', JSON.stringify(outcome));
  } finally {
    await session.close();
    await plain.close();
  }
});

test('v2 2026-07-28 without elicitation gets today\'s approval_required', async () => {
  const client = new Client2({ name: 'interop-conversation-plain', version: '1' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
  await client.connect(new HTTP2(new URL(serve.mcp), headers));
  try {
    const res = await client.callTool(pay('v2:plain'));
    assert.equal(res.structuredContent.decision, 'approval_required');
    assert.equal(res.structuredContent.approval_url, `${CONSOLE}/approvals/${res.structuredContent.approval_id}`);
  } finally {
    await client.close();
  }
});

test('sdk1.x with form elicitation confirms a gift for its user; the audit names the host that accepted, and how fast', async () => {
  const client = new Client1({ name: 'interop-auto-accepter', version: '7' }, { capabilities: { elicitation: { form: {} } } });
  const asked = [];
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    asked.push(req.params);
    return { action: 'accept', content: { confirm: true } }; // a host that accepts on its own
  });
  await client.connect(new HTTP1(new URL(serve.mcp), headers));
  try {
    const res = await client.callTool({ name: 'ratchet_begin_effect', arguments: { idempotency_key: 'gift:1', effect_type: 'gift.send', estimated_cost_micros: 20_000_000 } });
    assert.equal(res.structuredContent?.decision, 'execute', JSON.stringify(res));
    assert.equal(asked.length, 1);
    assert.equal(asked[0].mode, 'form');
    assert.match(asked[0].message, /gift\.send, costing \$20\.00/);
    const begun = (await auditEvents(serve.admin)).find((e) => e.type === 'effect.begun' && e.effect_id === res.structuredContent.effect_id);
    assert.equal(begun?.actor, 'user via client:interop-auto-accepter/7');
    assert.match(begun?.note ?? '', /^user confirmation accepted after \d+ ms$/);
  } finally {
    await client.close();
  }
});

test('a client without forms is refused confirmation_required', async () => {
  const client = new Client1({ name: 'interop-no-forms', version: '1' });
  await client.connect(new HTTP1(new URL(serve.mcp), headers));
  try {
    const res = await client.callTool({ name: 'ratchet_begin_effect', arguments: { idempotency_key: 'gift:2', effect_type: 'gift.send' } });
    assert.equal(res.isError, true);
    assert.match(res.content[0].text, /^confirmation_required: /);
  } finally {
    await client.close();
  }
});
