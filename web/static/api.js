// The gateway's HTTP API (api/src/service.rs) as seen from the browser. A bearer token typed into
// the sign-in form lives in sessionStorage (this tab only); a cookie session (OIDC) needs the CSRF
// token from whoami echoed on every state-changing request.

const TOKEN_KEY = 'kbind.token';
const CSRF_HEADER = 'X-Kbind-Csrf';

let csrfToken = null;

/** An error answer of the gateway (its ApiError body), or an unreachable gateway (status 0). */
export class ApiError extends Error {
  constructor(status, reason, message) {
    super(message);
    this.status = status;
    this.reason = reason;
  }
}

/** The bearer token of this tab, if one was entered. */
export function bearerToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** Keeps a bearer token for this tab. */
export function setBearerToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

/** Forgets the bearer token and any cookie session's CSRF token. */
export function forgetCredentials() {
  sessionStorage.removeItem(TOKEN_KEY);
  csrfToken = null;
}

/** Whether the caller signed in through a cookie session (OIDC) rather than a token. */
export function hasCookieSession() {
  return csrfToken !== null;
}

async function errorOf(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    if (body && typeof body.message === 'string') {
      return new ApiError(response.status, body.reason ?? 'Error', body.message);
    }
  } catch {
    // Not an ApiError body (a proxy's page, say): the status below says enough.
  }
  return new ApiError(response.status, 'Error', `The gateway answered HTTP ${response.status}; try again, or ask the provider's administrator.`);
}

/** Calls the gateway; resolves to the parsed JSON body (null for an empty one). */
export async function call(method, path, body) {
  const headers = { Accept: 'application/json' };
  const token = bearerToken();
  if (token) {
    headers.Authorization = `Bearer ${token}`;
  } else if (csrfToken && method !== 'GET' && method !== 'HEAD') {
    headers[CSRF_HEADER] = csrfToken;
  }
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
  }
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'same-origin',
    });
  } catch {
    throw new ApiError(0, 'Unreachable', 'The gateway did not answer. Check your connection and try again.');
  }
  if (!response.ok) {
    throw await errorOf(response);
  }
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

/** The provider's name and sign-in methods (no authentication needed). */
export function provider() {
  return call('GET', '/api/v1/provider');
}

/** Who the caller is; remembers a cookie session's CSRF token. */
export async function whoami() {
  const me = await call('GET', '/api/v1/whoami');
  csrfToken = bearerToken() ? null : (me.csrfToken ?? null);
  return me;
}

/** Ends a cookie session (OIDC); a no-op answer for token callers. */
export async function signOutCookieSession() {
  if (csrfToken) {
    await call('POST', '/auth/logout');
  }
}

/** The catalog: Collections and Exports. */
export function catalog() {
  return call('GET', '/api/v1/catalog');
}

/** Binds an Export for a consumer cluster; resolves to { grant, pickupURL, expiresAt }. */
export function bind(request) {
  return call('POST', '/api/v1/bind', request);
}

/** The caller's Grants. */
export function grants() {
  return call('GET', '/api/v1/grants');
}

/** Revokes one Grant. */
export function revoke(name) {
  return call('DELETE', `/api/v1/grants/${encodeURIComponent(name)}`);
}

/** Fetches the bundle from a one-time pickup URL as YAML text (this uses the pickup up). */
export async function pickupYaml(url) {
  let response;
  try {
    response = await fetch(url, { headers: { Accept: 'application/yaml' }, credentials: 'omit' });
  } catch {
    throw new ApiError(0, 'Unreachable', 'The gateway did not answer. Check your connection and try again.');
  }
  if (!response.ok) {
    throw await errorOf(response);
  }
  return response.text();
}
