// An MCP host that speaks OAuth connects to Ratchet with no agent token
// configured: the TypeScript SDK 1.x's OAuth client flow (an
// OAuthClientProvider; discovery from Ratchet's 401 through its protected
// resource metadata; dynamic client registration; authorization code with
// PKCE and the resource indicator) against a real authorization server,
// oidc-provider, run here and issuing JWT access tokens for Ratchet's
// resource. Then every tool (the full scenario), and the Inspector CLI with
// the access token as its bearer token. Run by "make interop" (RATCHET_BIN
// names the binary).

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash, generateKeyPairSync } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import Provider from 'oidc-provider';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

import { inspector } from '../lib/clients.mjs';
import { ADMIN_TOKEN, AGENT_ID, BIN, approve, tempDir } from '../lib/ratchet.mjs';
import { fullScenario, shortScenario } from '../lib/scenario.mjs';

const AGENT_SCOPE = 'ratchet:agent';

/** A free loopback port (the resource's URL must be known before serve starts). */
async function freePort() {
  const srv = createServer();
  await new Promise((ok) => srv.listen(0, '127.0.0.1', ok));
  const { port } = srv.address();
  await new Promise((ok) => srv.close(ok));
  return port;
}

/**
 * oidc-provider on a loopback port, issuing JWT access tokens (RS256) for
 * the resource with the agent scope to the account AGENT_ID, whose login
 * and consent the interaction route grants at once (a person clicking
 * "allow").
 */
async function startAuthServer(resource) {
  const port = await freePort();
  const issuer = `http://127.0.0.1:${port}`;
  // A signing key of its own (oidc-provider's quick-start keys are for
  // development), and lifetimes set, as a deployment would.
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const provider = new Provider(issuer, {
    jwks: { keys: [{ ...privateKey.export({ format: 'jwk' }), kid: 'interop-1', alg: 'RS256', use: 'sig' }] },
    ttl: { Interaction: 600, Session: 3600, Grant: 3600, AccessToken: 600, AuthorizationCode: 60, RefreshToken: 3600 },
    features: {
      devInteractions: { enabled: false },
      registration: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => resource,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, indicator) => {
          if (indicator !== resource) throw new Error(`unknown resource ${indicator}`);
          return { scope: AGENT_SCOPE, audience: resource, accessTokenTTL: 600, accessTokenFormat: 'jwt', jwt: { sign: { alg: 'RS256' } } };
        },
      },
    },
    pkce: { required: () => true },
    scopes: ['openid', 'offline_access', AGENT_SCOPE],
    findAccount: (_ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  });
  const callback = provider.callback();
  const server = createServer(async (req, res) => {
    if (!req.url.startsWith('/interaction/')) return callback(req, res);
    try {
      const { prompt, params, session } = await provider.interactionDetails(req, res);
      if (prompt.name === 'login') {
        return await provider.interactionFinished(req, res, { login: { accountId: AGENT_ID } }, { mergeWithLastSubmission: false });
      }
      const grant = new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
      if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
      for (const [indicator, scopes] of Object.entries(prompt.details.missingResourceScopes ?? {})) {
        grant.addResourceScope(indicator, scopes.join(' '));
      }
      const grantId = await grant.save();
      return await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
    } catch (e) {
      res.statusCode = 500;
      res.end(String(e?.stack ?? e));
    }
  });
  await new Promise((ok) => server.listen(port, '127.0.0.1', ok));
  return { issuer, close: () => new Promise((ok) => server.close(ok)) };
}

/** "ratchet serve" trusting the issuer for agents, with only an admin token configured. */
async function startServe(issuer, mcpPort) {
  const dir = tempDir('oauth');
  const sha = (s) => createHash('sha256').update(s).digest('hex');
  const config = join(dir, 'ratchet.yaml');
  writeFileSync(config, `listen: {mcp: '127.0.0.1:${mcpPort}', admin: '127.0.0.1:0', proxy: '127.0.0.1:0'}
data_dir: ${join(dir, 'data')}
auth:
  admins:
    - {token_sha256: "${sha(ADMIN_TOKEN)}", name: interop}
  oauth:
    resource: http://127.0.0.1:${mcpPort}/mcp
    issuers:
      - {name: local, issuer: '${issuer}', discovery_url: '${issuer}/.well-known/openid-configuration', namespace: oauth, algorithms: [RS256]}
policies:
  - match: "payment.*"
    approval_threshold_micros: 100000000
    require_dimensions: [counterparty]
  - match: "db.drop.*"
    deny: true
  - match: "sms.send"
    ceilings:
      - {name: sms-per-run, limit_count: 1, window: 1h, per: run}
`);
  const proc = spawn(BIN, ['serve', '--config', config], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const urls = await new Promise((ok, failed) => {
    const timer = setTimeout(() => failed(new Error(`ratchet serve did not start:\n${log}`)), 20_000);
    proc.on('exit', (code) => { clearTimeout(timer); failed(new Error(`ratchet serve exited (${code}):\n${log}`)); });
    proc.stderr.on('data', (b) => {
      log += b;
      const m = /mcp=(http:\/\/\S+\/mcp) admin=(http:\/\/\S+)/.exec(log);
      if (m) { clearTimeout(timer); ok({ mcp: m[1], admin: m[2] }); }
    });
  });
  return { ...urls, log: () => log, stop: () => { proc.removeAllListeners('exit'); proc.kill('SIGTERM'); } };
}

/** An OAuthClientProvider as a host keeps one: in memory, its browser a function. */
class HostProvider {
  constructor(browse) { this.browse = browse; this.saved = {}; }
  get redirectUrl() { return 'http://127.0.0.1:1/callback'; }
  get clientMetadata() {
    return { client_name: 'ratchet-interop', redirect_uris: [this.redirectUrl], grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'], token_endpoint_auth_method: 'none', application_type: 'native' };
  }
  clientInformation() { return this.saved.client; }
  saveClientInformation(c) { this.saved.client = c; }
  tokens() { return this.saved.tokens; }
  saveTokens(t) { this.saved.tokens = t; }
  saveCodeVerifier(v) { this.saved.verifier = v; }
  codeVerifier() { return this.saved.verifier; }
  async redirectToAuthorization(url) { this.saved.authorizationURL = url; }
}

/**
 * The person's browser: follows the authorization server's redirects with
 * its cookies until it is sent to the redirect URI, and returns the code.
 */
async function browse(url, redirectUri) {
  const jar = new Map();
  let next = new URL(url);
  for (let i = 0; i < 10; i++) {
    if (next.href.startsWith(redirectUri)) {
      const code = next.searchParams.get('code');
      if (!code) throw new Error(`redirected without a code: ${next.href}`);
      return code;
    }
    const res = await fetch(next, { redirect: 'manual', headers: { cookie: [...jar].map(([k, v]) => `${k}=${v}`).join('; ') } });
    for (const c of res.headers.getSetCookie()) {
      const [pair] = c.split(';');
      const eq = pair.indexOf('=');
      jar.set(pair.slice(0, eq), pair.slice(eq + 1));
    }
    const loc = res.headers.get('location');
    if (!loc) throw new Error(`${next.href}: ${res.status} without a redirect: ${await res.text()}`);
    next = new URL(loc, next);
  }
  throw new Error('too many redirects');
}

let as;
let serve;
const host = new HostProvider();

before(async () => {
  const mcpPort = await freePort();
  as = await startAuthServer(`http://127.0.0.1:${mcpPort}/mcp`);
  serve = await startServe(as.issuer, mcpPort);
});

after(async () => {
  serve?.stop();
  await as?.close();
});

test('the SDK finds the authorization server from the 401 and gets a token by authorization code and PKCE', async () => {
  const client = new Client({ name: 'ratchet-interop-oauth', version: '1' });
  const first = new StreamableHTTPClientTransport(new URL(serve.mcp), { authProvider: host });
  await assert.rejects(client.connect(first), UnauthorizedError);
  const asked = host.saved.authorizationURL;
  assert.ok(asked, 'the SDK was not sent to the authorization server');
  assert.equal(asked.origin, as.issuer);
  assert.equal(asked.searchParams.get('code_challenge_method'), 'S256');
  assert.equal(asked.searchParams.get('resource'), serve.mcp);
  const code = await browse(asked, host.redirectUrl);
  await first.finishAuth(code);
  const token = host.tokens()?.access_token;
  assert.ok(token, 'no access token');
  const claims = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString());
  assert.deepEqual([claims.iss, claims.aud, claims.sub, claims.scope], [as.issuer, serve.mcp, AGENT_ID, AGENT_SCOPE]);
});

test('every tool with the access token', async () => {
  const client = new Client({ name: 'ratchet-interop-oauth', version: '1' });
  await client.connect(new StreamableHTTPClientTransport(new URL(serve.mcp), { authProvider: host }));
  const driver = {
    client: '@modelcontextprotocol/sdk',
    listTools: async () => (await client.listTools()).tools,
    call: async (name, args) => {
      const res = await client.callTool({ name, arguments: args });
      return { isError: res.isError === true, structured: res.structuredContent, texts: (res.content ?? []).filter((c) => c.type === 'text').map((c) => c.text) };
    },
  };
  await fullScenario(driver, { prefix: 'oauth', approve: (id) => approve(serve.admin, id) });
  const got = await driver.call('ratchet_list_effects', {});
  assert.ok(got.structured.effects.every((e) => e.namespace === 'oauth' && e.agent_id === AGENT_ID), 'an effect outside the token\'s namespace and agent');
  await client.close();
});

test('the Inspector CLI with the access token as its bearer token', async () => {
  const driver = await inspector({ kind: 'http', url: serve.mcp, token: host.tokens().access_token });
  await shortScenario(driver, { prefix: 'oauth-inspector' });
});

test('a bearer token that is no access token is refused with the metadata and what to fix', async () => {
  const res = await fetch(serve.mcp, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: 'Bearer not.a.token' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/list' }),
  });
  assert.equal(res.status, 401);
  assert.match(res.headers.get('www-authenticate'), /resource_metadata="http:\/\/127\.0\.0\.1:\d+\/\.well-known\/oauth-protected-resource\/mcp"/);
  const body = await res.json();
  assert.equal(body.id, 3);
  assert.match(body.error.message, /^unauthorized: /);
});
