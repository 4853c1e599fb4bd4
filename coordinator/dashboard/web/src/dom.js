// A few DOM helpers: enough to build the views without a framework.

// h('tr', {class: 'x', onclick: f}, child, 'text', [more children]) -> element
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// Empties `el`, then appends `children` (null, false and undefined are skipped, arrays flattened).
export function clear(el, ...children) {
  while (el.firstChild) el.removeChild(el.firstChild);
  append(el, children);
  return el;
}

export function percent(value) {
  return value === null || value === undefined ? '–' : `${(100 * value).toFixed(1)} %`;
}

export function number(value, digits = 3) {
  return value === null || value === undefined ? '–' : Number(value).toFixed(digits);
}

export function ago(ms, now = Date.now()) {
  if (!ms) return 'never';
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

export function clock(ms) {
  return ms ? new Date(ms).toLocaleString() : '–';
}

// 1234567 -> "1.2 MB": the units a volunteer's connection is measured in.
export function bytes(n) {
  if (n < 1000) return `${Math.round(n)} B`;
  const units = ['kB', 'MB', 'GB'];
  let v = n / 1000;
  let i = 0;
  while (v >= 1000 && i < units.length - 1) {
    v /= 1000;
    i += 1;
  }
  return `${v >= 100 ? Math.round(v) : v.toFixed(1)} ${units[i]}`;
}
