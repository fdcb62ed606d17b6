// Job page: the task graph (grouped by cluster node or by stage, laid out by elkjs in a web
// worker), kept live from the job's progress stream (server-sent events: nothing polls), the
// task panel with each attempt, and job control. The server rendered the job as of log
// sequence `seq`; the stream continues from there.
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const W = 150, H = 34, GAP = 5, PAD = 6, HEAD = 20;
  const COL_CHIPS = 20;      // stage groups: chips per column
  const ALL_EDGES = 160;     // up to this many tasks every dependency is drawn; above, only the selected task's
  const TIMELINE_MAX = 200;
  const MAX_GROUP_EDGES = 1500;  // bounds the layout's work on very large jobs
  const PHASES = {forward: 0, cleanup: 1, rollback: 2};
  const REPLAN = new Set(["JobPlanned", "RollbackPlanned", "CleanupQueued", "JobRetried"]);

  let d, job, seq, final, group, elk, graph;
  const chips = new Map();   // task id -> {g, text, x, y}
  const latest = new Map();  // task id -> newest task state from the stream, with its seq
  let preds = null, succs = null, selected = null, scale = 1, size = {w: 0, h: 0};
  let source = null, queue = [], scheduled = false, layoutRun = 0, panelTimer = null;

  const $ = (id) => document.getElementById(id);
  const el = (name, attrs, parent) => {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  };
  const words = (s) => String(s || "unknown").replace(/_/g, " ");
  const place = (p, w) => (!p ? (w || "–") : (w && w.startsWith(p + "/")) ? w : p + (w ? "/" + w : ""));
  const label = (t) => (t.action + (t.service ? " " + t.service : "")).slice(0, 24);
  const status = (t) => words(t.state) + (t.attempt > 1 ? " · attempt " + t.attempt : "");

  // -- grouping and layout -------------------------------------------------------------------

  // By cluster node: one lane per node, its tasks in the column of their stage, so the stages
  // line up across lanes (forward stages, then cleanups, then the rollback's stages); elkjs
  // orders the lanes by the dependencies between nodes. By stage: one column per stage, its
  // tasks by node; elkjs lays the stages out in order.
  function columns() {
    const forward = (graph.stages.forward || []).length;
    const cleanup = graph.tasks.some((t) => t.phase === "cleanup") ? 1 : 0;
    return {
      of: (t) => t.phase === "forward" ? (t.stage || 1) - 1 : t.phase === "cleanup" ? forward : forward + cleanup + (t.stage || 1) - 1,
      count: forward + cleanup + (graph.stages.rollback || []).length,
    };
  }

  function groupsOf(tasks) {
    const groups = new Map();
    for (const t of tasks) {
      const key = group === "stage" ? (t.phase === "cleanup" ? "cleanup" : t.phase + " stage " + (t.stage || "?")) : t.node;
      if (!groups.has(key)) groups.set(key, {id: "g:" + key, title: key, tasks: []});
      groups.get(key).tasks.push(t);
    }
    const order = (a, b) => (PHASES[a.phase] - PHASES[b.phase]) || ((a.stage || 0) - (b.stage || 0)) || (a.node < b.node ? -1 : a.node > b.node ? 1 : 0);
    const cols = columns();
    for (const g of groups.values()) {
      g.tasks.sort(order);
      if (group === "node") {
        const depth = new Map();  // column -> tasks placed in it (cleanups may share one)
        for (const t of g.tasks) {
          const col = cols.of(t), row = depth.get(col) || 0;
          depth.set(col, row + 1);
          t._dx = PAD + col * (W + GAP);
          t._dy = HEAD + row * (H + GAP);
        }
        g.width = PAD * 2 + Math.max(1, cols.count) * (W + GAP) - GAP;
        g.height = HEAD + Math.max(1, ...depth.values()) * (H + GAP) - GAP + PAD;
      } else {
        const n = g.tasks.length, ncols = Math.ceil(n / COL_CHIPS), nrows = Math.min(n, COL_CHIPS);
        g.tasks.forEach((t, i) => {
          t._dx = PAD + Math.floor(i / COL_CHIPS) * (W + GAP);
          t._dy = HEAD + (i % COL_CHIPS) * (H + GAP);
        });
        g.width = PAD * 2 + ncols * (W + GAP) - GAP;
        g.height = HEAD + nrows * (H + GAP) - GAP + PAD;
      }
    }
    return groups;
  }

  function groupEdges(groups, tasks) {
    const gid = new Map();
    for (const g of groups.values()) for (const t of g.tasks) gid.set(t.id, g.id);
    const edges = new Set();
    if (group === "stage") {
      for (const phase of ["forward", "rollback"]) {
        const stages = (graph.stages[phase] || []).map((_, i) => "g:" + phase + " stage " + (i + 1));
        for (let i = 1; i < stages.length; i++) edges.add(stages[i - 1] + "|" + stages[i]);
      }
    } else {
      for (const [src, dst] of graph.links) {
        const a = new Set(src.map((x) => gid.get(x))), b = new Set(dst.map((x) => gid.get(x)));
        for (const x of a) for (const y of b) if (x && y && x !== y) edges.add(x + "|" + y);
      }
    }
    // Nodes that wait on each other (every datanode installs before any nodemanager, say) say
    // nothing about their order: keep only the one-way dependencies, and a bounded number.
    const oneway = [...edges].filter((e) => { const [s, t] = e.split("|"); return !edges.has(t + "|" + s); }).slice(0, MAX_GROUP_EDGES);
    return oneway.map((e, i) => { const [s, t] = e.split("|"); return {id: "e" + i, sources: [s], targets: [t]}; })
      .filter((e) => groups.has(e.sources[0].slice(2)) && groups.has(e.targets[0].slice(2)));
  }

  async function layout() {
    const run = ++layoutRun;
    const tasks = graph.tasks;
    const box = $("graph");
    if (!tasks.length) { box.textContent = ""; $("graph-status").textContent = "No plan yet."; return; }
    $("graph-status").textContent = "Laying out " + tasks.length + " tasks…";
    const groups = groupsOf(tasks);
    const input = {
      id: "root",
      layoutOptions: {"elk.algorithm": "layered", "elk.direction": group === "node" ? "DOWN" : "RIGHT", "elk.spacing.nodeNode": "14",
                      "elk.layered.spacing.nodeNodeBetweenLayers": "46", "elk.edgeRouting": "POLYLINE",
                      "elk.layered.considerModelOrder.strategy": "NODES_AND_EDGES"},
      children: [...groups.values()].map((g) => ({id: g.id, width: g.width, height: g.height})),
      edges: groupEdges(groups, tasks),
    };
    // Draw at once in plan order, then again when elkjs (in its worker; slow to start on a first
    // visit) has ordered the groups by their dependencies.
    draw(groups, provisional(input.children));
    const n = groups.size;
    const said = tasks.length + " tasks in " + n + (group === "stage" ? " stages" : " cluster nodes") +
      (tasks.length > ALL_EDGES ? "; pick a task to see its dependencies." : ".");
    $("graph-status").textContent = said + " Arranging…";
    window.musterGraphReady = (window.musterGraphReady || 0) + 1;  // for tests and the benchmark
    window.musterGraphReadyAt = performance.now();
    let out;
    try {
      elk = elk || window.musterElk || new ELK({workerUrl: d.worker});
      performance.mark("layout-start");
      out = await elk.layout(input);
      performance.mark("layout-end");
    } catch (err) {
      $("graph-status").textContent = said + " (elkjs failed: " + err + "; shown in plan order.)";
      return;
    }
    if (run !== layoutRun) return;  // a newer layout started meanwhile
    if (group === "node") out = lanes(out);
    draw(groups, out);
    $("graph-status").textContent = said;
    window.musterGraphLaidOut = (window.musterGraphLaidOut || 0) + 1;
    window.musterGraphLaidOutAt = performance.now();
  }

  // Groups in plan order: lanes stacked (by node), or columns side by side (by stage).
  function provisional(children) {
    const kids = children.map((c) => Object.assign({}, c));
    if (group === "node") return lanes({children: kids.map((k, i) => Object.assign(k, {x: 0, y: i}))});
    const rank = (k) => { const m = /^g:(\w+)(?: stage (\d+))?/.exec(k.id) || []; return [PHASES[m[1]] || 0, Number(m[2] || 0)]; };
    kids.sort((a, b) => { const ra = rank(a), rb = rank(b); return (ra[0] - rb[0]) || (ra[1] - rb[1]); });
    let x = 4, h = 0;
    const edges = [];
    kids.forEach((k, i) => {
      k.x = x; k.y = 4; x += k.width + 46; h = Math.max(h, k.height);
      const prev = kids[i - 1];
      if (prev && prev.id.split(" stage ")[0] === k.id.split(" stage ")[0]) {
        edges.push({sections: [{startPoint: {x: prev.x + prev.width, y: 4 + 20}, endPoint: {x: k.x, y: 4 + 20}}]});
      }
    });
    return {children: kids, edges: edges, width: x, height: h + 8};
  }

  // Lanes: elkjs ordered the nodes by their dependencies (its layers, top to bottom); stack them
  // in that order, left-aligned, so the stage columns line up, under a header of stage names.
  function lanes(out) {
    const kids = [...(out.children || [])].sort((a, b) => (a.y - b.y) || (a.x - b.x));
    let y = HEAD + 8, w = 0;
    for (const k of kids) { k.x = 4; k.y = y; y += k.height + 8; w = Math.max(w, k.width); }
    return {children: kids, edges: [], width: w + 8, height: y, header: true};
  }

  function header(svg) {
    const cols = columns(), forward = (graph.stages.forward || []).length;
    const cleanup = graph.tasks.some((t) => t.phase === "cleanup");
    for (let c = 0; c < cols.count; c++) {
      let name = c < forward ? "stage " + (c + 1) : (cleanup && c === forward) ? "cleanup" : "rollback " + (c - forward - (cleanup ? 1 : 0) + 1);
      const t = el("text", {x: 4 + PAD + c * (W + GAP) + 4, y: HEAD, class: "colhead"}, svg);
      t.textContent = name;
    }
  }

  function draw(groups, out) {
    const box = $("graph");
    chips.clear();
    size = {w: Math.ceil(out.width || 0) + 4, h: Math.ceil(out.height || 0) + 4};
    const svg = el("svg", {viewBox: "0 0 " + size.w + " " + size.h, "aria-hidden": "true", focusable: "false"});
    const gEdges = el("g", {}, svg), gNodes = el("g", {}, svg);
    if (out.header) header(svg);
    for (const e of out.edges || []) {
      for (const s of e.sections || []) {
        const pts = [s.startPoint, ...(s.bendPoints || []), s.endPoint];
        el("polyline", {class: "gedge", points: pts.map((p) => p.x + "," + p.y).join(" "), "marker-end": "url(#arrow)"}, gEdges);
      }
    }
    const defs = el("defs", {}, svg);
    const marker = el("marker", {id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse"}, defs);
    el("path", {d: "M 0 0 L 10 5 L 0 10 z", fill: "#7d8894"}, marker);
    for (const node of out.children || []) {
      const g = groups.get(node.id.slice(2));
      const gg = el("g", {class: "group", transform: "translate(" + node.x + "," + node.y + ")"}, gNodes);
      el("rect", {width: node.width, height: node.height, rx: 5}, gg);
      const title = el("text", {x: PAD, y: 15}, gg);
      title.textContent = g.title + " (" + g.tasks.length + ")";
      for (const t of g.tasks) {
        const x = node.x + t._dx, y = node.y + t._dy;
        const c = el("g", {class: "chip st-" + t.state, transform: "translate(" + t._dx + "," + t._dy + ")", "data-task": t.id}, gg);
        el("rect", {width: W, height: H}, c);
        const l1 = el("text", {x: 6, y: 14}, c); l1.textContent = label(t);
        const l2 = el("text", {x: 6, y: 28, class: "st"}, c); l2.textContent = status(t);
        const tip = el("title", {}, c); tip.textContent = t.id + ": " + status(t);
        chips.set(t.id, {g: c, text: l2, tip: tip, x: x, y: y});
      }
    }
    el("g", {id: "task-edges"}, svg);
    box.textContent = "";
    box.appendChild(svg);
    fit(true);
    drawTaskEdges();
    if (selected) select(selected, false);
  }

  // -- dependencies of one task (and every one, for small jobs) ---------------------------------

  function adjacency() {
    if (preds) return;
    preds = new Map(); succs = new Map();
    for (const [src, dst] of graph.links) {
      for (const a of src) { if (!succs.has(a)) succs.set(a, []); succs.get(a).push(dst); }
      for (const b of dst) { if (!preds.has(b)) preds.set(b, []); preds.get(b).push(src); }
    }
  }

  function curve(a, b) {
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, dx = Math.max(30, Math.abs(x2 - x1) / 2);
    return "M" + x1 + "," + y1 + " C" + (x1 + dx) + "," + y1 + " " + (x2 - dx) + "," + y2 + " " + x2 + "," + y2;
  }

  function drawTaskEdges() {
    const layer = document.getElementById("task-edges");
    if (!layer) return;
    layer.textContent = "";
    adjacency();
    const pairs = [];
    if (graph.tasks.length <= ALL_EDGES) {
      for (const [src, dst] of graph.links) for (const a of src) for (const b of dst) pairs.push([a, b, "tedge faint"]);
    }
    if (selected) {
      for (const dst of succs.get(selected) || []) for (const b of dst) pairs.push([selected, b, "tedge"]);
      for (const src of preds.get(selected) || []) for (const a of src) pairs.push([a, selected, "tedge"]);
    }
    for (const [a, b, cls] of pairs) {
      const ca = chips.get(a), cb = chips.get(b);
      if (ca && cb) el("path", {class: cls, d: curve(ca, cb)}, layer);
    }
  }

  // -- zoom ---------------------------------------------------------------------------------------

  function apply() {
    const svg = $("graph").querySelector("svg");
    if (!svg) return;
    svg.setAttribute("width", Math.round(size.w * scale));
    svg.setAttribute("height", Math.round(size.h * scale));
    $("graph").style.height = Math.max(120, Math.min(size.h * scale + 24, window.innerHeight * 0.7)) + "px";
  }
  function fit(initial) {
    const box = $("graph");
    let s = Math.min(1, (box.clientWidth - 8) / size.w, initial ? 1 : (box.clientHeight - 8) / size.h);
    if (initial && graph.tasks.length <= ALL_EDGES) s = Math.max(s, 0.7);  // small jobs: readable first, scroll for the rest
    scale = Math.max(0.05, s || 1);
    apply();
  }

  // -- the task panel -----------------------------------------------------------------------------

  function select(id, scroll) {
    for (const c of $("graph").querySelectorAll(".chip.sel")) c.classList.remove("sel");
    for (const r of document.querySelectorAll("#tasks tr[aria-selected]")) r.removeAttribute("aria-selected");
    selected = id;
    const c = chips.get(id);
    if (c) c.g.classList.add("sel");
    const row = document.getElementById("row-" + id);
    if (row) row.setAttribute("aria-selected", "true");
    drawTaskEdges();
    if (scroll && c) {
      const box = $("graph");
      box.scrollTo({left: c.x * scale - box.clientWidth / 3, top: c.y * scale - box.clientHeight / 3, behavior: "smooth"});
    }
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
    source = new EventSource("/ui/jobs/" + job + "/stream?after=" + seq);
    source.onopen = () => setLive(true, "live: updates as they happen");
    source.onerror = () => setLive(false, source && source.readyState === 2 ? "disconnected; reload the page" : "reconnecting…");
    source.addEventListener("progress", (ev) => { queue.push(JSON.parse(ev.data)); schedule(); });
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
        if (e.error) { $("job-error").textContent = e.error; $("job-error").hidden = false; }
        setLive(false, "finished: " + words(e.state));
        continue;
      }
      seq = Math.max(seq, m.seq);
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
      setState(last.state);
      const counts = Object.entries(last.counts || {}).map(([k, n]) => n + " " + k).join(", ") || "none yet";
      $("job-counts").textContent = counts + " (of " + last.tasks_total + ")";
      $("job-stage").textContent = (last.stage.current || "–") + " of " + last.stage.total;
    }
    if (replan) refetch();
    if (panel) { clearTimeout(panelTimer); panelTimer = setTimeout(() => openTask(selected, false), 250); }
  }

  function setState(s) {
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
    if (!known) return false;
    Object.assign(known, {state: t.state, attempt: t.attempt, provisioner: t.provisioner, worker: t.worker});
    const c = chips.get(t.id);
    if (c) {
      c.g.setAttribute("class", "chip st-" + t.state + (t.id === selected ? " sel" : ""));
      c.text.textContent = status(known);
      c.tip.textContent = t.id + ": " + status(known);
    }
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
    byId = new Map(graph.tasks.map((t) => [t.id, t]));
    preds = succs = null;
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
      rebuildTable();
      await layout();
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

  // -- job control ----------------------------------------------------------------------------------

  function control() {
    const form = $("control");
    if (!form) return;
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const action = ev.submitter ? ev.submitter.value : "";
      const said = $("control-said");
      const buttons = form.querySelectorAll("button");
      buttons.forEach((b) => { b.disabled = true; });
      said.textContent = action + ": asking the planner…";
      try {
        const resp = await fetch(form.getAttribute("action"), {method: "POST", body: new URLSearchParams({action: action}),
                                               headers: {Accept: "application/json"}});
        const body = await resp.json();
        said.textContent = action + ": " + (body.said || (body.error && body.error.message) || resp.status);
        if (body.accepted && action === "retry") { final = false; connect(); }
      } catch (err) {
        said.textContent = action + ": no answer (" + err + ")";
      } finally {
        buttons.forEach((b) => { b.disabled = false; });
      }
    });
  }

  // -- start ------------------------------------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", function () {
    d = JSON.parse($("job-data").textContent);
    job = d.job; seq = d.seq; final = d.final; group = d.group; graph = d.graph;
    index();
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
        layout();
      });
    }
    for (const b of document.querySelectorAll("[data-zoom]")) {
      b.addEventListener("click", () => {
        const z = b.dataset.zoom;
        if (z === "fit") fit(false); else { scale = Math.max(0.05, Math.min(3, scale * (z === "in" ? 1.25 : 0.8))); apply(); }
      });
    }
    const open = document.querySelector("#task-body [data-task]");
    if (open) selected = open.dataset.task;
    control();
    if (!final) connect();
    requestAnimationFrame(() => setTimeout(layout, 0));  // paint the summary and the table first
  });
})();
