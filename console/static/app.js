// Ratchet's operator console: plain JavaScript, no build step, nothing
// loaded from elsewhere. Every value an agent or a vendor wrote is put in
// the page as text (h() makes text nodes; nothing is parsed as HTML), and the
// page's Content-Security-Policy allows no inline script besides.
'use strict';

const POLL = { approvals: 1000, approval: 1000, attention: 1000, effects: 3000, effect: 2000, budgets: 2000, groups: 3000, grants: 2000, explain: 60000 };

const S = { session: null, timer: null, busy: false, route: null, counts: null };

// ---- DOM helpers -------------------------------------------------------

/** h(tag, attrs, ...children): an element; strings and numbers become text. */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const $ = (id) => document.getElementById(id);

function link(path, ...children) {
  return h('a', { href: path, 'data-nav': true }, ...children);
}

const enc = encodeURIComponent;

// ---- formatting --------------------------------------------------------

const usd = new Intl.NumberFormat('en-US', { style: 'currency', currency: 'USD' });

/** micro-USD as dollars (more decimals only when there are). */
function money(micros) {
  if (micros === undefined || micros === null) return '—';
  if (micros % 10000 !== 0) return '$' + (micros / 1e6).toFixed(6).replace(/0+$/, '');
  return usd.format(micros / 1e6);
}

function amount(unit, v) {
  return unit === 'count' ? String(v) : money(v);
}

function span(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  const hr = Math.floor(m / 60);
  if (hr < 48) return `${hr}h ${m % 60}m`;
  return `${Math.floor(hr / 24)}d ${hr % 24}h`;
}

function rel(iso) {
  const d = Date.parse(iso) - Date.now();
  return d > 0 ? `in ${span(d)}` : `${span(-d)} ago`;
}

/** A time that keeps saying how long ago (or how soon) it is. */
function when(iso) {
  if (!iso || iso.startsWith('0001-')) return '—';
  return h('time', { datetime: iso, title: new Date(iso).toLocaleString() }, rel(iso));
}

function tick() {
  for (const t of document.querySelectorAll('time[datetime]')) t.textContent = rel(t.getAttribute('datetime'));
}

function badge(state) {
  return h('span', { class: `badge s-${String(state).replace(/[^a-z_]/g, '')}` }, String(state).replace(/_/g, ' '));
}

function short(s, n = 14) {
  if (!s) return '';
  return s.length > n ? h('span', { title: s }, s.slice(0, n) + '…') : s;
}

const WHY = { lease_expired: 'lease expired, no report', reported_unknown: 'reported unknown' };

// ---- the API -----------------------------------------------------------

class APIError extends Error {
  constructor(status, code, message) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

async function api(path, { method = 'GET', body } = {}) {
  const init = { method, headers: {}, credentials: 'same-origin', cache: 'no-store' };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  if (method !== 'GET') init.headers['X-Ratchet-CSRF'] = S.session?.csrf ?? '';
  const res = await fetch(path, init);
  const data = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = new APIError(res.status, data.error?.code, data.error?.message);
    if (err.code === 'sign_in_required') {
      if (S.session?.mode === 'sign_in') {
        S.session = { ...S.session, signed_in: false };
        render();
      } else {
        start(); // no sign-in here: the session expired or Ratchet restarted; take a new one
      }
    }
    throw err;
  }
  return data;
}

const v1 = (path) => api('/console/api/v1' + path);

function flash(msg, bad = false) {
  const f = $('flash');
  f.hidden = false;
  f.className = bad ? 'flash bad' : 'flash';
  f.textContent = msg;
  clearTimeout(flash.t);
  flash.t = setTimeout(() => { f.hidden = true; }, bad ? 10000 : 5000);
}

// ---- decisions ---------------------------------------------------------

/**
 * A note field and buttons; each button posts {note, ...extra} to its path.
 * An action with a `confirm` text asks first, in the page: the text (its
 * consequence) and a button that does it, or Cancel.
 */
function decideForm(actions) {
  const note = h('input', { type: 'text', class: 'note', placeholder: 'note (optional)', maxlength: 1000, 'aria-label': 'note' });
  const ask = h('div', { class: 'confirm', hidden: true, role: 'alertdialog' });
  const row = h('div', { class: 'decide' });
  const setDisabled = (on) => row.querySelectorAll('button').forEach((b) => { b.disabled = on; });
  const perform = async (a) => {
    setDisabled(true);
    try {
      const out = await api(a.path, { method: 'POST', body: { ...a.body, note: note.value } });
      flash(typeof a.done === 'function' ? a.done(out) : a.done);
      await refresh();
    } catch (err) {
      flash(`${a.label} failed: ${err.message}`, true);
      setDisabled(false);
    }
  };
  const confirmFirst = (a) => {
    ask.replaceChildren(h('p', null, a.confirm),
      h('button', { type: 'button', class: a.class, 'data-action': `confirm-${a.name}`,
        onclick: () => { ask.hidden = true; perform(a); } }, `Yes, ${a.label.toLowerCase()}`),
      h('button', { type: 'button', 'data-action': 'cancel', onclick: () => { ask.hidden = true; ask.replaceChildren(); } }, 'Cancel'));
    ask.hidden = false;
  };
  const buttons = actions.map((a) => h('button', {
    type: 'button', class: a.class, 'data-action': a.name,
    onclick: () => (a.confirm ? confirmFirst(a) : perform(a)),
  }, a.label));
  if (!S.session?.can_decide) {
    return h('div', { class: 'decide muted' }, 'cannot decide here');
  }
  row.append(note, ...buttons, ask);
  return row;
}

// How far an approval needing several people has come ("1 of 2:
// approved by admin:alice"); '' when one person decides it.
function progress(a) {
  if (!(a?.approvers_required > 1)) return '';
  const by = (a.approved_by || []).map((p) => p.by);
  return `${by.length} of ${a.approvers_required}` + (by.length ? `: approved by ${by.join(', ')}` : '');
}

function approvalActions(a) {
  return decideForm([
    { name: 'approve', label: 'Approve', class: 'ok', path: `/console/api/v1/approvals/${enc(a.approval_id)}/approve`,
      done: (out) => (out?.state === 'pending' ? `Counted for ${a.approval_id}: ${progress(out)}; it needs more approvers.`
        : `Approved ${a.approval_id}: the agent's next begin executes.`) },
    { name: 'reject', label: 'Reject', class: 'no', path: `/console/api/v1/approvals/${enc(a.approval_id)}/reject`,
      done: `Rejected ${a.approval_id}: the agent's next begin is denied.` },
  ]);
}

function resolveActions(e) {
  return decideForm([
    { name: 'succeeded', label: 'It succeeded', class: 'ok', path: `/console/api/v1/effects/${enc(e.effect_id)}/resolve`,
      body: { resolution: 'succeeded' }, done: `Resolved ${e.effect_id} as succeeded: a retry is a duplicate.`,
      confirm: 'Resolving as succeeded records the action as done: a retry is answered duplicate and never executes. If it did not happen at the vendor, it never will through Ratchet.' },
    { name: 'failed', label: 'It failed', class: 'no', path: `/console/api/v1/effects/${enc(e.effect_id)}/resolve`,
      body: { resolution: 'failed' }, done: `Resolved ${e.effect_id} as failed: a retry may execute again.`,
      confirm: "Resolving as failed frees the idempotency key: the agent's next begin executes the action again. If it did happen at the vendor, that is a second charge or a second email. Check at the vendor first (the vendor idempotency key of each attempt is on the effect's page)." },
  ]);
}

// ---- keeping rows while the data polls ---------------------------------

/**
 * Puts one row per item in body, keyed; a row whose item has not changed is
 * kept as it is (so a note being typed survives the next poll).
 */
function rows(body, items, keyOf, make) {
  const old = new Map([...body.children].map((el) => [el.dataset.key, el]));
  let prev = null;
  for (const it of items) {
    const key = keyOf(it);
    const sig = JSON.stringify(it);
    let el = old.get(key);
    if (!el || el.dataset.sig !== sig) {
      const fresh = make(it);
      fresh.dataset.key = key;
      fresh.dataset.sig = sig;
      const typed = el?.querySelector('input.note')?.value;
      if (typed) { const n = fresh.querySelector('input.note'); if (n) n.value = typed; }
      if (el) el.replaceWith(fresh);
      el = fresh;
    }
    old.delete(key);
    const want = prev ? prev.nextSibling : body.firstChild;
    if (el !== want) body.insertBefore(el, want);
    prev = el;
  }
  for (const el of old.values()) el.remove();
}

/** A table with a fixed head; returns {table, body}. */
function table(cls, heads) {
  const body = h('tbody');
  return { table: h('table', { class: cls }, h('thead', null, h('tr', null, heads.map((x) => h('th', null, x)))), body), body };
}

// ---- views -------------------------------------------------------------
// A view is {page, title, mount(root), update(root)}: mount builds the
// parts that stay, update fetches and fills them (and runs on every poll).

const views = {};

views.approvals = () => {
  let t;
  return {
    page: 'approvals',
    title: 'Approvals',
    mount(root) {
      t = table('list approvals', ['Effect type', 'Agent', 'Run', 'Cost', 'Threshold', 'Requested', 'Expires', 'Namespace', 'Decide']);
      root.append(
        h('h1', null, 'Approvals waiting for a decision'),
        h('p', { class: 'muted' }, 'An agent asked before an action at or above its approval threshold. Approve and its next begin executes (ceilings still apply); reject and every retry is denied.'),
        h('p', { class: 'empty muted', hidden: true }, 'Nothing waits for a decision.'),
        t.table);
    },
    async update(root) {
      const { approvals } = await v1('/approvals?state=pending');
      $('count-approvals').textContent = approvals.length ? String(approvals.length) : '';
      root.querySelector('.empty').hidden = approvals.length > 0;
      t.table.hidden = approvals.length === 0;
      rows(t.body, approvals, (a) => a.approval_id, (a) => h('tr', null,
        h('td', null, link(`/approvals/${enc(a.approval_id)}`, a.effect_type)),
        h('td', null, a.agent_id || '—'),
        h('td', null, short(a.run_id, 20) || '—'),
        h('td', { class: 'num' }, money(a.estimated_cost_micros)),
        h('td', { class: 'num' }, money(a.threshold_micros)),
        h('td', null, when(a.requested_at)),
        h('td', null, when(a.expires_at)),
        h('td', null, a.namespace),
        h('td', null, progress(a) ? h('div', { class: 'small progress' }, progress(a)) : null,
          approvalActions(a), S.session?.can_decide && !progress(a) ? h('div', { class: 'small' }, grantLink(a)) : null)));
    },
  };
};

views.approval = (id) => {
  let box;
  return {
    page: 'approvals',
    title: `Approval ${id}`,
    mount(root) {
      box = h('div');
      root.append(h('p', null, link('/approvals', '← Approvals')), h('h1', null, 'Approval ', h('code', null, id)), box);
    },
    async update() {
      if (box.dataset.final) return; // decided or expired: it changes no more
      // The pending list is short; every approval ever is read only once it is not in it.
      let a = (await v1('/approvals?state=pending')).approvals.find((x) => x.approval_id === id);
      if (!a) {
        a = (await v1('/approvals')).approvals.find((x) => x.approval_id === id);
        if (a) box.dataset.final = '1';
      }
      const sig = JSON.stringify(a ?? null);
      if (box.dataset.sig === sig) return;
      box.dataset.sig = sig;
      if (!a) {
        box.replaceChildren(h('p', { class: 'muted' }, 'No approval has this id (it may have been purged by retention).'));
        return;
      }
      box.replaceChildren(
        dl([
          ['State', badge(a.state)],
          ['Effect type', a.effect_type],
          ['Effect', link(`/effects/${enc(a.effect_id)}`, a.effect_id)],
          ['Namespace', a.namespace],
          ['Agent', a.agent_id || '—'],
          ['Run', a.run_id || '—'],
          ['Estimated cost', money(a.estimated_cost_micros)],
          ['Threshold', money(a.threshold_micros)],
          ['Undo declared', undoDeclared(a.compensation)],
          ['Requested', when(a.requested_at)],
          ['Expires', when(a.expires_at)],
          progress(a) && ['Approvers', h('span', { class: 'progress' }, progress(a))],
          a.decided_by && ['Decided by', a.decided_by],
          a.decided_at && ['Decided', when(a.decided_at)],
          a.note && ['Note', a.note],
          a.used_at && ['Used by an execute', when(a.used_at)],
        ]),
        ...(a.state === 'pending' ? [h('div', { class: 'panel' }, h('h2', null, 'Decide'), approvalActions(a), progress(a) ? null : h('p', { class: 'small' }, grantLink(a)))] : []));
    },
  };
};

// The undo a step declared: approving the step lets it run without
// approval or ceilings up to the step's estimate, so the approver sees it.
function undoDeclared(c) {
  if (!c) return 'none: the step is permanent';
  return h('span', { class: 'undo' }, h('code', null, c.effect_type), c.vendor ? ` at ${c.vendor}` : '',
    c.estimated_cost_micros != null ? ` for ${money(c.estimated_cost_micros)}` : '', c.description ? `: ${c.description}` : '');
}

function dl(pairs) {
  return h('dl', { class: 'facts' }, pairs.filter(Boolean).map(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
}

views.attention = () => {
  let t;
  return {
    page: 'attention',
    title: 'Needs attention',
    mount(root) {
      t = table('list attention', ['Idempotency key', 'Effect type', 'Why', 'Since', 'Vendor', 'Vendor reference', 'Agent', 'Run', 'Error', 'Resolve']);
      root.append(
        h('h1', null, 'Needs attention: outcomes unknown'),
        h('p', { class: 'muted' }, 'Ratchet does not know whether these happened: every retry is blocked until someone checks at the vendor and resolves it. Succeeded: a retry gets the stored result. Failed: the key is free for a new attempt and the reserved spend is released.'),
        h('p', { class: 'empty muted', hidden: true }, 'Nothing needs attention.'),
        t.table);
    },
    async update(root) {
      const { effects } = await v1('/effects?state=indeterminate&limit=500');
      $('count-attention').textContent = effects.length ? (effects.length >= 500 ? '500+' : String(effects.length)) : '';
      root.querySelector('.empty').hidden = effects.length > 0;
      t.table.hidden = effects.length === 0;
      rows(t.body, effects, (e) => e.effect_id, (e) => h('tr', null,
        h('td', { class: 'key' }, link(`/effects/${enc(e.effect_id)}`, e.idempotency_key)),
        h('td', null, e.effect_type),
        h('td', null, WHY[e.reason] ?? e.reason ?? '—'),
        h('td', null, when(e.since ?? e.updated_at)),
        h('td', null, e.vendor || '—'),
        h('td', null, e.vendor_reference || '—'),
        h('td', null, e.agent_id || '—'),
        h('td', null, short(e.run_id, 20) || '—'),
        h('td', { class: 'err' }, e.error || '—'),
        h('td', null, resolveActions(e))));
    },
  };
};

const STATES = ['', 'pending', 'succeeded', 'failed', 'indeterminate', 'awaiting_approval', 'approved', 'rejected', 'compensated'];
const FIELDS = [['key', 'Idempotency key or effect id'], ['namespace', 'Namespace'], ['run_id', 'Run'], ['group_key', 'Group'], ['agent_id', 'Agent'], ['effect_type', 'Effect type (glob)']];

// search navigates to path with a search form's filled fields as its query.
function search(ev, form, path) {
  ev.preventDefault();
  const q = new URLSearchParams();
  for (const el of form.elements) if (el.name && el.value) q.set(el.name, el.value);
  navigate(path + (q.size ? '?' + q : ''));
}

views.effects = () => {
  let t, more, form, cursor;
  const params = () => new URLSearchParams(location.search);
  return {
    page: 'effects',
    title: 'Effects',
    mount(root) {
      const p = params();
      form = h('form', { class: 'search', onsubmit: (ev) => search(ev, form, '/effects') },
      FIELDS.map(([name, label]) => h('label', null, label, h('input', { name, value: p.get(name) ?? '', type: 'search' }))),
      h('label', null, 'State', h('select', { name: 'state' }, STATES.map((s) => h('option', { value: s, selected: p.get('state') === s }, s || 'any')))),
      h('button', { type: 'submit' }, 'Search'));
      t = table('list effects', ['Idempotency key', 'Effect type', 'State', 'Attempt', 'Agent', 'Run', 'Group', 'Cost', 'Updated']);
      more = h('button', { type: 'button', hidden: true, onclick: () => this.update(root, true) }, 'More');
      root.append(h('h1', null, 'Effects'), form, h('p', { class: 'empty muted', hidden: true }, 'No effect matches.'), t.table, more);
    },
    async update(root, next) {
      if (cursor && !next) return; // paging: keep what was shown
      const q = params();
      if (next && cursor) q.set('cursor', cursor);
      const { effects, next_cursor: nc } = await api('/console/api/search?' + q);
      const shown = next ? [...JSON.parse(t.body.dataset.items ?? '[]'), ...effects] : effects;
      t.body.dataset.items = JSON.stringify(shown);
      cursor = nc;
      more.hidden = !nc;
      root.querySelector('.empty').hidden = shown.length > 0;
      t.table.hidden = shown.length === 0;
      rows(t.body, shown, (e) => e.effect_id, effectRow);
    },
  };
};

function effectRow(e) {
  return h('tr', null,
    h('td', { class: 'key' }, link(`/effects/${enc(e.effect_id)}`, e.idempotency_key)),
    h('td', null, e.effect_type),
    h('td', null, badge(e.state)),
    h('td', { class: 'num' }, e.attempt),
    h('td', null, e.agent_id || '—'),
    h('td', null, short(e.run_id, 20) || '—'),
    h('td', null, e.group_key ? link(`/groups?namespace=${enc(e.namespace)}&group_key=${enc(e.group_key)}`, short(e.group_key, 20)) : '—'),
    h('td', { class: 'num' }, money(e.actual_cost_micros ?? e.estimated_cost_micros)),
    h('td', null, when(e.updated_at)));
}

views.effect = (id) => {
  let box, hist;
  return {
    page: 'effects',
    title: `Effect ${id}`,
    mount(root) {
      box = h('div');
      hist = table('list history', ['When', 'Event', 'Attempt', 'Decision / state', 'Reason', 'Cost', 'By']);
      root.append(h('p', null, link('/effects', '← Effects')), h('h1', null, 'Effect ', h('code', null, id)), box,
        h('h2', null, 'History'), h('p', { class: 'muted hist-note' }), hist.table);
    },
    async update(root) {
      const sig = box.dataset.updated;
      const e = await v1(`/effects/${enc(id)}`);
      if (sig === e.updated_at + e.state) return;
      box.dataset.updated = e.updated_at + e.state;
      const a = e.approval;
      box.replaceChildren(
        dl([
          ['Idempotency key', h('span', { class: 'key' }, e.idempotency_key)],
          ['State', [badge(e.state), e.reason ? ` (${WHY[e.reason] ?? e.reason})` : '']],
          ['Attempt', e.attempt],
          ['Effect type', e.effect_type],
          ['Namespace', e.namespace],
          ['Vendor', e.vendor || '—'],
          e.operation && ['Vendor operation', h('code', null, e.operation)],
          ['Vendor reference (last report)', e.vendor_reference || '—'],
          ['Vendor idempotency keys', e.attempts?.length
            ? h('ul', { class: 'attempt-keys' }, e.attempts.map((k) => h('li', null, `attempt ${k.attempt}: `,
              h('code', { class: 'vkey' }, k.vendor_idempotency_key.value),
              h('span', { class: 'muted' }, k.vendor_idempotency_key.location
                ? ` (${k.vendor_idempotency_key.location} ${k.vendor_idempotency_key.name}: search the vendor by it)`
                : ` (no key location known for ${e.vendor})`))))
            : h('span', { class: 'muted' }, e.vendor ? 'no attempt executed yet' : 'no vendor named')],
          ['Estimated cost', money(e.estimated_cost_micros)],
          ['Actual cost', money(e.actual_cost_micros)],
          ['Agent', e.agent_id || '—'],
          ['Run', e.run_id ? link(`/effects?run_id=${enc(e.run_id)}`, e.run_id) : '—'],
          ['Group', e.group_key ? link(`/groups?namespace=${enc(e.namespace)}&group_key=${enc(e.group_key)}`, e.group_key) : '—'],
          e.error && ['Error', h('span', { class: 'err' }, e.error)],
          e.since && ['Since', when(e.since)],
          e.state === 'pending' && e.lease_expires_at && ['Lease expires', when(e.lease_expires_at)],
          e.compensation && ['Undo declared', `${e.compensation.effect_type}${e.compensation.description ? ': ' + e.compensation.description : ''}`],
          e.compensates_effect_id && ['Undoes', link(`/effects/${enc(e.compensates_effect_id)}`, e.compensates_effect_id)],
          e.compensated_by && ['Undone by', link(`/effects/${enc(e.compensated_by)}`, e.compensated_by)],
          a && ['Approval', [link(`/approvals/${enc(a.approval_id)}`, a.approval_id), ' ', badge(a.state),
            a.decided_by ? ` by ${a.decided_by}` : '', a.note ? ` — “${a.note}”` : '']],
          e.resolved_by && ['Resolved by', [e.resolved_by, e.resolution_note ? ` — “${e.resolution_note}”` : '']],
          ['Created', when(e.created_at)],
          ['Updated', when(e.updated_at)],
          e.completed_at && ['Completed', when(e.completed_at)],
        ]),
        ...(e.state === 'indeterminate' ? [h('div', { class: 'panel' }, h('h2', null, 'Resolve'), resolveActions(e))] : []));
      const { events, note } = await api(`/console/api/history/${enc(id)}`);
      root.querySelector('.hist-note').textContent = note ?? '';
      rows(hist.body, events, (ev) => ev.id, (ev) => h('tr', null,
        h('td', null, when(ev.at)),
        h('td', null, ev.type),
        h('td', { class: 'num' }, ev.attempt ?? ''),
        h('td', null, ev.decision ? badge(ev.decision) : ev.state ? badge(ev.state) : ''),
        h('td', null, ev.reason ?? ''),
        h('td', { class: 'num' }, ev.cost_micros !== undefined ? money(ev.cost_micros) : ''),
        h('td', null, ev.actor ?? '')));
    },
  };
};

views.budgets = () => {
  let box;
  let lookup = null; // the answer of a lookup by value, shown instead of every ceiling
  return {
    page: 'budgets',
    title: 'Budgets',
    mount(root) {
      box = h('div', { class: 'budgets' });
      const dim = h('input', { name: 'dimension', type: 'text', placeholder: 'counterparty', required: true, 'aria-label': 'dimension' });
      const value = h('input', { name: 'value', type: 'text', placeholder: 'acct_1MqB…', required: true, 'aria-label': 'value', autocomplete: 'off' });
      const found = h('p', { class: 'lookup-note muted' });
      const form = h('form', { class: 'lookup' }, h('label', null, 'Dimension', dim), h('label', null, 'Value', value),
        h('button', { type: 'submit' }, 'Find'), h('button', { type: 'button', 'data-action': 'clear',
          onclick: () => { lookup = null; value.value = ''; found.textContent = ''; this.update(root).catch((err) => flash(err.message, true)); } }, 'Show all'));
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        try {
          // POSTed, so the value stays out of URLs and logs; the server hashes it.
          lookup = { dimension: dim.value, value: value.value };
          await this.update(root);
        } catch (err) {
          flash(`Lookup failed: ${err.message}`, true);
        }
      });
      root.append(h('h1', null, 'Budgets'),
        h('p', { class: 'muted' }, 'Every ceiling with a live counter: what is counted (reserved at begin, replaced by the actual cost at report) against its limit in its window. On a fleet, every replica\'s share is summed. A dimension\'s scope shows as a hash of its value (the value is never stored): find a value\'s ceilings by typing it.'),
        form, found,
        h('p', { class: 'empty muted', hidden: true }, 'No ceiling has counted anything yet.'), box);
    },
    async update(root) {
      let budgets;
      if (lookup) {
        const ans = await api('/console/api/v1/budgets/lookup', { method: 'POST', body: lookup });
        budgets = ans.budgets.map((b) => ({ ...b, value: lookup.value }));
        root.querySelector('.lookup-note').textContent = budgets.length ? '' : `No live ceiling counts ${lookup.dimension} ${lookup.value}.`;
      } else {
        budgets = (await v1('/budgets')).budgets;
      }
      root.querySelector('.empty').hidden = budgets.length > 0 || lookup !== null;
      rows(box, budgets, (b) => `${b.namespace}\x00${b.name}\x00${b.per}\x00${b.scope ?? ''}`, (b) => {
        const pct = b.limit > 0 ? Math.min(100, (b.counted / b.limit) * 100) : 100;
        const level = pct >= 90 ? 'hot' : pct >= 70 ? 'warm' : 'cool';
        return h('section', { class: 'budget' },
          h('div', { class: 'bhead' },
            h('strong', null, b.name),
            b.observed ? [' ', h('span', { class: 'badge s-observed', title: 'a ceiling of an observed rule: it counts and never refuses' }, 'observed')] : '',
            b.counted > b.limit ? [' ', h('span', { class: 'badge s-denied' }, 'over its limit')] : '',
            h('div', { class: 'muted' }, `${b.namespace} · `, scopeOf(b), ` · ${b.window} window`)),
          bar(level, pct, b),
          h('div', { class: 'bnums' },
            h('span', { class: 'counted' }, `${amount(b.unit, b.counted)} counted`),
            h('span', null, `${amount(b.unit, b.remaining)} remaining`),
            h('span', { class: 'muted' }, `of ${amount(b.unit, b.limit)}`)));
      });
    },
  };
};

/** What a ceiling counts per: a dimension's value is shown as its keyed hash (the value is not stored). */
function scopeOf(b) {
  if (b.per === 'global') return 'global';
  const dim = /^dimension:(.*)$/.exec(b.per);
  if (dim) {
    if (b.value !== undefined) return [`${dim[1]} `, h('span', { class: 'key scope-value' }, b.value)];
    return [`per ${dim[1]} `, h('span', { class: 'key scope-hash', title: `keyed hash of the ${dim[1]} value: ${b.scope}` }, 'hash ' + (b.scope ?? '').slice(0, 10) + '…')];
  }
  return [`per ${b.per} `, h('span', { class: 'key' }, b.scope ?? '')];
}

/** A bar (its width set through the CSSOM: the CSP allows no style attribute). */
function bar(level, pct, b) {
  const fill = h('div', { class: 'fill' });
  fill.style.width = `${pct.toFixed(1)}%`;
  return h('div', { class: `bar ${level}`, role: 'meter', 'aria-valuemin': 0, 'aria-valuemax': b.limit, 'aria-valuenow': b.counted }, fill);
}

views.groups = () => {
  let box, form;
  const params = () => new URLSearchParams(location.search);
  return {
    page: 'groups',
    title: 'Groups',
    mount(root) {
      const p = params();
      form = h('form', { class: 'search', onsubmit: (ev) => search(ev, form, '/groups') },
      h('label', null, 'Namespace', h('input', { name: 'namespace', value: p.get('namespace') ?? '', type: 'search', placeholder: 'default' })),
      h('label', null, 'Group key', h('input', { name: 'group_key', value: p.get('group_key') ?? '', type: 'search' })),
      h('button', { type: 'submit' }, 'Show'));
      box = h('div');
      root.append(h('h1', null, 'Groups'),
        h('p', { class: 'muted' }, 'Groups being unwound (from the audit log), newest first, each with what is left: compensations to perform, steps that cannot be undone, and steps whose outcome is not known yet. Show any group by its key.'),
        form, h('p', { class: 'empty muted', hidden: true }, 'No group is being unwound.'), h('p', { class: 'muted g-note' }), box);
    },
    async update(root) {
      const p = params();
      const q = p.get('group_key') ? `?namespace=${enc(p.get('namespace') ?? '')}&group_key=${enc(p.get('group_key'))}` : '';
      const { groups, note } = await api('/console/api/groups' + q);
      root.querySelector('.empty').hidden = groups.length > 0;
      root.querySelector('.g-note').textContent = note ?? '';
      rows(box, groups, (g) => `${g.namespace}\x00${g.group_key}`, groupCard);
    },
  };
};

function steps(title, list, extra) {
  if (!list.length) return null;
  return h('div', { class: 'steps' }, h('h3', null, `${title} (${list.length})`),
    h('ul', null, list.map((e) => h('li', null, link(`/effects/${enc(e.effect_id)}`, h('span', { class: 'key' }, e.idempotency_key)),
      ' ', e.effect_type, ' ', badge(e.state), extra ? extra(e) : ''))));
}

function groupCard(g) {
  return h('section', { class: 'group panel' },
    h('h2', null, h('span', { class: 'key' }, g.group_key), ' ', g.state ? badge(g.state) : badge('active')),
    h('p', { class: 'muted' }, `${g.namespace} · ${g.steps} steps`, g.since ? [' · unwinding since ', when(g.since)] : '', g.reason ? ` · reason: ${g.reason}` : ''),
    steps('Compensations to perform', g.compensations, (e) => e.compensation
      ? [' → undo with ', h('code', null, e.compensation.effect_type), e.compensation.description ? `: ${e.compensation.description}` : '',
        e.compensation.estimated_cost_micros !== undefined ? ` (${money(e.compensation.estimated_cost_micros)})` : ''] : ''),
    steps('Permanent: cannot be undone', g.permanent),
    steps('Unresolved: outcome not known yet', g.unresolved),
    steps('Compensated', g.compensated),
    !g.compensations.length && !g.permanent.length && !g.unresolved.length && !g.compensated.length ? h('p', { class: 'muted' }, 'Nothing left to undo.') : null);
}

// Grants (scoped approvals, the admin API's /v1/grants): up to an amount
// and/or a number of effects, of an effect-type glob, for an agent or a
// run, until a time. A Ratchet whose admin API has no grants says so.
const TTLS = [['1h', '1 hour'], ['4h', '4 hours'], ['8h', '8 hours'], ['24h', '1 day'], ['168h', '7 days']];

/** Dollars typed by an operator as micro-USD ('' → undefined). */
function micros(dollars) {
  const v = String(dollars).trim().replace(/^\$/, '').replace(/,/g, '');
  if (v === '') return undefined;
  if (!/^\d+(\.\d{1,6})?$/.test(v)) throw new Error(`${dollars} is not an amount in dollars`);
  const [whole, frac = ''] = v.split('.');
  return Number(whole) * 1e6 + Number(frac.padEnd(6, '0'));
}

/** The grant form's fields a link may fill in. */
const GRANT_SCOPE_FROM_LINK = ['namespace', 'effect_type', 'agent_id', 'run_id'];

function grantLink(a) {
  const q = new URLSearchParams({ namespace: a.namespace, effect_type: a.effect_type });
  if (a.agent_id) q.set('agent_id', a.agent_id);
  if (a.run_id) q.set('run_id', a.run_id);
  return link(`/grants?${q}`, 'or grant a scope…');
}

views.grants = () => {
  let box, form, all;
  return {
    page: 'grants',
    title: 'Grants',
    mount(root) {
      // A link (an approval's "or grant a scope…") fills in the scope only:
      // what, by whom; never how much, how many or the note, so that a
      // crafted link cannot lay out a grant of anything for one click.
      const p = new URLSearchParams(location.search);
      const linked = (name) => (GRANT_SCOPE_FROM_LINK.includes(name) ? p.get(name) ?? '' : '');
      const field = (name, label, attrs = {}) => h('label', null, label, h('input', { name, type: 'text', value: linked(name), ...attrs }));
      const msg = h('p', { class: 'err', role: 'alert' });
      form = h('form', { class: 'search grant-form', onsubmit: async (ev) => {
        ev.preventDefault();
        msg.textContent = '';
        const f = Object.fromEntries([...form.elements].filter((el) => el.name).map((el) => [el.name, el.value.trim()]));
        const btn = form.querySelector('button[type=submit]');
        try {
          const body = { namespace: f.namespace, effect_type: f.effect_type, ttl: f.ttl };
          if (f.agent_id) body.agent_id = f.agent_id;
          if (f.run_id) body.run_id = f.run_id;
          const cost = micros(f.max_cost);
          if (cost !== undefined) body.max_cost_micros = cost;
          if (f.max_effects) body.max_effects = Number(f.max_effects);
          if (f.note) body.note = f.note;
          btn.disabled = true;
          const g = await api('/console/api/v1/grants', { method: 'POST', body });
          flash(`Granted ${g.grant_id}: begins inside it execute without asking until ${new Date(g.expires_at).toLocaleString()}.`);
          await refresh();
        } catch (err) {
          msg.textContent = `Granting failed: ${err.message}`;
        } finally {
          btn.disabled = false;
        }
      } },
      field('namespace', 'Namespace', { required: true, placeholder: 'default', value: linked('namespace') || 'default' }),
      field('effect_type', 'Effect type (glob)', { required: true, placeholder: 'payment.*' }),
      field('agent_id', 'Agent'),
      field('run_id', 'Run'),
      field('max_cost', 'Up to ($)', { inputmode: 'decimal', placeholder: '500.00', size: 10 }),
      field('max_effects', 'Up to (effects)', { inputmode: 'numeric', placeholder: '10', size: 8 }),
      h('label', null, 'For', h('select', { name: 'ttl' }, TTLS.map(([v, l]) => h('option', { value: v, selected: v === '8h' }, l)))),
      field('note', 'Note', { class: 'note-wide' }),
      h('button', { type: 'submit', class: 'ok' }, 'Grant'), msg);
      all = h('input', { type: 'checkbox', onchange: () => refresh() });
      box = h('div', { class: 'grants' });
      root.append(h('h1', null, 'Grants'),
        h('p', { class: 'muted' }, 'A grant approves in advance: begins of its effect types, by its agent or run, execute without an approval request of their own until it has covered its amount or its number of effects, or it ends. Give an agent, a run or both, and an amount, a number or both. Ceilings still apply.'),
        S.session?.can_decide ? form : null,
        h('label', { class: 'check' }, all, ' show ended grants (expired, used up, revoked)'),
        box);
    },
    async update() {
      let data;
      try {
        data = await v1('/grants' + (all.checked ? '?all=true' : ''));
      } catch (err) {
        if (err.status === 404 || err.status === 405) {
          form.hidden = true;
          if (!box.dataset.none) {
            box.dataset.none = '1';
            box.replaceChildren(h('p', { class: 'muted' }, 'This Ratchet\'s admin API has no grants endpoint yet.'));
          }
          return;
        }
        throw err;
      }
      const list = data.grants ?? [];
      let body = box.querySelector('tbody');
      if (!list.length) {
        box.replaceChildren(h('p', { class: 'muted' }, all.checked ? 'No grants.' : 'No live grants.'));
        return;
      }
      if (!body) {
        const t = table('list grants-list', ['State', 'Namespace', 'Effect type', 'Agent', 'Run', 'Covered so far', 'Expires', 'By', 'Note', '']);
        box.replaceChildren(t.table);
        body = t.body;
      }
      rows(body, list, (g) => g.grant_id, (g) => h('tr', null,
        h('td', null, badge(g.state)),
        h('td', null, g.namespace),
        h('td', null, h('code', null, g.effect_type)),
        h('td', null, g.agent_id || 'any'),
        h('td', null, g.run_id ? short(g.run_id, 20) : 'any'),
        h('td', { class: 'used' },
          g.max_cost_micros !== undefined ? h('div', null, `${money(g.used_cost_micros)} of ${money(g.max_cost_micros)}`) : null,
          g.max_effects !== undefined ? h('div', null, `${g.used_effects} of ${g.max_effects} effects`) : null),
        h('td', null, g.revoked_at ? ['revoked ', when(g.revoked_at)] : when(g.expires_at)),
        h('td', null, g.revoked_by ? `${g.created_by ?? ''}; revoked by ${g.revoked_by}` : g.created_by ?? ''),
        h('td', null, g.note ?? ''),
        h('td', null, g.state === 'active' && S.session?.can_decide ? h('span', { class: 'decide' }, h('button', {
          type: 'button', class: 'no', 'data-action': 'revoke', onclick: async (ev) => {
            ev.target.disabled = true;
            try {
              await api(`/console/api/v1/grants/${enc(g.grant_id)}/revoke`, { method: 'POST', body: {} });
              flash(`Revoked ${g.grant_id}: its begins ask for approval again.`);
              await refresh();
            } catch (err) {
              flash(`Revoking failed: ${err.message}`, true);
              ev.target.disabled = false;
            }
          },
        }, 'Revoke')) : '')));
    },
  };
};

// ---- explain: which rules a begin or a proxied request meets -----------

views.explain = () => {
  let out;
  return {
    page: 'explain',
    title: 'Explain',
    mount(root) {
      const msg = h('p', { class: 'err', role: 'alert' });
      const kind = h('select', { name: 'kind', onchange: () => {
        for (const el of form.querySelectorAll('[data-kind]')) el.hidden = el.dataset.kind !== kind.value;
      } }, h('option', { value: 'request' }, 'a request through the proxy'), h('option', { value: 'begin' }, 'an MCP begin'));
      const area = (name, label, attrs = {}) => h('label', { class: 'note-wide' }, label, h('textarea', { name, rows: 4, cols: 70, ...attrs }));
      const input = (name, label, attrs = {}) => h('label', null, label, h('input', { name, type: 'text', ...attrs }));
      const form = h('form', { class: 'search explain-form', onsubmit: async (ev) => {
        ev.preventDefault();
        msg.textContent = '';
        const f = Object.fromEntries([...form.elements].filter((el) => el.name).map((el) => [el.name, el.value]));
        let body;
        try {
          if (kind.value === 'begin') {
            body = { begin: JSON.parse(f.begin) };
            if (f.namespace.trim()) body.namespace = f.namespace.trim();
            if (f.agent_id.trim()) body.agent_id = f.agent_id.trim();
          } else {
            const headers = {};
            for (const line of f.headers.split('\n')) {
              const i = line.indexOf(':');
              if (i > 0) (headers[line.slice(0, i).trim()] ??= []).push(line.slice(i + 1).trim());
            }
            body = { request: { method: f.method.trim().toUpperCase() || 'POST', url: f.url.trim(), headers, body: f.body } };
          }
        } catch (err) {
          msg.textContent = `The begin is not JSON: ${err.message}`;
          return;
        }
        try {
          out.replaceChildren(explanation(await api('/console/api/v1/explain', { method: 'POST', body })));
        } catch (err) {
          msg.textContent = `Explaining failed: ${err.message}`;
        }
      } },
      h('label', null, 'Explain', kind),
      h('div', { 'data-kind': 'request' },
        input('method', 'Method', { value: 'POST', size: 6 }),
        input('url', 'URL', { size: 60, placeholder: 'api.stripe.com/v1/payment_intents (https, or the proxy URL)' }),
        area('headers', 'Headers (Name: value, one a line)', { placeholder: 'Content-Type: application/x-www-form-urlencoded' }),
        area('body', 'Body', { placeholder: 'amount=15000&currency=usd&customer=cus_1' })),
      h('div', { 'data-kind': 'begin', hidden: true },
        input('namespace', 'Namespace', { placeholder: 'default' }),
        input('agent_id', 'Agent'),
        area('begin', 'Begin arguments (JSON)', { placeholder: '{"idempotency_key": "order-1", "effect_type": "payment.charge", "estimated_cost_micros": 150000000}' })),
      h('button', { type: 'submit', class: 'ok' }, 'Explain'), msg);
      out = h('div', { class: 'explanation' });
      root.append(h('h1', null, 'Explain'),
        h('p', { class: 'muted' }, 'Which rules a begin or a request through the proxy meets, every ceiling that applies with what it counts now, and the decision it would get. Nothing is recorded: it is the engine\'s own decision on a read of the ledger.'),
        form, out);
    },
    async update() {},
  };
};

function explanation(a) {
  if (a.not_gated) return h('p', null, 'Not gated: ', a.not_gated);
  if (a.refused) return h('p', { class: 'err' }, 'Refused by the proxy: ', a.refused);
  const d = a.decision;
  const t = table('list explain-ceilings', ['Ceiling', 'Per', 'Window', 'Counted', 'Limit', 'Remaining', '']);
  for (const c of a.ceilings ?? []) {
    t.body.append(h('tr', null, h('td', null, c.name), h('td', null, c.per), h('td', null, c.window),
      h('td', { class: 'num' }, amount(c.unit, c.counted)), h('td', { class: 'num' }, amount(c.unit, c.limit)),
      h('td', { class: 'num' }, amount(c.unit, c.remaining)),
      h('td', null, [c.observed ? 'observed ' : '', c.not_applied ? `not applied: ${c.not_applied}` : ''].join(''))));
  }
  return h('div', null,
    dl([
      a.gated && ['Proxy', `${a.gated.vendor} ${a.gated.operation}, key from ${a.gated.key_source}${a.gated.dedupe_window ? ` (identical requests within ${a.gated.dedupe_window} are one call)` : ''}`],
      ['Effect type', h('code', null, a.effect_type)],
      a.vendor && ['Vendor', a.vendor],
      a.operation && ['Operation', h('code', null, a.operation)],
      ['Rules', a.rules.length ? h('ul', null, a.rules.map((r) => h('li', null, h('code', null, r.match),
        r.vendor ? ` vendor ${r.vendor}` : '', r.operation ? ` operation ${r.operation}` : '', ` (${r.mode}${r.deny ? ', deny' : ''}), policies[${r.index}]`))) : 'none match: no limit applies'],
      ['Threshold', a.threshold_micros !== undefined ? money(a.threshold_micros) : '—'],
      ['Requires', (a.require_dimensions ?? []).join(', ') || '—'],
      ['Decision', a.error ? `refused: ${a.error.code}: ${a.error.message}` : `${d.decision}${d.reason ? ` (${d.reason})` : ''}: ${d.message}`],
      d?.dimension_warning && ['Warning', d.dimension_warning.message],
      d?.budget_warning && ['Warning', d.budget_warning.message],
      a.observed && ['Observed rule', `would answer ${a.observed.would}${a.observed.reason ? ` (${a.observed.reason})` : ''}`],
    ]),
    (a.ceilings ?? []).length ? t.table : null);
}

// ---- counts in the navigation -----------------------------------------

async function counts() {
  if (!S.session?.signed_in || document.hidden) {
    if (!S.session?.signed_in) $('halts').hidden = true;
    return;
  }
  try {
    const [{ approvals }, { effects }, { halts }] = await Promise.all([v1('/approvals?state=pending'), v1('/effects?state=indeterminate&limit=500'), v1('/halts')]);
    $('count-approvals').textContent = approvals.length ? String(approvals.length) : '';
    $('count-attention').textContent = effects.length ? (effects.length >= 500 ? '500+' : String(effects.length)) : '';
    haltBanner(halts);
  } catch { /* the view shows errors */ }
}

/** haltBanner shows every active halt (ledger/halt.go) while there is one:
 * what it stops, who halted it, the note, and how to lift it. */
function haltBanner(halts) {
  const el = $('halts');
  el.hidden = !halts.length;
  el.replaceChildren(...halts.map((x) => {
    const scope = [['namespace', x.namespace], ['effect_type', x.effect_type], ['agent_id', x.agent_id], ['vendor', x.vendor]]
      .filter(([, v]) => v).map(([k, v]) => `${k}=${v}`).join(' ') || 'everything';
    return h('p', { class: 'halt', 'data-halt': x.halt_id }, h('strong', null, 'Halted: '), scope,
      ` (since ${new Date(x.created_at).toLocaleString()} by ${x.created_by || 'an operator'}): `, x.note,
      '. New begins in this scope are denied. Lift it with ', h('code', null, `ratchet resume ${x.halt_id}`), '.');
  }));
}

// ---- sign-in, routing, polling ----------------------------------------

function signInView() {
  const token = h('input', { type: 'password', name: 'token', autocomplete: 'current-password', required: true, 'aria-label': 'admin token', placeholder: 'admin token' });
  const msg = h('p', { class: 'err', role: 'alert' });
  const form = h('form', { class: 'signin panel', onsubmit: async (ev) => {
    ev.preventDefault();
    msg.textContent = '';
    try {
      S.session = await api('/console/session', { method: 'POST', body: { token: token.value } });
      token.value = '';
      render();
    } catch (err) {
      msg.textContent = err.message;
    }
  } },
  h('h1', null, 'Sign in'),
  h('p', { class: 'muted' }, 'With an admin token (one of auth.admins). Agent tokens cannot sign in.'),
  token, h('button', { type: 'submit' }, 'Sign in'), msg);
  return form;
}

/** decodeURIComponent, or null for a malformed escape (a mangled link). */
function unescapeSegment(s) {
  try {
    return decodeURIComponent(s);
  } catch {
    return null;
  }
}

function route() {
  const p = location.pathname;
  let m;
  let id;
  if (p === '/' || p === '/approvals') return views.approvals();
  if ((m = /^\/approvals\/([^/]+)$/.exec(p))) return (id = unescapeSegment(m[1])) === null ? null : views.approval(id);
  if (p === '/attention') return views.attention();
  if (p === '/effects') return views.effects();
  if ((m = /^\/effects\/([^/]+)$/.exec(p))) return (id = unescapeSegment(m[1])) === null ? null : views.effect(id);
  if (p === '/budgets') return views.budgets();
  if (p === '/groups') return views.groups();
  if (p === '/grants') return views.grants();
  if (p === '/explain') return views.explain();
  return null;
}

function header() {
  const s = S.session;
  const who = $('who');
  const banner = $('banner');
  $('nav').hidden = !s?.signed_in;
  banner.hidden = true;
  if (s?.mode === 'admin_required') {
    banner.hidden = false;
    banner.textContent = 'Closed: agent tokens are configured and admin tokens are not, so the console shows and decides nothing (an agent on this host must neither approve its own actions nor read other namespaces). Configure auth.admins and sign in with an admin token.';
  }
  if (!s?.signed_in) {
    who.replaceChildren();
  } else if (s.mode === 'sign_in') {
    who.replaceChildren(h('span', null, 'Signed in as ', h('strong', null, s.name)), ' ',
      h('button', { type: 'button', class: 'link', onclick: signOut }, 'Sign out'));
  } else {
    who.replaceChildren(h('span', { class: 'muted' }, 'No admin tokens: open on loopback'));
  }
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('here', a.dataset.page === S.route?.page);
}

async function signOut() {
  try {
    await api('/console/session/end', { method: 'POST', body: {} });
  } catch { /* signed out either way */ }
  S.session = { ...S.session, signed_in: false, csrf: undefined };
  render();
}

function render() {
  clearInterval(S.timer);
  const root = $('view');
  root.replaceChildren();
  if (S.session?.mode === 'admin_required') {
    S.route = null;
    header();
    document.title = 'Closed · Ratchet';
    root.append(h('h1', null, 'Closed'), h('p', null, 'Configure auth.admins (ratchet token hash < token-file) and restart Ratchet to sign in.'));
    return;
  }
  if (!S.session?.signed_in) {
    S.route = null;
    header();
    document.title = 'Sign in · Ratchet';
    root.append(signInView());
    root.querySelector('input')?.focus();
    return;
  }
  S.route = route();
  header();
  if (!S.route) {
    root.append(h('h1', null, 'Not found'), h('p', null, link('/approvals', 'Approvals')));
    return;
  }
  document.title = `${S.route.title} · Ratchet`;
  const err = h('p', { class: 'err load-err', hidden: true });
  const inner = h('div');
  root.append(err, inner);
  S.route.mount(inner);
  const view = S.route;
  const poll = async () => {
    if (S.busy || document.hidden || S.route !== view) return;
    S.busy = true;
    try {
      await view.update(inner);
      err.hidden = true;
    } catch (e) {
      if (S.route === view && e.code !== 'sign_in_required') {
        err.hidden = false;
        err.textContent = `Could not load: ${e.message}`;
      }
    } finally {
      S.busy = false;
      inner.dataset.loaded = '1';
    }
  };
  poll();
  S.timer = setInterval(poll, POLL[view.page === 'approvals' && view.title !== 'Approvals' ? 'approval' : view.page] ?? 2000);
  counts();
}

/** refresh runs the current view's update now (after a decision). */
async function refresh() {
  const root = $('view').lastElementChild;
  if (S.route && root) {
    while (S.busy) await new Promise((ok) => setTimeout(ok, 20));
    S.busy = true;
    try { await S.route.update(root); } finally { S.busy = false; }
  }
  counts();
}

function navigate(path) {
  history.pushState(null, '', path);
  render();
}

document.addEventListener('click', (ev) => {
  const a = ev.target.closest('a[data-nav]');
  if (!a || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) return;
  ev.preventDefault();
  navigate(a.getAttribute('href'));
});
window.addEventListener('popstate', render);

let started = false;

async function start() {
  try {
    S.session = await api('/console/session');
    // Without admin tokens there is no sign-in: the page asks for its
    // tokenless session (for its CSRF token) with a POST, as a GET never
    // makes one.
    if (!S.session.signed_in && S.session.mode === 'open') {
      S.session = await api('/console/session', { method: 'POST', body: {} });
    }
  } catch (err) {
    $('view').replaceChildren(h('p', { class: 'err' }, `Could not reach Ratchet: ${err.message}`));
    return;
  }
  render();
  if (!started) {
    started = true;
    setInterval(tick, 1000);
    setInterval(counts, 2000);
  }
}

start();
