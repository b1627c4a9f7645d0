// A real "ratchet serve" for one declared vendor: free loopback ports, a
// temporary data dir, the vendor's shipped definition (configs/vendors/,
// read as it ships) with its upstream pointed at a fake, and the policies a
// test names. Resolves once serve logs its addresses.

import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';

import { BIN, tempDir } from '../lib/ratchet.mjs';

/** The PostgreSQL server of the Go suites (internal/pgtest). */
export const PG_DSN = process.env.RATCHET_TEST_PG_DSN ?? 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable';

/** Whether PostgreSQL answers at PG_DSN's host and port. */
export function pgReachable() {
  const u = new URL(PG_DSN);
  return new Promise((ok) => {
    const s = connect({ host: u.hostname, port: Number(u.port || 5432) });
    s.setTimeout(2000, () => { s.destroy(); ok(false); });
    s.on('connect', () => { s.end(); ok(true); });
    s.on('error', () => ok(false));
  });
}

// On PostgreSQL every serve of a run shares one schema and one HMAC key (a
// ledger refuses another key) and gets a namespace of its own, so that no
// test sees another's spend; the schema is the same every run.
const RUN = randomBytes(4).toString('hex');
let serves = 0;
let pgKey;
function pgKeyFile() {
  if (!pgKey) {
    pgKey = join(tempDir('vendors-pg'), 'hmac.key');
    writeFileSync(pgKey, '7d1f5c3ab8e94f0d2c6b1a7e9f3d5c8b0a2e4f6d8c1b3a5e7f9d0c2b4a6e8f1d\n', { mode: 0o600 });
  }
  return pgKey;
}

const VENDORS_DIR = new URL('../../configs/vendors/', import.meta.url).pathname;

/** The shipped definition of vendor, as a user would paste it (it begins with "vendors:"). */
export const definition = (vendor) => readFileSync(join(VENDORS_DIR, `${vendor}.yaml`), 'utf8');

/**
 * Starts serve with vendor's definition, its upstream at upstreamURL and
 * policies (YAML list items under "policies:"), on backend (badger or
 * postgres). Resolves to {proxy, admin, namespace, stop(), log()}.
 */
export async function startServe(vendor, upstreamURL, policies, backend = 'badger') {
  const dir = tempDir(`vendors-${vendor}`);
  const config = join(dir, 'ratchet.yaml');
  const namespace = backend === 'postgres' ? `shop-${RUN}-${++serves}` : 'shop';
  const ledger = backend === 'postgres'
    ? `ledger: {backend: postgres, dsn_env: RATCHET_VENDORS_PG_DSN, schema: interop_vendors}\nsecrets: {hmac_key_file: '${pgKeyFile()}'}\n`
    : '';
  writeFileSync(config, `listen: {mcp: '127.0.0.1:0', admin: '127.0.0.1:0', proxy: '127.0.0.1:0'}
data_dir: ${join(dir, 'data')}
${ledger}proxy:
  namespace: ${namespace}
  agent_id: legacy-billing
  upstream_timeout: 2s
  upstreams: {${vendor}: '${upstreamURL}'}
  currency_micros: {usd: 1000000, eur: 1080000}
policies:
${policies}
${definition(vendor)}`);
  const proc = spawn(BIN, ['serve', '--config', config], {
    stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, RATCHET_VENDORS_PG_DSN: PG_DSN },
  });
  const kill = () => proc.kill('SIGKILL');
  process.on('exit', kill);
  let log = '';
  proc.stderr.on('data', (b) => { log += b; });
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
    proc.stderr.on('data', () => {
      const m = /admin=(http:\/\/\S+) proxy=(http:\/\/\S+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        ok({ admin: m[1], proxy: m[2] });
      }
    });
  });
  proc.removeAllListeners('exit');
  const stop = () => new Promise((ok) => {
    process.off('exit', kill);
    if (proc.exitCode !== null) return ok();
    proc.on('exit', ok);
    proc.kill('SIGTERM');
  });
  return { ...urls, namespace, stop, log: () => log };
}
