// kbind's web UI: sign in, browse the catalog, bind an Export, see and revoke Grants. A small
// single-page app over the gateway's API; every path without a file extension serves this page.

import * as api from './api.js';
import { h, replace, srOnly } from './dom.js';

const UID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const UID_COMMAND = "kubectl get ns kube-system -o jsonpath='{.metadata.uid}'";

const main = document.getElementById('main');
const statusRegion = document.getElementById('status');

const state = { provider: null, me: null, catalog: null, grants: null };

/** Says `text` to screen readers through the polite live region. */
function announce(text) {
  // Clearing first makes a repeated message be read again.
  statusRegion.textContent = '';
  window.setTimeout(() => {
    statusRegion.textContent = text;
  }, 50);
}

/**
 * `value` as a link target only when it is an absolute https URL. Export `docs` and `icon` come from
 * whoever may write Exports: `javascript:`, `data:`, plain `http:` or a relative path never becomes
 * a link.
 */
function httpsUrl(value) {
  if (typeof value !== 'string') return null;
  try {
    const url = new URL(value);
    return url.protocol === 'https:' ? url.href : null;
  } catch {
    return null;
  }
}

function errorText(error) {
  return error instanceof api.ApiError ? error.message : `Something went wrong: ${error}`;
}

// ---- routing ---------------------------------------------------------------------------------

const routes = [
  { pattern: /^\/$/, page: catalogPage, nav: 'catalog' },
  { pattern: /^\/catalog$/, page: catalogPage, nav: 'catalog' },
  { pattern: /^\/bind\/([^/]+)$/, page: bindPage, nav: 'catalog' },
  { pattern: /^\/grants$/, page: grantsPage, nav: 'grants' },
  { pattern: /^\/signin$/, page: signInPage, nav: null, public: true },
];

function navigate(path, { replaceHistory = false } = {}) {
  if (replaceHistory) {
    history.replaceState(null, '', path);
  } else {
    history.pushState(null, '', path);
  }
  render(true);
}

async function render(moveFocus) {
  const path = location.pathname;
  const route = routes.find((r) => r.pattern.test(path));
  if (!route) {
    showPage('Page not found', [h('p', {}, 'There is no such page. ', h('a', { href: '/', 'data-link': true }, 'Go to the catalog'), '.')], moveFocus);
    return;
  }
  if (!route.public && !state.me) {
    history.replaceState(null, '', `/signin?next=${encodeURIComponent(path)}`);
    await signInPage([], moveFocus);
    return;
  }
  for (const link of document.querySelectorAll('[data-nav]')) {
    if (link.dataset.nav === route.nav) {
      link.setAttribute('aria-current', 'page');
    } else {
      link.removeAttribute('aria-current');
    }
  }
  const params = path.match(route.pattern).slice(1).map(decodeURIComponent);
  await route.page(params, moveFocus);
}

/** Puts a page into <main>, titles the document and, after a navigation, focuses the heading. */
function showPage(title, content, moveFocus) {
  const heading = h('h1', { tabindex: '-1', id: 'page-title' }, title);
  replace(main, heading, content);
  document.title = `${title} · kbind`;
  if (moveFocus) {
    heading.focus();
  }
  return heading;
}

document.addEventListener('click', (event) => {
  const link = event.target.closest('a[data-link]');
  if (!link || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) {
    return;
  }
  event.preventDefault();
  navigate(link.getAttribute('href'));
});

window.addEventListener('popstate', () => render(true));

// ---- session -----------------------------------------------------------------------------------

function showSignedIn() {
  const signedIn = state.me !== null;
  document.getElementById('nav').hidden = !signedIn;
  document.getElementById('account').hidden = !signedIn;
  document.getElementById('who').textContent = signedIn ? `Signed in as ${state.me.name ?? state.me.subject}` : '';
}

/** Finds an existing session: a token of this tab, else a cookie session; null when neither. */
async function restoreSession() {
  try {
    return await api.whoami();
  } catch (error) {
    if (error instanceof api.ApiError && error.status === 401) {
      api.forgetCredentials();
      return null;
    }
    throw error;
  }
}

document.getElementById('sign-out').addEventListener('click', async () => {
  try {
    await api.signOutCookieSession();
  } catch (error) {
    announce(errorText(error));
  }
  api.forgetCredentials();
  state.me = null;
  state.catalog = null;
  state.grants = null;
  showSignedIn();
  navigate('/signin');
  announce('You are signed out.');
});

// ---- sign in -----------------------------------------------------------------------------------

function nextPath() {
  const next = new URLSearchParams(location.search).get('next');
  // Only a path on this site: never an absolute or protocol-relative URL.
  return next && next.startsWith('/') && !next.startsWith('//') ? next : '/';
}

async function signInPage(_params, moveFocus) {
  const provider = state.provider;
  const methods = (provider?.authMethods ?? []).map((m) => m.type);
  const content = [];
  if (provider?.unavailable) {
    content.push(h('p', { class: 'warning' }, `Binding does not work on this provider right now: ${provider.unavailable}`));
  }
  if (methods.includes('oidc')) {
    const oidc = provider.authMethods.find((m) => m.type === 'oidc');
    const login = `${oidc.loginPath ?? '/auth/oidc/login'}?return_to=${encodeURIComponent(nextPath())}`;
    content.push(
      h('section', { 'aria-labelledby': 'oidc-title', class: 'panel' },
        h('h2', { id: 'oidc-title' }, 'With your organisation’s account'),
        h('p', {}, h('a', { class: 'button', href: login }, 'Sign in with single sign-on'))));
  }
  if (methods.includes('token') || methods.length === 0) {
    const error = h('p', { id: 'token-error', class: 'error', role: 'alert' });
    const input = h('input', {
      id: 'token', name: 'token', type: 'password', required: true, autocomplete: 'off',
      spellcheck: 'false', 'aria-describedby': 'token-hint token-error',
    });
    const form = h('form', { class: 'panel', novalidate: true },
      h('h2', {}, 'With an access token'),
      h('div', { class: 'field' },
        h('label', { for: 'token' }, 'Access token'),
        h('p', { id: 'token-hint', class: 'hint' },
          'A token the provider’s administrator gave you. It stays in this browser tab only and is sent as ',
          h('code', {}, 'Authorization: Bearer'), '.'),
        input),
      error,
      h('button', { type: 'submit' }, 'Sign in'));
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      const token = input.value.trim();
      if (!token) {
        input.setAttribute('aria-invalid', 'true');
        error.textContent = 'Enter your access token.';
        input.focus();
        return;
      }
      api.setBearerToken(token);
      try {
        state.me = await api.whoami();
      } catch (e) {
        api.forgetCredentials();
        input.setAttribute('aria-invalid', 'true');
        error.textContent = e instanceof api.ApiError && e.status === 401
          ? 'The gateway did not accept this token. Check it, or ask the provider’s administrator for a new one.'
          : errorText(e);
        input.focus();
        return;
      }
      showSignedIn();
      announce(`Signed in as ${state.me.name ?? state.me.subject}.`);
      navigate(nextPath(), { replaceHistory: true });
    });
    content.push(form);
  }
  showPage(`Sign in to ${provider?.name ?? 'kbind'}`, content, moveFocus);
}

// ---- catalog -----------------------------------------------------------------------------------

async function loadCatalog() {
  state.catalog = await api.catalog();
  return state.catalog;
}

/** The caller's Grants, or null when they cannot be read (the page then says nothing about them). */
async function loadGrants() {
  try {
    state.grants = (await api.grants()).grants;
  } catch {
    state.grants = null;
  }
  return state.grants;
}

function grantsOf(exportName) {
  return (state.grants ?? []).filter((g) => g.export === exportName);
}

/** "Widget · v1 · namespaced", or why the API cannot be bound. */
function apiFacts(api) {
  if (!api.exported) return 'not exported by the provider';
  return [api.kind, api.versions?.join(', '), api.scope === 'Cluster' ? 'cluster-wide' : 'namespaced']
    .filter(Boolean).join(' · ');
}

/** The Export's documentation: a link only to an https URL, anything else shown as inert text. */
function docsLink(exp) {
  if (!exp.docs) return null;
  const href = httpsUrl(exp.docs);
  if (href) {
    return h('p', {}, h('a', { href, rel: 'noopener noreferrer' }, 'Documentation', srOnly(` for ${exp.title || exp.name}`)));
  }
  return h('p', { class: 'muted docs-unlinked' }, 'Documentation (not an https URL, so not a link): ', h('code', {}, exp.docs));
}

function exportCard(exp) {
  const titleId = `export-${exp.name}`;
  const mine = grantsOf(exp.name);
  return h('li', { class: 'card', 'data-export': exp.name },
    h('h3', { id: titleId }, exp.title || exp.name),
    exp.title && exp.title !== exp.name ? h('p', { class: 'muted' }, h('code', {}, exp.name)) : null,
    exp.description ? h('p', {}, exp.description) : null,
    h('p', { class: 'hint' }, exp.apis.length === 1 ? 'API:' : 'APIs:'),
    h('ul', { class: 'apis' }, exp.apis.map((a) => h('li', {}, h('code', {}, a.name), ' ', h('span', { class: 'muted' }, apiFacts(a))))),
    docsLink(exp),
    exp.clusterScopedSharing ? h('p', { class: 'warning' }, `Shared: ${exp.clusterScopedSharing}.`) : null,
    mine.length
      ? h('p', { class: 'ok bound-count' }, `You have ${mine.length} ${mine.length === 1 ? 'grant' : 'grants'} of it, see `,
        h('a', { href: '/grants', 'data-link': true }, 'My grants'), '.')
      : null,
    exp.ready
      ? h('a', { class: 'button', href: `/bind/${encodeURIComponent(exp.name)}`, 'data-link': true }, 'Bind', srOnly(` ${exp.title || exp.name}`))
      : h('p', { class: 'warning' }, `Not available yet: ${exp.message ?? 'some of its APIs are not exported.'}`));
}

async function catalogPage(_params, moveFocus) {
  let catalog;
  try {
    [catalog] = await Promise.all([loadCatalog(), loadGrants()]);
  } catch (error) {
    showPage('Catalog', [h('p', { class: 'error', role: 'alert' }, errorText(error))], moveFocus);
    return;
  }
  const byName = new Map(catalog.exports.map((e) => [e.name, e]));
  const inCollections = new Set();
  const sections = [];
  for (const collection of catalog.collections) {
    const exports = collection.exports.map((n) => byName.get(n)).filter(Boolean);
    exports.forEach((e) => inCollections.add(e.name));
    const id = `collection-${collection.name}`;
    sections.push(h('section', { 'aria-labelledby': id, class: 'collection' },
      h('h2', { id }, collection.title || collection.name),
      collection.description ? h('p', {}, collection.description) : null,
      exports.length ? h('ul', { class: 'cards' }, exports.map(exportCard)) : h('p', { class: 'muted' }, 'No Exports in this collection yet.')));
  }
  const others = catalog.exports.filter((e) => !inCollections.has(e.name));
  if (others.length) {
    sections.push(h('section', { 'aria-labelledby': 'collection-other', class: 'collection' },
      h('h2', { id: 'collection-other' }, catalog.collections.length ? 'Other exports' : 'Exports'),
      h('ul', { class: 'cards' }, others.map(exportCard))));
  }
  if (!catalog.exports.length) {
    sections.push(h('p', {}, 'This provider offers no APIs yet.'));
  }
  showPage('Catalog', [h('p', { class: 'lead' }, 'APIs this provider offers, by collection. Bind one to use it in your cluster.'), sections], moveFocus);
}

// ---- bind --------------------------------------------------------------------------------------

function parseNamespaces(text) {
  return text.split(/[\s,]+/).map((s) => s.trim()).filter(Boolean);
}

/** Which objects a related-resource rule selects, in words: its labels and names, and the names found at each reference path of the bound objects. */
function selectorText(selector) {
  const parts = [];
  const names = selector?.names ?? [];
  if (names.length) parts.push(`named ${names.join(', ')}`);
  const labels = selector?.labelSelector;
  if (labels) {
    const terms = [
      ...Object.entries(labels.matchLabels ?? {}).map(([k, v]) => `${k}=${v}`),
      ...(labels.matchExpressions ?? []).map((e) => `${e.key} ${e.operator}${e.values?.length ? ` ${e.values.join(', ')}` : ''}`),
    ];
    parts.push(terms.length ? `labelled ${terms.join(', ')}` : 'all of them (an empty label selector)');
  }
  const selected = parts.length ? [parts.join(' and ')] : [];
  const paths = (selector?.references ?? []).map((r) => r.path);
  if (paths.length) selected.push(`named at ${paths.join(' or ')} of each bound object`);
  return selected.length ? selected.join(', or ') : 'none (an empty selector selects nothing)';
}

/** A rule's kind as kubectl names a resource: `secrets`, `ingresses.networking.k8s.io`. */
function relatedKind(rule) {
  const kind = rule.group ? `${rule.resource}.${rule.group}` : rule.resource;
  return rule.version ? `${kind} (${rule.version})` : kind;
}

function relatedRule(rule) {
  const kind = h('code', { class: 'related-kind' }, relatedKind(rule));
  const status = rule.syncStatus
    ? rule.direction === 'FromConsumer'
      ? ' Their status is set from the provider\'s copy.'
      : ' The status of the copies in your cluster goes back to the provider.'
    : '';
  return rule.direction === 'FromConsumer'
    ? h('li', { class: 'warning', 'data-related': relatedKind(rule) }, h('strong', {}, kind, ' objects of your cluster are copied to the provider: '), selectorText(rule.selector), '.', status)
    : h('li', { 'data-related': relatedKind(rule) }, kind, ' objects of the provider are copied to your cluster: ', selectorText(rule.selector), '.', status);
}

/** One API of an Export: where it comes from and the fields its objects have. */
function apiDetails(api) {
  const fields = api.fields ?? [];
  return h('section', { class: 'panel', 'aria-labelledby': `api-${api.name}`, 'data-api': api.name },
    h('h3', { id: `api-${api.name}` }, api.kind ?? api.resource ?? api.name, ' ', h('span', { class: 'muted' }, h('code', {}, api.name))),
    h('dl', {},
      h('dt', {}, 'Group'), h('dd', {}, h('code', {}, api.group || api.name.split('.').slice(1).join('.'))),
      h('dt', {}, 'Resource'), h('dd', {}, h('code', {}, api.resource || api.name.split('.')[0])),
      h('dt', {}, 'Scope'), h('dd', {}, !api.exported ? 'not exported by the provider' : api.scope === 'Cluster' ? 'cluster-wide' : 'namespaced'),
      h('dt', {}, 'Versions'), h('dd', {}, api.versions?.length ? api.versions.join(', ') : '—')),
    fields.length
      ? [h('p', { class: 'hint' }, 'Fields of its spec:'),
        h('ul', { class: 'fields' }, fields.map((f) => h('li', { 'data-field': f.path },
          h('code', {}, f.path), ' ',
          h('span', { class: 'muted' }, [f.type, f.required ? 'required' : null].filter(Boolean).join(', ')),
          f.description ? ` — ${f.description}` : null)))]
      : h('p', { class: 'hint' }, api.exported ? 'Its schema lists no spec fields.' : 'Its fields are not known until the provider exports it.'));
}

/** The caller's Grants of one Export: what is already bound (or being bound) and where. */
function boundList(exp) {
  const mine = grantsOf(exp.name);
  if (state.grants === null) return h('p', { class: 'hint' }, 'Your grants could not be read; see My grants.');
  if (!mine.length) return h('p', {}, 'None yet: you have no grant of this Export.');
  return h('ul', { class: 'bound' }, mine.map((g) => h('li', { 'data-grant': g.name },
    'Consumer cluster ', h('code', {}, g.consumerClusterUID),
    g.namespaces.length ? [', namespaces ', g.namespaces.join(', ')] : null,
    ': grant ', grantStatus(g), '; ',
    g.heartbeatAgeSeconds === undefined || g.heartbeatAgeSeconds === null
      ? 'its konnector has not connected yet (the bundle is not applied, or not yet running)'
      : `last heartbeat ${age(g.heartbeatAgeSeconds)}`)));
}

async function bindPage([name], moveFocus) {
  let exp;
  try {
    [exp] = await Promise.all([
      (async () => (state.catalog ?? await loadCatalog()).exports.find((e) => e.name === name))(),
      loadGrants(),
    ]);
  } catch (error) {
    showPage('Bind', [h('p', { class: 'error', role: 'alert' }, errorText(error))], moveFocus);
    return;
  }
  if (!exp) {
    showPage('Export not found', [h('p', {}, `This provider has no Export named “${name}”. `, h('a', { href: '/', 'data-link': true }, 'Back to the catalog'), '.')], moveFocus);
    return;
  }
  const title = exp.title || exp.name;
  const error = h('p', { id: 'bind-error', class: 'error', role: 'alert' });
  const uid = h('input', {
    id: 'consumer-uid', name: 'consumer-uid', type: 'text', required: true, autocomplete: 'off',
    spellcheck: 'false', inputmode: 'text', 'aria-describedby': 'consumer-uid-hint bind-error',
  });
  const namespaces = exp.namespaced
    ? h('input', {
      id: 'namespaces', name: 'namespaces', type: 'text', required: true, autocomplete: 'off',
      spellcheck: 'false', 'aria-describedby': 'namespaces-hint bind-error',
    })
    : null;
  const submit = h('button', { type: 'submit' }, 'Bind');
  const result = h('div', { id: 'bind-result' });
  const form = h('form', { class: 'panel', novalidate: true },
    h('div', { class: 'field' },
      h('label', { for: 'consumer-uid' }, 'Consumer cluster UID'),
      h('p', { id: 'consumer-uid-hint', class: 'hint' },
        'The UID of the kube-system namespace of the cluster that will use these APIs. Get it with ',
        h('code', {}, UID_COMMAND), ' against that cluster.'),
      uid),
    namespaces && h('div', { class: 'field' },
      h('label', { for: 'namespaces' }, 'Namespaces'),
      h('p', { id: 'namespaces-hint', class: 'hint' },
        'The namespaces of that cluster whose objects these APIs serve, separated by commas or spaces.'),
      namespaces),
    error,
    submit);

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    for (const input of [uid, namespaces]) input?.removeAttribute('aria-invalid');
    error.textContent = '';
    const consumer = uid.value.trim();
    if (!UID_PATTERN.test(consumer)) {
      uid.setAttribute('aria-invalid', 'true');
      error.textContent = 'The consumer cluster UID is a UUID like 0f8e…-…; run the command above against the consumer cluster and paste its output.';
      uid.focus();
      return;
    }
    const names = namespaces ? parseNamespaces(namespaces.value) : [];
    if (namespaces) {
      const bad = names.filter((n) => !DNS_LABEL.test(n));
      if (!names.length || bad.length) {
        namespaces.setAttribute('aria-invalid', 'true');
        error.textContent = names.length
          ? `Not a namespace name: ${bad.join(', ')}. Use lower-case letters, digits and '-'.`
          : 'Enter at least one namespace.';
        namespaces.focus();
        return;
      }
    }
    submit.disabled = true;
    submit.textContent = 'Binding…';
    announce(`Binding ${title}…`);
    let answer;
    try {
      answer = await api.bind({ export: exp.name, consumerClusterUID: consumer, namespaces: names });
    } catch (e) {
      error.textContent = `The bind failed: ${errorText(e)}`;
      submit.disabled = false;
      submit.textContent = 'Bind';
      submit.focus();
      return;
    }
    submit.disabled = false;
    submit.textContent = 'Bind again';
    showBindResult(result, exp, answer);
    await loadGrants();
    replace(bound, boundList(exp));
  });

  const bound = h('div', { id: 'bound-list' }, boundList(exp));
  const related = exp.relatedResources ?? [];
  showPage(`Bind ${title}`, [
    exp.description ? h('p', { class: 'lead' }, exp.description) : null,
    h('p', {}, 'Binding creates a Grant for one consumer cluster and gives you a one-time bundle to apply there; the konnector on that cluster then syncs the APIs.'),
    h('section', { 'aria-labelledby': 'what-title', id: 'what-you-bind' },
      h('h2', { id: 'what-title' }, 'What you bind'),
      exp.clusterScopedSharing ? h('p', { class: 'warning' }, `Shared: ${exp.clusterScopedSharing}.`) : null,
      exp.apis.map(apiDetails),
      related.length
        ? [h('p', {}, 'Its bindings also copy these, in the bound namespaces:'), h('ul', { class: 'bound related' }, related.map(relatedRule))]
        : null),
    h('section', { 'aria-labelledby': 'bound-title' },
      h('h2', { id: 'bound-title' }, 'Your grants of this Export'),
      bound),
    h('section', { 'aria-labelledby': 'bind-form-title' },
      h('h2', { id: 'bind-form-title' }, 'Bind it for a consumer cluster'),
      form,
      result),
  ], moveFocus);
}

function showBindResult(container, exp, answer) {
  const command = `kbind redeem ${answer.pickupURL}`;
  const expires = new Date(answer.expiresAt);
  const expiresText = Number.isNaN(expires.getTime()) ? answer.expiresAt : expires.toLocaleTimeString();
  const fileName = `${exp.name}-bundle.yaml`;
  const note = h('p', { id: 'pickup-note', class: 'note', tabindex: '-1' },
    `This works once, until ${expiresText}: run the command on a machine whose kubeconfig points at the consumer cluster, `,
    h('strong', {}, 'or'),
    ' download the bundle and apply it with ', h('code', {}, `kubectl apply -f ${fileName}`),
    '. After a download the command no longer works.');
  const copy = h('button', { type: 'button', class: 'secondary', id: 'copy-command' }, 'Copy command');
  const download = h('button', { type: 'button', id: 'download-bundle' }, 'Download the bundle');
  const code = h('code', { id: 'redeem-command' }, command);
  // Nothing is bound yet: the gateway made a Grant and a one-time pickup; the consumer's
  // konnector binds once the bundle is applied there.
  const heading = h('h2', { tabindex: '-1', id: 'bind-result-title' }, `Bundle ready for grant ${answer.grant}`);

  copy.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(command);
      announce('The command is copied to the clipboard.');
      copy.textContent = 'Copied';
    } catch {
      // Without clipboard access (an insecure origin, a refused permission) select the text instead.
      const range = document.createRange();
      range.selectNodeContents(code);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      announce('This browser does not allow copying here; the command is selected, press Ctrl+C to copy it.');
    }
  });

  download.addEventListener('click', async () => {
    download.disabled = true;
    let yaml;
    try {
      yaml = await api.pickupYaml(answer.pickupURL);
    } catch (e) {
      download.disabled = false;
      const text = e.reason === 'PickupGone' || e.status === 404 || e.status === 410
        ? `The bundle is no longer available (${errorText(e)}). Bind again for a new one.`
        : `The download failed: ${errorText(e)}`;
      replace(note, text);
      note.focus();
      announce(text);
      return;
    }
    const url = URL.createObjectURL(new Blob([yaml], { type: 'application/yaml' }));
    const link = h('a', { href: url, download: fileName, hidden: true });
    document.body.append(link);
    link.click();
    link.remove();
    window.setTimeout(() => URL.revokeObjectURL(url), 60_000);
    copy.disabled = true;
    code.classList.add('used');
    replace(note, `The bundle is downloaded as ${fileName}. Apply it on the consumer cluster with `,
      h('code', {}, `kubectl apply -f ${fileName}`),
      '. The pickup is used up: the command above no longer works.');
    note.focus();
    announce(`The bundle is downloaded as ${fileName}. The command no longer works.`);
  });

  replace(container,
    h('section', { 'aria-labelledby': 'bind-result-title', class: 'panel result', 'data-grant': answer.grant },
      heading,
      h('p', {}, 'Nothing is bound yet: the APIs are bound once this bundle is applied on the consumer cluster and its konnector connects. Apply it there with ',
        h('code', {}, 'kbind redeem'), ':'),
      h('pre', { class: 'command' }, code),
      h('div', { class: 'actions' }, copy, download),
      note,
      h('p', {}, 'Your grants and their consumers’ heartbeats are under ', h('a', { href: '/grants', 'data-link': true }, 'My grants'), '.')));
  heading.focus();
  announce(`The bundle for ${exp.title || exp.name} is ready. Nothing is bound until you apply it on the consumer cluster with the command.`);
}

// ---- grants ------------------------------------------------------------------------------------

/** "12 s ago", "3 min ago", … */
function age(seconds) {
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return `${Math.floor(seconds / 86400)} d ago`;
}

function grantStatus(grant) {
  if (grant.revoking) return 'Being revoked';
  if (grant.ready) return 'Ready';
  return `Not ready${grant.reason ? `: ${grant.reason}` : ''}${grant.message ? ` — ${grant.message}` : ''}`;
}

const dialog = h('dialog', { id: 'confirm-revoke', 'aria-labelledby': 'confirm-title', 'aria-describedby': 'confirm-text confirm-unbind' });
document.body.append(dialog);

/** Asks whether to revoke; resolves to true only on an explicit "Revoke". */
function confirmRevoke(grant) {
  return new Promise((resolve) => {
    const cancel = h('button', { type: 'button', class: 'secondary', autofocus: true }, 'Cancel');
    const confirm = h('button', { type: 'button', class: 'danger' }, 'Revoke');
    replace(dialog,
      h('h2', { id: 'confirm-title' }, `Revoke grant ${grant.name}?`),
      h('p', { id: 'confirm-text' },
        `The consumer cluster ${grant.consumerClusterUID} loses access to ${grant.export}: its credentials stop working and its konnector stops syncing. This cannot be undone; binding again makes a new grant.`),
      h('p', { id: 'confirm-unbind', class: 'warning' },
        h('strong', {}, 'Unbind before you revoke. '),
        'If that cluster still uses these APIs, run ', h('code', {}, `kbind unbind ${grant.export}`),
        ' against it first: that removes its copies on the provider and then revokes this grant itself. Revoked first, its bindings cannot drain and stay stuck until ',
        h('code', {}, `kbind unbind ${grant.export} --orphan`), ', which leaves the provider’s copies behind.'),
      h('div', { class: 'actions' }, cancel, confirm));
    const done = (answer) => {
      dialog.addEventListener('close', () => resolve(answer), { once: true });
      dialog.close();
    };
    cancel.addEventListener('click', () => done(false));
    confirm.addEventListener('click', () => done(true));
    // Escape closes the dialog without a click: that is a "no".
    dialog.addEventListener('cancel', () => resolve(false), { once: true });
    dialog.showModal();
    cancel.focus();
  });
}

function grantCard(grant, onRevoke) {
  const titleId = `grant-${grant.name}`;
  const revokeButton = h('button', { type: 'button', class: 'danger', disabled: grant.revoking },
    'Revoke', srOnly(` grant ${grant.name}`));
  revokeButton.addEventListener('click', () => onRevoke(grant, revokeButton));
  return h('li', { class: 'card grant', 'data-grant': grant.name },
    h('h2', { id: titleId }, grant.export, srOnly(','), ' ', h('span', { class: 'muted' }, grant.name)),
    h('dl', {},
      h('dt', {}, 'Consumer cluster'), h('dd', { class: 'wrap' }, grant.consumerClusterUID),
      h('dt', {}, 'Namespaces'), h('dd', {}, grant.namespaces.length ? grant.namespaces.join(', ') : '—'),
      h('dt', {}, 'Status'), h('dd', { class: grant.ready && !grant.revoking ? 'ok' : 'muted' }, grantStatus(grant)),
      h('dt', {}, 'Last heartbeat'), h('dd', { class: 'heartbeat' },
        grant.heartbeatAgeSeconds === undefined || grant.heartbeatAgeSeconds === null
          ? 'None yet: the konnector has not connected'
          : age(grant.heartbeatAgeSeconds)),
      grant.created ? [h('dt', {}, 'Created'), h('dd', {}, new Date(grant.created).toLocaleString())] : null),
    h('div', { class: 'actions' }, revokeButton));
}

async function grantsPage(_params, moveFocus) {
  const list = h('div', { id: 'grant-list' });
  const refresh = h('button', { type: 'button', class: 'secondary' }, 'Refresh');
  const heading = showPage('My grants', [
    h('p', { class: 'lead' }, 'The consumer clusters you bound, and when each last checked in.'),
    h('p', { class: 'hint' }, 'To stop using an Export, unbind it on the consumer cluster (', h('code', {}, 'kbind unbind'),
      ') rather than revoking here: unbind drains and revokes; a revoke alone leaves that cluster’s bindings stuck.'),
    h('div', { class: 'actions' }, refresh),
    list,
  ], moveFocus);

  const onRevoke = async (grant, button) => {
    const yes = await confirmRevoke(grant);
    if (!yes) {
      button.focus();
      announce('Nothing was revoked.');
      return;
    }
    try {
      await api.revoke(grant.name);
    } catch (e) {
      announce(`Revoking ${grant.name} failed: ${errorText(e)}`);
      button.focus();
      return;
    }
    await load();
    heading.focus();
    announce(`Grant ${grant.name} is being revoked.`);
  };

  const load = async () => {
    let answer;
    try {
      answer = await api.grants();
    } catch (e) {
      replace(list, h('p', { class: 'error', role: 'alert' }, errorText(e)));
      return;
    }
    if (!answer.grants.length) {
      replace(list, h('p', {}, 'You have no grants. ', h('a', { href: '/', 'data-link': true }, 'Bind an API from the catalog'), '.'));
      return;
    }
    replace(list, h('ul', { class: 'cards grants' }, answer.grants.map((g) => grantCard(g, onRevoke))));
  };
  refresh.addEventListener('click', async () => {
    await load();
    announce('Grants refreshed.');
  });
  await load();
}

// ---- start -------------------------------------------------------------------------------------

async function start() {
  try {
    state.provider = await api.provider();
    document.getElementById('provider-name').textContent = state.provider.name ? ` · ${state.provider.name}` : '';
    state.me = await restoreSession();
  } catch (error) {
    showPage('kbind', [h('p', { class: 'error', role: 'alert' }, errorText(error))], false);
    return;
  }
  showSignedIn();
  await render(false);
}

start();
