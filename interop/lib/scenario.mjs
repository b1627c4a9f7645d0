// What an agent does with Ratchet, step by step, checking at each step what
// the client hands the agent: the structured result (which the TypeScript
// SDKs have already checked against the tool's output schema), the text, and
// for errors the stable code (text "<code>: <message>", then the JSON
// {"error":{...}}, and no structured content).

import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';

import { AGENT_ID } from './ratchet.mjs';

export const TOOLS = ['ratchet_begin_effect', 'ratchet_report_effect', 'ratchet_resolve_effect',
  'ratchet_unwind_group', 'ratchet_get_effect', 'ratchet_list_effects'];
export const DECISIONS = ['execute', 'duplicate', 'in_flight', 'blocked', 'approval_required', 'denied'];
export const ERRORS = ['invalid_argument', 'idempotency_key_conflict', 'dimension_required', 'cost_required',
  'unauthorized', 'invalid_state_transition', 'effect_not_found', 'group_not_found'];

/** Every boolean or non-object schema in a schema, by path. */
export function schemaProblems(s, path) {
  if (s === null || typeof s !== 'object' || Array.isArray(s)) return [`${path}: ${JSON.stringify(s)} is not a schema object`];
  const out = [];
  for (const k of ['items', 'additionalProperties', 'not', 'if', 'then', 'else', 'contains', 'propertyNames']) {
    if (k in s) out.push(...schemaProblems(s[k], `${path}.${k}`));
  }
  for (const k of ['allOf', 'anyOf', 'oneOf', 'prefixItems']) {
    (s[k] ?? []).forEach((x, i) => out.push(...schemaProblems(x, `${path}.${k}[${i}]`)));
  }
  for (const k of ['properties', 'patternProperties', '$defs']) {
    for (const [name, x] of Object.entries(s[k] ?? {})) out.push(...schemaProblems(x, `${path}.${k}.${name}`));
  }
  return out;
}

/** Checks a tool list as a client received it. */
export function checkTools(tools) {
  assert.deepEqual(tools.map((t) => t.name).sort(), [...TOOLS].sort());
  for (const t of tools) {
    assert.ok(t.description, `${t.name} has no description`);
    for (const kind of ['inputSchema', 'outputSchema']) {
      assert.equal(t[kind]?.type, 'object', `${t.name}.${kind} is not an object schema`);
      assert.deepEqual(schemaProblems(t[kind], `${t.name}.${kind}`), []);
    }
  }
}

/** Records what a run reached, for the summary. */
export class Coverage {
  constructor() { this.tools = new Set(); this.decisions = new Set(); this.errors = new Set(); }
}

/** A driver with checks: begin expects a decision, fail expects an error code. */
class Agent {
  constructor(driver, cov) { this.d = driver; this.cov = cov; }

  async call(tool, args) {
    this.cov.tools.add(tool);
    return this.d.call(tool, args);
  }

  async ok(tool, args) {
    const r = await this.call(tool, args);
    assert.equal(r.isError, false, `${tool} failed: ${r.texts.join(' | ')}`);
    assert.equal(typeof r.structured, 'object', `${tool}: no structured result`);
    assert.ok(r.texts[0], `${tool}: no text`);
    assert.deepEqual(JSON.parse(r.texts[1]), r.structured, `${tool}: the JSON text differs from the structured result`);
    return r.structured;
  }

  async begin(args, decision) {
    const r = await this.call('ratchet_begin_effect', args);
    assert.equal(r.isError, false, `begin ${args.idempotency_key}: ${r.texts.join(' | ')}`);
    assert.equal(r.structured?.decision, decision, `begin ${args.idempotency_key}: ${JSON.stringify(r.structured)}`);
    assert.ok(r.texts[0].startsWith(`${decision}: `), `the text the agent reads does not start with the decision: ${r.texts[0]}`);
    this.cov.decisions.add(decision);
    return r.structured;
  }

  async fail(tool, args, code) {
    const r = await this.call(tool, args);
    assert.equal(r.isError, true, `${tool} ${JSON.stringify(args)} did not fail: ${JSON.stringify(r.structured)}`);
    assert.equal(r.structured, undefined, `${tool}: an error carries structured content, which clients check against the output schema`);
    assert.ok(r.texts[0]?.startsWith(`${code}: `), `${tool}: the agent reads "${r.texts[0]}", not the code ${code}`);
    const { error } = JSON.parse(r.texts[1]);
    assert.equal(error.code, code);
    assert.equal(r.texts[0], `${code}: ${error.message}`);
    this.cov.errors.add(code);
    return error;
  }

  report(eff, outcome, extra = {}) {
    return this.ok('ratchet_report_effect', { effect_id: eff.effect_id, attempt: eff.attempt, outcome, ...extra });
  }
}

const pay = (key, cost, extra = {}) => ({ idempotency_key: key, effect_type: 'payment.charge', vendor: 'stripe',
  payload: { amount: cost }, dimensions: { counterparty: 'acct_1' }, estimated_cost_micros: cost, ...extra });

/**
 * The whole contract: every tool, every decision, every error code of SPEC
 * 3.1-3.5. admin approves through the admin API when the transport has one
 * (ratchet mcp --stdio serves none: there the approval is only requested).
 */
export async function fullScenario(driver, { prefix, approve }) {
  const cov = new Coverage();
  const a = new Agent(driver, cov);
  const k = (s) => `${prefix}:${s}`;
  checkTools(await driver.listTools());

  // A lease of one second, to be found expired later: blocked.
  const slow = await a.begin({ idempotency_key: k('slow'), effect_type: 'email.send', lease_seconds: 1 }, 'execute');
  const slowSince = Date.now();

  // execute, in_flight, report, duplicate with the stored result.
  const mail = { idempotency_key: k('mail'), effect_type: 'email.send', payload: { to: 'ana@example.com' } };
  const ex = await a.begin(mail, 'execute');
  assert.equal(ex.attempt, 1);
  assert.ok(ex.lease_expires_at);
  const inf = await a.begin(mail, 'in_flight');
  assert.ok(inf.retry_after_seconds >= 1);
  const rep = await a.report(ex, 'succeeded', { result: { id: 'msg_1' }, vendor_reference: 'msg_1' });
  assert.equal(rep.state, 'succeeded');
  const dup = await a.begin(mail, 'duplicate');
  assert.deepEqual(dup.result, { id: 'msg_1' });
  assert.equal(dup.vendor_reference, 'msg_1');

  // Errors the agent fixes and retries.
  await a.fail('ratchet_begin_effect', { ...mail, payload: { to: 'bob@example.com' } }, 'idempotency_key_conflict');
  const missing = await a.fail('ratchet_begin_effect', { effect_type: 'email.send' }, 'invalid_argument');
  assert.equal(missing.field, 'idempotency_key');
  const unknown = await a.fail('ratchet_begin_effect', { ...mail, colour: 'red' }, 'invalid_argument');
  assert.equal(unknown.field, 'colour');
  const cost = await a.fail('ratchet_begin_effect', pay(k('nocost'), 1, { estimated_cost_micros: undefined }), 'cost_required');
  assert.equal(cost.field, 'estimated_cost_micros');
  const dim = await a.fail('ratchet_begin_effect', pay(k('nodim'), 1, { dimensions: undefined }), 'dimension_required');
  assert.equal(dim.field, 'dimensions.counterparty');
  await a.fail('ratchet_begin_effect', { ...mail, agent_id: 'someone-else' }, 'unauthorized');
  await a.fail('ratchet_report_effect', { effect_id: ex.effect_id, attempt: 1, outcome: 'failed' }, 'invalid_state_transition');
  await a.fail('ratchet_report_effect', { effect_id: ex.effect_id, outcome: 'maybe' }, 'invalid_argument');

  // denied: by policy, and by a count ceiling of one per run.
  const drop = await a.begin({ idempotency_key: k('drop'), effect_type: 'db.drop.table' }, 'denied');
  assert.equal(drop.reason, 'policy_denied');
  const run = k('run');
  const sms = await a.begin({ idempotency_key: k('sms1'), effect_type: 'sms.send', run_id: run }, 'execute');
  await a.report(sms, 'succeeded');
  const over = await a.begin({ idempotency_key: k('sms2'), effect_type: 'sms.send', run_id: run }, 'denied');
  assert.equal(over.reason, 'budget_exceeded');

  // approval_required, approved by an operator, then execute.
  const big = await a.begin(pay(k('big'), 150_000_000), 'approval_required');
  assert.ok(big.approval_id);
  assert.equal((await a.begin(pay(k('big'), 150_000_000), 'approval_required')).approval_id, big.approval_id);
  if (approve) {
    await approve(big.approval_id);
    const go = await a.begin(pay(k('big'), 150_000_000), 'execute');
    assert.equal(go.vendor_idempotency_key?.name, 'Idempotency-Key');
    await a.report(go, 'succeeded', { actual_cost_micros: 150_000_000 });
  }

  // A group: two steps, one undoable; unwind, compensate, unwound.
  const group = k('trip');
  const hotel = await a.begin({ idempotency_key: k('hotel'), effect_type: 'hotel.book', group_key: group,
    compensation: { effect_type: 'hotel.cancel', payload: { booking: 'H1' }, description: 'cancel the booking' } }, 'execute');
  await a.report(hotel, 'succeeded');
  const note = await a.begin({ idempotency_key: k('note'), effect_type: 'email.send', group_key: group }, 'execute');
  await a.report(note, 'succeeded');
  const plan = await a.ok('ratchet_unwind_group', { group_key: group, reason: 'trip cancelled' });
  assert.equal(plan.state, 'unwinding');
  assert.equal(plan.compensations.length, 1);
  assert.equal(plan.permanent.length, 1);
  const late = await a.begin({ idempotency_key: k('spa'), effect_type: 'spa.book', group_key: group }, 'denied');
  assert.equal(late.reason, 'group_unwinding');
  // The entry goes back unchanged, description and all, as an LLM passes it.
  const c = plan.compensations[0];
  assert.equal(c.description, 'cancel the booking');
  const undo = await a.begin(c, 'execute');
  await a.report(undo, 'succeeded');
  assert.equal((await a.ok('ratchet_unwind_group', { group_key: group })).state, 'unwound');
  await a.fail('ratchet_unwind_group', { group_key: k('no-such-group') }, 'group_not_found');

  // Reads.
  const got = await a.ok('ratchet_get_effect', { idempotency_key: k('hotel') });
  assert.equal(got.state, 'compensated');
  assert.equal(got.agent_id, AGENT_ID);
  await a.fail('ratchet_get_effect', { effect_id: 'eff_nope' }, 'effect_not_found');
  const listed = await a.ok('ratchet_list_effects', { group_key: group });
  assert.equal(listed.effects.length, 3);

  // blocked: the one-second lease has lapsed unreported.
  await sleep(Math.max(0, 1300 - (Date.now() - slowSince)));
  const slowArgs = { idempotency_key: k('slow'), effect_type: 'email.send', lease_seconds: 1 };
  const blocked = await a.begin(slowArgs, 'blocked');
  assert.equal(blocked.reason, 'lease_expired');
  const warned = await a.begin({ idempotency_key: k('after'), effect_type: 'email.send' }, 'execute');
  assert.ok(warned.integration_warning, 'no integration_warning after an unreported expiry');
  await a.report(warned, 'succeeded');
  const settled = await a.ok('ratchet_resolve_effect', { effect_id: slow.effect_id, attempt: blocked.attempt,
    resolution: 'failed', note: 'not in the outbox' });
  assert.equal(settled.state, 'failed');
  await a.fail('ratchet_resolve_effect', { effect_id: slow.effect_id, attempt: blocked.attempt, resolution: 'succeeded' }, 'invalid_state_transition');
  const retry = await a.begin(slowArgs, 'execute');
  assert.equal(retry.attempt, 2);
  // After the first attempt a report names its attempt, and a stale one is refused.
  const unnamed = await a.fail('ratchet_report_effect', { effect_id: retry.effect_id, outcome: 'succeeded' }, 'invalid_argument');
  assert.equal(unnamed.field, 'attempt');
  await a.fail('ratchet_report_effect', { effect_id: retry.effect_id, attempt: 1, outcome: 'succeeded' }, 'invalid_state_transition');
  await a.report(retry, 'succeeded');
  await a.begin(slowArgs, 'duplicate');

  assert.deepEqual([...cov.tools].sort(), [...TOOLS].sort());
  assert.deepEqual([...cov.decisions].sort(), [...DECISIONS].sort());
  assert.deepEqual([...cov.errors].sort(), [...ERRORS].sort());
  return cov;
}

/** Listing, a success and an error code: for slow clients and for each protocol version. */
export async function shortScenario(driver, { prefix }) {
  const cov = new Coverage();
  const a = new Agent(driver, cov);
  checkTools(await driver.listTools());
  const args = { idempotency_key: `${prefix}:short`, effect_type: 'email.send', payload: { n: 1 } };
  const ex = await a.begin(args, 'execute');
  await a.begin(args, 'in_flight');
  await a.fail('ratchet_begin_effect', { ...args, payload: { n: 2 } }, 'idempotency_key_conflict');
  await a.report(ex, 'succeeded', { result: { ok: true } });
  assert.deepEqual((await a.begin(args, 'duplicate')).result, { ok: true });
  await a.fail('ratchet_get_effect', { effect_id: 'eff_nope' }, 'effect_not_found');
  return cov;
}
