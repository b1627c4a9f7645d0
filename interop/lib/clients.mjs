// One driver per client, each over streamable HTTP (bearer token), stdio
// ("ratchet mcp --stdio") or the --server bridge. A driver hands back what
// the client hands its agent: {isError, structured, texts}. A client that
// throws (as the TypeScript SDK 1.x does on a tool list or result it
// rejects) fails the step with its own message.

import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';

import { Client as Client1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as HTTP1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport as Stdio1 } from '@modelcontextprotocol/sdk/client/stdio.js';
import { Client as Client2, StreamableHTTPClientTransport as HTTP2 } from '@modelcontextprotocol/client';
import { StdioClientTransport as Stdio2 } from '@modelcontextprotocol/client/stdio';

import { tempDir } from './ratchet.mjs';

const run = promisify(execFile);

function agentView(res) {
  return {
    isError: res.isError === true,
    structured: res.structuredContent,
    texts: (res.content ?? []).filter((c) => c.type === 'text').map((c) => c.text),
  };
}

/** target: {kind: 'http', url, token} or {kind: 'stdio', command, args, env}. */
function sdkTransport(HTTP, Stdio, target) {
  if (target.kind === 'http') {
    return new HTTP(new URL(target.url), { requestInit: { headers: { Authorization: `Bearer ${target.token}` } } });
  }
  return new Stdio({ command: target.command, args: target.args, env: { ...target.env, PATH: process.env.PATH }, stderr: 'pipe' });
}

/**
 * Watches a 1.x transport: records the protocol version the server answered
 * initialize with and, when force is set, asks for that version instead of
 * the SDK's latest (the 1.x client has no option for it).
 */
function watchVersion(transport, force) {
  const seen = { version: undefined };
  const send = transport.send.bind(transport);
  let initID;
  transport.send = (msg, opts) => {
    if (msg.method === 'initialize') {
      initID = msg.id;
      if (force) msg = { ...msg, params: { ...msg.params, protocolVersion: force } };
    }
    return send(msg, opts);
  };
  let handler;
  const wrapped = (msg, extra) => {
    if (initID !== undefined && msg.id === initID && msg.result) seen.version = msg.result.protocolVersion;
    handler?.(msg, extra);
  };
  Object.defineProperty(transport, 'onmessage', {
    configurable: true,
    get: () => (handler ? wrapped : undefined),
    set: (h) => { handler = h; },
  });
  return seen;
}

/** @modelcontextprotocol/sdk 1.x; version forces a protocol version. */
export async function sdk1(target, { version } = {}) {
  const client = new Client1({ name: 'ratchet-interop-sdk1', version: '1' });
  const transport = sdkTransport(HTTP1, Stdio1, target);
  const seen = watchVersion(transport, version);
  await client.connect(transport);
  return {
    client: '@modelcontextprotocol/sdk',
    protocol: seen.version,
    listTools: async () => (await client.listTools()).tools,
    call: async (name, args) => agentView(await client.callTool({ name, arguments: args })),
    close: () => client.close(),
  };
}

/** @modelcontextprotocol/client 2.x; pin selects a 2026-era protocol version. */
export async function v2(target, { pin } = {}) {
  const client = new Client2({ name: 'ratchet-interop-v2', version: '1' },
    pin ? { versionNegotiation: { mode: { pin } } } : {});
  await client.connect(sdkTransport(HTTP2, Stdio2, target));
  return {
    client: '@modelcontextprotocol/client',
    protocol: client.getNegotiatedProtocolVersion(),
    listTools: async () => (await client.listTools()).tools,
    call: async (name, args) => agentView(await client.callTool({ name, arguments: args })),
    close: () => client.close(),
  };
}

const INSPECTOR = new URL('../node_modules/@modelcontextprotocol/inspector/clients/cli/build/index.js', import.meta.url).pathname;

/**
 * The Inspector CLI ("mcp-inspector --cli"): every call is one run of the
 * CLI, as a person or a script would use it, so it is the slow one.
 */
export async function inspector(target, { era } = {}) {
  const home = tempDir('inspector-home');
  const base = era ? ['--protocol-era', era] : [];
  if (target.kind === 'http') {
    base.push(target.url, '--transport', 'http', '--header', `Authorization: Bearer ${target.token}`);
  } else {
    // A config file carries the environment (the bridge's token) as a host would.
    const config = join(home, 'servers.json');
    writeFileSync(config, JSON.stringify({ mcpServers: { ratchet: { command: target.command, args: target.args, env: target.env ?? {} } } }));
    base.push('--config', config, '--server', 'ratchet');
  }
  const env = { ...process.env, HOME: home, MCP_CLIENT_CONFIG_PATH: join(home, 'client.json') };
  const cli = async (...args) => {
    try {
      const { stdout } = await run(process.execPath, [INSPECTOR, ...base, '--format', 'json', '-q', ...args], { env, timeout: 60_000 });
      const out = JSON.parse(stdout);
      return { code: 0, out: out.result ?? out };
    } catch (e) {
      if (e.code === undefined || typeof e.code !== 'number') throw e;
      let out;
      try { out = JSON.parse(e.stdout || e.stderr); } catch { out = { stdout: e.stdout, stderr: e.stderr }; }
      out = out.result ?? out;
      return { code: e.code, out };
    }
  };
  const driver = {
    client: '@modelcontextprotocol/inspector',
    // The CLI does not print the version it negotiated; a result of the
    // 2026 era carries the server's identity in _meta, a 2025-era one not.
    protocol: undefined,
    strict: async () => cli('--method', 'tools/list', '--strict'),
    listTools: async () => {
      const { code, out } = await cli('--method', 'tools/list');
      if (code !== 0) throw new Error(`inspector tools/list exited ${code}: ${JSON.stringify(out)}`);
      return out.tools;
    },
    call: async (name, args) => {
      const { code, out } = await cli('--method', 'tools/call', '--tool-name', name, '--tool-args-json', JSON.stringify(args));
      if (!out || !Array.isArray(out.content)) throw new Error(`inspector tools/call ${name} exited ${code}: ${JSON.stringify(out)}`);
      driver.protocol ??= out._meta?.['io.modelcontextprotocol/serverInfo'] ? '2026 era' : '2025 era';
      return agentView(out);
    },
    close: async () => {},
  };
  return driver;
}
