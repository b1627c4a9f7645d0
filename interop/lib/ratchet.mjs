// A real Ratchet for the suite: "ratchet serve" on free loopback ports with a
// temporary data dir and a config with agent and admin tokens and the
// policies the scenario needs, and the command lines of "ratchet mcp --stdio"
// (own ledger) and of the --server bridge.

import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export const BIN = resolve(process.env.RATCHET_BIN ?? new URL('../../bin/ratchet', import.meta.url).pathname);

// The tokens: agents are fixed to an agent_id, so a claim of another one is
// the unauthorized error.
export const AGENT_ID = 'interop-bot';
export const ADMIN_TOKEN = 'interop-admin-token';

const sha256 = (s) => createHash('sha256').update(s).digest('hex');

/** Policies of every run: an approval threshold and a required dimension on
 * payments, a denied type, a count ceiling to be refused by, and a user
 * confirmation (conversation.test.mjs). */
const POLICIES = `
policies:
  - match: "payment.*"
    approval_threshold_micros: 100000000
    require_dimensions: [counterparty]
  - match: "db.drop.*"
    deny: true
  - match: "sms.send"
    ceilings:
      - {name: sms-per-run, limit_count: 1, window: 1h, per: run}
  - match: "gift.send"
    confirm_with: user
`;

const cleanups = [];
process.on('exit', () => cleanups.forEach((f) => f()));

/** A fresh temporary directory, removed at exit. */
export function tempDir(prefix) {
  const dir = mkdtempSync(join(tmpdir(), `ratchet-interop-${prefix}-`));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Writes a config for a data dir; tokens maps agent tokens to namespaces;
 * extra is more YAML (top-level keys the config does not set already). */
function writeConfig(dir, tokens, extra = '') {
  const agents = Object.entries(tokens)
    .map(([tok, ns]) => `    - {token_sha256: "${sha256(tok)}", namespace: ${ns}, agent_id: ${AGENT_ID}}`)
    .join('\n');
  const file = join(dir, 'ratchet.yaml');
  writeFileSync(file, `listen: {mcp: '127.0.0.1:0', admin: '127.0.0.1:0', proxy: '127.0.0.1:0'}
data_dir: ${join(dir, 'data')}
${agents ? `auth:\n  agents:\n${agents}\n  admins:\n    - {token_sha256: "${sha256(ADMIN_TOKEN)}", name: interop}\n` : ''}${POLICIES}${extra}`);
  return file;
}

/** Starts "ratchet serve"; resolves to {mcp, admin, stop()} once it listens. */
export async function startServe(tokens, extra = '') {
  const dir = tempDir('serve');
  const config = writeConfig(dir, tokens, extra);
  const proc = spawn(BIN, ['serve', '--config', config], { stdio: ['ignore', 'ignore', 'pipe'] });
  cleanups.unshift(() => proc.kill('SIGKILL'));
  let log = '';
  const urls = await new Promise((ok, failed) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      failed(new Error(`ratchet serve did not start:\n${log}`));
    }, 20_000);
    const fail = (err) => {
      clearTimeout(timer);
      failed(err);
    };
    proc.on('error', (err) => fail(new Error(`running ${BIN} (make build, or set RATCHET_BIN): ${err.message}`)));
    proc.on('exit', (code) => fail(new Error(`ratchet serve exited (${code}):\n${log}`)));
    proc.stderr.on('data', (b) => {
      log += b;
      const m = /mcp=(http:\/\/\S+\/mcp) admin=(http:\/\/\S+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        ok({ mcp: m[1], admin: m[2] });
      }
    });
  });
  // Its info line is the one we wait for; drop what it logs after it.
  proc.stderr.removeAllListeners('data');
  proc.stderr.resume();
  const stop = () => new Promise((ok) => {
    if (proc.exitCode !== null) return ok();
    proc.removeAllListeners('exit');
    proc.on('exit', ok);
    proc.kill('SIGTERM');
  });
  return { ...urls, stop, log: () => log };
}

/** The command line of "ratchet mcp --stdio" on a ledger of its own. */
export function stdioServer(name) {
  const dir = tempDir(name);
  mkdirSync(join(dir, 'data'));
  const config = writeConfig(dir, {});
  return { command: BIN, args: ['mcp', '--stdio', '--config', config, '--namespace', name, '--agent-id', AGENT_ID, '--log-level', 'warn'] };
}

/** The command line of the bridge to a running serve, token in the environment. */
export function bridgeServer(url, token) {
  return { command: BIN, args: ['mcp', '--stdio', '--server', url, '--log-level', 'warn'], env: { RATCHET_TOKEN: token } };
}

/** The audit's events through the admin API. */
export async function auditEvents(adminURL) {
  const res = await fetch(`${adminURL}/v1/audit`, { headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } });
  if (!res.ok) throw new Error(`audit: ${res.status} ${await res.text()}`);
  return (await res.text()).split('\n').filter(Boolean).map((l) => JSON.parse(l)).filter((r) => r.event).map((r) => r.event);
}

/** Approves a pending approval through the admin API. */
export async function approve(adminURL, approvalID) {
  const res = await fetch(`${adminURL}/v1/approvals/${approvalID}/approve`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ note: 'approved by the interop suite' }),
  });
  if (!res.ok) throw new Error(`approving ${approvalID}: ${res.status} ${await res.text()}`);
}
