// Job page: kept live from the job's progress stream (server-sent events: nothing polls), the
// task table, the timeline, the task panel with each attempt, and job control; the graph is
// graph.js. The server rendered the job as of log sequence `seq`; the stream continues from there.
"use strict";
(function () {
  const TIMELINE_MAX = 200;
  const REPLAN = new Set(["JobPlanned", "RollbackPlanned", "CleanupQueued", "JobRetried", "JobLayoutRetried",
                          "JobCancelRequested"]);  // (a cancel makes every task not queued yet cancelled)

  let d, job, seq, final, group, graph, view;
  const latest = new Map();  // task id -> newest task state from the stream, with its seq
  let selected = null, source = null, queue = [], scheduled = false, panelTimer = null;

  const $ = (id) => document.getElementById(id);
  const words = (s) => String(s || "unknown").replace(/_/g, " ");
  const place = (p, w) => (!p ? (w || "–") : (w && w.startsWith(p + "/")) ? w : p + (w ? "/" + w : ""));

  // -- the task panel -----------------------------------------------------------------------------

  function select(id, scroll) {
    for (const r of document.querySelectorAll("#tasks tr[aria-selected]")) r.removeAttribute("aria-selected");
    selected = id;
    const row = id ? document.getElementById("row-" + id) : null;
    if (row) row.setAttribute("aria-selected", "true");
    view.select(id, scroll);
  }

  async function openTask(id, push) {
    select(id, true);
    const resp = await fetch("/ui/jobs/" + job + "/tasks/" + encodeURIComponent(id) + "?fragment=1", {headers: {Accept: "text/html"}});
    $("task-body").innerHTML = await resp.text();
    musterConsole.localTimes($("task-body"));
    $("task-panel").hidden = false;
    if (push) {
      const url = new URL(location.href);
      url.searchParams.set("task", id);
      history.replaceState(null, "", url);
    }
  }

  function closeTask() {
    $("task-panel").hidden = true;
    selected = null;
    select(null, false);
    const url = new URL(location.href);
    url.searchParams.delete("task");
    history.replaceState(null, "", url);
  }

  // -- live ------------------------------------------------------------------------------------------

  function setLive(on, text) {
    $("live").classList.toggle("on", on);
    $("live-text").textContent = text;
  }

  function connect() {
    if (source || final) return;
    // Coalesced by the server: one batch per interval, each changed task once (ui/batches.py).
    source = new EventSource("/ui/jobs/" + job + "/stream?after=" + seq + "&batch=1");
    source.onopen = () => setLive(true, "live: updates as they happen");
    source.onerror = () => setLive(false, source && source.readyState === 2 ? "disconnected; reload the page" : "reconnecting…");
    musterConsole.endedBy(source, (why) => { source = null; final = true; setLive(false, why + "; reload the page"); });
    source.addEventListener("progress", (ev) => { queue.push(JSON.parse(ev.data)); schedule(); });
    source.addEventListener("batch", (ev) => { queue.push(JSON.parse(ev.data)); schedule(); });
    source.addEventListener("end", (ev) => {
      const end = JSON.parse(ev.data);
      source.close(); source = null; final = true;
      queue.push({end: end}); schedule();
    });
  }

  function schedule() {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(flush);  // many events, one repaint
  }

  function flush() {
    scheduled = false;
    const batch = queue; queue = [];
    let last = null, replan = false, panel = false;
    const list = $("timeline");
    const frag = document.createDocumentFragment();
    for (const m of batch) {
      if (m.end) {
        const e = m.end;
        setState(e.state);
        if (e.error) { musterConsole.coded($("job-error"), e.error); $("job-error").hidden = false; }
        if (e.finished_at) finished(e.finished_at);
        setLive(false, "finished: " + words(e.state));
        continue;
      }
      seq = Math.max(seq, m.seq);
      if (m.tasks) {  // a batch: each task that changed once, in its latest state
        for (const t of m.tasks) {
          if (!d.big) latest.set(t.id, Object.assign({seq: m.seq}, t));
          if (!update(t)) replan = true;
          if (t.id === selected) panel = true;
        }
        for (const p of m.progress) if (p.task_id === selected && !progressLine(p)) panel = true;
        for (const l of m.lines) frag.appendChild(line(l));
        replan = replan || m.replan;
        last = m;
        continue;
      }
      if (m.type === "TaskProgressed") {  // a line of a running attempt: under its task, not in the timeline
        if (m.task_id === selected && !progressLine(m)) panel = true;
        continue;
      }
      last = m;
      if (m.task) {
        latest.set(m.task.id, Object.assign({seq: m.seq}, m.task));
        if (!update(m.task)) replan = true;
        if (m.task.id === selected) panel = true;
      }
      if (REPLAN.has(m.type)) replan = true;
      frag.appendChild(line(m));
    }
    if (frag.childNodes.length) {
      list.appendChild(frag);
      while (list.children.length > TIMELINE_MAX) list.removeChild(list.firstElementChild);
      musterConsole.localTimes(list);
    }
    if (last) {
      if (last.groups && view.counts) view.counts(last.groups);
      if ($("control") && last.tasks_total) $("control").dataset.planned = "true";
      setState(last.state);
      showWait(last);
      showDecision(last.approval);
      const counts = Object.entries(last.counts || {}).map(([k, n]) => n + " " + k).join(", ") || "none yet";
      $("job-counts").textContent = counts + " (of " + last.tasks_total + ")";
      $("job-stage").textContent = stageText(last.stage, last.state);
    }
    if (batch.length) {  // what the page has applied, up to which log sequence (for tests and the benchmark)
      const applied = window.musterApplied = window.musterApplied || [];
      applied.push([seq, Date.now()]);
      if (applied.length > 10000) applied.shift();
    }
    if (replan) refetch();
    if (panel) { clearTimeout(panelTimer); panelTimer = setTimeout(() => openTask(selected, false), 250); }
  }

  const progressLine = (m) => musterConsole.progressLine($("task-body"), m);  // false: that attempt is not shown yet

  // As the server renders them (job.html), so the page at its end reads as it does reloaded.
  const ENDED_MID_PLAN = ["failed", "rolled_back", "needs_attention"];  // where it stopped, not where it is
  const stageText = (stage, state) =>
    (stage.current && ENDED_MID_PLAN.includes(state) ? "stopped at " : "") +
    (stage.current || (stage.total && state === "succeeded" ? "all done" : "–")) + " of " + stage.total;

  function finished(iso) {
    const t = document.createElement("time");
    t.setAttribute("datetime", iso);
    t.textContent = iso;
    $("job-finished").replaceChildren(t);
    musterConsole.localTimes($("job-finished"));
  }

  function showWait(m) {  // the job asked a pool for hosts after the page was rendered: say so
    const r = m.resources;
    let p = $("job-resources");
    if (!r || r.granted || m.state !== "waiting_for_resources" || (p && !p.hidden)) return;
    if (!p) {
      p = document.createElement("p");
      p.id = "job-resources"; p.className = "notice"; p.dataset.testid = "job-resources";
      $("job-error").after(p);
    }
    const a = document.createElement("a");
    a.href = "/ui/pools/" + encodeURIComponent(r.pool);
    a.textContent = "its place in the pool's line";
    p.replaceChildren("Waiting for " + r.hosts + " host" + (r.hosts === 1 ? "" : "s") + " of pool " + r.pool + " (", a, ")");
    p.hidden = false;
  }

  // A decision taken elsewhere (the CLI, another approver, its expiry) while the page still offers
  // one: said in the words the server renders (job.html), and no longer offered (a Reject there
  // could only be refused). Its costs are left to a reload.
  function showDecision(a) {
    const waits = $("approval-waits");
    if (!a || !waits) return;
    const p = document.createElement("p");
    p.id = "approval-decision"; p.dataset.testid = "approval-decision"; p.tabIndex = -1;
    p.textContent = "Approval: " + a.decision + (a.by ? " by " + a.by : "") + (a.comment ? ": \u201c" + a.comment + "\u201d" : "");
    const focused = waits.contains(document.activeElement);
    waits.replaceWith(p);
    if (focused) p.focus();  // a keyboard user who was typing a comment is not left on nothing
  }

  function setState(s) {
    showControls(s);
    const waiting = $("job-resources");  // "waiting for 2 hosts of pool lab: 1st in line" holds no longer
    if (waiting && s !== "waiting_for_resources") waiting.hidden = true;
    const b = $("job-state").querySelector(".badge");
    b.className = "badge st-" + s;
    b.textContent = words(s);
    document.title = document.title.replace(/\([^)]*\)/, "(" + s + ")");
  }

  function line(m) {
    const li = document.createElement("li");
    li.innerHTML = '<span class="seq"></span> <time></time> <span class="type"></span> <span class="txt"></span>';
    li.children[0].textContent = "#" + m.seq;
    li.children[1].setAttribute("datetime", m.time);
    li.children[1].textContent = m.time;
    li.children[2].textContent = m.type;
    li.children[3].textContent = m.text + (m.who ? " [" + m.who + "]" : "");
    return li;
  }

  function update(t) {
    const known = byId.get(t.id);
    if (!known && !d.big) return false;  // (a large job's page holds only some of its tasks)
    if (known) Object.assign(known, {state: t.state, attempt: t.attempt, provisioner: t.provisioner, worker: t.worker});
    view.updateChip(known || t);
    const row = document.getElementById("row-" + t.id);
    if (row) {
      const badge = row.querySelector(".t-state .badge");
      badge.className = "badge st-" + t.state;
      badge.textContent = words(t.state);
      row.querySelector(".t-attempt").textContent = t.attempt;
      row.querySelector(".t-place").textContent = place(t.provisioner, t.worker);
    }
    return true;
  }

  let byId = new Map();
  function index() {
    byId = new Map((graph.tasks || []).map((t) => [t.id, t]));
  }

  let refetching = false, again = false;
  async function refetch() {
    if (refetching) { again = true; return; }
    refetching = true;
    try {
      const resp = await fetch("/ui/jobs/" + job + "/graph", {headers: {Accept: "application/json"}});
      const fresh = await resp.json();
      graph = fresh;
      index();
      for (const [id, t] of latest) if (t.seq > fresh.seq && byId.has(id)) Object.assign(byId.get(id), t);
      if (!d.big) rebuildTable();
      await view.show(graph);
    } finally {
      refetching = false;
      if (again) { again = false; refetch(); }
    }
  }

  function rebuildTable() {
    const body = $("tasks").tBodies[0];
    const have = new Set([...body.rows].map((r) => r.dataset.task));
    for (const t of graph.tasks) {
      if (have.has(t.id)) continue;
      const tr = body.insertRow();
      tr.id = "row-" + t.id; tr.dataset.task = t.id;
      tr.innerHTML = '<th scope="row"><a class="mono task-link"></a></th><td></td><td class="num"></td><td class="mono"></td>' +
        '<td class="t-state"><span class="badge"></span></td><td class="num t-attempt"></td><td class="mono t-place"></td>';
      const a = tr.querySelector("a");
      a.textContent = t.id; a.href = "?task=" + encodeURIComponent(t.id) + "&group=" + group;
      tr.cells[1].textContent = t.phase; tr.cells[2].textContent = t.stage || "–"; tr.cells[3].textContent = t.node;
    }
    for (const t of graph.tasks) update(t);
  }

  // -- job control and an approval's decision ---------------------------------------------------------

  // A form of the page sent without leaving it: what was typed stays (a comment before Check first,
  // or one a refusal answered: the plain post went back to the page without it) and so does the
  // focus; the answer shows in `said` (a live region). `told` words the answer.
  function stay(form, said, told) {
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const action = ev.submitter ? ev.submitter.value : "";
      const buttons = form.querySelectorAll("button");
      buttons.forEach((b) => { b.disabled = true; });
      said.textContent = action + ": asking the planner…";
      const fields = new URLSearchParams(new FormData(form));
      fields.set("action", action);
      try {
        const resp = await fetch(form.getAttribute("action"), {method: "POST", body: fields, headers: {Accept: "application/json"}});
        const body = await resp.json();
        if (resp.status === 401 && body.sign_in) {  // the token is no longer valid: the sign-in page says so
          window.location.assign(body.sign_in + "&next=" + encodeURIComponent(location.pathname + location.search));
          return;
        }
        musterConsole.coded(said, told(action, body, resp.status));
      } catch (err) {
        said.textContent = action + ": no answer (" + err + ")";
      } finally {
        buttons.forEach((b) => { b.disabled = false; });
        if (ev.submitter && ev.submitter.isConnected && document.activeElement === document.body) ev.submitter.focus();  // (disabling blurred it)
      }
    });
  }

  function control() {
    const form = $("control");
    if (form) stay(form, $("control-said"), (action, body, status) => {
      if (body.accepted && action === "retry") { final = false; connect(); }
      return action + ": " + (body.said || (body.error && body.error.message) || status);
    });
    const decide = $("decide");  // its decision shows from the stream (showDecision) once the planner takes it
    if (decide) stay(decide, document.querySelector('[data-testid="decision-said"]'),
                     (action, body, status) => body.said || (body.error && body.error.message) || String(status));
  }

  // Only the buttons the job's state allows (data-states: the states the planner takes each in).
  function showControls(s) {
    const form = $("control");
    if (!form) return;
    let any = false;
    form.querySelectorAll("button[data-states]").forEach((b) => {
      const ok = b.dataset.states.split(" ").includes(s) && (b.value !== "retry" || form.dataset.planned === "true");
      b.hidden = !ok;
      any = any || ok;
    });
    $("control-none").hidden = any;
    $("control-none").textContent = "no job control in state " + s.replace(/_/g, " ");
  }

  // -- start ------------------------------------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", function () {
    d = JSON.parse($("job-data").textContent);
    job = d.job; seq = d.seq; final = d.final; group = d.group; graph = d.graph;
    index();
    view = d.big ? MusterAggregate($("graph"), $("graph-status"), job) : MusterGraph($("graph"), $("graph-status"), d.worker);
    const box = $("graph");
    box.tabIndex = 0;  // scroll the graph with the keyboard
    box.addEventListener("click", (ev) => {
      const c = ev.target.closest(".chip");
      if (c) openTask(c.dataset.task, true);
    });
    document.addEventListener("click", (ev) => {
      const a = ev.target.closest("a.task-link");
      if (a && !ev.ctrlKey && !ev.metaKey && !ev.shiftKey && ev.button === 0) {
        ev.preventDefault();
        openTask(a.closest("tr").dataset.task, true);
      }
    });
    $("task-close").addEventListener("click", closeTask);
    document.addEventListener("keydown", (ev) => { if (ev.key === "Escape" && !$("task-panel").hidden) closeTask(); });
    for (const a of document.querySelectorAll("[data-group]")) {
      a.addEventListener("click", (ev) => {
        ev.preventDefault();
        group = a.dataset.group;
        for (const b of document.querySelectorAll("[data-group]")) b.toggleAttribute("aria-current", b === a);
        const url = new URL(location.href);
        url.searchParams.set("group", group);
        history.replaceState(null, "", url);
        view.setGroup(group);
      });
    }
    for (const b of document.querySelectorAll("[data-zoom]")) {
      b.addEventListener("click", () => {
        const z = b.dataset.zoom;
        if (z === "fit") view.fit(); else view.zoom(z === "in" ? 1.25 : 0.8);
      });
    }
    const open = document.querySelector("#task-body [data-task]");
    if (open) select(open.dataset.task, false);
    control();
    if (!final) connect();
    // Paint the summary and the table first, then the graph.
    requestAnimationFrame(() => setTimeout(() => view.show(graph, group), 0));
  });
})();
