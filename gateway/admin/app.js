/* The admin page: reads the gateway's /api/ every few seconds with the
 * token kept in this tab's sessionStorage and draws what it finds. Every
 * value from the API reaches the page as text (textContent), never as
 * markup. The API decides what a token may see; the page shows whatever
 * comes back. */
'use strict';

(function () {
  const REFRESH_MS = 3000;
  const KEY = 'spotlab.token';
  const SVG = 'http://www.w3.org/2000/svg';
  let budgetsAbsent = false;   // the gateway answered 404: no budget panel
  let timer = null;
  let lastOk = null;

  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k === 'title') e.title = v;
      else e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(k == null ? '' : String(k)));
    return e;
  }

  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }

  function usd(v) {
    v = Number(v) || 0;
    const a = Math.abs(v);
    return '$' + (a === 0 ? '0.00' : a < 0.01 ? v.toFixed(5) : a < 1 ? v.toFixed(4) : v.toFixed(2));
  }

  function duration(s) {
    if (s == null || !isFinite(s)) return '';
    s = Math.max(0, Math.round(s));
    if (s < 60) return s + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
    return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
  }

  function when(us) {
    if (!us) return '';
    const d = new Date(us / 1000);
    const today = new Date();
    return d.toDateString() === today.toDateString() ? d.toLocaleTimeString() : d.toLocaleString();
  }

  function state(s) {
    return el('span', { class: 'state ' + String(s).replace(/[^a-z-]/g, '') }, s);
  }

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function api(path) {
    const token = sessionStorage.getItem(KEY);
    let r;
    try {
      r = await fetch(path, { headers: { Authorization: 'Bearer ' + token }, cache: 'no-store' });
    } catch (e) {
      throw new ApiError(0, 'the gateway is unreachable');
    }
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (!r.ok) {
      const msg = body && body.error && body.error.message ? body.error.message : 'HTTP ' + r.status;
      throw new ApiError(r.status, msg);
    }
    return body;
  }

  function fill(tableId, rows, emptyId) {
    const tbody = $(tableId).tBodies[0];
    tbody.replaceChildren(...rows);
    if (emptyId) $(emptyId).hidden = rows.length > 0;
  }

  function td(v, cls) { return el('td', cls ? { class: cls } : null, v); }

  function drawFleet(instances) {
    const rows = instances.map((i) => {
      const idle = i.state === 'idle';
      const tr = el('tr', idle ? { class: 'idle' } : null,
        td(i.instance), td(i.type), td(i.zone), td(i.market), td(state(i.state)), td(i.job || '–'),
        td(i.user || '–'), td(usd(i.price_usd_per_hour), 'num'),
        td(idle ? (i.idle_s != null ? duration(i.idle_s) : 'idle') : ''));
      return tr;
    });
    fill('fleet-table', rows, 'fleet-empty');
  }

  function progress(j) {
    if (j.steps > 0) {
      const p = el('progress', { max: String(j.steps), value: String(Math.min(j.step, j.steps)) });
      return el('span', null, p, ' ' + j.step + ' / ' + j.steps);
    }
    return j.step ? 'step ' + j.step : '';
  }

  function drawJobs(jobs) {
    fill('jobs-table', jobs.map((j) => el('tr', null,
      td(j.job), td(j.user), td(j.kind), td(state(j.state)), td(j.instance || '–'), td(progress(j)),
      td(j.attempt, 'num'), td(usd(j.cost_usd), 'num'))), 'jobs-empty');
  }

  function drawPreemptions(p) {
    $('preempt-count').textContent = String(p.count);
    $('preempt-split').textContent = p.notice + ' with notice, ' + p.no_notice + ' without';
    fill('preempt-table', p.recent.map((e) => el('tr', null,
      td(when(e.time_us)), td(e.job), td(e.user), td(e.instance), td(e.notice ? 'yes' : 'no'),
      td(e.step == null ? '–' : e.step, 'num'),
      td(e.resumed_us ? 'after ' + duration(e.recovery_s) + (e.resumed_type ? ' on ' + e.resumed_type : '')
                      : 'not yet'))), 'preempt-empty');
  }

  function drawUsers(users) {
    fill('users-table', users.map((u) => {
      const jobs = Object.entries(u.jobs || {}).map(([s, n]) => s + ' ' + n).join(', ');
      return el('tr', null, td(u.user + (u.admin ? ' (admin)' : '')), td(u.group || '–'),
        td(jobs || '–'), td(u.live_jobs, 'num'), td(usd(u.month_spent_usd), 'num'));
    }));
  }

  function drawGroups(groups) {
    fill('groups-table', groups.map((g) => el('tr', null, td(g.group + (g.configured ? '' : ' (hub)')),
      td(g.members ? g.members.join(', ') || '–' : '–'),
      td('notebook ' + duration(g.notebook_timeout_s) + ', worker ' + duration(g.worker_timeout_s)),
      td(usd(g.month_spent_usd), 'num'))), 'groups-empty');
  }

  /* GET /api/budgets: {"month", "budgets": [{"scope", "name", "budget_usd",
   * "spent_usd", "alert_at", "fired", "hard_cap", "capped"}]}. */
  function drawBudgets(b) {
    const list = b && Array.isArray(b.budgets) ? b.budgets : null;
    $('budgets-card').hidden = !list || list.length === 0;
    if (!list) return;
    fill('budgets-table', list.map((r) => {
      const budget = Number(r.budget_usd) || 0;
      const spent = Number(r.spent_usd) || 0;
      const pct = budget > 0 ? spent / budget * 100 : 0;
      const bar = el('span');
      bar.style.width = Math.min(100, pct).toFixed(1) + '%';
      const fired = Array.isArray(r.fired) && r.fired.length ? 'alerts at ' + r.fired.join(', ') + '% sent' : '';
      const cap = r.capped ? 'capped' : r.hard_cap ? 'hard cap' : 'alerts only';
      return el('tr', r.capped ? { class: 'capped' } : null, td(r.scope || ''), td(r.name || '–'),
        td(usd(spent), 'num'), td(budget > 0 ? usd(budget) : 'none', 'num'),
        td(el('span', null, el('span', { class: 'meter' + (pct >= 100 ? ' over' : '') }, bar),
           budget > 0 ? ' ' + pct.toFixed(0) + '%' : '')),
        td(cap + (fired ? '; ' + fired : '')));
    }));
  }

  /* Daily spend as bars, the month's running total as a line and the
   * monthly budget as a dashed line, on one scale, drawn at the chart's
   * own width so the labels keep their size on a phone. A budget far above
   * the spend would flatten everything: it is named instead of drawn. */
  let chartData = null;
  function drawChart(days, budget, spent) {
    chartData = [days, budget, spent];
    const host = $('chart');
    const W = Math.max(280, host.clientWidth || 640), H = W < 500 ? 170 : 220;
    const L = 64, R = 10, T = 10, B = 24;
    const box = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, width: W, height: H, role: 'img' });
    const month = new Date().toISOString().slice(0, 7);
    let run = 0;
    const total = days.map((d) => (d.key.slice(0, 7) === month ? (run += d.usd) : null));
    const peak = Math.max(0, ...days.map((d) => d.usd), ...total.map((t) => t || 0));
    const withBudget = budget > 0 && (peak === 0 || budget <= peak * 4);
    const top = Math.max(peak, withBudget ? budget : 0) || 0.01;
    const n = Math.max(days.length, 1);
    const x = (i) => L + (i + 0.5) * (W - L - R) / n;
    const y = (v) => T + (H - T - B) * (1 - v / (top * 1.05));
    for (const f of [0, 0.5, 1]) {
      const v = top * f;
      box.append(svg('line', { class: 'axis', x1: L, x2: W - R, y1: y(v), y2: y(v) }));
      const t = svg('text', { x: L - 4, y: y(v) + 4, 'text-anchor': 'end' });
      t.textContent = usd(v);
      box.append(t);
    }
    const bw = Math.max(1, (W - L - R) / n * 0.7);
    days.forEach((d, i) => {
      const r = svg('rect', { class: 'bar', x: x(i) - bw / 2, y: y(d.usd), width: bw,
                              height: Math.max(0, y(0) - y(d.usd)) });
      const tip = svg('title');
      tip.textContent = d.key + ': ' + usd(d.usd);
      r.append(tip);
      box.append(r);
    });
    const pts = total.map((t, i) => (t == null ? null : x(i).toFixed(1) + ',' + y(t).toFixed(1)))
      .filter((p) => p);
    if (pts.length) box.append(svg('polyline', { class: 'line', points: pts.join(' ') }));
    if (withBudget) box.append(svg('line', { class: 'budget', x1: L, x2: W - R, y1: y(budget), y2: y(budget) }));
    [0, days.length - 1].forEach((i) => {
      if (i < 0 || !days[i]) return;
      const t = svg('text', { x: x(i), y: H - 6, 'text-anchor': i ? 'end' : 'start' });
      t.textContent = days[i].key.slice(5);
      box.append(t);
    });
    host.replaceChildren(box);
    $('chart-note').textContent = !budget ? 'no monthly budget'
      : withBudget ? 'budget ' + usd(budget)
      : 'budget ' + usd(budget) + ', above this scale (' + (spent / budget * 100).toFixed(1) + '% used)';
  }

  function showBanner(text) {
    const b = $('banner');
    b.textContent = text;
    b.hidden = !text;
  }

  async function budgets() {
    if (budgetsAbsent) return null;
    try {
      return await api('/api/budgets');
    } catch (e) {
      if (e.status === 404) { budgetsAbsent = true; return null; }
      if (e.status === 403) return null;  // budgets this token may not read: no panel
      throw e;
    }
  }

  async function refresh() {
    timer = null;
    try {
      const [status, jobs, insts, cost, pre, users, groups, buds] = await Promise.all([
        api('/api/status'), api('/api/jobs?limit=50'), api('/api/instances'),
        api('/api/cost?days=30'), api('/api/preemptions?limit=20'), api('/api/users'),
        api('/api/groups'), budgets()]);
      $('who').textContent = status.user + (status.admin ? ' (admin)' : '');
      $('tile-jobs').textContent = String(status.live_jobs);
      $('tile-insts').textContent = String(status.instances);
      const budget = status.budget && status.budget.monthly_usd > 0 ? status.budget.monthly_usd : 0;
      $('spend-month').textContent = usd(cost.month_spent_usd);
      $('spend-budget').textContent = budget ? 'of ' + usd(budget) + ' (' +
        (cost.month_spent_usd / budget * 100).toFixed(0) + '%)' : 'no monthly budget';
      $('spend-saved').textContent = usd(cost.saved_usd);
      drawChart(cost.by_day || [], budget, cost.month_spent_usd);
      drawFleet(insts.instances);
      drawJobs(jobs.jobs);
      drawPreemptions(pre);
      drawUsers(users.users);
      drawGroups(groups.groups);
      drawBudgets(buds);
      lastOk = new Date();
      $('updated').textContent = 'updated ' + lastOk.toLocaleTimeString();
      showBanner('');
    } catch (e) {
      if (e.status === 401) {
        sessionStorage.removeItem(KEY);
        showBanner('The gateway refused the token: ' + e.message);
        signedOut();
        return;
      }
      showBanner((e.status ? 'The gateway answered ' + e.status + ': ' : '') + e.message +
                 (lastOk ? '; showing what it said at ' + lastOk.toLocaleTimeString() : ''));
    }
    timer = setTimeout(refresh, REFRESH_MS);
  }

  function signedOut() {
    if (timer) clearTimeout(timer);
    timer = null;
    $('dash').hidden = true;
    $('signout').hidden = true;
    $('login').hidden = false;
    $('who').textContent = '';
    $('token').focus();
  }

  function signedIn() {
    $('login').hidden = true;
    $('dash').hidden = false;
    $('signout').hidden = false;
    if (timer) clearTimeout(timer);
    refresh();
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const t = $('token').value.trim();
      if (!t) return;
      sessionStorage.setItem(KEY, t);
      $('token').value = '';
      showBanner('');
      lastOk = null;
      signedIn();
    });
    $('signout').addEventListener('click', () => {
      sessionStorage.removeItem(KEY);
      showBanner('');
      signedOut();
    });
    window.addEventListener('resize', () => { if (chartData && !$('dash').hidden) drawChart(...chartData); });
    if (sessionStorage.getItem(KEY)) signedIn(); else signedOut();
  });
})();
