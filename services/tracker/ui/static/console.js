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
  window.musterConsole = {localTimes: localTimes, fmt: fmt};
  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    for (const el of document.querySelectorAll(".tz")) el.textContent = Intl.DateTimeFormat().resolvedOptions().timeZone || "local";
  });
})();
