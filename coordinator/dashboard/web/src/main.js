// The Gleaner coordinator's admin dashboard: log in with the admin token (a session cookie), then jobs, one job's
// charts, agents and enrollment tokens, kept current by the server's live events (docs/dashboard.md).

import { api, setCsrf } from './api.js';
import { clear, h } from './dom.js';
import { AgentsView, JobsView, JobView, TokensView } from './views.js';

const EVENT_TYPES = ['job', 'lease', 'lease_expired', 'update', 'applied', 'validation', 'agent'];

class App {
  constructor(root) {
    this.root = root;
    this.view = null;
    this.timers = {};
    // For people and tests: how long after the coordinator accepted something the page showed it.
    this.stats = { update: [], validation: [], events: 0 };
    window.__gleaner = this;
    window.addEventListener('hashchange', () => this.route());
    window.addEventListener('gleaner-logged-out', () => this.showLogin('Your session has ended; log in again.'));
  }

  async start() {
    try {
      const session = await api('GET', '/api/v1/admin/session');
      setCsrf(session.csrf_token);
      this.showApp();
    } catch {
      this.showLogin();
    }
  }

  showLogin(message) {
    this.closeEvents();
    if (this.view && this.view.destroy) this.view.destroy();
    this.view = null;
    const token = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'current-password', required: true, placeholder: 'gla_…' });
    const error = h('p', { class: 'field-error', role: 'alert' }, message || '');
    clear(this.root, h('main', { class: 'login' }, h('form', { class: 'card', onsubmit: async (e) => {
      e.preventDefault();
      error.textContent = '';
      try {
        const session = await api('POST', '/api/v1/admin/session', { token: token.value.trim() });
        setCsrf(session.csrf_token);
        token.value = '';
        this.showApp();
      } catch (err) {
        error.textContent = err.message;
      }
    } }, h('h1', {}, 'Gleaner coordinator'), h('label', { for: 'token' }, 'Admin token'), token,
    h('p', { class: 'muted' }, 'The admin token is in the data directory\'s admin-token file.'), error,
    h('button', { type: 'submit', class: 'primary' }, 'Log in'))));
    token.focus();
  }

  showApp() {
    this.nav = h('nav', {},
      h('a', { href: '#/jobs', 'data-nav': 'jobs' }, 'Jobs'),
      h('a', { href: '#/agents', 'data-nav': 'agents' }, 'Agents'),
      h('a', { href: '#/tokens', 'data-nav': 'tokens' }, 'Tokens'));
    this.status = h('span', { class: 'live', title: 'live updates' }, 'connecting…');
    this.flashBox = h('div', { class: 'flash', role: 'status' });
    this.main = h('main', {});
    clear(this.root, 
      h('header', {}, h('a', { class: 'brand', href: '#/jobs' }, 'Gleaner'), this.nav, this.status,
        h('button', { class: 'logout', onclick: async () => {
          try {
            await api('DELETE', '/api/v1/admin/session');
          } finally {
            this.showLogin('Logged out.');
          }
        } }, 'Log out')),
      this.flashBox, this.main);
    this.openEvents();
    this.route();
  }

  go(hash) {
    if (location.hash === hash) this.route();
    else location.hash = hash;
  }

  async route() {
    if (!this.main) return;
    const hash = location.hash || '#/jobs';
    const job = hash.match(/^#\/jobs\/(\d+)$/);
    if (this.view && this.view.destroy) this.view.destroy();
    this.view = job ? new JobView(this, job[1]) : hash === '#/agents' ? new AgentsView(this) : hash === '#/tokens' ? new TokensView(this) : new JobsView(this);
    const section = job ? 'jobs' : hash.slice(2) || 'jobs';
    for (const a of this.nav.querySelectorAll('a')) a.classList.toggle('current', a.dataset.nav === section);
    try {
      await this.view.render(this.main);
      this.main.dataset.view = job ? 'job' : section;
    } catch (err) {
      if (err.status !== 401) clear(this.main, h('p', { class: 'field-error' }, err.message));
    }
  }

  openEvents() {
    this.closeEvents();
    const source = new EventSource('/api/v1/admin/events');
    this.events = source;
    source.addEventListener('hello', () => {
      this.status.textContent = 'live';
      this.status.classList.add('on');
      // Reconnected after a gap: what happened meanwhile is fetched again.
      if (this.connectedBefore && this.view) this.route();
      this.connectedBefore = true;
    });
    for (const type of EVENT_TYPES) {
      source.addEventListener(type, (e) => {
        this.stats.events += 1;
        if (this.view && this.view.onEvent) this.view.onEvent(type, JSON.parse(e.data));
      });
    }
    source.onerror = async () => {
      this.status.textContent = 'reconnecting…';
      this.status.classList.remove('on');
      if (source.readyState === EventSource.CLOSED) {
        // Refused (the session ended?): ask, and either log in again or retry.
        try {
          await api('GET', '/api/v1/admin/session');
          setTimeout(() => this.events === source && this.openEvents(), 2000);
        } catch {
          /* the logged-out event shows the login */
        }
      }
    };
  }

  closeEvents() {
    if (this.events) this.events.close();
    this.events = null;
  }

  // Records, once the browser has painted, how long ago (ms) the coordinator accepted what is now on screen.
  measure(kind, atMs) {
    requestAnimationFrame(() => requestAnimationFrame(() => {
      const list = this.stats[kind];
      list.push(Date.now() - atMs);
      if (list.length > 1000) list.shift();
    }));
  }

  debounce(key, fn, ms) {
    clearTimeout(this.timers[key]);
    this.timers[key] = setTimeout(fn, ms);
  }

  flash(message) {
    this.flashBox.textContent = message;
    this.debounce('flash', () => { this.flashBox.textContent = ''; }, 6000);
  }
}

new App(document.getElementById('app')).start();
