// The job page's task graph: tasks grouped by cluster node (lanes, stages as columns) or by
// stage, drawn as SVG; the groups are placed by elkjs in its web worker. A component of the
// job page (job.js): `MusterGraph(box, statusEl, workerUrl)` -> {show, setGroup, select, fit,
// zoom, updateChip}; it holds no state of the job beyond what it draws.
"use strict";
window.MusterGraph = function (box, statusEl, workerUrl) {
  const NS = "http://www.w3.org/2000/svg";
  const W = 150, H = 34, GAP = 5, PAD = 6, HEAD = 20;
  const COL_CHIPS = 20;      // stage groups: chips per column
  const ALL_EDGES = 160;     // up to this many tasks every dependency is drawn; above, only the selected task's
  const MAX_GROUP_EDGES = 1500;  // bounds the layout's work on very large jobs
  const PHASES = {forward: 0, cleanup: 1, rollback: 2};

  let graph = {tasks: [], links: [], stages: {}}, group = "node", elk = null;
  const chips = new Map();   // task id -> {g, text, tip, x, y}
  let preds = null, succs = null, selected = null, scale = 1, size = {w: 0, h: 0}, layoutRun = 0;

  const el = (name, attrs, parent) => {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  };
  const words = (s) => String(s || "unknown").replace(/_/g, " ");
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
        if (!tasks.length) { box.textContent = ""; statusEl.textContent = "No plan yet."; return; }
    statusEl.textContent = "Laying out " + tasks.length + " tasks…";
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
    statusEl.textContent = said + " Arranging…";
    window.musterGraphReady = (window.musterGraphReady || 0) + 1;  // for tests and the benchmark
    document.documentElement.dataset.graphReady = window.musterGraphReady;  // (a selector waits on it: no eval under the CSP)
    window.musterGraphReadyAt = performance.now();
    let out;
    try {
      elk = elk || window.musterElk || new ELK({workerUrl: workerUrl});
      performance.mark("layout-start");
      out = await elk.layout(input);
      performance.mark("layout-end");
    } catch (err) {
      statusEl.textContent = said + " (elkjs failed: " + err + "; shown in plan order.)";
      return;
    }
    if (run !== layoutRun) return;  // a newer layout started meanwhile
    if (group === "node") out = lanes(out);
    draw(groups, out);
    statusEl.textContent = said;
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
    const svg = box.querySelector("svg");
    if (!svg) return;
    svg.setAttribute("width", Math.round(size.w * scale));
    svg.setAttribute("height", Math.round(size.h * scale));
    box.style.height = Math.max(120, Math.min(size.h * scale + 24, window.innerHeight * 0.7)) + "px";
  }
  function fit(initial) {
        let s = Math.min(1, (box.clientWidth - 8) / size.w, initial ? 1 : (box.clientHeight - 8) / size.h);
    if (initial && graph.tasks.length <= ALL_EDGES) s = Math.max(s, 0.7);  // small jobs: readable first, scroll for the rest
    scale = Math.max(0.05, s || 1);
    apply();
  }


  function select(id, scroll) {
    for (const c of box.querySelectorAll(".chip.sel")) c.classList.remove("sel");
    selected = id;
    const c = chips.get(id);
    if (c) c.g.classList.add("sel");
    drawTaskEdges();
    if (scroll && c) box.scrollTo({left: c.x * scale - box.clientWidth / 3, top: c.y * scale - box.clientHeight / 3, behavior: "smooth"});
  }

  // One task changed (its object in `graph.tasks` already says how): its chip only.
  function updateChip(t) {
    const c = chips.get(t.id);
    if (!c) return;
    c.g.setAttribute("class", "chip st-" + t.state + (t.id === selected ? " sel" : ""));
    c.text.textContent = status(t);
    c.tip.textContent = t.id + ": " + status(t);
  }

  return {
    show(g, grp) { graph = g; group = grp || group; preds = succs = null; return layout(); },
    setGroup(g) { group = g; return layout(); },
    select: select,
    fit: () => fit(false),
    zoom(factor) { scale = Math.max(0.05, Math.min(3, scale * factor)); apply(); },
    updateChip: updateChip,
  };
};
