// What the browser tests share: the ratchet binary, Chromium, and a real
// "ratchet serve" started on a config file.

import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';

export const BIN = resolve(process.env.RATCHET_BIN ?? new URL('../../bin/ratchet', import.meta.url).pathname);
export const CHROMIUM = process.env.CHROMIUM ||
  (process.env.PATH ?? '').split(':').flatMap((d) => [join(d, 'chromium'), join(d, 'chromium-browser')]).find((p) => existsSync(p));
export const sha256 = (s) => createHash('sha256').update(s).digest('hex');

/**
 * Starts "ratchet serve --config config"; resolves to {proc, mcp, admin}
 * once it listens, and stop() ends it.
 */
export async function serveWith(config) {
  const proc = spawn(BIN, ['serve', '--config', config], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const urls = await new Promise((ok, failed) => {
    const timer = setTimeout(() => { proc.kill('SIGKILL'); failed(new Error(`ratchet serve did not start:\n${log}`)); }, 20_000);
    proc.on('error', (err) => { clearTimeout(timer); failed(new Error(`running ${BIN} (make build, or set RATCHET_BIN): ${err.message}`)); });
    proc.on('exit', (code) => { clearTimeout(timer); failed(new Error(`ratchet serve exited (${code}):\n${log}`)); });
    proc.stderr.on('data', (b) => {
      log += b;
      const m = /mcp=(http:\/\/\S+\/mcp) admin=(http:\/\/\S+)/.exec(log);
      if (m) { clearTimeout(timer); ok({ mcp: m[1], admin: m[2] }); }
    });
  });
  proc.removeAllListeners('exit');
  proc.stderr.removeAllListeners('data');
  proc.stderr.resume();
  const stop = () => new Promise((ok) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return ok();
    proc.on('exit', ok);
    proc.kill('SIGTERM');
  });
  return { proc, ...urls, stop };
}
