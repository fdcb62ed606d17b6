// A large job's task graph (docs/ui.md, "Large jobs"): one group per stage, its tasks counted by
// state, drawn by the server; this keeps the counts live and opens a group to its tasks (at most
// 200, those that need a look first, fetched when asked). The same face as graph.js for job.js:
// `MusterAggregate(box, statusEl, job)` -> {show, setGroup, select, fit, zoom, updateChip, counts}.
"use strict";
window.MusterAggregate = function (box, statusEl, job) {
  const chips = new Map();   // task id -> its chip, in the groups opened
  const shown = new Map();   // group key -> the counts drawn, as JSON
  let selected = null;

  const words = (s) => String(s || "unknown").replace(/_/g, " ");
  const status = (t) => words(t.state) + (t.attempt > 1 ? " · attempt " + t.attempt : "");
  const label = (t) => t.action + (t.service ? " " + t.service : "") + " · " + t.node;
  const make = (name, cls, text) => { const e = document.createElement(name); if (cls) e.className = cls; if (text) e.textContent = text; return e; };

  // The counts of the groups that changed: the bar and the words.
  function counts(groups) {
    for (const [key, c] of Object.entries(groups || {})) {
      const json = JSON.stringify(c);
      if (shown.get(key) === json) continue;
      const li = document.getElementById("grp-" + key);
      if (!li) continue;
      shown.set(key, json);
      const bar = li.querySelector(".bar"), words_ = li.querySelector(".agg-counts");
      bar.textContent = ""; words_.textContent = "";
      Object.keys(c).sort().forEach((st, i) => {
        const s = make("span", "st-" + st); s.style.flexGrow = c[st]; bar.appendChild(s);
        if (i) words_.append(" · ");
        words_.append(make("span", "badge st-" + st, words(st)), " " + c[st]);
      });
    }
  }

  function chip(t) {
    const b = make("button", "chip st-" + t.state + (t.id === selected ? " sel" : ""));
    b.type = "button"; b.dataset.task = t.id;
    b.append(make("span", "", label(t)), make("br"), make("small", "st", status(t)));
    b.title = t.id + ": " + status(t);
    chips.set(t.id, b);
    return b;
  }

  async function open(li, link) {
    const list = li.querySelector(".agg-tasks");
    if (!list.hidden) { list.hidden = true; link.textContent = "its tasks"; return; }
    const resp = await fetch("/ui/jobs/" + job + "/graph?part=" + encodeURIComponent(li.dataset.part), {headers: {Accept: "application/json"}});
    const part = await resp.json();
    for (const c of list.querySelectorAll(".chip")) chips.delete(c.dataset.task);
    list.textContent = "";
    for (const t of part.tasks) list.appendChild(chip(t));
    if (part.total > part.tasks.length) list.appendChild(make("p", "dim", part.tasks.length + " of " + part.total + " shown: the table has them all."));
    list.hidden = false;
    link.textContent = "hide its tasks";
  }

  box.addEventListener("click", (ev) => {
    const a = ev.target.closest("a[data-open]");
    if (!a || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) return;
    ev.preventDefault();
    open(a.closest(".agg-group"), a);
  });

  // The groups again (the plan changed: a rollback, a cleanup, a retry).
  function render(agg) {
    box.textContent = "";
    chips.clear(); shown.clear();
    for (const g of agg.groups) {
      const li = make("li", "agg-group");
      li.id = "grp-" + g.key; li.dataset.part = g.key; li.dataset.testid = "graph-group";
      const kinds = g.kinds.map(([k, n]) => k + " ×" + n).join(", ");
      const h = make("h3", "", g.title + " "); h.appendChild(make("span", "dim", "(" + g.total + " tasks: " + kinds + ")"));
      const more = make("p", "agg-open"), a = make("a", "", "its tasks");
      a.href = "?part=" + encodeURIComponent(g.key) + "#h-tasks"; a.dataset.open = g.key; more.appendChild(a);
      const list = make("div", "agg-tasks"); list.hidden = true;
      li.append(h, make("div", "bar"), make("p", "agg-counts"), more, list);
      li.querySelector(".bar").setAttribute("aria-hidden", "true");
      li.querySelector(".agg-counts").dataset.testid = "group-counts";
      box.appendChild(li);
    }
    counts(Object.fromEntries(agg.groups.map((g) => [g.key, g.counts])));
    statusEl.textContent = agg.total + " tasks in " + agg.groups.length + " stages: one group per stage, its tasks counted by state.";
  }

  function ready() {  // for tests and the benchmark, as graph.js
    window.musterGraphReady = (window.musterGraphReady || 0) + 1;
    document.documentElement.dataset.graphReady = window.musterGraphReady;
    window.musterGraphReadyAt = window.musterGraphLaidOutAt = performance.now();
    window.musterGraphLaidOut = (window.musterGraphLaidOut || 0) + 1;
  }

  let first = true;
  return {
    show(agg) { if (first) { first = false; for (const g of agg.groups) shown.set(g.key, JSON.stringify(g.counts)); } else render(agg); ready(); },
    setGroup() {},
    select(id) {
      for (const c of box.querySelectorAll(".chip.sel")) c.classList.remove("sel");
      selected = id;
      const c = chips.get(id);
      if (c) c.classList.add("sel");
    },
    fit() {},
    zoom() {},
    updateChip(t) {
      const c = chips.get(t.id);
      if (!c) return;
      c.className = "chip st-" + t.state + (t.id === selected ? " sel" : "");
      c.lastChild.textContent = status(t);
      c.title = t.id + ": " + status(t);
    },
    counts: counts,
  };
};
