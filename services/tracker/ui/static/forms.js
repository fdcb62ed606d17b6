// The console's forms, enhanced (docs/ui.md, "Operating"): everything works without this file.
// A template picked in the list with the pointer shows its form at once; a delete's Preview waits
// until the typed name matches (the server checks it again).
(function () {
  "use strict";
  const PICKED = "muster-picked";  // the list whose pick loaded this page: it keeps the focus
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("select[data-autosubmit]").forEach(function (select) {
      const form = select.form;
      const buttons = form.querySelectorAll(".js-hide");
      buttons.forEach(function (b) { b.hidden = true; });
      // The arrow keys walk a closed list one entry at a time, each a change: sent at the first,
      // the page loaded the next entry's form and left the focus nowhere, so a keyboard never got
      // past it (session 34). A change from the keyboard shows the button that sends it instead.
      let keyed = false;
      select.addEventListener("keydown", function () { keyed = true; });
      select.addEventListener("pointerdown", function () { keyed = false; });
      const remember = function () { sessionStorage.setItem(PICKED, select.id); };
      form.addEventListener("submit", remember);
      select.addEventListener("change", function () {
        if (keyed) { buttons.forEach(function (b) { b.hidden = false; }); return; }
        remember();
        form.submit();
      });
      if (sessionStorage.getItem(PICKED) === select.id) {
        sessionStorage.removeItem(PICKED);
        select.focus();
      }
    });
    document.querySelectorAll("input[data-must-be]").forEach(function (input) {
      const button = input.form.querySelector("button[type=submit]");
      // Enter with another name typed did nothing at all (the disabled button sends nothing):
      // the field now says it does not match, in formdata.py's words, and keeps the focus.
      const said = function (text) {
        let p = document.getElementById("err-" + input.name);
        if (!p && text) {
          p = document.createElement("p");
          p.id = "err-" + input.name;
          p.className = "error field-error";
          p.setAttribute("role", "alert");
          p.dataset.testid = "error-" + input.name;
          input.insertAdjacentElement("afterend", p);
        }
        if (!p) return;
        p.textContent = text;
        p.hidden = !text;
        if (text) {
          input.setAttribute("aria-invalid", "true");
          input.setAttribute("aria-describedby", p.id);
        } else {
          input.removeAttribute("aria-invalid");
        }
      };
      const check = function () {
        button.disabled = input.value !== input.dataset.mustBe;
        if (!button.disabled) said("");
      };
      input.addEventListener("input", check);
      input.addEventListener("keydown", function (event) {
        if (event.key !== "Enter" || input.value === input.dataset.mustBe) return;
        event.preventDefault();
        said(input.value ? "'" + input.value + "' does not match the cluster's name, " + input.dataset.mustBe + ": nothing is deleted"
          : "type the cluster's name, " + input.dataset.mustBe + ", to confirm");
        input.focus();
      });
      check();
    });
    // The first field the server refused gets the focus (its reason is next to it); a group of
    // boxes (services: one that requires a service not ticked) its first ticked box, else its
    // first. Once the page has loaded: the scroll to a change form's #operations took it away.
    // A change form the server opened without a refusal (Change, back from its preview) gets it
    // on its first field: the page was left at its top, the form far below and the focus nowhere.
    const invalid = document.querySelector("[aria-invalid=true]");
    const opened = document.querySelector("details.op[open]");
    let box = null;
    if (invalid) {
      const d = invalid.closest("details"); if (d) d.open = true;
      box = invalid.tagName === "FIELDSET" ? (invalid.querySelector("input:checked") || invalid.querySelector("input")) : invalid;
    } else if (opened) {
      box = opened.querySelector("input:not([type=hidden]), select, textarea");
    }
    if (box) {
      const focus = function () { box.focus(); };
      if (document.readyState === "complete") focus(); else window.addEventListener("load", focus);
    }
  });
})();
