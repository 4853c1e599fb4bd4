// The dashboard's views: jobs (list, submit, actions), one job (charts, subtasks), agents, enrollment tokens.
// Each view renders from the admin API and then follows the live events the app hands it.

import { api, ApiError } from './api.js';
import { JobCharts } from './charts.js';
import { ago, bytes, clear, clock, h, number, percent } from './dom.js';

const ACTIONS = { running: ['pause', 'cancel'], paused: ['resume', 'cancel'], created: ['cancel'] };

function stateBadge(state) {
  return h('span', { class: `badge state-${state}`, 'data-state': state }, state);
}

function actionButtons(job, onDone) {
  return (ACTIONS[job.state] || []).map((action) =>
    h('button', {
      class: action === 'cancel' ? 'danger' : '',
      'data-action': action,
      onclick: async (e) => {
        e.stopPropagation();
        if (action === 'cancel' && !confirm(`Cancel job ${job.id} (${job.name}) for good?`)) return;
        try {
          onDone(await api('POST', `/api/v1/admin/jobs/${job.id}/${action}`));
        } catch (err) {
          alert(err.message);
        }
      },
    }, action),
  );
}

// "adaptive-nesterov (server_lr 1, momentum 0.5), speed-aware": the rule that folds the job's updates.
function ruleText(aggregation, speedAware) {
  if (!aggregation) return '–';
  const params = Object.entries(aggregation)
    .filter(([key]) => key !== 'rule')
    .map(([key, value]) => (typeof value === 'object' ? `${key} ${value.function ?? value.decay}` : `${key} ${value}`));
  return `${aggregation.rule}${params.length ? ` (${params.join(', ')})` : ''}${speedAware ? ', speed-aware' : ''}`;
}

// "useful agents now: 6; 14 connected", with the measured useful agents over the job's versions as a line.
function widthFact(width) {
  if (!width) return '–';
  const points = width.history || [];
  const title = width.noise_scale === undefined ? '' : `gradient noise scale ${number(width.noise_scale)} updates; cap ${width.cap ?? 'none'}`;
  const box = h('span', { 'data-width': String(width.useful_agents ?? ''), title }, width.summary || '–');
  if (points.length < 2) return box;
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'sparkline');
  svg.setAttribute('viewBox', '0 0 120 24');
  svg.setAttribute('width', '120');
  svg.setAttribute('height', '24');
  const top = Math.max(...points.map((p) => p.useful_agents));
  const first = points[0].version;
  const span = Math.max(1, points[points.length - 1].version - first);
  const line = document.createElementNS(ns, 'polyline');
  line.setAttribute('points', points.map((p) => `${(120 * (p.version - first)) / span},${22 - (20 * p.useful_agents) / top}`).join(' '));
  line.setAttribute('fill', 'none');
  line.setAttribute('stroke', 'currentColor');
  svg.append(line);
  return h('span', {}, box, ' ', svg);
}

// "topk 1% with error feedback, 10.4 kB an update (162× under the 1.7 MB weights) · patches at 3%": what a
// subtask costs an agent's connection.
function transferText(t) {
  if (!t || !t.upload) return '–';
  const u = t.upload;
  let text = u.encoding === 'topk' ? `topk ${+(u.density * 100).toPrecision(3)}%` : u.encoding;
  if (u.encoding !== 'fp32' && u.error_feedback) text += ' with error feedback';
  if (t.upload_bytes_per_update) {
    text += `, ${bytes(t.upload_bytes_per_update)} an update`;
    if (t.upload_ratio) text += ` (${t.upload_ratio.toFixed(t.upload_ratio < 10 ? 1 : 0)}× under the ${bytes(t.weights_bytes)} weights)`;
  }
  if (t.download && t.download.density < 1) text += ` · patches at ${+(t.download.density * 100).toPrecision(3)}%`;
  return text;
}

// The weights as safetensors (PyTorch's state_dict names) and, for a TorchScript job, its program with them in it.
function weightsLink(job) {
  if (job.state === 'created' || job.state === 'failed') return null;
  const safetensors = h('a', { class: 'button', href: `/api/v1/admin/jobs/${job.id}/weights`, download: `job-${job.id}-v${job.version}.safetensors`, title: 'safetensors.torch.load_file, then model.load_state_dict' }, 'weights');
  if (job.model !== 'torchscript') return safetensors;
  return h('span', { class: 'buttons' }, safetensors, ' ',
    h('a', { class: 'button', href: `/api/v1/admin/jobs/${job.id}/torchscript`, download: `job-${job.id}-v${job.version}.pt`, title: 'torch.jit.load' }, 'TorchScript'));
}

function subtasksText(s) {
  if (!s) return '–';
  return `${s.done}/${s.total} done · ${s.leased} leased · ${s.pending} pending` + (s.late ? ` · ${s.late} late` : '') + (s.reissued ? ` · ${s.reissued} re-issued` : '');
}

// ---- jobs ----------------------------------------------------------------------------------------------------

export class JobsView {
  constructor(app) {
    this.app = app;
    this.jobs = new Map();
  }

  async render(root) {
    this.root = root;
    this.tbody = h('tbody');
    const specField = h('textarea', { id: 'spec', name: 'spec', rows: 10, spellcheck: 'false', placeholder: '{"name": "fashion-mlp", "dataset": {"format": "fashion-mnist"}, ...}', 'aria-describedby': 'spec-error' });
    const specError = h('p', { id: 'spec-error', class: 'field-error', role: 'alert' });
    const fileInput = h('input', { type: 'file', accept: '.json,application/json', onchange: async () => {
      const file = fileInput.files[0];
      if (file) specField.value = await file.text();
    } });
    const form = h('form', { class: 'card submit', onsubmit: async (e) => {
      e.preventDefault();
      specError.textContent = '';
      specField.removeAttribute('aria-invalid');
      try {
        const created = await api('POST', '/api/v1/admin/jobs', specField.value);
        specField.value = '';
        await this.refresh();
        this.app.flash(`Job ${created.id} submitted; it imports its dataset, then runs.`);
      } catch (err) {
        specError.textContent = err.message;
        specField.setAttribute('aria-invalid', 'true');
      }
    } },
    h('h2', {}, 'Submit a job'),
    h('label', { for: 'spec' }, 'Job spec (JSON; see docs/protocol.md section 13.1)'),
    specField, specError,
    h('div', { class: 'row' }, h('label', { class: 'file' }, 'or load a file ', fileInput), h('button', { type: 'submit', class: 'primary' }, 'Submit')));

    clear(root, 
      h('section', { class: 'card' }, h('h2', {}, 'Jobs'),
        h('table', { class: 'list jobs' },
          h('thead', {}, h('tr', {}, ['Job', 'State', 'Epoch', 'Accuracy', 'Updates', 'Agents', 'Subtasks (current epoch)', ''].map((t) => h('th', {}, t)))),
          this.tbody)),
      form);
    await this.refresh();
  }

  async refresh() {
    const { jobs } = await api('GET', '/api/v1/admin/jobs');
    this.jobs = new Map(jobs.map((j) => [j.id, j]));
    this.draw();
  }

  draw() {
    clear(this.tbody);
    if (!this.jobs.size) this.tbody.append(h('tr', {}, h('td', { colspan: 8, class: 'empty' }, 'No job yet: submit one below.')));
    for (const job of [...this.jobs.values()].sort((a, b) => b.id - a.id)) {
      this.tbody.append(h('tr', { 'data-job': job.id, onclick: () => this.app.go(`#/jobs/${job.id}`) },
        h('td', { 'data-label': 'Job' }, h('a', { href: `#/jobs/${job.id}` }, `${job.id} · ${job.name}`)),
        h('td', { 'data-label': 'State' }, stateBadge(job.state)),
        h('td', { 'data-label': 'Epoch' }, `${job.epoch}/${job.max_epochs}`),
        h('td', { 'data-label': 'Accuracy' }, percent(job.accuracy)),
        h('td', { 'data-label': 'Updates' }, job.updates),
        h('td', { 'data-label': 'Agents' }, job.agents),
        h('td', { 'data-label': 'Subtasks' }, subtasksText(job.subtasks || (job.workunits && { ...job.workunits, total: job.shards, late: 0, reissued: 0 }))),
        h('td', { class: 'actions' }, actionButtons(job, (j) => { this.jobs.set(j.id, { ...this.jobs.get(j.id), ...j }); this.draw(); }), weightsLink(job))));
    }
  }

  onEvent(type, data) {
    if (type === 'job') {
      this.jobs.set(data.id, data);
      this.draw();
    }
  }
}

// ---- one job -------------------------------------------------------------------------------------------------

export class JobView {
  constructor(app, id) {
    this.app = app;
    this.id = Number(id);
  }

  async render(root) {
    this.root = root;
    const history = await api('GET', `/api/v1/admin/jobs/${this.id}/history`);
    this.job = history.job;
    this.head = h('div', { class: 'job-head' });
    this.counts = h('div', { class: 'counts', 'data-subtasks': '' });
    const chartBox = (name) => h('div', { class: 'chart', 'data-chart': name });
    clear(root, 
      h('section', { class: 'card' }, this.head, this.counts),
      h('section', { class: 'charts' }, chartBox('accuracy'), chartBox('losses'), chartBox('rate'), chartBox('staleness'), chartBox('bytes')));
    this.drawHead();
    this.charts = new JobCharts(root);
    this.charts.load(history);
    root.querySelector('[data-chart=accuracy]').dataset.points = String(this.charts.accuracyPoints());
  }

  drawHead() {
    const j = this.job;
    clear(this.head, 
      h('h2', {}, `Job ${j.id} · ${j.name} `, stateBadge(j.state)),
      j.reason ? h('p', { class: 'reason' }, j.reason) : null,
      h('dl', { class: 'facts' },
        h('dt', {}, 'Epoch'), h('dd', {}, `${j.epoch} of ${j.max_epochs}`),
        h('dt', {}, 'Accuracy'), h('dd', { 'data-accuracy': '' }, `${percent(j.accuracy)} (target ${percent(j.target_accuracy)})`),
        h('dt', {}, 'Loss'), h('dd', {}, number(j.loss)),
        h('dt', {}, 'Updates'), h('dd', {}, `${j.updates} folded in, ${j.updates_received} received`),
        h('dt', {}, 'Agents'), h('dd', {}, j.agents),
        h('dt', {}, 'Width'), h('dd', {}, widthFact(j.width)),
        h('dt', {}, 'Rule'), h('dd', { 'data-rule': '' }, ruleText(j.aggregation, j.speed_aware)),
        h('dt', {}, 'Transfer'), h('dd', { 'data-transfer': '' }, transferText(j.transfer))),
      h('div', { class: 'actions' }, actionButtons(j, (updated) => { this.job = { ...this.job, ...updated }; this.drawHead(); }), weightsLink(j)));
    const s = j.subtasks || {};
    clear(this.counts, h('h3', {}, `Subtasks of epoch ${s.epoch ?? j.epoch}`),
      h('ul', { class: 'tally' }, ['pending', 'leased', 'late', 'reissued', 'done'].map((k) =>
        h('li', { 'data-count': k }, h('b', {}, s[k] ?? 0), ' ', k === 'reissued' ? 're-issued' : k)), h('li', {}, h('b', {}, s.total ?? 0), ' in all')));
  }

  onEvent(type, data) {
    if (data.job !== this.id && data.id !== this.id) return;
    if (type === 'job') {
      this.job = data;
      this.drawHead();
    } else if (type === 'validation') {
      this.charts.addValidation(data);
      const box = this.root.querySelector('[data-chart=accuracy]');
      box.dataset.points = String(this.charts.accuracyPoints());
      this.app.measure('validation', data.at_ms);
    } else if (type === 'update') {
      this.charts.addUpdate(data);
      this.app.measure('update', data.at_ms);
    } else if (type === 'applied') {
      this.charts.addApplied(data);
    }
  }

  destroy() {
    if (this.charts) this.charts.destroy();
  }
}

// ---- agents --------------------------------------------------------------------------------------------------

export class AgentsView {
  constructor(app) {
    this.app = app;
  }

  async render(root) {
    this.root = root;
    this.tbody = h('tbody');
    clear(root, h('section', { class: 'card' }, h('h2', {}, 'Agents'),
      h('table', { class: 'list agents' },
        h('thead', {}, h('tr', {}, ['Agent', 'Online', 'Kind', 'Platform', 'Cores', 'GPU', 'Speed', 'Done', 'Timed out', 'Invalid', 'Failed', 'Last seen', 'Current subtask', ''].map((t) => h('th', {}, t)))),
        this.tbody)));
    await this.refresh();
  }

  async refresh() {
    const { agents, now_ms: now } = await api('GET', '/api/v1/admin/agents');
    clear(this.tbody);
    if (!agents.length) this.tbody.append(h('tr', {}, h('td', { colspan: 14, class: 'empty' }, 'No agent has enrolled yet: create an enrollment token.')));
    for (const a of agents) {
      const current = (a.current || []).map((c) => h('div', {}, `job ${c.job} · epoch ${c.epoch} · shard ${c.shard}${c.state === 'expired' ? ' (late)' : ''}`));
      this.tbody.append(h('tr', { 'data-agent': a.id, class: a.revoked ? 'revoked' : '' },
        h('td', { 'data-label': 'Agent' }, h('b', {}, a.name), h('div', { class: 'muted' }, a.id)),
        h('td', { 'data-label': 'Online' }, a.revoked ? h('span', { class: 'badge state-cancelled' }, 'revoked') : h('span', { class: `dot ${a.online ? 'on' : 'off'}`, 'data-online': String(a.online) }, a.online ? 'online' : 'offline'),
          a.quarantined ? h('div', { class: 'badge state-failed', 'data-quarantined': 'true', title: a.quarantine_reason }, 'quarantined') : null,
          a.quarantined ? h('div', { class: 'muted quarantine-reason' }, a.quarantine_reason) : null),
        h('td', { 'data-label': 'Kind', 'data-kind': a.kind || 'desktop' }, h('span', { class: `badge kind-${a.kind || 'desktop'}` }, a.kind || 'desktop')),
        h('td', { 'data-label': 'Platform' }, a.platform || '–'),
        h('td', { 'data-label': 'Cores' }, a.cores ?? '–'),
        h('td', { 'data-label': 'GPU' }, a.gpu === undefined || a.gpu === null || a.gpu === false ? '–' : String(a.gpu)),
        h('td', { 'data-label': 'Speed' }, (a.speed ?? a.samples_per_second) ? `${Math.round(a.speed ?? a.samples_per_second)} samples/s` : '–'),
        h('td', { 'data-label': 'Done' }, a.done),
        h('td', { 'data-label': 'Timed out' }, a.timed_out),
        h('td', { 'data-label': 'Invalid' }, a.invalid),
        h('td', { 'data-label': 'Failed' }, a.failed ?? 0),
        h('td', { 'data-label': 'Last seen', title: clock(a.last_seen_ms) }, ago(a.last_seen_ms, now)),
        h('td', { 'data-label': 'Current' }, current.length ? current : '–'),
        h('td', { class: 'actions' }, a.quarantined && !a.revoked ? h('button', { 'data-action': 'release', onclick: async () => {
          if (!confirm(`Lift the quarantine of agent ${a.name}? It gets work again.`)) return;
          try {
            await api('POST', `/api/v1/admin/agents/${a.id}/release`);
            await this.refresh();
          } catch (err) {
            alert(err.message);
          }
        } }, 'lift quarantine') : null, a.revoked ? null : h('button', { class: 'danger', 'data-action': 'revoke', onclick: async () => {
          if (!confirm(`Revoke agent ${a.name}? Its next request will be refused; it must enroll again.`)) return;
          try {
            await api('POST', `/api/v1/admin/agents/${a.id}/revoke`);
            await this.refresh();
          } catch (err) {
            alert(err.message);
          }
        } }, 'revoke'))));
    }
  }

  onEvent(type) {
    if (['agent', 'lease', 'lease_expired', 'update'].includes(type)) this.app.debounce('agents', () => this.refresh(), 500);
  }
}

// ---- enrollment tokens ---------------------------------------------------------------------------------------

export class TokensView {
  constructor(app) {
    this.app = app;
  }

  async render(root) {
    this.root = root;
    this.tbody = h('tbody');
    const uses = h('input', { type: 'number', min: 1, id: 'uses', placeholder: 'unlimited' });
    const hours = h('input', { type: 'number', min: 1, id: 'hours', placeholder: '168 (7 days)' });
    const made = h('div', { class: 'made', 'aria-live': 'polite' });
    const error = h('p', { class: 'field-error', role: 'alert' });
    const form = h('form', { class: 'row', onsubmit: async (e) => {
      e.preventDefault();
      error.textContent = '';
      const body = {};
      if (uses.value) body.uses = Number(uses.value);
      if (hours.value) body.expires_seconds = Number(hours.value) * 3600;
      try {
        const t = await api('POST', '/api/v1/admin/tokens', body);
        clear(made, h('p', {}, 'New enrollment token (shown this once): '), h('code', { class: 'secret', 'data-token': '' }, t.token));
        await this.refresh();
      } catch (err) {
        error.textContent = err.message;
      }
    } }, h('label', { for: 'uses' }, 'Uses'), uses, h('label', { for: 'hours' }, 'Expires in hours'), hours, h('button', { type: 'submit', class: 'primary' }, 'Create token'));
    clear(root, h('section', { class: 'card' }, h('h2', {}, 'Enrollment tokens'), form, error, made,
      h('table', { class: 'list tokens' }, h('thead', {}, h('tr', {}, ['Id', 'State', 'Used', 'Uses left', 'Created', 'Expires', ''].map((t) => h('th', {}, t)))), this.tbody)));
    await this.refresh();
  }

  async refresh() {
    const { tokens } = await api('GET', '/api/v1/admin/tokens');
    clear(this.tbody);
    if (!tokens.length) this.tbody.append(h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'No enrollment token yet.')));
    for (const t of tokens) {
      this.tbody.append(h('tr', { 'data-token-id': t.id },
        h('td', { 'data-label': 'Id' }, t.id),
        h('td', { 'data-label': 'State' }, h('span', { class: `badge token-${t.state.replace(' ', '-')}` }, t.state)),
        h('td', { 'data-label': 'Used' }, t.used),
        h('td', { 'data-label': 'Uses left' }, t.uses_left ?? 'unlimited'),
        h('td', { 'data-label': 'Created' }, clock(t.created_ms)),
        h('td', { 'data-label': 'Expires' }, t.expires_ms ? clock(t.expires_ms) : 'never'),
        h('td', { class: 'actions' }, t.state === 'revoked' ? null : h('button', { class: 'danger', onclick: async () => {
          try {
            await api('POST', `/api/v1/admin/tokens/${t.id}/revoke`);
            await this.refresh();
          } catch (err) {
            alert(err.message);
          }
        } }, 'revoke'))));
    }
  }

  onEvent() {}
}

export { ApiError };
