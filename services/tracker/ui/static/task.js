// A task's own page (/ui/jobs/{id}/tasks/{task}): kept live from the job's coalesced stream, as
// the job page's task panel is (job.js): a new output line of a running attempt is appended to
// its list; a change of the task's state (claimed, succeeded, a retry) or the job's end fetches
// the task's part of the page again. Nothing polls. The server rendered it as of log sequence `seq`.
"use strict";
(function () {
  document.addEventListener("DOMContentLoaded", function () {
    const d = JSON.parse(document.getElementById("task-data").textContent);
    const body = document.getElementById("task-body");
    const live = document.getElementById("live");
    const text = document.getElementById("live-text");
    if (d.final) return;
    let refetching = null;

    function setLive(on, words) { live.classList.toggle("on", on); text.textContent = words; }

    async function refetch() {  // one at a time; the last asked for wins
      if (refetching) { refetching.again = true; return; }
      refetching = {again: false};
      try {
        const resp = await fetch("/ui/jobs/" + d.job + "/tasks/" + encodeURIComponent(d.task) + "?fragment=1",
                                 {headers: {Accept: "text/html"}});
        if (resp.ok) { body.innerHTML = await resp.text(); musterConsole.localTimes(body); }
      } finally {
        const again = refetching.again;
        refetching = null;
        if (again) refetch();
      }
    }

    const source = new EventSource("/ui/jobs/" + d.job + "/stream?after=" + d.seq + "&batch=1");
    source.onopen = () => setLive(true, "live: updates as they happen");
    source.onerror = () => setLive(false, source.readyState === 2 ? "disconnected; reload the page" : "reconnecting…");
    musterConsole.endedBy(source, (why) => setLive(false, why + "; reload the page"));
    source.addEventListener("batch", (ev) => {
      const m = JSON.parse(ev.data);
      let changed = m.tasks.some((t) => t.id === d.task) || m.replan;
      for (const p of m.progress) if (p.task_id === d.task && !musterConsole.progressLine(body, p)) changed = true;
      if (changed) refetch();
    });
    source.addEventListener("end", (ev) => {
      source.close();
      setLive(false, "finished: " + String(JSON.parse(ev.data).state || "").replace(/_/g, " "));
      refetch();
    });
  });
})();
