// The web UI in a real browser (Debian's chromium through playwright-core) against a running
// gateway: sign in, browse, bind, copy the command, download the bundle, see Grants, revoke. Every
// page is checked with axe-core, at 375 px wide for horizontal overflow, and screenshotted; a second
// pass does the whole flow with key presses only. What a signed-out user sees is checked by computed
// visibility (an element with `hidden` can still be displayed by CSS), and a catalog with hostile
// Export URLs (injected into the gateway's answer) must render no link but https ones.
//
// Started by backend/tests/ui.rs, which runs the backend and a fakeapi provider. Environment:
//   KBIND_UI_URL            the gateway, e.g. http://127.0.0.1:8080
//   KBIND_UI_TOKEN          a static token the gateway accepts
//   KBIND_UI_CONSUMER_UID   a consumer cluster UID with a heartbeat Lease on the provider
//   KBIND_UI_CONSUMER_UID_2 a second consumer cluster UID, without a heartbeat (the keyboard pass)
//   KBIND_UI_SCREENSHOTS    where the PNG screenshots and downloaded bundles go
//   KBIND_CHROMIUM          the browser (default /usr/bin/chromium)

import { readFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';
import axe from 'axe-core';

const env = (name) => {
  const value = process.env[name];
  if (!value) {
    console.error(`${name} is not set; run this through backend/tests/ui.rs (cargo test -p kbind-backend --test ui)`);
    process.exit(2);
  }
  return value;
};

const BASE = env('KBIND_UI_URL').replace(/\/$/, '');
const TOKEN = env('KBIND_UI_TOKEN');
const UID_1 = env('KBIND_UI_CONSUMER_UID');
const UID_2 = env('KBIND_UI_CONSUMER_UID_2');
const OUT = env('KBIND_UI_SCREENSHOTS');
const CHROMIUM = process.env.KBIND_CHROMIUM || '/usr/bin/chromium';
const DESKTOP = { width: 1280, height: 900 };
const PHONE = { width: 375, height: 800 };
const STEP_TIMEOUT = 30_000;

mkdirSync(OUT, { recursive: true });

const axeSummary = [];
const screenshots = [];
let shot = 0;

/** Page-level checks: axe at both widths, no overflow at 375 px, a screenshot at each width. */
async function checkPage(page, name) {
  await page.evaluate(axe.source);
  for (const viewport of [DESKTOP, PHONE]) {
    await page.setViewportSize(viewport);
    const result = await page.evaluate(() => window.axe.run(document));
    axeSummary.push({ page: name, width: viewport.width, violations: result.violations.length, passes: result.passes.length, incomplete: result.incomplete.length });
    const details = result.violations
      .map((v) => `  ${v.id} (${v.impact}): ${v.help}\n${v.nodes.map((n) => `    ${n.target.join(' ')}: ${n.failureSummary}`).join('\n')}`)
      .join('\n');
    assert.equal(result.violations.length, 0, `axe found violations on ${name} at ${viewport.width} px:\n${details}`);
    const file = join(OUT, `${String(++shot).padStart(2, '0')}-${name}-${viewport.width}.png`);
    await page.screenshot({ path: file, fullPage: true });
    screenshots.push(file);
    if (viewport === PHONE) {
      const widths = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth }));
      assert.ok(widths.scroll <= 375, `${name} overflows horizontally at 375 px: scrollWidth ${widths.scroll} (see ${file})`);
    }
  }
  await page.setViewportSize(DESKTOP);
}

/**
 * What a signed-out user sees: only the sign-in form's button, no navigation and no account area.
 * Checked by computed visibility, not the `hidden` attribute, which CSS can override.
 */
async function assertSignedOutView(page) {
  for (const [what, selector] of [['the Sign out button', '#sign-out'], ['the main navigation', '#nav'], ['the account area', '#account']]) {
    assert.equal(await page.locator(selector).isVisible(), false, `${what} is visible to a signed-out user`);
  }
  const buttons = (await page.locator('button:visible').allTextContents()).map((t) => t.trim());
  assert.deepEqual(buttons, ['Sign in'], 'a signed-out user sees no button but Sign in');
}

/**
 * Export `docs`/`icon` URLs come from whoever writes Exports: with hostile ones in the catalog
 * answer, every link and source on the page is https or this site's own, and the hostile URLs show
 * as inert text.
 */
async function assertHostileUrlsInert(page) {
  const api = [{ name: 'widgets.example.org', exported: true, scope: 'Namespaced', group: 'example.org', resource: 'widgets', kind: 'Widget', versions: ['v1'] }];
  const hostile = [
    { name: 'hostile-js', title: 'Hostile <img src=x onerror=alert(1)>', docs: 'javascript:alert(document.domain)', icon: 'javascript:alert(1)' },
    { name: 'hostile-http', title: 'Plain HTTP', docs: 'http://docs.example.org/plain', icon: 'data:image/svg+xml,<svg onload=alert(1)>' },
    { name: 'hostile-relative', title: 'Relative', docs: '//evil.example.org/x', icon: '/api/v1/grants' },
    { name: 'good-docs', title: 'Good docs', docs: 'https://docs.example.org/good', icon: 'https://docs.example.org/icon.png' },
  ].map((e) => ({ ...e, apis: api, namespaced: true, ready: true }));
  await page.route('**/api/v1/catalog', async (route) => {
    const response = await route.fetch();
    const body = await response.json();
    body.exports.push(...hostile);
    await route.fulfill({ response, json: body });
  });
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Catalog' }).click();
  await heading(page, 'Catalog');
  await page.locator('[data-export="good-docs"]').waitFor();
  const targets = await page.evaluate(() => [...document.querySelectorAll('[href], [src], [action], [formaction], [srcset]')]
    .map((el) => ({ tag: el.tagName, value: el.getAttribute('href') ?? el.getAttribute('src') ?? el.getAttribute('action') ?? el.getAttribute('formaction') ?? el.getAttribute('srcset') })));
  for (const { tag, value } of targets) {
    const url = new URL(value, BASE);
    assert.ok(url.protocol === 'https:' || url.origin === BASE,
      `a <${tag.toLowerCase()}> on the catalog points at ${value}: only https links (or this site's own) may be rendered`);
  }
  for (const [name, url] of [['hostile-js', 'javascript:alert(document.domain)'], ['hostile-http', 'http://docs.example.org/plain'], ['hostile-relative', '//evil.example.org/x']]) {
    const card = page.locator(`[data-export="${name}"]`);
    assert.equal(await card.getByRole('link', { name: /Documentation/ }).count(), 0, `${name}: a non-https docs URL is not a link`);
    assert.equal((await card.locator('.docs-unlinked code').textContent()), url, `${name}: the URL shows as text`);
  }
  assert.match(await page.locator('[data-export="hostile-js"] h3').textContent(), /<img src=x onerror=alert\(1\)>/, 'markup in a title is text');
  const good = page.locator('[data-export="good-docs"]').getByRole('link', { name: 'Documentation for Good docs' });
  assert.equal(await good.getAttribute('href'), 'https://docs.example.org/good', 'an https docs URL is a link');
  await page.unroute('**/api/v1/catalog');
}

/**
 * An Export's related-resource rules on its bind page: each rule's kind with its group, its
 * selector with every reference path, and whether status flows back.
 */
async function assertRelatedRulesShown(page) {
  const api = [{ name: 'widgets.example.org', exported: true, scope: 'Namespaced', group: 'example.org', resource: 'widgets', kind: 'Widget', versions: ['v1'] }];
  const relatedResources = [
    { group: 'networking.k8s.io', resource: 'ingresses', direction: 'FromConsumer', syncStatus: true, selector: { references: [{ path: 'spec.ingressRef.name' }, { path: 'spec.tls[].ingress' }] } },
    { group: '', resource: 'secrets', direction: 'FromProvider', selector: { names: ['widget-credentials'] } },
  ];
  await page.route('**/api/v1/catalog', async (route) => {
    const response = await route.fetch();
    const body = await response.json();
    body.exports.push({ name: 'with-related', title: 'With related', apis: api, namespaced: true, ready: true, relatedResources });
    await route.fulfill({ response, json: body });
  });
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Catalog' }).click();
  await heading(page, 'Catalog');
  await page.getByRole('link', { name: 'Bind With related' }).click();
  await heading(page, 'Bind With related');
  const rules = page.getByRole('region', { name: 'What you bind' }).locator('[data-related]');
  const text = async (kind) => (await rules.and(page.locator(`[data-related="${kind}"]`)).innerText()).replace(/\s+/g, ' ').trim();
  assert.equal(await text('ingresses.networking.k8s.io'),
    'ingresses.networking.k8s.io objects of your cluster are copied to the provider: named at spec.ingressRef.name or spec.tls[].ingress of each bound object. Their status is set from the provider\'s copy.');
  assert.equal(await text('secrets'), 'secrets objects of the provider are copied to your cluster: named widget-credentials.');
  await checkPage(page, 'bind-related');
  await page.unroute('**/api/v1/catalog');
}

async function heading(page, text) {
  await page.getByRole('heading', { level: 1, name: text }).waitFor({ timeout: STEP_TIMEOUT });
}

async function liveRegion(page, pattern) {
  await page.waitForFunction((source) => new RegExp(source, 'i').test(document.getElementById('status').textContent), pattern.source, { timeout: STEP_TIMEOUT });
}

function checkBundle(file) {
  const yaml = readFileSync(file, 'utf8');
  assert.match(yaml, /^kind: Connection$/m, `the downloaded bundle ${file} has no Connection`);
  assert.match(yaml, /^apiVersion: /m, `the downloaded bundle ${file} is not Kubernetes YAML`);
  assert.doesNotMatch(yaml.trimStart(), /^[{[]/, `the downloaded bundle ${file} is JSON, not YAML`);
  return yaml;
}

async function newPage(browser) {
  const context = await browser.newContext({ viewport: DESKTOP, acceptDownloads: true });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: BASE });
  const page = await context.newPage();
  page.setDefaultTimeout(STEP_TIMEOUT);
  const problems = [];
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('dialog', async (d) => {
    problems.push(`a script opened a ${d.type()} dialog: ${d.message()}`);
    await d.dismiss();
  });
  page.on('console', (message) => {
    if (/Content Security Policy/i.test(message.text())) problems.push(`CSP: ${message.text()}`);
  });
  return { context, page, problems };
}

async function pointerPass(browser) {
  const { context, page, problems } = await newPage(browser);

  // Sign in: a wrong token is refused with a reason, the right one is kept for the tab.
  await page.goto(BASE);
  await heading(page, 'Sign in to acme');
  assert.equal(new URL(page.url()).pathname, '/signin');
  assert.equal(await page.getByRole('link', { name: /single sign-on/i }).count(), 0, 'no OIDC link without oidc in the provider metadata');
  await assertSignedOutView(page);
  await checkPage(page, 'sign-in');
  await page.getByLabel('Access token').fill('not-a-valid-token');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('alert').filter({ hasText: 'did not accept this token' }).waitFor();
  await page.getByLabel('Access token').fill(TOKEN);
  await page.getByRole('button', { name: 'Sign in' }).click();

  // The catalog, by Collection.
  await heading(page, 'Catalog');
  const basics = page.getByRole('region', { name: 'Basics' });
  await basics.getByRole('heading', { name: 'Widgets' }).waitFor();
  assert.ok(await page.locator('#sign-out').isVisible(), 'Sign out shows once signed in');
  assert.match(await basics.locator('[data-export="widgets"]').textContent(), /widgets\.example\.org\s*Widget · v1 · namespaced/, 'the card names each API with its kind, versions and scope');
  await checkPage(page, 'catalog');

  // Bind: the form validates, then the command and the bundle.
  await basics.getByRole('link', { name: 'Bind Widgets' }).click();
  await heading(page, 'Bind Widgets');
  assert.match(await page.locator('#consumer-uid-hint').textContent(), /kubectl get ns kube-system -o jsonpath='\{\.metadata\.uid\}'/);
  // What a user binds: each API with its group, resource, scope, versions and spec fields.
  const api = page.getByRole('region', { name: 'What you bind' }).locator('[data-api="widgets.example.org"]');
  const facts = (await api.locator('dl').innerText()).replace(/\s+/g, ' ');
  assert.match(facts, /Group example\.org Resource widgets Scope namespaced Versions v1/, `the API's facts: ${facts}`);
  assert.deepEqual((await api.locator('[data-field]').evaluateAll((els) => els.map((e) => e.textContent.trim()))).sort(),
    ['spec.color string', 'spec.size integer'], 'the spec fields of the provider CRD');
  assert.match(await page.getByRole('region', { name: 'Your grants of this Export' }).textContent(), /None yet/);
  await checkPage(page, 'bind');
  await page.getByRole('button', { name: 'Bind' }).click();
  await page.getByRole('alert').filter({ hasText: 'UUID' }).waitFor();
  assert.equal(await page.evaluate(() => document.activeElement.id), 'consumer-uid', 'an invalid UID takes the focus');
  await page.getByLabel('Consumer cluster UID').fill(UID_1);
  await page.getByLabel('Namespaces').fill('team-a');
  await page.getByRole('button', { name: 'Bind' }).click();
  const command = page.locator('#redeem-command');
  await command.waitFor();
  const commandText = (await command.textContent()).trim();
  assert.match(commandText, new RegExp(`^kbind redeem ${BASE.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}/api/v1/pickup/\\S+$`));
  assert.equal(await page.evaluate(() => document.activeElement.id), 'bind-result-title', 'the result takes the focus');
  const grantName = await page.locator('#bind-result [data-grant]').getAttribute('data-grant');
  assert.match(await page.locator('#bind-result-title').textContent(), /^Bundle ready for grant /);
  // Only a pickup URL exists yet: the page must not say anything is bound.
  assert.doesNotMatch(await page.locator('main').innerText(), /\bBound\b/, 'nothing is called bound before the bundle is applied');
  assert.match(await page.locator('#bind-result').textContent(), /Nothing is bound yet/);
  // What is already bound: the new grant is listed, without a heartbeat until its konnector runs.
  const listed = page.locator(`#bound-list [data-grant="${grantName}"]`);
  await listed.waitFor();
  assert.match(await listed.textContent(), new RegExp(UID_1));
  await checkPage(page, 'bind-result');

  await page.getByRole('button', { name: 'Copy command' }).click();
  await liveRegion(page, /copied/);
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), commandText, 'the clipboard holds the command');

  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.getByRole('button', { name: 'Download the bundle' }).click(),
  ]);
  const bundleFile = join(OUT, `pointer-${download.suggestedFilename()}`);
  await download.saveAs(bundleFile);
  assert.equal(download.suggestedFilename(), 'widgets-bundle.yaml');
  checkBundle(bundleFile);
  await page.locator('#pickup-note').filter({ hasText: 'no longer works' }).waitFor();
  const replay = await fetch(commandText.replace('kbind redeem ', ''), { headers: { Accept: 'application/yaml' } });
  assert.notEqual(replay.status, 200, 'the pickup works once: after the download the command no longer works');
  await checkPage(page, 'bind-downloaded');

  // The catalog says what is bound already; hostile Export URLs are never links.
  await assertHostileUrlsInert(page);
  assert.match(await page.locator('[data-export="widgets"] .bound-count').textContent(), /You have 1 grant of it/);
  await assertRelatedRulesShown(page);

  // Grants with the consumer's heartbeat age.
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'My grants' }).click();
  await heading(page, 'My grants');
  const card = page.locator(`[data-grant="${grantName}"]`);
  await card.waitFor();
  assert.match(await card.locator('.heartbeat').textContent(), /^\d+ (s|min) ago$/, 'the heartbeat age of a consumer with a Lease');
  assert.match(await card.textContent(), new RegExp(UID_1));
  await checkPage(page, 'grants');

  // Revoke: Cancel keeps the grant, Revoke revokes it.
  const revoke = card.getByRole('button', { name: `Revoke grant ${grantName}` });
  await revoke.click();
  const dialog = page.getByRole('dialog', { name: `Revoke grant ${grantName}?` });
  await dialog.waitFor();
  const warning = await dialog.locator('#confirm-unbind').textContent();
  assert.match(warning, /Unbind before you revoke/);
  assert.match(warning, /kbind unbind widgets --orphan/);
  await checkPage(page, 'revoke-confirm');
  await dialog.getByRole('button', { name: 'Cancel' }).click();
  await dialog.waitFor({ state: 'hidden' });
  await liveRegion(page, /Nothing was revoked/);
  assert.doesNotMatch(await card.textContent(), /Being revoked/);
  await revoke.click();
  await dialog.getByRole('button', { name: 'Revoke' }).click();
  await liveRegion(page, new RegExp(`${grantName} is being revoked`));
  await page.waitForFunction((name) => {
    const el = document.querySelector(`[data-grant="${name}"]`);
    return !el || /Being revoked/.test(el.textContent);
  }, grantName).catch((error) => {
    throw new Error(`grant ${grantName} never showed as being revoked after Revoke was confirmed: ${error.message}`);
  });
  await checkPage(page, 'grants-revoked');

  assert.deepEqual(problems, [], 'no page errors and no CSP violations');
  await context.close();
}

/** Tabs (forwards or backwards) until the focused element matches; asserts focus is visible. */
async function tabTo(page, what, selector, text, { back = false, max = 80 } = {}) {
  for (let i = 0; i < max; i++) {
    await page.keyboard.press(back ? 'Shift+Tab' : 'Tab');
    const hit = await page.evaluate(({ selector, text }) => {
      const el = document.activeElement;
      if (!el || !el.matches(selector)) return false;
      return text === null || el.textContent.replace(/\s+/g, ' ').trim() === text;
    }, { selector, text });
    if (hit) {
      const visible = await page.evaluate(() => {
        const el = document.activeElement;
        const style = getComputedStyle(el);
        return el.matches(':focus-visible') && style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0;
      });
      assert.ok(visible, `the focus on ${what} is not visible`);
      return;
    }
  }
  throw new Error(`Tab never reached ${what}`);
}

async function focusedId(page) {
  return page.evaluate(() => document.activeElement?.id ?? '');
}

async function keyboardPass(browser) {
  const { context, page, problems } = await newPage(browser);
  await page.goto(BASE);
  await heading(page, 'Sign in to acme');

  await tabTo(page, 'the skip link', 'a.skip', 'Skip to content');
  await tabTo(page, 'the token field', '#token', null);
  await page.keyboard.type(TOKEN);
  await page.keyboard.press('Enter');
  await heading(page, 'Catalog');
  assert.equal(await focusedId(page), 'page-title', 'after signing in the focus is on the page heading');

  await tabTo(page, 'the Bind link', 'a.button', 'Bind Widgets');
  await page.keyboard.press('Enter');
  await heading(page, 'Bind Widgets');
  assert.equal(await focusedId(page), 'page-title');
  await tabTo(page, 'the UID field', '#consumer-uid', null);
  await page.keyboard.type(UID_2);
  await tabTo(page, 'the namespaces field', '#namespaces', null, { max: 1 });
  await page.keyboard.type('team-b');
  await page.keyboard.press('Enter');
  await page.locator('#redeem-command').waitFor();
  assert.equal(await focusedId(page), 'bind-result-title', 'the result takes the focus');
  const commandText = (await page.locator('#redeem-command').textContent()).trim();
  const grantName = await page.locator('#bind-result [data-grant]').getAttribute('data-grant');

  await tabTo(page, 'Copy command', 'button', 'Copy command');
  await page.keyboard.press('Enter');
  await liveRegion(page, /copied/);
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), commandText);

  await tabTo(page, 'Download the bundle', 'button', 'Download the bundle', { max: 1 });
  const [download] = await Promise.all([page.waitForEvent('download'), page.keyboard.press('Enter')]);
  const bundleFile = join(OUT, `keyboard-${download.suggestedFilename()}`);
  await download.saveAs(bundleFile);
  checkBundle(bundleFile);
  await page.locator('#pickup-note').filter({ hasText: 'no longer works' }).waitFor();
  assert.equal(await focusedId(page), 'pickup-note', 'after the download the focus is on what it means');

  await tabTo(page, 'the My grants link', 'a', 'My grants');
  await page.keyboard.press('Enter');
  await heading(page, 'My grants');
  assert.equal(await focusedId(page), 'page-title');
  const card = page.locator(`[data-grant="${grantName}"]`);
  await card.waitFor();
  assert.match(await card.locator('.heartbeat').textContent(), /None yet/, 'a consumer without a Lease has no heartbeat');

  // Escape cancels and gives the focus back to the button that opened the dialog.
  await tabTo(page, 'the Revoke button', 'button', `Revoke grant ${grantName}`);
  await page.keyboard.press('Enter');
  const dialog = page.getByRole('dialog', { name: `Revoke grant ${grantName}?` });
  await dialog.waitFor();
  assert.equal(await page.evaluate(() => document.activeElement.textContent), 'Cancel', 'the dialog opens on Cancel');
  await page.keyboard.press('Escape');
  await dialog.waitFor({ state: 'hidden' });
  await liveRegion(page, /Nothing was revoked/);
  assert.equal(await page.evaluate(() => document.activeElement.textContent.replace(/\s+/g, ' ').trim()), `Revoke grant ${grantName}`);
  await page.keyboard.press('Enter');
  await dialog.waitFor();
  await tabTo(page, 'the dialog\'s Revoke', 'dialog button', 'Revoke', { max: 1 });
  await page.keyboard.press('Enter');
  await liveRegion(page, new RegExp(`${grantName} is being revoked`));
  assert.equal(await focusedId(page), 'page-title');

  await tabTo(page, 'Sign out', 'button', 'Sign out', { back: true });
  await page.keyboard.press('Enter');
  await heading(page, 'Sign in to acme');
  await assertSignedOutView(page);

  assert.deepEqual(problems, [], 'no page errors and no CSP violations');
  await context.close();
}

const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true });
let failed = false;
try {
  await pointerPass(browser);
  console.log('pointer pass: sign in, browse, bind, copy, download, grants, revoke: ok');
  await keyboardPass(browser);
  console.log('keyboard pass (key presses only): ok');
} catch (error) {
  failed = true;
  console.error(error);
} finally {
  await browser.close();
}
console.log('\naxe-core', axe.version, 'results (violations / passes / incomplete):');
for (const r of axeSummary) {
  console.log(`  ${r.page.padEnd(16)} ${String(r.width).padStart(4)} px: ${r.violations} / ${r.passes} / ${r.incomplete}`);
}
console.log(`\nscreenshots (${screenshots.length}) in ${OUT}:`);
for (const file of screenshots) console.log(`  ${file}`);
process.exit(failed ? 1 : 0);
