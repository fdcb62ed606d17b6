// The console's forms, enhanced (docs/ui.md, "Operating"): everything works without this file.
// A template picked in the list shows its form at once; a delete's Preview waits until the typed
// name matches (the server checks it again).
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("select[data-autosubmit]").forEach(function (select) {
      const form = select.form;
      form.querySelectorAll(".js-hide").forEach(function (b) { b.hidden = true; });
      select.addEventListener("change", function () { form.submit(); });
    });
    document.querySelectorAll("input[data-must-be]").forEach(function (input) {
      const button = input.form.querySelector("button[type=submit]");
      const check = function () { button.disabled = input.value !== input.dataset.mustBe; };
      input.addEventListener("input", check);
      check();
    });
    // The first field the server refused gets the focus (its reason is next to it); a group of
    // boxes (services: one that requires a service not ticked) its first ticked box, else its
    // first. Once the page has loaded: the scroll to a change form's #operations took it away.
    const invalid = document.querySelector("[aria-invalid=true]");
    if (invalid) {
      const d = invalid.closest("details"); if (d) d.open = true;
      const box = invalid.tagName === "FIELDSET" ? (invalid.querySelector("input:checked") || invalid.querySelector("input")) : invalid;
      const focus = function () { if (box) box.focus(); };
      if (document.readyState === "complete") focus(); else window.addEventListener("load", focus);
    }
  });
})();
