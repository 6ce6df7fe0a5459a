// A real OpenID Connect provider for the single sign-on tests: the certified `oidc-provider`
// from npm (package.json's devDependencies), in a Node process of its own.
//
//   node tests/support/oidc_provider.mjs CONFIG.json
//
// CONFIG.json: {"issuer", "port", "client_id", "client_secret", "redirect_uri", "users"}, where
// "users" names a JSON file {"alice": {"password", "email", "groups": [...]}, ...}. The users
// file is read again at every sign-in, so a test changes a user's groups by rewriting it, as
// an administrator would in the identity provider. Prints "listening <issuer>" when ready.
//
// Its sign-in page is the only part written here (oidc-provider leaves interactions to the
// application): a form that checks the user's password. Consent is given for the one static
// client (a first-party application), so a sign-in is one form.

import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';

import Provider from 'oidc-provider';

const config = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const SCOPE = 'openid email profile groups';

function users() {
  return JSON.parse(fs.readFileSync(config.users, 'utf8'));
}

function signingKey() {
  const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: 'test-key', use: 'sig', alg: 'RS256' };
}

const provider = new Provider(config.issuer, {
  clients: [{
    client_id: config.client_id,
    client_secret: config.client_secret,
    redirect_uris: [config.redirect_uri],
    response_types: ['code'],
    grant_types: ['authorization_code'],
    token_endpoint_auth_method: 'client_secret_post',
  }],
  jwks: { keys: [signingKey()] },
  cookies: { keys: [crypto.randomBytes(32).toString('hex')] },
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['preferred_username', 'name'],
    groups: ['groups'],
  },
  pkce: { required: () => true },
  features: { devInteractions: { enabled: false } },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  async findAccount(ctx, id) {
    const user = users()[id];
    if (!user) return undefined;
    return {
      accountId: id,
      async claims() {
        return {
          sub: id,
          email: user.email,
          email_verified: true,
          preferred_username: user.username ?? id,
          name: id,
          groups: user.groups,
        };
      },
    };
  },
  async loadExistingGrant(ctx) {
    const { Grant } = ctx.oidc.provider;
    const id = ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    const grant = (id && await Grant.find(id))
      || new Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope(SCOPE);
    await grant.save();
    return grant;
  },
});

function page(res, status, uid, message) {
  res.writeHead(status, { 'content-type': 'text/html; charset=utf-8' });
  res.end(`<!doctype html><title>Test identity provider</title>
<h1>Test identity provider</h1><p id="message">${message}</p>
<form method="post" action="/interaction/${uid}/login">
<input name="login" placeholder="user"><input name="password" type="password">
<button type="submit">Sign in</button></form>`);
}

async function formBody(req) {
  let body = '';
  for await (const chunk of req) body += chunk;
  return new URLSearchParams(body);
}

async function interaction(req, res, uid, submitted) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) throw new Error('interaction mismatch');
  if (!submitted) return page(res, 200, uid, 'Sign in');
  const form = await formBody(req);
  const login = form.get('login') ?? '';
  const user = users()[login];
  if (!user || user.password !== form.get('password')) {
    return page(res, 401, uid, 'Wrong user or password');
  }
  return provider.interactionFinished(req, res, { login: { accountId: login } },
    { mergeWithLastSubmission: false });
}

const handle = provider.callback();
const server = http.createServer((req, res) => {
  const match = /^\/interaction\/([\w-]+)(\/login)?$/.exec(new URL(req.url, config.issuer).pathname);
  if (!match) return handle(req, res);
  return interaction(req, res, match[1], req.method === 'POST' && Boolean(match[2]))
    .catch((error) => {
      res.writeHead(400, { 'content-type': 'text/plain' });
      res.end(`interaction failed: ${error.message}`);
    });
});
server.listen(config.port, '127.0.0.1', () => console.log(`listening ${config.issuer}`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
