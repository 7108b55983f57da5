// The test OpenID provider (issuer.mjs) checked the way kubefan will use it,
// with no browser: discovery, the authorization-code flow with PKCE through
// the sign-in form, the id_token verified against the JWKS with `jose`,
// rotating refresh tokens, key rotation, revocation, RP-initiated logout,
// the counters, and the program's start and stop.
//
// Run: cd web-test && node --test oidc/issuer.test.mjs

import assert from 'node:assert/strict';
import {spawn} from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import {after, before, describe, test} from 'node:test';
import {fileURLToPath} from 'node:url';
import {createRemoteJWKSet, customFetch, decodeJwt, decodeProtectedHeader, errors as joseErrors, jwtVerify} from 'jose';
import {
  CookieJar, authorizationCodeFlow, makeTestCertificates, pkcePair, refresh, request, startIssuer,
} from './issuer.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ID_TOKEN_TTL = 10;

const CLIENTS = [
  {client_id: 'kubefan', client_secret: 'throwaway-basic', redirect_uris: ['https://127.0.0.1:9443/oidc/callback'],
    post_logout_redirect_uris: ['https://127.0.0.1:9443/signed-out']},
  {client_id: 'kubefan-post', client_secret: 'throwaway-post', token_endpoint_auth_method: 'client_secret_post',
    redirect_uris: ['https://localhost:9443/oidc/callback']},
  {client_id: 'kubefan-public', redirect_uris: ['http://127.0.0.1:8080/callback']},
];
const ACCOUNTS = {
  alice: {email: 'alice@example.com', email_verified: true, groups: ['team-a']},
  bob: {email: 'bob@example.com', email_verified: false, groups: ['team-b', 'viewers']},
  carol: {email: 'carol@example.com', email_verified: true, groups: []},
};

let certs;
let caPem;
let op;
let startupMs;

before(() => {
  certs = makeTestCertificates();
  caPem = fs.readFileSync(certs.ca, 'utf8');
});

after(async () => {
  await op?.stop();
  if (certs) fs.rmSync(certs.dir, {recursive: true, force: true});
});

const get = (url, opts = {}) => request(url, {ca: caPem, ...opts});
const post = (url, opts = {}) => request(url, {method: 'POST', ca: caPem, ...opts});
const admin = async (pathAndQuery, method = 'POST') => {
  const res = await request(new URL(pathAndQuery, op.issuer), {method, ca: caPem});
  assert.equal(res.status, 200, res.body);
  return res.json();
};
const client = (id) => op.clients.find((c) => c.client_id === id);

// A fresh remote key set each time: every verification reads /jwks, as a
// verifier with a cold cache would.
function verify(idToken, audience = 'kubefan') {
  const jwks = createRemoteJWKSet(new URL('/jwks', op.issuer), {
    [customFetch]: async (url) => {
      const res = await get(url);
      return new Response(res.body, {status: res.status, headers: {'content-type': res.headers['content-type']}});
    },
  });
  return jwtVerify(idToken, jwks, {issuer: op.issuer, audience, algorithms: ['RS256']});
}

describe('the test OpenID provider', () => {
  before(async () => {
    const t0 = performance.now();
    op = await startIssuer({certFile: certs.cert, keyFile: certs.key, clients: CLIENTS, accounts: ACCOUNTS,
      idTokenTtl: ID_TOKEN_TTL, accessTokenTtl: ID_TOKEN_TTL});
    startupMs = performance.now() - t0;
  });

  test('serves discovery over HTTPS that the test CA vouches for', async (t) => {
    t.diagnostic(`startIssuer took ${startupMs.toFixed(0)} ms`);
    assert.match(op.issuer, /^https:\/\/127\.0\.0\.1:\d+$/);
    const res = await get(`${op.issuer}/.well-known/openid-configuration`);
    assert.equal(res.status, 200);
    const d = res.json();
    assert.equal(d.issuer, op.issuer);
    assert.equal(d.authorization_endpoint, `${op.issuer}/auth`);
    assert.equal(d.token_endpoint, `${op.issuer}/token`);
    assert.equal(d.jwks_uri, `${op.issuer}/jwks`);
    assert.equal(d.end_session_endpoint, `${op.issuer}/session/end`);
    assert.deepEqual(d.code_challenge_methods_supported, ['S256']);
    assert.deepEqual(d.response_types_supported, ['code']);
    assert.deepEqual(d.id_token_signing_alg_values_supported, ['RS256']);
    for (const s of ['openid', 'email', 'profile', 'groups', 'offline_access']) assert.ok(d.scopes_supported.includes(s), s);
    for (const c of ['sub', 'email', 'email_verified', 'groups']) assert.ok(d.claims_supported.includes(c), c);
    const jwks = (await get(d.jwks_uri)).json();
    assert.deepEqual(jwks.keys.map((k) => k.kid), [op.kid]);
    assert.equal(jwks.keys[0].alg, 'RS256');
    assert.equal(jwks.keys[0].d, undefined, 'no private part in the JWKS');
    // Only 127.0.0.1 is bound.
    await assert.rejects(request(`https://[::1]:${op.port}/jwks`, {ca: caPem, timeoutMs: 2000}));
  });

  test('authorization code + PKCE through the sign-in form, step by step, and the id_token it gives', async (t) => {
    const c = client('kubefan');
    const jar = new CookieJar();
    const {verifier, challenge} = pkcePair();
    const state = 'st-123';
    const nonce = 'nonce-456';
    const go = async (url, init = {}) => {
      const u = new URL(url, op.issuer);
      const res = await request(u, {...init, ca: caPem, headers: {...(init.headers || {}), cookie: jar.header(u.pathname)}});
      jar.take(res.headers['set-cookie']);
      return res;
    };
    const t0 = performance.now();
    const auth = new URL('/auth', op.issuer);
    auth.search = new URLSearchParams({response_type: 'code', client_id: c.client_id, redirect_uri: c.redirect_uris[0],
      scope: 'openid email groups', state, nonce, code_challenge: challenge, code_challenge_method: 'S256'}).toString();
    let res = await go(auth);
    assert.equal(res.status, 303);
    const interaction = new URL(res.headers.location, op.issuer);
    assert.match(interaction.pathname, /^\/interaction\/[\w-]+$/);

    res = await go(interaction);
    assert.equal(res.status, 200);
    assert.match(res.body, /<form id="login-form" method="post"/);
    assert.match(res.body, /<input id="login" name="login"/);
    assert.match(res.body, /<input id="password" name="password" type="password"/);

    // A name with no account is refused on the same page.
    const form = (login) => ({method: 'POST', headers: {'content-type': 'application/x-www-form-urlencoded'},
      body: new URLSearchParams({login, password: 'whatever'}).toString()});
    res = await go(`${interaction.pathname}/login`, form('mallory'));
    assert.equal(res.status, 200);
    assert.match(res.body, /id="login-error"/);

    res = await go(`${interaction.pathname}/login`, form('alice'));
    assert.equal(res.status, 303);
    res = await go(res.headers.location);
    // No consent screen: straight back to the client.
    assert.equal(res.status, 303, res.body);
    const back = new URL(res.headers.location);
    assert.equal(`${back.origin}${back.pathname}`, c.redirect_uris[0]);
    assert.equal(back.searchParams.get('state'), state);
    assert.equal(back.searchParams.get('iss'), op.issuer);
    const code = back.searchParams.get('code');
    assert.ok(code);

    // The code is bound to the verifier: a wrong one fails (and burns the
    // code, as the spec wants: so the wrong try goes to a second flow).
    const basic = `Basic ${Buffer.from(`${c.client_id}:${c.client_secret}`).toString('base64')}`;
    const exchange = (codeValue, codeVerifier) => post(`${op.issuer}/token`, {
      headers: {'content-type': 'application/x-www-form-urlencoded', authorization: basic},
      body: new URLSearchParams({grant_type: 'authorization_code', code: codeValue, redirect_uri: c.redirect_uris[0],
        ...(codeVerifier ? {code_verifier: codeVerifier} : {})}).toString(),
    });
    res = await exchange(code, verifier);
    const flowMs = performance.now() - t0;
    assert.equal(res.status, 200, res.body);
    const tokens = res.json();
    t.diagnostic(`the whole flow (6 requests) took ${flowMs.toFixed(0)} ms`);
    assert.equal(tokens.token_type, 'Bearer');
    assert.equal(tokens.expires_in, ID_TOKEN_TTL);
    assert.ok(tokens.access_token);
    assert.ok(tokens.refresh_token, 'a refresh token without offline_access');

    const {payload, protectedHeader} = await verify(tokens.id_token);
    const now = Math.floor(Date.now() / 1000);
    assert.equal(protectedHeader.alg, 'RS256');
    assert.equal(protectedHeader.kid, op.kid);
    assert.equal(payload.iss, op.issuer);
    assert.equal(payload.aud, 'kubefan');
    assert.equal(payload.sub, 'alice');
    assert.equal(payload.nonce, nonce);
    assert.equal(payload.email, 'alice@example.com');
    assert.equal(payload.email_verified, true);
    assert.deepEqual(payload.groups, ['team-a']);
    assert.equal(payload.exp - payload.iat, ID_TOKEN_TTL);
    assert.ok(Math.abs(payload.exp - (now + ID_TOKEN_TTL)) <= 2, `exp ${payload.exp} vs now ${now}`);
    assert.equal(payload.name, undefined, 'profile was not asked for');

    // The code works once.
    res = await exchange(code, verifier);
    assert.equal(res.status, 400);
    assert.equal(res.json().error, 'invalid_grant');

    // The provider's sign-in session (its cookie in the jar) signs alice in
    // again without the form.
    const {challenge: ch2} = pkcePair();
    auth.searchParams.set('code_challenge', ch2);
    auth.searchParams.set('state', 'st-2');
    res = await go(auth);
    assert.equal(res.status, 303);
    const again = new URL(res.headers.location);
    assert.equal(`${again.origin}${again.pathname}`, c.redirect_uris[0]);
    assert.equal(again.searchParams.get('state'), 'st-2');
    assert.ok(again.searchParams.get('code'));
  });

  test('PKCE is required, and a verifier that does not match is refused', async () => {
    const c = client('kubefan');
    const auth = new URL('/auth', op.issuer);
    auth.search = new URLSearchParams({response_type: 'code', client_id: c.client_id, redirect_uri: c.redirect_uris[0],
      scope: 'openid', state: 's'}).toString();
    const res = await get(auth);
    assert.equal(res.status, 303);
    const back = new URL(res.headers.location);
    assert.equal(`${back.origin}${back.pathname}`, c.redirect_uris[0]);
    assert.equal(back.searchParams.get('error'), 'invalid_request');
    assert.match(back.searchParams.get('error_description'), /PKCE/);

    let codeSeen;
    await assert.rejects(authorizationCodeFlow({issuer: op.issuer, client: c, login: 'alice', ca: caPem,
      beforeExchange: (code) => {
        codeSeen = code;
        throw new Error('stop before the exchange');
      }}), /stop before the exchange/);
    const form = new URLSearchParams({grant_type: 'authorization_code', code: codeSeen, redirect_uri: c.redirect_uris[0],
      code_verifier: pkcePair().verifier});
    const bad = await post(`${op.issuer}/token`, {
      headers: {'content-type': 'application/x-www-form-urlencoded',
        authorization: `Basic ${Buffer.from(`${c.client_id}:${c.client_secret}`).toString('base64')}`},
      body: form.toString()});
    assert.equal(bad.status, 400);
    assert.equal(bad.json().error, 'invalid_grant');
  });

  test('client_secret_post and public clients get id_tokens for their own audience', async () => {
    for (const [id, login, groups] of [['kubefan-post', 'bob', ['team-b', 'viewers']], ['kubefan-public', 'carol', []]]) {
      const tokens = await authorizationCodeFlow({issuer: op.issuer, client: client(id), login, ca: caPem});
      const {payload} = await verify(tokens.id_token, id);
      assert.equal(payload.aud, id);
      assert.equal(payload.sub, login);
      assert.deepEqual(payload.groups, groups);
      assert.equal(payload.email_verified, ACCOUNTS[login].email_verified);
      assert.ok(tokens.refresh_token, id);
    }
    // A public client without PKCE never gets that far; a confidential one
    // with a wrong secret is refused at the token endpoint.
    const wrong = {...client('kubefan'), client_secret: 'not-it'};
    await assert.rejects(authorizationCodeFlow({issuer: op.issuer, client: wrong, login: 'alice', ca: caPem}), /invalid_client/);
  });

  test('refresh gives a new id_token and a new refresh token; the old one then fails', async () => {
    const c = client('kubefan');
    const first = await authorizationCodeFlow({issuer: op.issuer, client: c, login: 'alice', ca: caPem});
    const r1 = await refresh({issuer: op.issuer, client: c, refreshToken: first.refresh_token, ca: caPem});
    assert.equal(r1.status, 200, JSON.stringify(r1.body));
    // (A new id_token, though byte for byte the same as the first when both
    // fall in one second: RS256 is deterministic and iat counts seconds.)
    assert.ok(r1.body.id_token);
    assert.notEqual(r1.body.refresh_token, first.refresh_token, 'refresh tokens rotate');
    const {payload} = await verify(r1.body.id_token);
    assert.equal(payload.sub, 'alice');
    assert.equal(payload.email, 'alice@example.com');
    assert.deepEqual(payload.groups, ['team-a']);
    assert.equal(payload.exp - payload.iat, ID_TOKEN_TTL);
    assert.ok(payload.iat >= decodeJwt(first.id_token).iat);
    // oidc-provider repeats the original nonce in a refreshed id_token: a
    // relying party must not expect it absent, nor a new one.
    assert.equal(payload.nonce, first.nonce);

    const r2 = await refresh({issuer: op.issuer, client: c, refreshToken: r1.body.refresh_token, ca: caPem});
    assert.equal(r2.status, 200);
    // Reusing a rotated-out token is refused, and (reuse detection) the
    // whole grant goes with it.
    const reuse = await refresh({issuer: op.issuer, client: c, refreshToken: first.refresh_token, ca: caPem});
    assert.equal(reuse.status, 400);
    assert.equal(reuse.body.error, 'invalid_grant');
    const after = await refresh({issuer: op.issuer, client: c, refreshToken: r2.body.refresh_token, ca: caPem});
    assert.equal(after.status, 400);
    assert.equal(after.body.error, 'invalid_grant');
  });

  test('POST /__test/token runs the real flow and honours ttl', async (t) => {
    const t0 = performance.now();
    const tokens = await admin('/__test/token?sub=bob&ttl=5&nonce=n-1');
    const ms = performance.now() - t0;
    assert.ok(tokens.id_token && tokens.access_token && tokens.refresh_token);
    assert.equal(tokens.expires_in, 5);
    const {payload} = await verify(tokens.id_token);
    assert.equal(payload.exp - payload.iat, 5);
    assert.equal(payload.nonce, 'n-1');
    assert.equal(payload.sub, 'bob');
    assert.equal(payload.email_verified, false);
    // A later flow is back to the configured lifetime.
    const again = await admin('/__test/token?sub=bob&client_id=kubefan-public');
    const p2 = (await verify(again.id_token, 'kubefan-public')).payload;
    assert.equal(p2.exp - p2.iat, ID_TOKEN_TTL);
    const bad = await post(`${op.issuer}/__test/token?sub=mallory`);
    assert.equal(bad.status, 400);
    assert.equal(bad.json().error, 'invalid_request');
    t.diagnostic(`POST /__test/token took ${ms.toFixed(0)} ms`);
  });

  test('rotate-keys: new tokens carry a new kid; the old key stays published or goes', async () => {
    const c = client('kubefan');
    const before = await authorizationCodeFlow({issuer: op.issuer, client: c, login: 'alice', ca: caPem});
    const oldKid = decodeProtectedHeader(before.id_token).kid;
    assert.equal(oldKid, op.kid);

    const rotated = await admin('/__test/rotate-keys');
    assert.notEqual(rotated.signing, oldKid);
    assert.deepEqual(rotated.kids, [rotated.signing, oldKid]);
    const jwks = (await get(`${op.issuer}/jwks`)).json();
    assert.deepEqual(jwks.keys.map((k) => k.kid), [rotated.signing, oldKid]);

    // Tokens from before still verify; refreshing one (a grant from before
    // the rotation) gives an id_token under the new key.
    await verify(before.id_token);
    const r = await refresh({issuer: op.issuer, client: c, refreshToken: before.refresh_token, ca: caPem});
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(decodeProtectedHeader(r.body.id_token).kid, rotated.signing);
    await verify(r.body.id_token);
    const fresh = await authorizationCodeFlow({issuer: op.issuer, client: c, login: 'alice', ca: caPem});
    assert.equal(decodeProtectedHeader(fresh.id_token).kid, rotated.signing);

    const dropped = await admin('/__test/rotate-keys?keep=0');
    assert.deepEqual(dropped.kids, [dropped.signing]);
    assert.deepEqual((await get(`${op.issuer}/jwks`)).json().keys.map((k) => k.kid), [dropped.signing]);
    await assert.rejects(verify(fresh.id_token), joseErrors.JWKSNoMatchingKey);
    const latest = await admin('/__test/token?sub=alice');
    assert.equal(decodeProtectedHeader(latest.id_token).kid, dropped.signing);
    await verify(latest.id_token);
  });

  test('revoke?sub= ends that account\'s refresh tokens, and no one else\'s', async () => {
    const c = client('kubefan');
    const bob = await admin('/__test/token?sub=bob');
    const alice = await admin('/__test/token?sub=alice');
    const ok = await refresh({issuer: op.issuer, client: c, refreshToken: bob.refresh_token, ca: caPem});
    assert.equal(ok.status, 200);

    const revoked = await admin('/__test/revoke?sub=bob');
    assert.equal(revoked.sub, 'bob');
    assert.ok(revoked.removed.Grant >= 1, JSON.stringify(revoked));
    assert.ok(revoked.removed.RefreshToken >= 1, JSON.stringify(revoked));

    const fail = await refresh({issuer: op.issuer, client: c, refreshToken: ok.body.refresh_token, ca: caPem});
    assert.equal(fail.status, 400);
    assert.equal(fail.body.error, 'invalid_grant');
    const still = await refresh({issuer: op.issuer, client: c, refreshToken: alice.refresh_token, ca: caPem});
    assert.equal(still.status, 200);
    // Bob can sign in again afterwards.
    const again = await admin('/__test/token?sub=bob');
    assert.equal((await verify(again.id_token)).payload.sub, 'bob');
  });

  test('RP-initiated logout: back to post_logout_redirect_uri with state; the session\'s refresh token dies, an offline one lives', async () => {
    const c = client('kubefan');
    const jar = new CookieJar();
    const online = await authorizationCodeFlow({issuer: op.issuer, client: c, login: 'alice', ca: caPem, jar});
    const offline = await authorizationCodeFlow({issuer: op.issuer, client: c, login: 'alice', ca: caPem, jar,
      scope: 'openid email groups offline_access', prompt: 'consent'});
    assert.equal(offline.scope.split(' ').includes('offline_access'), true, offline.scope);

    const go = async (url, init = {}) => {
      const u = new URL(url, op.issuer);
      const res = await request(u, {...init, ca: caPem, headers: {...(init.headers || {}), cookie: jar.header(u.pathname)}});
      jar.take(res.headers['set-cookie']);
      return res;
    };
    const end = new URL('/session/end', op.issuer);
    end.search = new URLSearchParams({id_token_hint: online.id_token, post_logout_redirect_uri: c.post_logout_redirect_uris[0],
      state: 'bye-1', client_id: c.client_id}).toString();
    let res = await go(end);
    assert.equal(res.status, 200);
    assert.match(res.body, /id="logout-yes"/);
    const action = /<form[^>]*id="op.logoutForm"[^>]*action="([^"]+)"/.exec(res.body)?.[1]
      || /<form[^>]*action="([^"]+)"[^>]*id="op.logoutForm"/.exec(res.body)?.[1];
    const xsrf = /name="xsrf" value="([^"]+)"/.exec(res.body)?.[1];
    assert.ok(action && xsrf, res.body);
    res = await go(action, {method: 'POST', headers: {'content-type': 'application/x-www-form-urlencoded'},
      body: new URLSearchParams({xsrf, logout: 'yes'}).toString()});
    assert.equal(res.status, 303, res.body);
    const back = new URL(res.headers.location);
    assert.equal(`${back.origin}${back.pathname}`, c.post_logout_redirect_uris[0]);
    assert.equal(back.searchParams.get('state'), 'bye-1');

    const dead = await refresh({issuer: op.issuer, client: c, refreshToken: online.refresh_token, ca: caPem});
    assert.equal(dead.status, 400);
    assert.equal(dead.body.error, 'invalid_grant');
    const alive = await refresh({issuer: op.issuer, client: c, refreshToken: offline.refresh_token, ca: caPem});
    assert.equal(alive.status, 200, JSON.stringify(alive.body));

    // Signed out at the provider: the next authorization asks for the form again.
    const auth = new URL('/auth', op.issuer);
    auth.search = new URLSearchParams({response_type: 'code', client_id: c.client_id, redirect_uri: c.redirect_uris[0],
      scope: 'openid', state: 's', code_challenge: pkcePair().challenge, code_challenge_method: 'S256'}).toString();
    res = await go(auth);
    res = await go(res.headers.location);
    assert.equal(res.status, 200);
    assert.match(res.body, /id="login-form"/);
  });

  test('stats count discovery, JWKS, token calls by grant type and refreshes, not the harness\'s own', async () => {
    const zero = await admin('/__test/stats/reset');
    assert.equal(zero.jwks, 0);
    const c = client('kubefan');
    await get(`${op.issuer}/.well-known/openid-configuration`);
    await get(`${op.issuer}/.well-known/openid-configuration`);
    const minted = await admin('/__test/token?sub=alice'); // not counted
    let s = await admin('/__test/stats', 'GET');
    assert.equal(s.discovery, 2);
    assert.equal(s.token, 0);
    assert.equal(s.logins, 0);

    await verify(minted.id_token); // one JWKS read
    const flow = await authorizationCodeFlow({issuer: op.issuer, client: c, login: 'alice', ca: caPem});
    const r = await refresh({issuer: op.issuer, client: c, refreshToken: flow.refresh_token, ca: caPem});
    assert.equal(r.status, 200);
    const bad = await refresh({issuer: op.issuer, client: c, refreshToken: 'no-such-token', ca: caPem});
    assert.equal(bad.status, 400);
    s = await admin('/__test/stats', 'GET');
    assert.deepEqual({
      discovery: s.discovery, jwks: s.jwks, authorization: s.authorization, token: s.token, logins: s.logins,
      token_by_grant_type: s.token_by_grant_type, refreshes: s.refreshes, id_tokens_issued: s.id_tokens_issued,
    }, {
      discovery: 2, jwks: 1, authorization: 1, token: 3, logins: 1,
      token_by_grant_type: {authorization_code: {ok: 1, failed: 0}, refresh_token: {ok: 1, failed: 1}},
      refreshes: {ok: 1, failed: 1}, id_tokens_issued: 2,
    });
  });

  test('the admin API says what it has on an unknown path', async () => {
    const res = await get(`${op.issuer}/__test/nothing`);
    assert.equal(res.status, 404);
    assert.ok(res.json().routes.length >= 5);
  });
});

describe('the program', () => {
  // Starts issuer.mjs and resolves its ready line, within a bounded time.
  function launch(args) {
    const child = spawn(process.execPath, [path.join(HERE, 'issuer.mjs'), ...args], {stdio: ['pipe', 'pipe', 'pipe']});
    let out = '';
    let err = '';
    child.stderr.on('data', (d) => { err += d; });
    const ready = new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ready line within 15 s; stderr: ${err}`)), 15000);
      child.stdout.on('data', (d) => {
        out += d;
        const nl = out.indexOf('\n');
        if (nl >= 0) {
          clearTimeout(timer);
          resolve(JSON.parse(out.slice(0, nl)));
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`exited ${code} before ready; stderr: ${err}`));
      });
    });
    const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({code, signal})));
    const within = (p, ms, what) => Promise.race([p, new Promise((_, reject) => {
      const t = setTimeout(() => reject(new Error(`${what} not within ${ms} ms`)), ms);
      t.unref();
    })]);
    return {child, ready, exited, within, stdout: () => out, stderr: () => err};
  }

  test('prints one JSON line, serves, and exits when its stdin closes', async (t) => {
    const t0 = performance.now();
    const p = launch(['--port', '0', '--cert', certs.cert, '--key', certs.key, '--id-token-ttl', '7',
      '--client-id', 'cli', '--client-secret', 'throwaway', '--redirect-uri', 'https://127.0.0.1:1/cb',
      '--accounts', JSON.stringify({dave: {email: 'dave@example.com', email_verified: true, groups: ['g']}})]);
    let started = false;
    try {
      const ready = await p.ready;
      started = true;
      t.diagnostic(`program ready in ${(performance.now() - t0).toFixed(0)} ms (its own count: ${ready.startup_ms} ms)`);
      assert.match(ready.issuer, /^https:\/\/127\.0\.0\.1:\d+$/);
      assert.equal(ready.issuer, `https://127.0.0.1:${ready.port}`);
      assert.equal(ready.pid, p.child.pid);
      assert.deepEqual(ready.accounts, ['dave']);
      assert.deepEqual(ready.clients.map((c) => c.client_id), ['cli']);
      const d = (await get(`${ready.issuer}/.well-known/openid-configuration`)).json();
      assert.equal(d.issuer, ready.issuer);
      const tok = (await post(`${ready.issuer}/__test/token?sub=dave`)).json();
      const claims = JSON.parse(Buffer.from(tok.id_token.split('.')[1], 'base64url'));
      assert.equal(claims.exp - claims.iat, 7);
      assert.equal(claims.aud, 'cli');
      assert.deepEqual(claims.groups, ['g']);
    } finally {
      if (started) {
        p.child.stdin.end();
        const {code} = await p.within(p.exited, 5000, 'exit after stdin closed');
        assert.equal(code, 0);
      } else {
        // It watches its stdin only once ready: the error that stopped the
        // test is the one to see, not a slow exit.
        p.child.kill('SIGKILL');
      }
    }
    assert.equal(p.stdout().trim().split('\n').length, 1, 'one line on stdout');
  });

  test('makes its own throwaway CA without --cert, and exits on SIGTERM', async () => {
    const p = launch([]);
    let ready;
    try {
      ready = await p.ready;
      assert.ok(ready.ca && fs.existsSync(ready.ca));
      const res = await request(`${ready.issuer}/jwks`, {ca: fs.readFileSync(ready.ca, 'utf8')});
      assert.equal(res.status, 200);
      assert.equal(res.json().keys[0].kid, ready.kid);
    } finally {
      p.child.kill('SIGTERM');
      const {code} = await p.within(p.exited, 5000, 'exit after SIGTERM');
      assert.equal(code, 0);
      if (ready?.ca) fs.rmSync(path.dirname(ready.ca), {recursive: true, force: true});
    }
  });
});
