// An OpenID provider for kbind-backend's OIDC end-to-end test (backend/tests/oidc.rs): the
// certified `oidc-provider` package with one client and one account, whose login and consent
// are granted without a human (no form: the interaction route answers at once).
//
// Configuration comes from the environment; the server listens on 127.0.0.1 on a free port and
// prints one JSON line `{"issuer": "<url>"}` on stdout once it serves. It exits when its stdin
// closes, so a test that dies does not leave it behind.
//   OIDC_CLIENT_ID, OIDC_CLIENT_SECRET   the one client (client_secret_basic, PKCE required)
//   OIDC_REDIRECT_URIS                   comma-separated redirect URIs of that client
//   OIDC_CLI_CLIENT_ID                   optional: a public native client too (no secret, PKCE,
//                                        redirect http://127.0.0.1/callback on any port, RFC 8252)
//   OIDC_DENY=1                          the person declines: every sign-in ends in access_denied
//   OIDC_ACCOUNT, OIDC_ACCOUNT_NAME      the `sub` and `name` of the account that signs in
//   OIDC_ID_TOKEN_TTL                    ID token lifetime in seconds (default 3600)
//   OIDC_TLS_CERT, OIDC_TLS_KEY          PEM files: serve https instead of http
import { generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';

import Provider from 'oidc-provider';

const env = (name, fallback) => {
  const value = process.env[name] ?? fallback;
  if (value === undefined) {
    console.error(`kbind oidc test provider: ${name} is required`);
    process.exit(2);
  }
  return value;
};

const clientId = env('OIDC_CLIENT_ID');
const clientSecret = env('OIDC_CLIENT_SECRET');
const redirectUris = env('OIDC_REDIRECT_URIS').split(',').filter(Boolean);
const cliClientId = process.env.OIDC_CLI_CLIENT_ID;
const deny = process.env.OIDC_DENY === '1';
const account = env('OIDC_ACCOUNT', 'alice');
const accountName = env('OIDC_ACCOUNT_NAME', 'Alice Example');
const idTokenTtl = Number(env('OIDC_ID_TOKEN_TTL', '3600'));
const tlsCert = process.env.OIDC_TLS_CERT;
const tlsKey = process.env.OIDC_TLS_KEY;

// A fresh signing key per run: never the package's built-in development key.
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), use: 'sig', alg: 'RS256', kid: 'kbind-test' };

let provider;
const handler = async (req, res) => {
  if (req.url.startsWith('/interaction/')) {
    try {
      await interact(req, res);
    } catch (err) {
      res.statusCode = 500;
      res.end(`interaction failed: ${err}`);
    }
    return;
  }
  provider.callback()(req, res);
};

// The login and consent a person would give: the configured account, every requested scope.
async function interact(req, res) {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params, session } = details;
  if (deny) {
    await provider.interactionFinished(req, res, { error: 'access_denied', error_description: 'the person declined' }, { mergeWithLastSubmission: false });
    return;
  }
  if (prompt.name === 'login') {
    await provider.interactionFinished(req, res, { login: { accountId: account } }, { mergeWithLastSubmission: false });
    return;
  }
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
  if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(prompt.details.missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const grantId = await grant.save();
  await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
}

const server = tlsCert
  ? https.createServer({ cert: readFileSync(tlsCert), key: readFileSync(tlsKey) }, handler)
  : http.createServer(handler);

server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const issuer = `${tlsCert ? 'https' : 'http'}://127.0.0.1:${port}`;
  provider = new Provider(issuer, {
    clients: [{
      client_id: clientId,
      client_secret: clientSecret,
      redirect_uris: redirectUris,
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    }, ...(cliClientId ? [{
      // `kbind login`: a native app holds no secret; oidc-provider lets a native client's
      // loopback redirect use any port.
      client_id: cliClientId,
      application_type: 'native',
      redirect_uris: ['http://127.0.0.1/callback'],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    }] : [])],
    pkce: { required: () => true },
    jwks: { keys: [signingKey] },
    cookies: { keys: ['kbind-oidc-test-provider-cookie-key'] },
    features: { devInteractions: { enabled: false } },
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    claims: { openid: ['sub'], profile: ['name'] },
    // Scope claims (`name`) in the ID token: the gateway reads no userinfo.
    conformIdTokenClaims: false,
    findAccount: async (_ctx, id) => ({
      accountId: id,
      claims: async () => ({ sub: id, name: accountName }),
    }),
    ttl: {
      AccessToken: 600,
      AuthorizationCode: 60,
      Grant: 3600,
      IdToken: idTokenTtl,
      Interaction: 600,
      Session: 3600,
    },
  });
  process.stdout.write(`${JSON.stringify({ issuer })}\n`);
});

process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
