// The OpenID provider of the twistgw test suite: panva/oidc-provider (OpenID
// Certified), two issuers in one Node.js process, each on its own loopback
// port (port 0: the kernel picks). Started by tests/oidc/oidc_support.py.
//
//   node idp.mjs CONFIG.json
//
// CONFIG.json: {"issuers": [{"name": "a", "keys": {JWKS with private keys},
//                            "clients": [oidc-provider client metadata...]}],
//               "users": {"alice": {"password": "...", "claims": {...}}}}
//
// An issuer may carry "port" (a restart on the same address); else port 0;
// and "clientAuthMethods" (what its discovery document offers for the token endpoint).
//
// Prints one line of JSON when every issuer listens:
//   {"ready": true, "issuers": {"a": "http://127.0.0.1:PORT", ...}}
//
// Interactions (login) are a plain form: POST login + password; a wrong
// password shows the form again with "invalid". Consent is granted for the
// scopes asked (a first-party client). A client whose client_id starts with
// "short" gets ID and access tokens that live 2 seconds (refresh tests).

import fs from 'node:fs';
import http from 'node:http';
import querystring from 'node:querystring';

import Provider from 'oidc-provider';

const config = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const users = config.users;

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function page(title, body) {
  return `<!DOCTYPE html><html><head><meta charset="utf-8"><title>${esc(title)}</title></head>`
    + `<body>${body}</body></html>`;
}

function loginForm(uid, client, error) {
  return page('Sign-in', `<h1 id="title">Sign in to ${esc(client)}</h1>`
    + (error ? `<p id="error">${esc(error)}</p>` : '')
    + `<form id="login" method="post" action="/interaction/${esc(uid)}/login">`
    + '<input id="username" type="text" name="login" required>'
    + '<input id="password" type="password" name="password" required>'
    + '<button id="submit" type="submit">Sign in</button></form>');
}

async function readForm(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return querystring.parse(Buffer.concat(chunks).toString('utf8'));
}

function shortLived(client) {
  return client && client.clientId.startsWith('short');
}

function makeProvider(issuer, spec) {
  const provider = new Provider(issuer, {
    // the client authentication methods the discovery document lists
    // (token_endpoint_auth_methods_supported); oidc-provider's defaults unless the issuer names them
    ...(spec.clientAuthMethods ? { clientAuthMethods: spec.clientAuthMethods } : {}),
    clients: spec.clients,
    jwks: spec.keys,
    findAccount: async (ctx, sub) => {
      const user = users[sub];
      if (!user) return undefined;
      return { accountId: sub, claims: async () => ({ sub, ...user.claims }) };
    },
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name'],
      groups: ['groups'],
    },
    conformIdTokenClaims: false,
    scopes: ['openid', 'offline_access', 'email', 'profile', 'groups'],
    features: {
      devInteractions: { enabled: false },
      introspection: { enabled: true },
      revocation: { enabled: true },
      // registered only so that ID tokens carry "sid" (front-channel logout tests)
      backchannelLogout: { enabled: true },
      userinfo: { enabled: true },
      rpInitiatedLogout: {
        enabled: true,
        logoutSource: async (ctx, form) => {
          ctx.body = page('Sign out', `${form}<h1 id="title">Sign out?</h1>`
            + '<button id="logout-yes" type="submit" form="op.logoutForm" value="yes" name="logout">Yes</button>'
            + '<button id="logout-no" type="submit" form="op.logoutForm">No</button>');
        },
        postLogoutSuccessSource: async (ctx) => {
          ctx.body = page('Signed out', '<h1 id="title">Signed out</h1>');
        },
      },
    },
    pkce: { required: () => true },
    issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
    ttl: {
      AccessToken: (ctx, token, client) => (shortLived(client) ? 2 : 3600),
      IdToken: (ctx, token, client) => (shortLived(client) ? 2 : 3600),
      AuthorizationCode: 60,
      Interaction: 600,
      Session: 3600,
      Grant: 3600,
      RefreshToken: 3600,
    },
    loadExistingGrant: async (ctx) => {
      const { client, session } = ctx.oidc;
      const existing = session.grantIdFor(client.clientId);
      if (existing) {
        const grant = await ctx.oidc.provider.Grant.find(existing);
        if (grant) return grant;
      }
      const grant = new ctx.oidc.provider.Grant({ clientId: client.clientId, accountId: session.accountId });
      grant.addOIDCScope('openid offline_access email profile groups');
      await grant.save();
      return grant;
    },
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    renderError: async (ctx, out) => {
      ctx.type = 'html';
      ctx.body = page('Error', `<h1 id="title">Error</h1><pre id="error">${esc(JSON.stringify(out))}</pre>`);
    },
  });
  provider.proxy = false;

  // the login pages, in front of the provider's own routes
  provider.use(async (ctx, next) => {
    const m = /^\/interaction\/([^/]+)(\/login)?$/.exec(ctx.path);
    if (!m) return next();
    const details = await provider.interactionDetails(ctx.req, ctx.res);
    if (details.prompt.name === 'consent') {
      // a first-party client: grant what was asked, without a page
      const grant = new provider.Grant({ clientId: details.params.client_id, accountId: details.session.accountId });
      grant.addOIDCScope(String(details.params.scope));
      const grantId = await grant.save();
      await provider.interactionFinished(ctx.req, ctx.res, { consent: { grantId } }, { mergeWithLastSubmission: true });
      ctx.respond = false;
      return undefined;
    }
    if (ctx.method === 'GET') {
      ctx.type = 'html';
      ctx.body = loginForm(details.uid, details.params.client_id);
      return undefined;
    }
    if (ctx.method === 'POST' && m[2]) {
      const form = await readForm(ctx.req);
      const user = users[form.login];
      if (!user || user.password !== form.password) {
        ctx.type = 'html';
        ctx.body = loginForm(details.uid, details.params.client_id, 'invalid login or password');
        return undefined;
      }
      await provider.interactionFinished(ctx.req, ctx.res, { login: { accountId: form.login } },
        { mergeWithLastSubmission: false });
      ctx.respond = false;
      return undefined;
    }
    ctx.status = 405;
    return undefined;
  });
  return provider;
}

const listening = {};
await Promise.all(config.issuers.map((spec) => new Promise((resolve) => {
  const server = http.createServer();
  server.listen(spec.port || 0, '127.0.0.1', () => {
    const issuer = `http://127.0.0.1:${server.address().port}`;
    const provider = makeProvider(issuer, spec);
    server.on('request', provider.callback());
    listening[spec.name] = issuer;
    resolve();
  });
})));
process.stdout.write(`${JSON.stringify({ ready: true, issuers: listening })}\n`);
process.on('SIGTERM', () => process.exit(0));
