// The job view's charts, on uPlot: accuracy and loss against wall-clock time with a marker per epoch end (the
// paper's Figure 2), the range of subtask training losses per epoch as error bars (its Figure 4), updates per
// minute, and the staleness of accepted updates. Times are milliseconds in the API, seconds for uPlot.

import uPlot from 'uplot';

import { bytes } from './dom.js';

// The x range of the per-minute bars, from the data itself: a few minutes around them, or the last ten minutes
// while there are none (uPlot's own guess for one bar or none spans years).
function minuteRange(xs) {
  if (!xs || xs.length === 0) {
    const now = Date.now() / 1000;
    return [now - 600, now + 60];
  }
  return [xs[0] - 120, xs[xs.length - 1] + 180];
}

const COLORS = { accuracy: '#1f6feb', loss: '#d1242f', range: '#8250df', bars: '#2da44e', stale: '#bf8700', bytes: '#0a7ea4' };

function width(container) {
  return Math.max(260, Math.floor(container.clientWidth || 600));
}

// Vertical dashed lines with "e1", "e2"... at the given times (seconds).
function epochMarkers(getMarkers) {
  return {
    hooks: {
      draw: (u) => {
        const { ctx } = u;
        const { top, height } = u.bbox;
        ctx.save();
        ctx.setLineDash([4, 4]);
        ctx.strokeStyle = '#8c959f';
        ctx.fillStyle = '#57606a';
        ctx.font = `${Math.round(11 * devicePixelRatio)}px sans-serif`;
        for (const marker of getMarkers()) {
          const x = Math.round(u.valToPos(marker.t, 'x', true));
          if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
          ctx.beginPath();
          ctx.moveTo(x, top);
          ctx.lineTo(x, top + height);
          ctx.stroke();
          ctx.fillText(`e${marker.epoch}`, x + 3 * devicePixelRatio, top + 12 * devicePixelRatio);
        }
        ctx.restore();
      },
    },
  };
}

// min..max whiskers with caps for series 1 (mean), from the `ranges` arrays (same index as x).
function errorBars(getRanges) {
  return {
    hooks: {
      draw: (u) => {
        const { ctx } = u;
        const ranges = getRanges();
        ctx.save();
        ctx.strokeStyle = COLORS.range;
        ctx.lineWidth = 2 * devicePixelRatio;
        const cap = 5 * devicePixelRatio;
        u.data[0].forEach((xv, i) => {
          const lo = ranges.min[i];
          const hi = ranges.max[i];
          if (lo === null || hi === null || lo === undefined) return;
          const x = Math.round(u.valToPos(xv, 'x', true));
          const y0 = Math.round(u.valToPos(lo, 'y', true));
          const y1 = Math.round(u.valToPos(hi, 'y', true));
          ctx.beginPath();
          ctx.moveTo(x, y0);
          ctx.lineTo(x, y1);
          ctx.moveTo(x - cap, y0);
          ctx.lineTo(x + cap, y0);
          ctx.moveTo(x - cap, y1);
          ctx.lineTo(x + cap, y1);
          ctx.stroke();
        });
        ctx.restore();
      },
    },
  };
}

function make(container, opts, data) {
  const chart = new uPlot({ width: width(container), height: 220, ...opts }, data, container);
  return chart;
}

export class JobCharts {
  constructor(root) {
    this.root = root;
    this.markers = [];
    this.ranges = { min: [], max: [] };
    this.counts = {};
    this.resize = () => {
      for (const chart of this.all()) chart.setSize({ width: width(chart.root.parentElement), height: 220 });
    };
    window.addEventListener('resize', this.resize);
  }

  all() {
    return [this.accuracy, this.losses, this.rate, this.staleness, this.bytes].filter(Boolean);
  }

  destroy() {
    window.removeEventListener('resize', this.resize);
    for (const chart of this.all()) chart.destroy();
  }

  // history: GET /api/v1/admin/jobs/{id}/history
  load(history) {
    const v = history.validations;
    this.markers = [];
    v.at_ms.forEach((t, i) => {
      if (v.epoch_end[i]) this.markers.push({ t: t / 1000, epoch: v.epoch[i] });
    });
    const accuracyData = [v.at_ms.map((t) => t / 1000), v.accuracy.slice(), v.loss.slice()];
    this.accuracy = make(
      this.root.querySelector('[data-chart=accuracy]'),
      {
        title: 'Test accuracy and loss',
        plugins: [epochMarkers(() => this.markers)],
        scales: { x: { time: true }, acc: { range: [0, 1] }, loss: { auto: true } },
        series: [
          {},
          { label: 'accuracy', scale: 'acc', stroke: COLORS.accuracy, width: 2, points: { show: true }, value: (u, x) => (x === null ? '–' : `${(100 * x).toFixed(1)} %`) },
          { label: 'loss', scale: 'loss', stroke: COLORS.loss, width: 2, points: { show: true } },
        ],
        axes: [{}, { scale: 'acc', values: (u, ticks) => ticks.map((t) => `${Math.round(100 * t)}%`) }, { scale: 'loss', side: 1, grid: { show: false } }],
      },
      accuracyData,
    );

    const epochs = history.epochs.filter((e) => e.subtask_loss);
    this.ranges = { min: epochs.map((e) => e.subtask_loss.min), max: epochs.map((e) => e.subtask_loss.max) };
    this.lossData = [epochs.map((e) => e.epoch), epochs.map((e) => e.subtask_loss.mean)];
    this.counts = Object.fromEntries(epochs.map((e) => [e.epoch, e.updates]));
    this.losses = make(
      this.root.querySelector('[data-chart=losses]'),
      {
        title: 'Subtask training loss per epoch (min, mean, max)',
        plugins: [errorBars(() => this.ranges)],
        scales: { x: { time: false, range: (u, lo, hi) => [Math.max(0, lo - 0.5), hi + 0.5] }, y: { range: (u, lo, hi) => [Math.max(0, Math.min(lo, ...this.ranges.min.filter((x) => x !== null)) * 0.9), Math.max(hi, ...this.ranges.max.filter((x) => x !== null)) * 1.1 || 1] } },
        series: [{ label: 'epoch' }, { label: 'mean loss', stroke: COLORS.range, width: 0, points: { show: true, size: 8, fill: COLORS.range } }],
        axes: [{ label: 'epoch', incrs: [1, 2, 5, 10, 20, 50, 100] }, {}],
      },
      this.lossData,
    );

    const m = history.updates_per_minute;
    this.rateData = [m.minute_ms.map((t) => t / 1000), m.count.slice()];
    this.rate = make(
      this.root.querySelector('[data-chart=rate]'),
      {
        title: 'Updates per minute',
        // One bar per minute; a lone minute still gets a sensible axis (not one spanning years).
        scales: { x: { time: true, range: (u) => minuteRange(u.data[0]) }, y: { range: (u, lo, hi) => [0, Math.max(1, hi * 1.15)] } },
        series: [{}, { label: 'updates', stroke: COLORS.bars, fill: 'rgba(45,164,78,0.35)', paths: uPlot.paths.bars({ size: [0.8, 60], align: 1 }), points: { show: false } }],
      },
      this.rateData,
    );

    const up = history.updates;
    const stale = up.at_ms.map((t, i) => [t / 1000, up.staleness[i]]).filter((p) => p[1] !== null);
    this.staleData = [stale.map((p) => p[0]), stale.map((p) => p[1])];
    this.staleness = make(
      this.root.querySelector('[data-chart=staleness]'),
      {
        title: 'Staleness of accepted updates',
        scales: { x: { time: true }, y: { range: (u, lo, hi) => [0, Math.max(1, hi + 1)] } },
        series: [{}, { label: 'updates folded in meanwhile', stroke: COLORS.stale, width: 0, points: { show: true, size: 5, fill: COLORS.stale } }],
      },
      this.staleData,
    );

    // What each update cost its agent's uplink (null for updates recorded before the coordinator counted them).
    const sent = up.at_ms.map((t, i) => [t / 1000, (up.upload_bytes || [])[i]]).filter((p) => p[1] !== null && p[1] !== undefined);
    this.bytesData = [sent.map((p) => p[0]), sent.map((p) => p[1])];
    this.bytes = make(
      this.root.querySelector('[data-chart=bytes]'),
      {
        title: 'Upload bytes per update',
        scales: { x: { time: true }, y: { range: (u, lo, hi) => [0, Math.max(1, hi * 1.15)] } },
        series: [{}, { label: 'bytes', stroke: COLORS.bytes, width: 1, points: { show: true, size: 4, fill: COLORS.bytes }, value: (u, x) => (x === null ? '–' : bytes(x)) }],
        axes: [{}, { values: (u, ticks) => ticks.map(bytes), size: 70 }],
      },
      this.bytesData,
    );
  }

  accuracyPoints() {
    return this.accuracy ? this.accuracy.data[0].length : 0;
  }

  addValidation(event) {
    const d = this.accuracy.data;
    d[0].push(event.at_ms / 1000);
    d[1].push(event.accuracy);
    d[2].push(event.loss);
    if (event.epoch_end) this.markers.push({ t: event.at_ms / 1000, epoch: event.epoch });
    this.accuracy.setData(d);
  }

  addUpdate(event) {
    if (this.bytes && event.upload_bytes) {
      this.bytesData[0].push(event.at_ms / 1000);
      this.bytesData[1].push(event.upload_bytes);
      this.bytes.setData(this.bytesData);
    }
    // Per-minute bars.
    const minute = Math.floor(event.at_ms / 60000) * 60;
    const r = this.rateData;
    if (r[0].length && r[0][r[0].length - 1] === minute) r[1][r[1].length - 1] += 1;
    else {
      r[0].push(minute);
      r[1].push(1);
    }
    this.rate.setData(r);
    // The epoch's loss range, and its running mean.
    const l = this.lossData;
    const i = l[0].indexOf(event.epoch);
    if (i < 0) {
      l[0].push(event.epoch);
      l[1].push(event.loss);
      this.ranges.min.push(event.loss);
      this.ranges.max.push(event.loss);
      this.counts[event.epoch] = 1;
    } else {
      const n = (this.counts[event.epoch] || 0) + 1;
      this.counts[event.epoch] = n;
      l[1][i] += (event.loss - l[1][i]) / n;
      this.ranges.min[i] = Math.min(this.ranges.min[i], event.loss);
      this.ranges.max[i] = Math.max(this.ranges.max[i], event.loss);
    }
    this.losses.setData(l);
  }

  addApplied(event) {
    const s = this.staleData;
    s[0].push(event.at_ms / 1000);
    s[1].push(event.staleness);
    this.staleness.setData(s);
  }
}
