// Starts the layout worker while the job page is still arriving (it is the slow part of the
// graph): loaded right after elk-api.js, not deferred. A file, not an inline script, so the
// console's Content-Security-Policy can allow scripts from the tracker alone.
"use strict";
window.musterElk = new ELK({workerUrl: document.currentScript.dataset.worker});
performance.mark("elk-created");
