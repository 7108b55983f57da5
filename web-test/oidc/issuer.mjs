// A real OpenID provider for kubefan's tests: panva's oidc-provider (an
// OpenID Certified implementation) served over HTTPS on 127.0.0.1, with
// fixed accounts, a login form a person or Playwright can fill in, consent
// granted without a screen, short token lifetimes, rotating refresh tokens,
// and a small admin API under /__test/ to rotate signing keys, revoke a
// user's grants, read request counters and get tokens without a browser.
//
// As a module:  const op = await startIssuer({port, cert, key, ...}); ...; await op.stop();
// As a program: node web-test/oidc/issuer.mjs --port P --cert F --key F [...]
//               prints one JSON line when ready; exits on SIGTERM, SIGINT or
//               when its standard input closes. See README.md beside this file.

import crypto from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import {execFileSync} from 'node:child_process';
import os from 'node:os';
import {fileURLToPath} from 'node:url';
import {Provider} from 'oidc-provider';

// Requests the harness makes to itself (for POST /__test/token) carry this
// header and are left out of the counters, so the counters say what the
// system under test did.
const INTERNAL = 'x-kubefan-test-internal';

export const DEFAULT_ACCOUNTS = Object.freeze({
  alice: {name: 'Alice Example', email: 'alice@example.com', email_verified: true, groups: ['team-a']},
  bob: {name: 'Bob Example', email: 'bob@example.com', email_verified: false, groups: ['team-b', 'viewers']},
});

export const DEFAULT_CLIENTS = Object.freeze([{
  client_id: 'kubefan',
  client_secret: 'kubefan-test-secret',
  redirect_uris: ['https://127.0.0.1/oidc/callback'],
  post_logout_redirect_uris: ['https://127.0.0.1/'],
}]);

const SCOPE_CLAIMS = {
  openid: ['sub'],
  email: ['email', 'email_verified'],
  profile: ['name', 'preferred_username'],
  groups: ['groups'],
};

/**
 * A new RSA-2048 private key as a JWK.
 *
 * Generated as PEM and exported from a key object made from that, not from
 * the generated key object itself: with Node 20 that export deadlocked
 * once in CI (stop 41). A garbage collection during the export ran the
 * key-generation job's destructor, which waits for the lock on the key
 * the export holds (gdb: `ExportJWKRsaKey` → GC → `~KeyGenJob` →
 * `uv_mutex_lock`), and the program never printed its ready line.
 */
export function rsaPrivateJwk() {
  const {privateKey} = crypto.generateKeyPairSync('rsa', {
    modulusLength: 2048,
    privateKeyEncoding: {type: 'pkcs8', format: 'pem'},
    publicKeyEncoding: {type: 'spki', format: 'pem'},
  });
  return crypto.createPrivateKey(privateKey).export({format: 'jwk'});
}

function rsaSigningKey() {
  const jwk = rsaPrivateJwk();
  jwk.kid = `k-${crypto.randomBytes(6).toString('base64url')}`;
  jwk.alg = 'RS256';
  jwk.use = 'sig';
  return jwk;
}

function publicJwk({d, p, q, dp, dq, qi, ...pub}) { // eslint-disable-line no-unused-vars
  return pub;
}

function html(s) {
  return String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function page(title, body) {
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>${html(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font-family:sans-serif;max-width:22rem;margin:3rem auto}label,input,button{display:block;width:100%;margin:.4rem 0}.error{color:#b00}</style>
</head><body><h1>${html(title)}</h1>${body}</body></html>`;
}

// The provider's storage: one Map per issuer (oidc-provider's own memory
// adapter keeps one store per process), so that /__test/revoke can find
// everything that belongs to an account and two issuers in one process
// stay apart.
class Store {
  constructor() {
    this.entries = new Map(); // `${model}:${id}` -> {model, id, payload, expiresAt}
  }

  live() {
    const now = Date.now();
    for (const [k, e] of this.entries) if (e.expiresAt <= now) this.entries.delete(k);
    return this.entries.values();
  }

  adapterFor(model) {
    const store = this;
    const key = (id) => `${model}:${id}`;
    const get = (id) => {
      const e = store.entries.get(key(id));
      if (!e) return undefined;
      if (e.expiresAt <= Date.now()) {
        store.entries.delete(key(id));
        return undefined;
      }
      return e.payload;
    };
    return {
      async upsert(id, payload, expiresIn) {
        const expiresAt = typeof expiresIn === 'number' ? Date.now() + expiresIn * 1000 : Infinity;
        store.entries.set(key(id), {model, id, payload, expiresAt});
      },
      async find(id) {
        return get(id);
      },
      async findByUid(uid) {
        for (const e of store.live()) if (e.model === model && e.payload.uid === uid) return e.payload;
        return undefined;
      },
      async findByUserCode(userCode) {
        for (const e of store.live()) if (e.model === model && e.payload.userCode === userCode) return e.payload;
        return undefined;
      },
      async consume(id) {
        const p = get(id);
        if (p) p.consumed = Math.floor(Date.now() / 1000);
      },
      async destroy(id) {
        store.entries.delete(key(id));
      },
      async revokeByGrantId(grantId) {
        for (const e of store.live()) {
          if (e.model === model && e.payload.grantId === grantId) store.entries.delete(`${e.model}:${e.id}`);
        }
      },
    };
  }

  // Everything issued to `sub`: its grants, every token of those grants,
  // and (when `sessions`) its sign-in sessions at the provider.
  revokeAccount(sub, {sessions = true} = {}) {
    const grants = new Set();
    for (const e of this.live()) if (e.model === 'Grant' && e.payload.accountId === sub) grants.add(e.id);
    const removed = {};
    for (const e of [...this.live()]) {
      const ours = (e.model === 'Grant' && grants.has(e.id))
        || (e.model !== 'Grant' && e.model !== 'Session' && (grants.has(e.payload.grantId) || e.payload.accountId === sub))
        || (sessions && e.model === 'Session' && e.payload.accountId === sub);
      if (ours) {
        this.entries.delete(`${e.model}:${e.id}`);
        removed[e.model] = (removed[e.model] || 0) + 1;
      }
    }
    return removed;
  }
}

function readBody(req, limit = 64 * 1024) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > limit) {
        reject(new Error('body too large'));
        req.destroy();
      } else {
        chunks.push(c);
      }
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function sendJson(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, {'content-type': 'application/json', 'cache-control': 'no-store', 'content-length': Buffer.byteLength(text)});
  res.end(text);
}

function sendHtml(res, status, text) {
  res.writeHead(status, {'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store', 'content-length': Buffer.byteLength(text)});
  res.end(text);
}

function emptyStats() {
  return {
    discovery: 0,
    jwks: 0,
    authorization: 0,
    token: 0,
    userinfo: 0,
    end_session: 0,
    revocation: 0,
    logins: 0,
    failed_logins: 0,
    token_by_grant_type: {},
    refreshes: {ok: 0, failed: 0},
    id_tokens_issued: 0,
  };
}

/**
 * Starts the provider. Options (all optional but cert and key):
 *   host            '127.0.0.1' (the only address it binds; the issuer is https://HOST:PORT)
 *   port            0 = any free port
 *   cert, key       PEM text, or paths with certFile/keyFile
 *   certFile, keyFile
 *   ca              PEM text of the CA that signed cert (used by clients of this module only)
 *   accounts        {login: {email, email_verified, groups, name, ...}}; the login is the `sub`
 *   clients         [{client_id, client_secret?, token_endpoint_auth_method?, redirect_uris,
 *                     post_logout_redirect_uris?, grant_types?}]
 *   idTokenTtl      seconds (default 60)
 *   accessTokenTtl  seconds (default 60)
 *   refreshTokenTtl seconds (default 3600)
 *   sessionTtl      seconds (default 3600), the sign-in session at the provider
 *   logoutPrompt    true (default): end_session shows "Sign out?" with a button;
 *                   false: the page submits itself
 *   verbose         false (default); true: the provider's errors on stderr
 */
export async function startIssuer(opts = {}) {
  const host = opts.host || '127.0.0.1';
  const cert = opts.cert || fs.readFileSync(opts.certFile, 'utf8');
  const key = opts.key || fs.readFileSync(opts.keyFile, 'utf8');
  const accounts = structuredClone(opts.accounts || DEFAULT_ACCOUNTS);
  const clients = (opts.clients || DEFAULT_CLIENTS).map(normalizeClient);
  const ttl = {
    idToken: num(opts.idTokenTtl, 60),
    accessToken: num(opts.accessTokenTtl, 60),
    refreshToken: num(opts.refreshTokenTtl, 3600),
    session: num(opts.sessionTtl, 3600),
  };
  const logoutPrompt = opts.logoutPrompt !== false;
  const verbose = opts.verbose === true;
  const started = performance.now();

  const store = new Store();
  const cookieKeys = [crypto.randomBytes(32).toString('base64url')];
  let signingKeys = [rsaSigningKey()];
  let stats = emptyStats();
  // code -> ttl override for POST /__test/token?ttl=S
  const ttlByCode = new Map();
  let provider;
  let internalAgent;

  const server = https.createServer({cert, key}, (req, res) => {
    handle(req, res).catch((err) => {
      if (!res.headersSent) sendJson(res, 500, {error: 'server_error', error_description: String(err?.message || err)});
      else res.destroy();
    });
  });
  const sockets = new Set();
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port || 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const {port} = server.address();
  const issuer = `https://${host}:${port}`;

  function build() {
    const p = new Provider(issuer, {
      adapter: (model) => store.adapterFor(model),
      clients: clients.map(({client_id, client_secret, token_endpoint_auth_method, redirect_uris, post_logout_redirect_uris, grant_types}) => ({
        client_id,
        ...(client_secret ? {client_secret} : {}),
        token_endpoint_auth_method,
        redirect_uris,
        post_logout_redirect_uris,
        grant_types,
        response_types: ['code'],
        id_token_signed_response_alg: 'RS256',
      })),
      jwks: {keys: signingKeys},
      cookies: {keys: cookieKeys},
      findAccount: async (ctx, sub) => {
        const a = Object.hasOwn(accounts, sub) ? accounts[sub] : undefined;
        if (!a) return undefined;
        return {
          accountId: sub,
          async claims() {
            return {preferred_username: sub, ...a, sub};
          },
        };
      },
      claims: opts.claims || SCOPE_CLAIMS,
      scopes: ['openid', 'offline_access', ...Object.keys(opts.claims || SCOPE_CLAIMS).filter((s) => s !== 'openid')],
      // Claims of the granted scopes go into the id_token too, not only to
      // userinfo: kubefan maps email/groups from the id_token alone.
      conformIdTokenClaims: false,
      responseTypes: ['code'],
      pkce: {required: () => true},
      // A refresh token with every code the client exchanges when it may use
      // the refresh_token grant, offline_access asked for or not.
      issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
      rotateRefreshToken: true,
      // Consent is never asked: the grant covers whatever the client asks for.
      loadExistingGrant: async (ctx) => {
        const accountId = ctx.oidc.session?.accountId;
        if (!accountId) return undefined;
        const clientId = ctx.oidc.client.clientId;
        const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(clientId);
        let grant = grantId ? await ctx.oidc.provider.Grant.find(grantId) : undefined;
        if (!grant || grant.accountId !== accountId) grant = new ctx.oidc.provider.Grant({accountId, clientId});
        grant.addOIDCScope([...(ctx.oidc.requestParamOIDCScopes || [])].join(' ') || 'openid');
        const claims = ctx.oidc.requestParamClaims;
        if (claims?.size) grant.addOIDCClaims([...claims]);
        await grant.save();
        return grant;
      },
      ttl: {
        AccessToken: (ctx) => overrideTtl(ctx) ?? ttl.accessToken,
        AuthorizationCode: 60,
        IdToken: (ctx) => overrideTtl(ctx) ?? ttl.idToken,
        RefreshToken: () => ttl.refreshToken,
        Interaction: 600,
        Session: () => ttl.session,
        Grant: () => Math.max(ttl.refreshToken, ttl.session),
      },
      clientBasedCORS: () => true,
      features: {
        devInteractions: {enabled: false},
        revocation: {enabled: true, allowedPolicy: async () => true},
        rpInitiatedLogout: {
          enabled: true,
          logoutSource: async (ctx, form) => {
            ctx.type = 'html';
            ctx.body = page('Sign out', `${form}
<p>Sign out of ${html(issuer)}?</p>
<button id="logout-yes" type="submit" form="op.logoutForm" name="logout" value="yes" autofocus>Yes, sign me out</button>
<button id="logout-no" type="submit" form="op.logoutForm">No, stay signed in</button>
${logoutPrompt ? '' : `<script>document.getElementById('logout-yes').click()</script>`}`);
          },
          postLogoutSuccessSource: async (ctx) => {
            ctx.type = 'html';
            ctx.body = page('Signed out', '<p id="signed-out">You are signed out.</p>');
          },
        },
      },
      interactions: {url: (ctx, interaction) => `/interaction/${interaction.uid}`},
      renderError: async (ctx, out) => {
        ctx.type = 'html';
        ctx.body = page('Error', `<p id="error" class="error">${html(out.error)}: ${html(out.error_description || '')}</p>`);
      },
    });
    // TLS ends in this process, so the provider sees https itself and no
    // proxy setting is needed (it would be for a TLS-terminating proxy).
    p.proxy = false;

    p.on('grant.success', (ctx) => {
      if (ctx.get(INTERNAL)) return;
      const gt = ctx.oidc.params?.grant_type || 'unknown';
      (stats.token_by_grant_type[gt] ||= {ok: 0, failed: 0}).ok++;
      if (gt === 'refresh_token') stats.refreshes.ok++;
      if (ctx.body?.id_token) stats.id_tokens_issued++;
    });
    p.on('grant.error', (ctx) => {
      if (ctx.get(INTERNAL)) return;
      const gt = ctx.oidc?.params?.grant_type || 'unknown';
      (stats.token_by_grant_type[gt] ||= {ok: 0, failed: 0}).failed++;
      if (gt === 'refresh_token') stats.refreshes.failed++;
    });
    if (verbose) {
      for (const ev of ['server_error', 'grant.error', 'authorization.error', 'end_session.error']) {
        p.on(ev, (ctx, err) => console.error(`oidc ${ev}:`, err?.message || err, err?.error_description || ''));
      }
    }
    return p;
  }

  function overrideTtl(ctx) {
    const code = ctx?.oidc?.entities?.AuthorizationCode?.jti;
    return code ? ttlByCode.get(code) : undefined;
  }

  const ROUTE_STATS = {
    '/.well-known/openid-configuration': 'discovery',
    '/jwks': 'jwks',
    '/auth': 'authorization',
    '/token': 'token',
    '/me': 'userinfo',
    '/session/end': 'end_session',
    '/token/revocation': 'revocation',
  };

  async function handle(req, res) {
    const url = new URL(req.url, issuer);
    const internal = Boolean(req.headers[INTERNAL]);
    if (url.pathname.startsWith('/__test/')) return admin(req, res, url);
    if (!internal && ROUTE_STATS[url.pathname]) stats[ROUTE_STATS[url.pathname]]++;

    const m = /^\/interaction\/([\w-]+)(\/login|\/abort)?$/.exec(url.pathname);
    if (m) return interaction(req, res, m[2], internal);
    return provider.callback()(req, res);
  }

  // The sign-in page: a login name from `accounts` and any password.
  async function interaction(req, res, action, internal) {
    let details;
    try {
      details = await provider.interactionDetails(req, res);
    } catch (err) {
      return sendHtml(res, 400, page('Error', `<p id="error" class="error">${html(err.message)}</p>`));
    }
    const {uid, prompt, params} = details;

    if (action === '/abort') {
      return provider.interactionFinished(req, res, {error: 'access_denied', error_description: 'End-User aborted interaction'}, {mergeWithLastSubmission: false});
    }

    if (prompt.name === 'consent') {
      // Only reached when the client asks for prompt=consent: granted at once.
      const {grantId, session} = details;
      let grant = grantId ? await provider.Grant.find(grantId) : undefined;
      grant ||= new provider.Grant({accountId: session.accountId, clientId: params.client_id});
      if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
      if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
      for (const [indicator, scope] of Object.entries(prompt.details.missingResourceScopes || {})) {
        grant.addResourceScope(indicator, scope.join(' '));
      }
      return provider.interactionFinished(req, res, {consent: {grantId: await grant.save()}}, {mergeWithLastSubmission: true});
    }
    if (prompt.name !== 'login') {
      return sendHtml(res, 501, page('Error', `<p id="error" class="error">prompt ${html(prompt.name)} not implemented</p>`));
    }

    let error = '';
    let login = params.login_hint || '';
    if (action === '/login' && req.method === 'POST') {
      const form = new URLSearchParams(await readBody(req));
      login = (form.get('login') || '').trim();
      if (Object.hasOwn(accounts, login)) {
        if (!internal) stats.logins++;
        return provider.interactionFinished(req, res, {login: {accountId: login}}, {mergeWithLastSubmission: false});
      }
      if (!internal) stats.failed_logins++;
      error = `<p id="login-error" class="error">No account named ${html(JSON.stringify(login))}.</p>`;
    }
    return sendHtml(res, 200, page('Sign in', `${error}
<p>to <b id="client-id">${html(params.client_id)}</b> at ${html(issuer)}</p>
<form id="login-form" method="post" action="/interaction/${html(uid)}/login" autocomplete="off">
<label for="login">Login name</label><input id="login" name="login" required autofocus value="${html(login)}">
<label for="password">Password (anything)</label><input id="password" name="password" type="password">
<button id="submit" type="submit">Sign in</button>
</form>
<p><a id="abort" href="/interaction/${html(uid)}/abort">Cancel</a></p>`));
  }

  async function admin(req, res, url) {
    const q = url.searchParams;
    const route = `${req.method} ${url.pathname}`;
    switch (route) {
      case 'GET /__test/stats':
        return sendJson(res, 200, stats);
      case 'POST /__test/stats/reset':
        stats = emptyStats();
        return sendJson(res, 200, stats);
      case 'GET /__test/keys':
        return sendJson(res, 200, {signing: signingKeys[0].kid, kids: signingKeys.map((k) => k.kid)});
      case 'POST /__test/rotate-keys':
        return sendJson(res, 200, rotateKeys({keep: q.get('keep') !== '0'}));
      case 'POST /__test/revoke': {
        const sub = q.get('sub');
        if (!sub) return sendJson(res, 400, {error: 'sub is required'});
        return sendJson(res, 200, revoke(sub, {sessions: q.get('sessions') !== '0'}));
      }
      case 'POST /__test/ttl': {
        for (const [param, field] of [['id_token', 'idToken'], ['access_token', 'accessToken'], ['refresh_token', 'refreshToken'], ['session', 'session']]) {
          if (q.has(param)) ttl[field] = num(q.get(param));
        }
        return sendJson(res, 200, {...ttl});
      }
      case 'POST /__test/token': {
        try {
          const t = await mintTokens({
            sub: q.get('sub'),
            clientId: q.get('client_id') || undefined,
            ttl: q.has('ttl') ? num(q.get('ttl')) : undefined,
            scope: q.get('scope') || undefined,
            nonce: q.get('nonce') || undefined,
            offline: q.get('offline') === '1',
          });
          return sendJson(res, 200, t);
        } catch (err) {
          return sendJson(res, err.status || 400, {error: err.code || 'failed', error_description: err.message});
        }
      }
      default:
        return sendJson(res, 404, {error: 'not_found', routes: [
          'GET /__test/stats', 'POST /__test/stats/reset', 'GET /__test/keys', 'POST /__test/rotate-keys?keep=1|0',
          'POST /__test/revoke?sub=S[&sessions=0]', 'POST /__test/ttl?id_token=S&access_token=S&refresh_token=S&session=S',
          'POST /__test/token?sub=S[&client_id=C&ttl=S&scope=..&nonce=..&offline=1]']});
    }
  }

  // A new signing key, first in the set so new tokens carry its kid; the
  // old ones stay in the JWKS (keep) or go. oidc-provider reads its key
  // set once, when built, so a new Provider is built on the same storage
  // and cookie keys: sessions, grants and tokens carry over.
  function rotateKeys({keep = true} = {}) {
    const fresh = rsaSigningKey();
    signingKeys = keep ? [fresh, ...signingKeys] : [fresh];
    provider = build();
    return {signing: fresh.kid, kids: signingKeys.map((k) => k.kid)};
  }

  function revoke(sub, {sessions = true} = {}) {
    return {sub, removed: store.revokeAccount(sub, {sessions})};
  }

  async function mintTokens({sub, clientId, ttl: ttlOverride, scope, nonce, offline}) {
    if (!sub || !Object.hasOwn(accounts, sub)) {
      throw Object.assign(new Error(`no account ${JSON.stringify(sub)}`), {code: 'invalid_request'});
    }
    const client = clientId ? clients.find((c) => c.client_id === clientId) : clients[0];
    if (!client) throw Object.assign(new Error(`no client ${JSON.stringify(clientId)}`), {code: 'invalid_client'});
    // The harness calls its own socket: no certificate check is needed there.
    internalAgent ||= new https.Agent({keepAlive: false, rejectUnauthorized: false});
    const result = await authorizationCodeFlow({
      issuer,
      client,
      login: sub,
      scope: offline ? `${scope || 'openid email profile groups'} offline_access` : scope,
      prompt: offline ? 'consent' : undefined,
      nonce,
      agent: internalAgent,
      headers: {[INTERNAL]: '1'},
      beforeExchange: (code) => {
        if (ttlOverride !== undefined) ttlByCode.set(code, ttlOverride);
      },
    });
    ttlByCode.clear();
    return result;
  }

  provider = build();
  const startupMs = performance.now() - started;

  return {
    issuer,
    port,
    host,
    ca: opts.ca,
    clients,
    accounts,
    startupMs,
    get stats() {
      return structuredClone(stats);
    },
    get kid() {
      return signingKeys[0].kid;
    },
    jwks: () => ({keys: signingKeys.map(publicJwk)}),
    rotateKeys,
    revoke,
    mintTokens,
    setTtl(t) {
      Object.assign(ttl, t);
    },
    async stop() {
      internalAgent?.destroy();
      await new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections?.();
        for (const s of sockets) s.destroy();
      });
    },
  };
}

function num(v, dflt) {
  if (v === undefined || v === null || v === '') return dflt;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`not a positive number of seconds: ${v}`);
  return n;
}

function normalizeClient(c) {
  if (!c.client_id) throw new Error('a client needs client_id');
  if (!Array.isArray(c.redirect_uris) || !c.redirect_uris.length) throw new Error(`client ${c.client_id} needs redirect_uris`);
  return {
    client_id: c.client_id,
    client_secret: c.client_secret || undefined,
    token_endpoint_auth_method: c.token_endpoint_auth_method || (c.client_secret ? 'client_secret_basic' : 'none'),
    redirect_uris: [...c.redirect_uris],
    post_logout_redirect_uris: [...(c.post_logout_redirect_uris || [])],
    grant_types: [...(c.grant_types || ['authorization_code', 'refresh_token'])],
  };
}

// ---------------------------------------------------------------------------
// A headless relying party: HTTP requests with a cookie jar, the way a
// browser goes through the flow, used by POST /__test/token and the tests.

/** One HTTPS request; resolves {status, headers, body, json()}. No redirects followed. */
export function request(url, {method = 'GET', headers = {}, body, agent, ca, timeoutMs = 10000} = {}) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = https.request(u, {method, headers, agent, ca, timeout: timeoutMs}, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        resolve({
          status: res.statusCode,
          headers: res.headers,
          body: text,
          json: () => JSON.parse(text),
        });
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${url}: no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

/** Cookies by name with their path, as a browser keeps them for one host. */
export class CookieJar {
  constructor() {
    this.cookies = new Map();
  }

  take(setCookie = []) {
    for (const line of [].concat(setCookie)) {
      const [pair, ...attrs] = line.split(';');
      const eq = pair.indexOf('=');
      const name = pair.slice(0, eq).trim();
      const value = pair.slice(eq + 1).trim();
      let cpath = '/';
      let expired = false;
      for (const a of attrs) {
        const [k, v = ''] = a.split('=');
        const lk = k.trim().toLowerCase();
        if (lk === 'path') cpath = v.trim() || '/';
        if (lk === 'expires' && Date.parse(v) <= Date.now()) expired = true;
        if (lk === 'max-age' && Number(v) <= 0) expired = true;
      }
      const id = `${name};${cpath}`;
      if (expired || value === '') this.cookies.delete(id);
      else this.cookies.set(id, {name, value, path: cpath});
    }
  }

  header(pathname) {
    return [...this.cookies.values()]
      .filter((c) => pathname === c.path || pathname.startsWith(c.path.endsWith('/') ? c.path : `${c.path}/`))
      .sort((a, b) => b.path.length - a.path.length)
      .map((c) => `${c.name}=${c.value}`)
      .join('; ');
  }
}

export function pkcePair() {
  const verifier = crypto.randomBytes(32).toString('base64url');
  const challenge = crypto.createHash('sha256').update(verifier).digest('base64url');
  return {verifier, challenge};
}

export function clientAuth(client, form) {
  const headers = {'content-type': 'application/x-www-form-urlencoded'};
  switch (client.token_endpoint_auth_method) {
    case 'client_secret_basic':
      headers.authorization = `Basic ${Buffer.from(`${encodeURIComponent(client.client_id)}:${encodeURIComponent(client.client_secret)}`).toString('base64')}`;
      break;
    case 'client_secret_post':
      form.set('client_id', client.client_id);
      form.set('client_secret', client.client_secret);
      break;
    default:
      form.set('client_id', client.client_id);
  }
  return headers;
}

/**
 * The authorization-code flow with PKCE, without a browser: GET the
 * authorization endpoint, follow the provider to its sign-in page, post the
 * login name, follow it back to the redirect_uri (never contacted), check
 * `state`, exchange the code. Returns the token response plus
 * {code, state, nonce, code_verifier, steps} (steps: the requests made).
 * Pass a `jar` to keep the provider's cookies (its sign-in session) for a
 * later request, as a browser would.
 */
export async function authorizationCodeFlow({
  issuer, client, login, password = 'anything', scope = 'openid email profile groups', prompt, nonce,
  state, redirectUri, agent, ca, headers = {}, beforeExchange, extraParams = {}, jar = new CookieJar(),
}) {
  const {verifier, challenge} = pkcePair();
  nonce ||= crypto.randomBytes(12).toString('base64url');
  state ||= crypto.randomBytes(12).toString('base64url');
  redirectUri ||= client.redirect_uris[0];
  const steps = [];

  const go = async (url, init = {}) => {
    const u = new URL(url, issuer);
    const cookie = jar.header(u.pathname);
    const res = await request(u, {...init, agent, ca, headers: {...headers, ...(init.headers || {}), ...(cookie ? {cookie} : {})}});
    jar.take(res.headers['set-cookie']);
    steps.push(`${init.method || 'GET'} ${u.pathname} -> ${res.status}`);
    return res;
  };

  const auth = new URL('/auth', issuer);
  for (const [k, v] of Object.entries({
    response_type: 'code', client_id: client.client_id, redirect_uri: redirectUri, scope, state, nonce,
    code_challenge: challenge, code_challenge_method: 'S256', ...(prompt ? {prompt} : {}), ...extraParams,
  })) auth.searchParams.set(k, v);

  let res = await go(auth);
  let code;
  for (let hop = 0; hop < 12; hop++) {
    if (res.status === 200 && /id="login-form"/.test(res.body)) {
      const action = /<form id="login-form" method="post" action="([^"]+)"/.exec(res.body)[1].replace(/&#(\d+);/g, (_, c) => String.fromCharCode(c));
      res = await go(action, {
        method: 'POST',
        headers: {'content-type': 'application/x-www-form-urlencoded'},
        body: new URLSearchParams({login, password}).toString(),
      });
      if (res.status === 200 && /id="login-error"/.test(res.body)) {
        throw Object.assign(new Error(`sign-in refused for ${login}`), {code: 'access_denied'});
      }
      continue;
    }
    if (![302, 303].includes(res.status) || !res.headers.location) {
      throw Object.assign(new Error(`unexpected answer in the flow (${steps.join(', ')}): ${res.status} ${res.body.slice(0, 300)}`), {code: 'flow_failed'});
    }
    const loc = new URL(res.headers.location, issuer);
    if (loc.href.startsWith(redirectUri.split('?')[0]) && loc.origin + loc.pathname === new URL(redirectUri).origin + new URL(redirectUri).pathname) {
      const p = loc.searchParams;
      if (p.get('error')) throw Object.assign(new Error(`${p.get('error')}: ${p.get('error_description')}`), {code: p.get('error')});
      if (p.get('state') !== state) throw Object.assign(new Error(`state came back as ${p.get('state')}, sent ${state}`), {code: 'state_mismatch'});
      if (p.get('iss') && p.get('iss') !== issuer) throw Object.assign(new Error(`iss came back as ${p.get('iss')}`), {code: 'iss_mismatch'});
      code = p.get('code');
      steps.push(`redirect_uri <- code`);
      break;
    }
    res = await go(loc);
  }
  if (!code) throw Object.assign(new Error(`no code after ${steps.length} steps: ${steps.join(', ')}`), {code: 'flow_failed'});

  await beforeExchange?.(code);
  const form = new URLSearchParams({grant_type: 'authorization_code', code, redirect_uri: redirectUri, code_verifier: verifier});
  const tokenHeaders = clientAuth(client, form);
  const tokenRes = await go('/token', {method: 'POST', headers: tokenHeaders, body: form.toString()});
  if (tokenRes.status !== 200) {
    throw Object.assign(new Error(`token endpoint: ${tokenRes.status} ${tokenRes.body}`), {code: 'token_failed'});
  }
  return {...tokenRes.json(), code, state, nonce, code_verifier: verifier, steps};
}

/** grant_type=refresh_token; resolves the provider's answer {status, body}. */
export async function refresh({issuer, client, refreshToken, agent, ca, headers = {}}) {
  const form = new URLSearchParams({grant_type: 'refresh_token', refresh_token: refreshToken});
  const h = clientAuth(client, form);
  const res = await request(new URL('/token', issuer), {method: 'POST', headers: {...headers, ...h}, body: form.toString(), agent, ca});
  return {status: res.status, body: res.json()};
}

// ---------------------------------------------------------------------------
// Throwaway certificates with the openssl CLI: a CA and a leaf for
// 127.0.0.1 and localhost signed by it, written into `dir`.

export function makeTestCertificates(dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kubefan-oidc-'))) {
  const f = (n) => path.join(dir, n);
  const run = (args) => execFileSync('openssl', args, {stdio: ['ignore', 'ignore', 'pipe']});
  run(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('ca.key'), '-out', f('ca.pem'),
    '-days', '2', '-subj', '/CN=kubefan test CA',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign']);
  run(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('key.pem'), '-out', f('leaf.csr'), '-subj', '/CN=127.0.0.1']);
  fs.writeFileSync(f('leaf.ext'), 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n'
    + 'extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n');
  run(['x509', '-req', '-in', f('leaf.csr'), '-CA', f('ca.pem'), '-CAkey', f('ca.key'), '-CAcreateserial',
    '-out', f('cert.pem'), '-days', '2', '-extfile', f('leaf.ext')]);
  return {dir, ca: f('ca.pem'), cert: f('cert.pem'), key: f('key.pem')};
}

// ---------------------------------------------------------------------------
// The program.

const USAGE = `usage: node issuer.mjs [--port P] [--cert F --key F] [options]
  --port P                    port on 127.0.0.1 (default 0: any free one)
  --cert F, --key F           PEM certificate (chain) and key; without them a
                              throwaway CA and leaf are made with openssl and
                              the CA's path is in the ready line ("ca")
  --id-token-ttl S            id_token lifetime, seconds (default 60)
  --access-token-ttl S        access token lifetime (default 60)
  --refresh-token-ttl S       refresh token lifetime (default 3600)
  --session-ttl S             sign-in session at the provider (default 3600)
  --client-id ID              a client (repeatable; the options below apply
  --client-secret S             to the latest --client-id; no secret: a
  --auth-method M               public client, token_endpoint_auth_method none)
  --redirect-uri U            (repeatable)
  --post-logout-redirect-uri U (repeatable)
  --clients JSON|@FILE        the clients as a JSON array instead
  --accounts JSON|@FILE       {"alice": {"email": ..., "email_verified": true, "groups": [...]}, ...}
  --no-logout-prompt          end_session signs out without asking
  --ignore-stdin              do not exit when stdin closes (SIGTERM only)
  --verbose                   oidc-provider's notices and errors on stderr
Prints one JSON line when ready: {"issuer", "port", "pid", "clients", "accounts", "ca", "startup_ms", "admin"}.`;

function parseArgs(argv) {
  const o = {clients: []};
  let current;
  const json = (v) => JSON.parse(v.startsWith('@') ? fs.readFileSync(v.slice(1), 'utf8') : v);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    switch (a) {
      case '--port': o.port = Number(val()); break;
      case '--host': o.host = val(); break;
      case '--cert': o.certFile = val(); break;
      case '--key': o.keyFile = val(); break;
      case '--id-token-ttl': o.idTokenTtl = num(val()); break;
      case '--access-token-ttl': o.accessTokenTtl = num(val()); break;
      case '--refresh-token-ttl': o.refreshTokenTtl = num(val()); break;
      case '--session-ttl': o.sessionTtl = num(val()); break;
      case '--client-id': current = {client_id: val(), redirect_uris: [], post_logout_redirect_uris: []}; o.clients.push(current); break;
      case '--client-secret':
      case '--auth-method':
      case '--redirect-uri':
      case '--post-logout-redirect-uri': {
        if (!current) throw new Error(`${a} comes after --client-id`);
        const v = val();
        if (a === '--client-secret') current.client_secret = v;
        if (a === '--auth-method') current.token_endpoint_auth_method = v;
        if (a === '--redirect-uri') current.redirect_uris.push(v);
        if (a === '--post-logout-redirect-uri') current.post_logout_redirect_uris.push(v);
        break;
      }
      case '--clients': o.clients.push(...json(val())); break;
      case '--accounts': o.accounts = json(val()); break;
      case '--no-logout-prompt': o.logoutPrompt = false; break;
      case '--ignore-stdin': o.ignoreStdin = true; break;
      case '--verbose': o.verbose = true; break;
      case '-h': case '--help': process.stdout.write(`${USAGE}\n`); process.exit(0); break;
      default: throw new Error(`unknown argument ${a}\n${USAGE}`);
    }
  }
  if (!o.clients.length) delete o.clients;
  return o;
}

async function main() {
  const t0 = performance.now();
  // oidc-provider prints its notices with console.info (stdout): stdout is
  // kept for the one ready line.
  const quietConsole = () => {};
  const o = parseArgs(process.argv.slice(2));
  const ignoreStdin = o.ignoreStdin;
  delete o.ignoreStdin;
  console.info = o.verbose ? (...a) => console.error(...a) : quietConsole;
  console.log = console.info;
  let caFile;
  if (!o.certFile || !o.keyFile) {
    if (o.certFile || o.keyFile) throw new Error('--cert and --key go together');
    const made = makeTestCertificates();
    o.certFile = made.cert;
    o.keyFile = made.key;
    caFile = made.ca;
  }
  const op = await startIssuer(o);
  const ready = {
    issuer: op.issuer,
    port: op.port,
    pid: process.pid,
    discovery: `${op.issuer}/.well-known/openid-configuration`,
    clients: op.clients.map((c) => ({client_id: c.client_id, token_endpoint_auth_method: c.token_endpoint_auth_method, redirect_uris: c.redirect_uris})),
    accounts: Object.keys(op.accounts),
    ca: caFile || null,
    kid: op.kid,
    startup_ms: Math.round(performance.now() - t0),
    admin: `${op.issuer}/__test/`,
  };
  process.stdout.write(`${JSON.stringify(ready)}\n`);

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await op.stop();
    if (caFile) fs.rmSync(path.dirname(caFile), {recursive: true, force: true});
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  if (!ignoreStdin) {
    process.stdin.on('end', stop);
    process.stdin.on('close', stop);
    process.stdin.resume();
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err) => {
    process.stderr.write(`issuer: ${err?.stack || err}\n`);
    process.exit(2);
  });
}
