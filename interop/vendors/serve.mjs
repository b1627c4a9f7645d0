// A real "ratchet serve" for one declared vendor: free loopback ports, a
// temporary data dir, the vendor's shipped definition (configs/vendors/,
// read as it ships) with its upstream pointed at a fake, and the policies a
// test names. Resolves once serve logs its addresses.

import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { BIN, tempDir } from '../lib/ratchet.mjs';

const VENDORS_DIR = new URL('../../configs/vendors/', import.meta.url).pathname;

/** The shipped definition of vendor, as a user would paste it (it begins with "vendors:"). */
export const definition = (vendor) => readFileSync(join(VENDORS_DIR, `${vendor}.yaml`), 'utf8');

/**
 * Starts serve with vendor's definition, its upstream at upstreamURL and
 * policies (YAML list items under "policies:"). Resolves to {proxy, admin, stop(), log()}.
 */
export async function startServe(vendor, upstreamURL, policies) {
  const dir = tempDir(`vendors-${vendor}`);
  const config = join(dir, 'ratchet.yaml');
  writeFileSync(config, `listen: {mcp: '127.0.0.1:0', admin: '127.0.0.1:0', proxy: '127.0.0.1:0'}
data_dir: ${join(dir, 'data')}
proxy:
  namespace: shop
  agent_id: legacy-billing
  upstream_timeout: 2s
  upstreams: {${vendor}: '${upstreamURL}'}
  currency_micros: {usd: 1000000, eur: 1080000}
policies:
${policies}
${definition(vendor)}`);
  const proc = spawn(BIN, ['serve', '--config', config], { stdio: ['ignore', 'ignore', 'pipe'] });
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
  return { ...urls, stop, log: () => log };
}
