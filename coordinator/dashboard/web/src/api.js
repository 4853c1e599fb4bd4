// The coordinator's admin API (docs/protocol.md section 13) from the page: the session cookie travels by itself;
// every request that changes something carries the session's CSRF token in X-Gleaner-CSRF.

let csrfToken = '';

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function setCsrf(token) {
  csrfToken = token || '';
}

export async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (method !== 'GET') headers['X-Gleaner-CSRF'] = csrfToken;
  let payload;
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    payload = typeof body === 'string' ? body : JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, { method, headers, body: payload, credentials: 'same-origin', cache: 'no-store' });
  } catch (e) {
    throw new ApiError(0, `the coordinator cannot be reached (${e.message})`);
  }
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!response.ok) {
    const message = (json && json.error) || `${response.status} ${response.statusText}`;
    const error = new ApiError(response.status, message);
    // A 401 anywhere but at the login itself means the session ended: the app shows the login again.
    if (response.status === 401 && path !== '/api/v1/admin/session') window.dispatchEvent(new CustomEvent('gleaner-logged-out', { detail: message }));
    throw error;
  }
  return json;
}
