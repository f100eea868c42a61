// Blendplane web console: a client of the public REST/JSON API (/v1), with
// the signed-in principal's bearer token on every call. No framework, no
// build step, nothing from another origin. Server data reaches the page as
// text nodes only (never as HTML).

const TOKEN_KEY = 'blendplane.token';
const POLL_MS = 2000;

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  caller: null, // GetCallerResponse
};

// ---------- API ----------

class APIError extends Error {
  constructor(httpStatus, body) {
    const err = body && body.error ? body.error : body || {};
    super(err.message || `HTTP ${httpStatus}`);
    this.httpStatus = httpStatus;
    this.details = err.details || [];
    const info = this.details.find((d) => (d['@type'] || '').endsWith('google.rpc.ErrorInfo'));
    this.code = info ? info.reason : '';
    const bad = this.details.find((d) => (d['@type'] || '').endsWith('google.rpc.BadRequest'));
    this.violations = bad ? bad.fieldViolations || [] : [];
  }
}

function headers(json) {
  const h = {};
  if (state.token) h.Authorization = 'Bearer ' + state.token;
  if (json) h['Content-Type'] = 'application/json';
  return h;
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== '' && v !== false) q.set(k, String(v));
  }
  const s = q.toString();
  return s ? '?' + s : '';
}

async function api(path, { method = 'GET', body, params, signal } = {}) {
  const resp = await fetch('/v1' + path + query(params), {
    method,
    headers: headers(body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  });
  const text = await resp.text();
  let data = {};
  try {
    data = text ? JSON.parse(text) : {};
  } catch {
    data = { message: text };
  }
  if (!resp.ok) throw new APIError(resp.status, data);
  return data;
}

// stream calls a server-streaming route: grpc-gateway sends one JSON object
// per line, {"result": ...} or {"error": ...}.
async function stream(path, params, onResult, signal) {
  const resp = await fetch('/v1' + path + query(params), { headers: headers(false), signal });
  if (!resp.ok) {
    let data = {};
    try {
      data = JSON.parse(await resp.text());
    } catch {}
    throw new APIError(resp.status, data);
  }
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  const handle = (line) => {
    if (!line.trim()) return;
    const msg = JSON.parse(line);
    if (msg.error) throw new APIError(resp.status, msg);
    onResult(msg.result || {});
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      handle(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  }
  handle(buf);
}

const MIME = { png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', webp: 'image/webp', gif: 'image/gif',
  glb: 'model/gltf-binary', gltf: 'model/gltf+json', obj: 'text/plain', json: 'application/json' };
const extOf = (name) => (name.split('.').pop() || '').toLowerCase();
const isImage = (name) => ['png', 'jpg', 'jpeg', 'webp', 'gif'].includes(extOf(name));

// download fetches an artifact through DownloadArtifact (its header, then
// base64 chunks) and returns it as a Blob.
async function download(art, signal) {
  const parts = [];
  await stream(`/sessions/${enc(art.sessionId)}/artifacts/${enc(art.name)}`, { sha256: art.sha256 }, (r) => {
    if (r.chunk) parts.push(Uint8Array.from(atob(r.chunk), (c) => c.charCodeAt(0)));
  }, signal);
  return new Blob(parts, { type: MIME[extOf(art.name)] || 'application/octet-stream' });
}

const enc = encodeURIComponent;
const has = (scope) => !!state.caller && (state.caller.scopes || []).includes(scope);

// ---------- DOM ----------

// h builds an element: h('a', {href: '#'}, 'text', child, ...). Strings are
// text nodes; attributes starting with "on" are listeners.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function table(columns, rows, attrs) {
  return h('table', attrs,
    h('thead', null, h('tr', null, columns.map((c) => h('th', null, c)))),
    h('tbody', null, rows));
}

function fmtTime(ts) {
  if (!ts) return '';
  const d = new Date(ts);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}
const short = (hash) => (hash ? h('code', { title: hash }, hash.slice(0, 12)) : '');
const strip = (s, prefix) => (s || '').replace(prefix, '');
const fmtBytes = (n) => {
  n = Number(n || 0);
  if (n < 1024) return n + ' B';
  if (n < 1 << 20) return (n / 1024).toFixed(1) + ' KiB';
  return (n / (1 << 20)).toFixed(1) + ' MiB';
};

const fmtMicros = (us) => {
  us = Number(us || 0);
  if (!us) return '';
  return us < 1000 ? us + ' µs' : (us / 1000).toFixed(1) + ' ms';
};

const TONE = {
  SUCCEEDED: 'ok', READY: 'ok', OPEN: 'ok', APPROVED: 'ok', VALIDATED: 'ok', ALLOW: 'ok',
  FAILED: 'bad', BROKEN: 'bad', LOST: 'bad', REJECTED: 'bad', ROLLED_BACK: 'bad', DENY: 'bad',
  RUNNING: 'info', PENDING: 'info', PARKED: 'info',
  AWAITING_APPROVAL: 'warn', UNREACHABLE: 'warn', CANCELLED: 'warn', NOT_RUN: 'warn', SKIPPED_IDEMPOTENT: 'info',
  REQUIRE_APPROVAL: 'warn',
};
function badge(value, prefix) {
  const v = strip(value, prefix);
  return h('span', { class: 'badge ' + (TONE[v] || ''), dataset: { state: v } }, v.replaceAll('_', ' ').toLowerCase());
}

function errorBox(err) {
  if (err instanceof APIError) {
    // The control plane's messages start with their code, which the box
    // shows apart: once.
    const message = err.code && err.message.startsWith(err.code + ': ') ? err.message.slice(err.code.length + 2) : err.message;
    return h('div', { class: 'error', role: 'alert' },
      err.code ? h('span', { class: 'code' }, err.code, ': ') : '', message,
      err.violations.length ? h('ul', null, err.violations.map((v) => h('li', null, h('code', null, v.field), ' ', v.description))) : '');
  }
  return h('div', { class: 'error', role: 'alert' }, String(err && err.message ? err.message : err));
}

// failure renders seed 000's failure contract.
function failure(f) {
  if (!f) return '';
  const steps = f.minimalRepairPlan || [];
  return h('div', { class: 'failure' },
    h('span', { class: 'badge bad' }, f.errorCode || 'FAILED'), ' ', f.message || '',
    h('div', { class: 'muted' }, f.recoverable ? 'recoverable' : 'not recoverable', f.retryHint ? ' — ' + f.retryHint : ''),
    steps.length ? h('ul', null, steps.map((s) => h('li', null, strip(s.action, 'ACTION_').toLowerCase().replaceAll('_', ' '), ' ', h('code', null, s.operationId)))) : '');
}

function showImage(blob, caption) {
  const url = URL.createObjectURL(blob);
  const img = document.getElementById('viewer-img');
  img.src = url;
  img.alt = caption;
  document.getElementById('viewer-caption').textContent = caption;
  document.getElementById('viewer').hidden = false;
}

function closeViewer() {
  const img = document.getElementById('viewer-img');
  if (img.src) URL.revokeObjectURL(img.src);
  img.removeAttribute('src');
  document.getElementById('viewer').hidden = true;
}

// artifactActions: view (images) and download buttons for an artifact.
function artifactActions(art, ctx) {
  const view = isImage(art.name) ? h('button', {
    type: 'button', dataset: { action: 'view', artifact: art.name },
    onclick: async (ev) => {
      ev.target.disabled = true;
      try {
        showImage(await download(art, ctx.signal), art.name);
      } catch (err) {
        ev.target.after(errorBox(err));
      } finally {
        ev.target.disabled = false;
      }
    },
  }, 'View') : '';
  const save = h('button', {
    type: 'button', dataset: { action: 'download', artifact: art.name },
    onclick: async (ev) => {
      ev.target.disabled = true;
      try {
        const url = URL.createObjectURL(await download(art, ctx.signal));
        const a = h('a', { href: url, download: art.name });
        document.body.append(a);
        a.click();
        a.remove();
        setTimeout(() => URL.revokeObjectURL(url), 60000);
      } catch (err) {
        ev.target.after(errorBox(err));
      } finally {
        ev.target.disabled = false;
      }
    },
  }, 'Download');
  return h('span', { class: 'row-actions' }, view, save);
}

// ---------- views ----------

// A view renders into main and may keep work running: ctx.signal ends with
// the view, ctx.every repeats a refresh while it is shown.
function newContext() {
  const ac = new AbortController();
  const timers = [];
  return {
    signal: ac.signal,
    // every runs fn now and every ms while the view is shown. A failure is
    // shown above the view until a later run succeeds; a token that stopped
    // working (401) signs out.
    every(ms, fn) {
      const run = async () => {
        if (ac.signal.aborted) return;
        try {
          await fn();
          document.getElementById('poll-error')?.remove();
        } catch (err) {
          if (ac.signal.aborted) return;
          if (err instanceof APIError && err.httpStatus === 401 && !state.caller?.authDisabled) {
            signOut();
            return;
          }
          const box = errorBox(err);
          box.id = 'poll-error';
          document.getElementById('poll-error')?.remove();
          document.getElementById('main').prepend(box);
        }
        if (!ac.signal.aborted) timers.push(setTimeout(run, ms));
      };
      return run();
    },
    close() {
      ac.abort();
      timers.forEach(clearTimeout);
    },
  };
}

async function agentsView(main, ctx) {
  main.append(h('h1', null, 'Agents'));
  const box = h('div');
  main.append(box);
  if (!has('admin')) {
    box.append(h('p', { class: 'muted' }, 'Listing agents needs the admin scope.'));
    return;
  }
  await ctx.every(POLL_MS, async () => {
    const resp = await api('/agents', { params: { pageSize: 1000 }, signal: ctx.signal });
    const rows = (resp.agents || []).map((a) => h('tr', { dataset: { agent: a.agentId } },
      h('td', null, h('code', null, a.agentId), h('div', { class: 'muted' }, a.hostname)),
      h('td', null, badge(a.state, 'STATE_')),
      h('td', null, a.address),
      h('td', null, fmtTime(a.lastSeenTime)),
      h('td', null, Object.entries(a.labels || {}).map(([k, v]) => h('span', { class: 'badge' }, `${k}=${v}`)), ''),
      h('td', null, (a.runtimes || []).map((r) => h('div', null, h('code', null, r.runtimeId), ' ',
        h('span', { class: 'muted' }, (r.blenderProfile && r.blenderProfile.version) || '')))),
      h('td', null, `${a.liveSessionCount || 0} running / ${a.maxSessions || 0} max`, a.busySessionCount ? ` (${a.busySessionCount} busy)` : ''),
      h('td', null, (a.sessionIds || []).map((id) => h('div', null, h('a', { href: '#/sessions/' + enc(id) }, id))))));
    box.replaceChildren(rows.length
      ? table(['Agent', 'State', 'Address', 'Last seen', 'Labels', 'Runtimes', 'Blenders', 'Sessions'], rows, { id: 'agents' })
      : h('p', { class: 'muted' }, 'No agent has registered.'));
  });
}

async function sessionsView(main, ctx) {
  const filter = h('select', { id: 'session-state' },
    h('option', { value: '' }, 'not closed'),
    ['OPEN', 'PARKED', 'CLOSED', 'BROKEN'].map((s) => h('option', { value: 'STATE_' + s }, s.toLowerCase())));
  const box = h('div');
  main.append(h('div', { class: 'toolbar' }, h('h1', null, 'Sessions'), filter), box);
  const refresh = async () => {
    const resp = await api('/sessions', {
      params: { pageSize: 1000, state: filter.value, allPrincipals: has('admin') }, signal: ctx.signal,
    });
    const rows = (resp.sessions || []).map((s) => h('tr', { dataset: { session: s.sessionId } },
      h('td', null, h('a', { href: '#/sessions/' + enc(s.sessionId) }, s.sessionId)),
      h('td', null, badge(s.state, 'STATE_')),
      h('td', null, s.owner),
      h('td', null, h('code', null, s.agentId), h('div', { class: 'muted' }, s.runtimeId)),
      h('td', null, `${s.activePlanCount || 0} active / ${s.planCount || 0}`),
      h('td', null, short(s.sceneHash)),
      h('td', null, fmtTime(s.createTime)),
      h('td', null, fmtTime(s.updateTime))));
    box.replaceChildren(rows.length
      ? table(['Session', 'State', 'Owner', 'Agent / runtime', 'Plans', 'Scene hash', 'Created', 'Updated'], rows, { id: 'sessions' })
      : h('p', { class: 'muted' }, 'No sessions.'));
  };
  filter.addEventListener('change', () => refresh().catch((err) => box.replaceChildren(errorBox(err))));
  await ctx.every(POLL_MS, refresh);
}

async function sessionView(main, ctx, id) {
  const facts = h('div', { class: 'panel' });
  const plans = h('div');
  const artifacts = h('div');
  main.append(h('h1', null, 'Session ', h('code', null, id)), facts,
    h('h2', null, 'Plans'), plans, h('h2', null, 'Renders and exports'), artifacts);
  await ctx.every(POLL_MS, async () => {
    const [sess, pl, arts] = await Promise.all([
      api('/sessions/' + enc(id), { signal: ctx.signal }),
      api(`/sessions/${enc(id)}/plans`, { params: { pageSize: 200 }, signal: ctx.signal }),
      api(`/sessions/${enc(id)}/artifacts`, { params: { pageSize: 1000 }, signal: ctx.signal }),
    ]);
    const s = sess.session || {};
    facts.replaceChildren(h('dl', { class: 'facts' },
      h('dt', null, 'State'), h('dd', { id: 'session-state-value' }, badge(s.state, 'STATE_')),
      h('dt', null, 'Owner'), h('dd', null, s.owner),
      h('dt', null, 'Agent'), h('dd', null, h('code', null, s.agentId), ' ', h('span', { class: 'muted' }, s.runtimeId), ' epoch ', s.epoch || ''),
      h('dt', null, 'Scene hash'), h('dd', null, h('code', null, s.sceneHash || '')),
      h('dt', null, 'Client'), h('dd', null, ((s.contract || {}).hostProfile || {}).clientName || ''),
      h('dt', null, 'Created'), h('dd', null, fmtTime(s.createTime))));
    const prow = (pl.plans || []).map((p) => h('tr', { dataset: { plan: p.requestId } },
      h('td', null, h('a', { href: `#/plans/${enc(p.owner)}/${enc(p.requestId)}` }, p.requestId)),
      h('td', null, badge(p.state, 'STATE_')),
      h('td', null, p.owner),
      h('td', null, p.receiptCount || '0'),
      h('td', null, p.atomic ? 'atomic' : ''),
      h('td', null, p.approvalId ? h('a', { href: '#/approvals' }, p.approvalId) : ''),
      h('td', null, fmtTime(p.createTime)),
      h('td', null, fmtTime(p.updateTime))));
    plans.replaceChildren(prow.length
      ? table(['Plan', 'State', 'Owner', 'Receipts', '', 'Approval', 'Submitted', 'Updated'], prow, { id: 'plans' })
      : h('p', { class: 'muted' }, 'No plans yet.'));
    const arow = (arts.artifacts || []).map((a) => h('tr', { dataset: { artifact: a.name } },
      h('td', null, a.name),
      h('td', null, fmtBytes(a.sizeBytes)),
      h('td', null, short(a.sha256)),
      h('td', null, !a.requestId ? h('span', { class: 'muted', title: 'uploaded by a client' }, 'upload')
        : a.operationId ? h('span', null, h('code', null, a.requestId), ' / ', h('code', null, a.operationId))
        : h('span', null, h('code', null, a.requestId), ' ', h('span', { class: 'muted', title: 'the render of the plan\'s preview, before its approval' }, 'preview'))),
      h('td', null, fmtTime(a.createTime)),
      h('td', null, artifactActions(a, ctx))));
    artifacts.replaceChildren(arow.length
      ? table(['Name', 'Size', 'SHA-256', 'Made by', 'Created', ''], arow, { id: 'artifacts' })
      : h('p', { class: 'muted' }, 'No renders or exports yet.'));
  });
}

async function planView(main, ctx, owner, requestId) {
  const ownerParam = state.caller && owner !== state.caller.principal ? owner : '';
  const head = h('div', { class: 'panel' });
  const bar = h('div', { class: 'progress' }, h('div'));
  const live = h('div', { id: 'live', class: 'muted' });
  const banner = h('div');
  const tbody = h('tbody');
  const rtable = h('table', { id: 'receipts' },
    h('thead', null, h('tr', null, ['#', 'Operation', 'Tool', 'Status', 'Time', 'Scene hash after', 'Mutation', 'Output / failure'].map((c) => h('th', null, c)))),
    tbody);
  main.append(h('h1', null, 'Plan ', h('code', null, requestId)), head, bar, live, banner, rtable);

  let plan = {};
  const showPlan = () => {
    const cancel = ['STATE_PENDING', 'STATE_RUNNING', 'STATE_AWAITING_APPROVAL'].includes(plan.state)
      ? h('button', { type: 'button', class: 'danger', dataset: { action: 'cancel' }, onclick: async () => {
        try {
          plan = (await api(`/plans/${enc(requestId)}:cancel`, { method: 'POST', body: { owner: ownerParam } })).plan || plan;
          showPlan();
        } catch (err) {
          head.append(errorBox(err));
        }
      } }, 'Cancel plan') : '';
    head.replaceChildren(h('dl', { class: 'facts' },
      h('dt', null, 'State'), h('dd', { id: 'plan-state' }, badge(plan.state, 'STATE_')),
      h('dt', null, 'Session'), h('dd', null, h('a', { href: '#/sessions/' + enc(plan.sessionId || '') }, plan.sessionId || '')),
      h('dt', null, 'Owner'), h('dd', null, plan.owner || owner),
      h('dt', null, 'Operations'), h('dd', null, `${(plan.schedule || []).length}${plan.atomic ? ', atomic' : ''}`),
      h('dt', null, 'Registry'), h('dd', null, short(plan.registryFingerprint)),
      plan.approvalId ? [h('dt', null, 'Approval'), h('dd', null, h('a', { href: '#/approvals' }, plan.approvalId))] : '',
      h('dt', null, 'Submitted'), h('dd', null, fmtTime(plan.createTime))),
    plan.failure ? failure(plan.failure) : '', cancel ? h('div', { class: 'actions' }, cancel) : '');
  };
  const getPlan = async () => {
    plan = (await api('/plans/' + enc(requestId), { params: { owner: ownerParam }, signal: ctx.signal })).plan || {};
    showPlan();
  };
  await getPlan();

  let count = 0;
  const addReceipt = (r) => {
    count++;
    const total = (plan.schedule || []).length || count;
    bar.firstChild.style.width = Math.min(100, (100 * count) / total) + '%';
    live.textContent = `${count} of ${total} operations`;
    const arts = r.artifacts || [];
    tbody.append(h('tr', { dataset: { sequence: r.sequence, status: strip(r.status, 'STATUS_') } },
      h('td', null, r.sequence),
      h('td', null, h('code', null, r.operationId)),
      h('td', null, h('code', null, r.toolName)),
      h('td', null, badge(r.status, 'STATUS_')),
      h('td', null, fmtMicros(r.durationMicros)),
      h('td', null, short(r.sceneHashAfter)),
      h('td', null, r.blenderMutationId ? h('a', { href: '#/audit?mutation=' + enc(r.blenderMutationId) }, h('code', null, r.blenderMutationId.slice(0, 12))) : ''),
      h('td', null, r.error ? failure(r.error) : '',
        arts.map((a) => h('div', null, a.name, ' ', artifactActions(a, ctx))))));
  };
  try {
    await stream(`/plans/${enc(requestId)}/receipts`, { owner: ownerParam }, (ev) => {
      if (ev.receipt) {
        addReceipt(ev.receipt);
        if (plan.state === 'STATE_PENDING' || plan.state === 'STATE_AWAITING_APPROVAL') {
          plan.state = 'STATE_RUNNING';
          showPlan();
        }
      } else if (ev.progress) {
        const p = ev.progress, d = p.detail || {};
        if (d.waiting_behind) {
          live.textContent = `waiting behind plan ${d.waiting_behind}, which waits for approval ${d.approval_id}`;
        } else if (d.waiting_for_agent) {
          live.textContent = `waiting for agent ${d.waiting_for_agent} to answer (${d.reason}); retrying until ${d.retry_until}`;
        } else {
          live.textContent = `${count} operations done; ${p.operationId}: ${p.done} of ${p.total}`;
        }
      } else if (ev.awaitingApproval) {
        const a = ev.awaitingApproval;
        banner.replaceChildren(h('div', { class: 'panel', id: 'awaiting-approval' },
          badge('AWAITING_APPROVAL'), ' This plan waits for approval ', h('a', { href: '#/approvals' }, a.approvalId),
          ` (${strip((a.preview || {}).state, 'STATE_').toLowerCase() || 'no'} preview).`));
      }
    }, ctx.signal);
  } catch (err) {
    if (!ctx.signal.aborted) banner.replaceChildren(errorBox(err));
  }
  if (!ctx.signal.aborted) {
    banner.replaceChildren();
    await getPlan();
    live.textContent = `${count} receipts; the plan ended ${strip(plan.state, 'STATE_').toLowerCase()}`;
  }
}

function previewBlock(ap, ctx) {
  const pv = ap.preview || {};
  const changes = pv.changes || [];
  const val = (v) => (v === undefined ? '' : JSON.stringify(v));
  const rows = changes.flatMap((c) => {
    const kind = strip(c.kind, 'KIND_').toLowerCase();
    const fields = c.fields || [];
    if (!fields.length) return [h('tr', null, h('td', null, kind), h('td', null, c.collection), h('td', null, c.name), h('td'), h('td'), h('td'))];
    return fields.map((f) => h('tr', null, h('td', null, kind), h('td', null, c.collection), h('td', null, c.name),
      h('td', null, h('code', null, f.field)), h('td', { class: 'before' }, h('code', null, val(f.before))), h('td', { class: 'after' }, h('code', null, val(f.after)))));
  });
  const img = h('div');
  if (pv.render) {
    download(pv.render, ctx.signal).then((blob) => {
      // Decoded once loaded: the blob's URL can go then.
      img.replaceChildren(h('img', { class: 'preview-img', src: URL.createObjectURL(blob), alt: 'preview render',
        onload: (ev) => URL.revokeObjectURL(ev.target.src) }));
    }).catch((err) => img.replaceChildren(errorBox(err)));
  }
  return h('div', { class: 'preview' },
    h('div', null, 'Preview ', badge(pv.state, 'STATE_'), ' ', short(pv.sceneHashBefore), ' → ', short(pv.sceneHashAfter)),
    pv.failure ? failure(pv.failure) : '',
    img,
    rows.length ? table(['Change', 'Collection', 'Name', 'Field', 'Before', 'After'], rows, { class: 'diff' }) : h('p', { class: 'muted' }, pv.state === 'STATE_PENDING' ? 'Computing the preview…' : 'No changes.'));
}

async function approvalsView(main, ctx) {
  const filter = h('select', { id: 'approval-state' },
    h('option', { value: 'STATE_PENDING' }, 'pending'),
    h('option', { value: '' }, 'all'));
  const box = h('div', { class: 'cards', id: 'approvals' });
  main.append(h('div', { class: 'toolbar' }, h('h1', null, 'Approvals'), filter), box);
  const shown = new Map(); // approval id → JSON of what is shown, to keep a card (and its image) while nothing changed
  const refresh = async () => {
    const resp = await api('/approvals', { params: { pageSize: 100, state: filter.value }, signal: ctx.signal });
    const list = resp.approvals || [];
    const cards = list.map((ap) => {
      const key = JSON.stringify(ap);
      const old = box.querySelector(`[data-approval="${CSS.escape(ap.approvalId)}"]`);
      if (old && shown.get(ap.approvalId) === key) return old;
      shown.set(ap.approvalId, key);
      const pending = ap.state === 'STATE_PENDING';
      const resolve = (decision) => async (ev) => {
        ev.target.closest('.actions').querySelectorAll('button').forEach((b) => (b.disabled = true));
        try {
          await api(`/approvals/${enc(ap.approvalId)}:resolve`, { method: 'POST', body: { decision } });
          await refresh();
        } catch (err) {
          ev.target.closest('.panel').append(errorBox(err));
        }
      };
      const buttons = pending && has('approve') ? h('div', { class: 'actions' },
        h('button', { type: 'button', class: 'primary', dataset: { action: 'approve' }, onclick: resolve('DECISION_APPROVE_ONCE') }, 'Approve'),
        h('button', { type: 'button', dataset: { action: 'always-allow' }, onclick: resolve('DECISION_APPROVE_AND_ALWAYS_ALLOW') }, 'Approve and always allow'),
        h('button', { type: 'button', class: 'danger', dataset: { action: 'reject' }, onclick: resolve('DECISION_REJECT') }, 'Reject'))
        : pending ? h('p', { class: 'muted' }, 'Resolving approvals needs the approve scope.') : '';
      return h('div', { class: 'panel', dataset: { approval: ap.approvalId, state: strip(ap.state, 'STATE_') } },
        h('div', { class: 'toolbar' }, h('strong', null, ap.approvalId), badge(ap.state, 'STATE_'),
          h('span', null, 'plan ', h('a', { href: `#/plans/${enc(ap.requestedBy)}/${enc(ap.requestId)}` }, ap.requestId),
            ' by ', ap.requestedBy, ' in ', h('a', { href: '#/sessions/' + enc(ap.sessionId) }, ap.sessionId)),
          h('span', { class: 'muted' }, fmtTime(ap.createTime))),
        table(['Operation', 'Tool', 'Decision', 'Target', 'Reason', 'Rule'], (ap.decisions || []).map((d) => h('tr', null,
          h('td', null, h('code', null, d.operationId)), h('td', null, h('code', null, d.toolName)), h('td', null, badge(d.mode, 'MODE_')),
          h('td', null, d.target), h('td', null, d.reason), h('td', null, d.rule)))),
        previewBlock(ap, ctx),
        // No decision: cancelled with its plan (a closed session, a restart), not decided.
        ap.resolvedBy ? h('p', { class: 'muted' }, `${(ap.decision && ap.decision !== 'DECISION_UNSPECIFIED' ? strip(ap.decision, 'DECISION_') : strip(ap.state, 'STATE_')).toLowerCase().replaceAll('_', ' ')} by ${ap.resolvedBy} at ${fmtTime(ap.resolveTime)}`) : '',
        buttons);
    });
    box.replaceChildren(...(cards.length ? cards : [h('p', { class: 'muted' }, filter.value ? 'Nothing waits for approval.' : 'No approvals.')]));
  };
  filter.addEventListener('change', () => refresh().catch((err) => box.replaceChildren(errorBox(err))));
  await ctx.every(POLL_MS, refresh);
}

async function auditView(main, ctx, params) {
  const field = (name, label, attrs) => h('label', null, label, h('input', { name, value: params.get(name) || '', ...attrs }));
  const form = h('form', { class: 'inline', id: 'audit-search' },
    field('request', 'Request id'), field('operation', 'Operation id'), field('mutation', 'Mutation id'),
    has('admin') ? field('principal', 'Principal (plan owner)') : '',
    h('button', { type: 'submit', class: 'primary' }, 'Search'));
  const box = h('div');
  const more = h('div');
  main.append(h('h1', null, 'Audit log'), form, box, more);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) q.set(k, v);
    location.hash = '#/audit' + (q.toString() ? '?' + q : '');
  });
  const tbody = h('tbody');
  box.append(h('table', { id: 'audit' },
    h('thead', null, h('tr', null, ['#', 'Time', 'Principal', 'Plan', 'Operation', 'Tool / event', 'Status', 'Mutation', 'Policy', 'Scene hash', 'Error'].map((c) => h('th', null, c)))),
    tbody));
  const load = async (token) => {
    const resp = await api('/audit', {
      params: {
        requestId: params.get('request'), operationId: params.get('operation'), blenderMutationId: params.get('mutation'),
        owner: params.get('principal'), pageSize: 200, pageToken: token,
      },
      signal: ctx.signal,
    });
    for (const r of resp.auditRecords || []) {
      tbody.append(h('tr', { dataset: { sequence: r.sequence } },
        h('td', null, r.sequence),
        h('td', null, fmtTime(r.timestamp)),
        h('td', null, r.principal),
        // An operation's record names its plan's owner; a decision's, who decided.
        h('td', null, r.event ? h('code', null, r.requestId) : h('a', { href: `#/plans/${enc(r.principal)}/${enc(r.requestId)}` }, r.requestId)),
        h('td', null, h('code', null, r.operationId || '')),
        h('td', null, r.event ? h('span', { class: 'badge warn' }, r.event) : h('code', null, r.toolName)),
        h('td', null, r.event ? '' : badge(r.status, 'STATUS_')),
        h('td', null, r.blenderMutationId ? h('code', { title: r.blenderMutationId }, r.blenderMutationId.slice(0, 12)) : ''),
        h('td', null, r.policyDecision || '', r.approvedBy ? ` (approved by ${r.approvedBy})` : ''),
        h('td', null, short(r.sceneHashAfter)),
        h('td', null, r.errorCode ? h('span', { class: 'badge bad' }, r.errorCode) : '')));
    }
    more.replaceChildren(resp.nextPageToken ? h('button', { type: 'button', onclick: () => load(resp.nextPageToken).catch((err) => more.replaceChildren(errorBox(err))) }, 'More') : '');
    if (!tbody.children.length) more.replaceChildren(h('p', { class: 'muted' }, 'No records match.'));
  };
  await load('');
}

// ---------- sign-in and routing ----------

async function whoami() {
  state.caller = await api('/caller');
  const who = document.getElementById('who');
  who.replaceChildren(state.caller.principal + ' · ' + (state.caller.scopes || []).join(', '),
    state.caller.authDisabled ? h('span', { class: 'badge warn' }, 'no tokens (--allow-insecure-local)') : h('button', { type: 'button', id: 'sign-out', onclick: signOut }, 'Sign out'));
  // The menu offers what the caller's scopes let it see.
  document.querySelectorAll('#nav a').forEach((a) => { a.hidden = !allowed(a.dataset.view); });
  document.getElementById('nav').hidden = false;
}

// views: the scopes (any one) each view needs (docs/SECURITY.md).
const views = { sessions: ['plans'], approvals: ['approve', 'plans'], audit: ['plans'], agents: ['admin'] };

function allowed(view) {
  const held = (state.caller && state.caller.scopes) || [];
  return (views[view] || []).some((s) => held.includes(s));
}

// home is the first view the caller may see: an approver's is Approvals.
function home() {
  return '#/' + (Object.keys(views).find(allowed) || 'sessions');
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = '';
  state.caller = null;
  document.getElementById('who').replaceChildren();
  document.getElementById('nav').hidden = true;
  route();
}

function signInView(main, err) {
  const input = h('input', { type: 'password', id: 'token', name: 'token', autocomplete: 'off', placeholder: 'bpt_…', required: true });
  const form = h('form', { class: 'panel signin', id: 'sign-in' },
    h('h1', null, 'Sign in'),
    h('p', { class: 'muted' }, 'Paste a bearer token (blendctl token create, or the control plane\'s admin.token).'),
    input, err ? errorBox(err) : '',
    h('button', { type: 'submit', class: 'primary' }, 'Sign in'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    state.token = input.value.trim();
    try {
      await whoami();
      sessionStorage.setItem(TOKEN_KEY, state.token);
      route();
    } catch (e) {
      state.token = '';
      main.replaceChildren(signInView(main, e));
    }
  });
  return form;
}

let current = null;

async function route() {
  if (current) current.close();
  const ctx = (current = newContext());
  const main = document.getElementById('main');
  main.replaceChildren();
  if (!state.caller) {
    try {
      await whoami();
      if (ctx.signal.aborted) return; // the address changed meanwhile: that route draws
    } catch (err) {
      if (ctx.signal.aborted) return;
      if (err instanceof APIError && err.httpStatus === 401) {
        const stale = !!state.token; // a stored token that no longer works
        sessionStorage.removeItem(TOKEN_KEY);
        state.token = '';
        main.replaceChildren(signInView(main, stale ? err : null));
        return;
      }
      main.replaceChildren(errorBox(err));
      return;
    }
  }
  if (!location.hash || location.hash === '#' || location.hash === '#/') {
    location.hash = home(); // routes again
    return;
  }
  const [path, search] = location.hash.slice(1).split('?');
  const params = new URLSearchParams(search || '');
  try {
    let parts;
    try {
      parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    } catch {
      main.append(errorBox(`The address ${location.hash} is not valid: a % in it is not followed by two hex digits.`));
      return;
    }
    document.querySelectorAll('#nav a').forEach((a) => a.classList.toggle('active', a.dataset.view === parts[0]));
    switch (parts[0]) {
      case 'agents': await agentsView(main, ctx); break;
      case 'approvals': await approvalsView(main, ctx); break;
      case 'audit': await auditView(main, ctx, params); break;
      case 'plans':
        if (!parts[2]) {
          main.append(errorBox(`A plan's address is #/plans/<owner>/<request id>; ${location.hash} names no request id.`));
          break;
        }
        await planView(main, ctx, parts[1], parts[2]);
        break;
      case 'sessions':
        if (parts[1]) await sessionView(main, ctx, parts[1]);
        else await sessionsView(main, ctx);
        break;
      default: location.hash = home();
    }
  } catch (err) {
    if (!ctx.signal.aborted) main.append(errorBox(err));
  }
}

// pendingCount keeps the approvals badge in the menu current.
async function pendingCount() {
  if (state.caller) {
    try {
      const resp = await api('/approvals', { params: { pageSize: 100, state: 'STATE_PENDING' } });
      const n = (resp.approvals || []).length;
      const el = document.getElementById('pending-count');
      el.textContent = n;
      el.hidden = n === 0;
    } catch {}
  }
  setTimeout(pendingCount, 3000);
}

document.getElementById('viewer-close').addEventListener('click', closeViewer);
document.getElementById('viewer').addEventListener('click', (ev) => { if (ev.target.id === 'viewer') closeViewer(); });
window.addEventListener('hashchange', route);
route();
pendingCount();
