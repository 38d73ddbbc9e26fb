// Building DOM nodes without innerHTML, so that no server-provided text is ever parsed as markup.

/**
 * h('p', { class: 'x', onclick: fn }, 'text', child): an element. Attributes whose value is false,
 * null or undefined are left out; `on…` attributes become event listeners.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (value === true) {
      el.setAttribute(key, '');
    } else {
      el.setAttribute(key, String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) {
      append(el, child);
    } else {
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }
}

/** Replaces an element's children. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

/** Text for screen readers only (keeps visible labels short and accessible names distinct). */
export function srOnly(text) {
  return h('span', { class: 'visually-hidden' }, text);
}
