// muster console: what every page needs. Times: the server writes UTC into <time datetime>;
// here they are shown in the viewer's own zone (the UTC stays in the title).
"use strict";
(function () {
  const fmt = new Intl.DateTimeFormat(undefined, {year: "numeric", month: "short", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit"});
  function localTimes(root) {
    for (const el of (root || document).querySelectorAll("time[datetime]")) {
      if (el.dataset.local) continue;
      const d = new Date(el.getAttribute("datetime"));
      if (isNaN(d)) continue;
      el.title = el.getAttribute("datetime");
      el.textContent = fmt.format(d);
      el.dataset.local = "1";
    }
  }
  // A running attempt's output line `p` into its list under `root` (a task's panel or page);
  // false when that attempt is not shown there yet (the caller fetches the task again).
  function progressLine(root, p) {
    const list = root.querySelector('ol[data-testid="attempt-lines"][data-attempt="' + p.attempt + '"]');
    if (!list) return false;
    if ([...list.children].some((li) => li.value === p.n)) return true;  // fetched with it already
    const li = document.createElement("li");
    li.value = p.n;
    li.textContent = (p.skipped ? "(" + p.skipped + " left out) " : "") + p.line;
    list.appendChild(li);
    const hint = list.parentElement.querySelector(".hint");
    if (hint) hint.remove();
    return true;
  }
  // A page's stream that the tracker ends because its reader may no longer read it (a token
  // revoked or expired, a grant taken back: still.py) says why in an `error` event with data; the
  // connection's own errors have none. Closed, so the browser does not ask again (a 401 it would
  // only report as "disconnected"), and `told` gets the tracker's words.
  function endedBy(source, told) {
    source.addEventListener("error", (ev) => {
      if (!ev.data) return;
      source.close();
      let why = "the stream ended";
      try { why = JSON.parse(ev.data).message || why; } catch (err) { /* (said as it is) */ }
      told(why);
    });
  }
  // A message the CLI and the API say too (a refusal, a job's error) into `el`, its `command`
  // spans as <code>, as the server's code_spans filter renders them: text nodes, no markup parsed.
  function coded(el, text) {
    el.replaceChildren(...String(text).split(/`([^`\n]+)`/).map((part, i) => {
      if (i % 2 === 0) return document.createTextNode(part);
      const code = document.createElement("code");
      code.textContent = part;
      return code;
    }));
  }
  window.musterConsole = {localTimes: localTimes, fmt: fmt, progressLine: progressLine, endedBy: endedBy, coded: coded};
  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    for (const el of document.querySelectorAll(".tz")) el.textContent = Intl.DateTimeFormat().resolvedOptions().timeZone || "local";
  });
})();
