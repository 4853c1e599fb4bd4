#!/usr/bin/env node
// The dashboard in a real browser: Debian's Chromium (headless, driven by playwright-core) against a real
// gleaner-coordinator on an ephemeral loopback port, training a small Fashion-MNIST job with an agent (agents.cjs).
// It logs in, submits the job (an invalid spec first: the error shows next to the field), watches the accuracy chart
// gain points, pauses the job and sees the agent stop receiving its subtasks, revokes the agent and sees its next
// lease refused; it saves screenshots of the job view and the agents view and prints their paths, the page's
// transfer size and the time from an accepted update to the chart showing it.
//
//   NODE_PATH=BUILD/dashboard-web/node_modules node dashboard_test.cjs --coordinator BIN --worker BIN
//       --agent-bin BIN --workdir DIR [--chromium /usr/bin/chromium]
//
// Bounded: everything it started is stopped by pid, and the whole run is cut off after 170 s.
'use strict';

const { execFileSync, spawn } = require('child_process');
const fs = require('fs');
const https = require('https');
const path = require('path');
const { startAgent } = require('./agents.cjs');

const LIMIT_MS = 175000;
const started = Date.now();
let passed = 0;
let failed = 0;
const children = [];
let browser = null;

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

function check(ok, what, detail) {
  if (ok) {
    passed += 1;
    console.log(`ok: ${what}`);
  } else {
    failed += 1;
    console.log(`FAIL: ${what}${detail !== undefined ? ` -- ${detail}` : ''}`);
  }
  return ok;
}

function require_(ok, what, detail) {
  if (!check(ok, what, detail)) throw new Error(`stopping: ${what}`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what, fn, timeoutMs, everyMs = 250) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e.message;
    }
    await sleep(everyMs);
  }
  throw new Error(`${what}: not within ${timeoutMs} ms (last: ${JSON.stringify(last)})`);
}

// SIGTERM to each process this test started (the coordinator then writes its weights and stops), SIGKILL to any
// still there after 10 s.
async function stopAll() {
  const alive = (c) => c.exitCode === null && c.signalCode === null;
  for (const child of [...children].reverse()) {
    if (!alive(child)) continue;
    try {
      process.kill(child.pid, 'SIGTERM');
    } catch {
      continue;
    }
    const deadline = Date.now() + 10000;
    while (alive(child) && Date.now() < deadline) await sleep(100);
    if (alive(child)) {
      try {
        process.kill(child.pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
  }
}

const binaries = {
  coordinator: arg('coordinator'),
  worker: arg('worker'),
  agent: arg('agent-bin'),
};
const chromium = arg('chromium', '/usr/bin/chromium');
const workdir = path.resolve(arg('workdir', path.join(require('os').tmpdir(), 'gleaner-browser-test')));

function median(list) {
  if (!list.length) return null;
  const s = [...list].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function main() {
  for (const [name, file] of Object.entries(binaries))
    require_(file && fs.existsSync(file), `the ${name} program exists`, file);
  require_(fs.existsSync(chromium), `Chromium is installed at ${chromium} (Debian package chromium)`);
  let playwright;
  try {
    playwright = require('playwright-core');
  } catch (e) {
    require_(false, 'playwright-core loads (NODE_PATH should name the build folder\'s dashboard-web/node_modules)', e.message);
  }
  fs.rmSync(workdir, { recursive: true, force: true });
  fs.mkdirSync(workdir, { recursive: true });

  // ---- a coordinator on an ephemeral loopback port --------------------------------------------------------------
  const dataDir = path.join(workdir, 'coordinator');
  const init = JSON.parse(execFileSync(binaries.coordinator, ['init', '--data-dir', dataDir, '--listen', '127.0.0.1:0', '--json']));
  const config = JSON.parse(fs.readFileSync(path.join(dataDir, 'config.json')));
  config.validate_every_updates = 2; // an accuracy point every two updates, between the epoch ends
  fs.writeFileSync(path.join(dataDir, 'config.json'), JSON.stringify(config, null, 2));
  const serverLog = fs.openSync(path.join(workdir, 'coordinator.log'), 'w');
  const server = spawn(binaries.coordinator, ['serve', '--data-dir', dataDir], { stdio: ['ignore', 'pipe', serverLog] });
  children.push(server);
  const port = await new Promise((resolve, reject) => {
    let text = '';
    server.stdout.on('data', (chunk) => {
      text += chunk;
      const m = text.match(/^port (\d+)$/m);
      if (m) resolve(Number(m[1]));
    });
    server.on('exit', (code) => reject(new Error(`serve exited with ${code}; see ${workdir}/coordinator.log`)));
    setTimeout(() => reject(new Error('serve did not print its port within 20 s')), 20000);
  });
  const url = `https://127.0.0.1:${port}`;
  const ca = fs.readFileSync(init.ca_certificate);
  check(true, `coordinator serving ${url}`);

  const admin = (method, target, body) => new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = https.request({ host: '127.0.0.1', port, path: target, method, ca,
      headers: { Authorization: `Bearer ${init.admin_token}`, ...(payload ? { 'Content-Type': 'application/json' } : {}) } }, (res) => {
      let data = '';
      res.on('data', (c) => { data += c; });
      res.on('end', () => resolve({ status: res.statusCode, text: data, json: () => JSON.parse(data) }));
    });
    req.on('error', reject);
    req.end(payload);
  });
  const metric = async (series) => {
    const text = (await admin('GET', '/metrics')).text;
    const line = text.split('\n').find((l) => l.startsWith(`${series} `));
    return line ? Number(line.slice(series.length + 1)) : 0;
  };

  // ---- the agent --------------------------------------------------------------------------------------------------
  const enrollment = (await admin('POST', '/api/v1/admin/tokens', { uses: 1 })).json().token;
  const agent = startAgent({ url, enrollmentToken: enrollment, ca: init.ca_certificate, dataDir: path.join(workdir, 'agent'), binaries });
  children.push(agent.process);
  check(true, `agent started (${agent.kind}), log ${agent.log}`);

  // ---- the browser ------------------------------------------------------------------------------------------------
  browser = await playwright.chromium.launch({ executablePath: chromium, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 1000 } });
  const page = await context.newPage();
  const consoleErrors = [];
  // Script errors; the browser's own "Failed to load resource" lines for the 401 / 422 answers the test asks for
  // are not the page's.
  page.on('console', (m) => { if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  page.on('dialog', (d) => d.accept());

  await page.goto(`${url}/`);
  await page.waitForSelector('#token');
  const sizes = await page.evaluate(() => performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'))
    .map((e) => ({ name: e.name, transfer: e.transferSize, body: e.encodedBodySize })));
  const transfer = sizes.reduce((s, e) => s + e.transfer, 0);
  const bodies = sizes.reduce((s, e) => s + e.body, 0);
  console.log(`figure: page load transfer ${transfer} bytes (${bodies} bytes of compressed bodies) over ${sizes.length} requests`);

  await page.fill('#token', 'gla_wrong');
  await page.click('button[type=submit]');
  await page.waitForSelector('.login .field-error:not(:empty)');
  check((await page.textContent('.login .field-error')).includes('not valid'), 'a wrong token is refused on the login page');
  await page.fill('#token', init.admin_token);
  await page.click('button[type=submit]');
  await page.waitForSelector('nav a[data-nav=jobs]');
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === '__Host-gleaner_session');
  check(session && session.httpOnly && session.secure && session.sameSite === 'Strict', 'logged in: an HttpOnly, Secure, SameSite=Strict session cookie');
  await page.waitForSelector('.live.on', { timeout: 10000 });
  check(true, 'live events connected');

  // Submit: first a spec with a typo, then the real one.
  await page.fill('#spec', '{"name": "x", "batchsize": 3}');
  await page.click('form.submit button[type=submit]');
  await page.waitForSelector('#spec-error:not(:empty)');
  const specError = await page.textContent('#spec-error');
  check(specError.includes('batchsize') || specError.includes('job'), 'an invalid spec shows the server\'s error next to the field', specError);
  const spec = {
    name: 'fashion-browser', dataset: { format: 'fashion-mnist' }, limit_train: 2000,
    model: { arch: 'mlp', input_shape: [1, 28, 28], num_classes: 10, hidden: [32] },
    shards: 4, local_epochs: 1, batch_size: 32, optimizer: { name: 'sgd', lr: 0.05, momentum: 0.9 },
    target_accuracy: 0.99, max_epochs: 50, deadline_seconds: 60, seed: 7,
  };
  await page.fill('#spec', JSON.stringify(spec, null, 2));
  await page.click('form.submit button[type=submit]');
  await page.waitForSelector('tr[data-job="1"]');
  await page.waitForSelector('tr[data-job="1"] [data-state=running]', { timeout: 60000 });
  check(true, 'the job is listed, and running');

  // The job view: the accuracy chart gains points as validations come in.
  await page.click('tr[data-job="1"] a');
  await page.waitForSelector('[data-chart=accuracy] canvas');
  const points = async () => Number(await page.getAttribute('[data-chart=accuracy]', 'data-points'));
  const before = await points();
  await waitFor('the accuracy chart gaining 3 points', async () => (await points()) >= before + 3, 90000, 500);
  check(true, `the accuracy chart gained points (${before} -> ${await points()})`);
  await page.waitForSelector('[data-count=done]');
  const jobShot = path.join(workdir, 'job-view.png');
  await page.screenshot({ path: jobShot, fullPage: true });
  console.log(`screenshot: ${jobShot}`);

  // Pause: the agent keeps asking but gets none of this job's subtasks.
  await page.click('.job-head [data-action=pause]');
  await page.waitForSelector('.job-head [data-state=paused]');
  await sleep(1500); // an upload in flight may still land; leases stop at once
  const leasesAtPause = await metric('gleaner_leases_issued_total');
  const seenAtPause = Date.now();
  await sleep(6000);
  const leasesLater = await metric('gleaner_leases_issued_total');
  check(leasesLater === leasesAtPause, `no lease while paused (${leasesAtPause} issued before, ${leasesLater} after 6 s)`);
  if (agent.kind === 'standin') {
    const replies = fs.readFileSync(agent.log, 'utf8').trim().split('\n').map((l) => { try { return JSON.parse(l); } catch { return {}; } })
      .filter((e) => e.event === 'lease' && e.at_ms > seenAtPause);
    check(replies.length > 0 && replies.every((e) => e.tasks === 0), `the agent asked ${replies.length} times while paused and got no subtask`);
  }

  // Agents: the agent is online; revoke it and its next lease is refused.
  await page.click('nav a[data-nav=agents]');
  await page.waitForSelector('tr[data-agent] [data-online=true]');
  check(true, 'the agent is listed online');
  await page.click('tr[data-agent] [data-action=revoke]');
  await page.waitForSelector('tr[data-agent].revoked');
  const refused = await waitFor('the revoked agent\'s next lease refused (403)',
    async () => (await metric('gleaner_http_requests_total{route="lease",code="403"}')) >= 1, agent.kind === 'standin' ? 20000 : 45000);
  check(refused, 'the revoked agent\'s next lease request was refused with 403');
  const agentsShot = path.join(workdir, 'agents-view.png');
  await page.screenshot({ path: agentsShot, fullPage: true });
  console.log(`screenshot: ${agentsShot}`);

  // Tokens, and a narrow screen.
  await page.click('nav a[data-nav=tokens]');
  await page.click('form.row button[type=submit]');
  await page.waitForSelector('[data-token]');
  check((await page.textContent('[data-token]')).startsWith('gle_'), 'an enrollment token is made from the page');
  await page.setViewportSize({ width: 390, height: 844 });
  await page.click('nav a[data-nav=jobs]');
  await page.waitForSelector('tr[data-job="1"]');
  const narrowShot = path.join(workdir, 'jobs-narrow.png');
  await page.screenshot({ path: narrowShot, fullPage: true });
  console.log(`screenshot: ${narrowShot}`);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(overflow <= 0, `nothing overflows a 390 px wide screen (${overflow} px)`);

  // Figures.
  const stats = await page.evaluate(() => window.__gleaner.stats);
  const u = stats.update;
  const v = stats.validation;
  console.log(`figure: accepted update -> chart shown: median ${median(u)} ms, max ${u.length ? Math.max(...u) : null} ms over ${u.length} updates`);
  console.log(`figure: validation -> accuracy chart shown: median ${median(v)} ms, max ${v.length ? Math.max(...v) : null} ms over ${v.length} points`);
  check(u.length > 0 && Math.max(...u) < 1000, 'every accepted update showed on the chart within a second');
  check(consoleErrors.length === 0, 'no error in the page\'s console', consoleErrors.join(' | '));

  // Logging out ends the session.
  await page.click('header .logout');
  await page.waitForSelector('#token');
  const after = await context.request.get(`${url}/api/v1/admin/jobs`);
  check(after.status() === 401, 'after logging out the admin API answers 401', after.status());
}

const guard = setTimeout(() => {
  console.log(`FAIL: the test did not finish within ${LIMIT_MS / 1000} s`);
  for (const child of children) {
    try {
      process.kill(child.pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  process.exit(1);
}, LIMIT_MS);

main()
  .catch((e) => check(false, 'unexpected error', e.stack || String(e)))
  .finally(async () => {
    if (browser) await browser.close().catch(() => {});
    await stopAll();
    clearTimeout(guard);
    check(Date.now() - started < LIMIT_MS, `whole run within ${LIMIT_MS / 1000} s`, `${((Date.now() - started) / 1000).toFixed(1)} s`);
    console.log(`${passed} passed, ${failed} failed`);
    process.exit(failed === 0 ? 0 : 1);
  });
