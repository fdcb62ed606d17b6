// Cluster page: the slider shows the cluster as it was after any event of its history. Each
// position is one event (log sequence); the state is rebuilt on the server by the same replay
// as `muster replay --seq`. It is fetched when the slider moves (not on a timer), and the URL
// keeps the point (?seq=N) so it can be shared.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  const range = document.getElementById("at");
  if (!range) return;
  const form = document.getElementById("slider-form");
  const out = document.getElementById("at-text");
  const box = document.getElementById("replay");
  const seqs = range.dataset.seqs.split(",").map(Number);
  const lines = document.querySelectorAll("[data-testid=cluster-timeline] li");
  const cluster = form.dataset.cluster;
  const heading = document.getElementById("h-state"), ops = document.getElementById("operations");
  let timer = null, wanted = null;

  function label() {
    const i = Number(range.value), li = lines[i];
    const when = li ? li.querySelector("time") : null;
    const what = li ? li.querySelector(".type").textContent : "";
    out.textContent = "#" + seqs[i] + " " + what + (when ? " · " + when.textContent : "") + (i === seqs.length - 1 ? " (latest)" : "");
    range.setAttribute("aria-valuetext", out.textContent);
  }
  async function show() {
    const i = Number(range.value), seq = seqs[i];
    wanted = seq;
    const resp = await fetch("/ui/clusters/" + cluster + "/at?seq=" + seq, {headers: {Accept: "text/html"}});
    if (wanted !== seq) return;  // the slider moved on meanwhile
    box.innerHTML = await resp.text();
    musterConsole.localTimes(box);
    for (const li of lines) li.removeAttribute("aria-current");
    if (lines[i]) lines[i].setAttribute("aria-current", "true");
    const url = new URL(location.href), latest = i === seqs.length - 1;
    if (latest) url.searchParams.delete("seq"); else url.searchParams.set("seq", seq);
    history.replaceState(null, "", url);
    // As the server renders ?seq=N: a point of the history, not the cluster now, so no change
    // forms (a change applies to the cluster now); back at the latest event, both return.
    heading.textContent = latest ? "State now" : "State at a point of its history";
    if (ops) ops.hidden = !latest;
  }
  range.addEventListener("input", function () {
    label();
    clearTimeout(timer);
    timer = setTimeout(show, 120);  // debounce while dragging
  });
  form.addEventListener("submit", function (ev) { ev.preventDefault(); show(); });
  label();
  const current = document.querySelector("[data-testid=cluster-timeline] li[aria-current]");
  if (current) current.parentElement.scrollTop = current.offsetTop - current.parentElement.offsetTop - 60;
});

// The cluster now (not a point of its history): told when it changes after the page was made
// (cluster_live.py; server-sent events, nothing polls). The page stays as rendered, so a change
// form being typed is kept; a notice says what changed, with a link that reloads it, and "busy
// with its job" goes once that job's final event comes.
document.addEventListener("DOMContentLoaded", function () {
  const notice = document.getElementById("cluster-changed");
  if (!notice || !window.EventSource) return;
  const text = document.getElementById("cluster-changed-text");
  const source = new EventSource("/ui/clusters/" + notice.dataset.cluster + "/stream?after=" + notice.dataset.after);
  source.addEventListener("changed", function (ev) {
    const m = JSON.parse(ev.data);
    text.textContent = "#" + m.seq + " " + m.type + (m.text ? ": " + m.text : "");
    notice.hidden = false;
    const busy = document.querySelector('[data-testid="ops-busy"]');
    if (m.final && busy && busy.dataset.job === m.job_id) busy.hidden = true;
  });
  const ended = document.getElementById("cluster-ended");  // no longer told of changes: said, with why
  musterConsole.endedBy(source, (why) => { ended.textContent = "This page is no longer told of the cluster's changes: " + why + ". Reload the page."; ended.hidden = false; });
});
