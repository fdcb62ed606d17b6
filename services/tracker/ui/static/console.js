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
  window.musterConsole = {localTimes: localTimes, fmt: fmt, progressLine: progressLine};
  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    for (const el of document.querySelectorAll(".tz")) el.textContent = Intl.DateTimeFormat().resolvedOptions().timeZone || "local";
  });
})();
