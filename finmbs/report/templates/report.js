(function () {
  "use strict";
  function markMirror(node) {
    var seed = node.closest(".seed");
    var wanted = node.getAttribute("data-mirrors");
    if (!seed || !wanted) { return; }
    seed.querySelectorAll(".original .node").forEach(function (original) {
      var hit = original.getAttribute("data-id") === wanted || original.getAttribute("data-path") === wanted;
      original.classList.toggle("mirrored", hit && node.classList.contains("open"));
    });
  }
  // Math: $...$ only in math problems (a finance "$8.7 billion" is money), \(...\), \[...\] and $$...$$ everywhere.
  var BASE = [{left: "$$", right: "$$", display: true}, {left: "\\[", right: "\\]", display: true},
              {left: "\\(", right: "\\)", display: false}];
  var DOLLAR = BASE.concat([{left: "$", right: "$", display: false}]);
  function renderMath(box) {
    if (!window.katex || !window.renderMathInElement) { return; }
    box.querySelectorAll(".tex:not([data-math-done])").forEach(function (el) {
      el.setAttribute("data-math-done", "1");
      var node = el.closest("[data-domain]");
      var math = node && node.getAttribute("data-domain") === "math";
      var text = el.textContent;
      if (math && el.classList.contains("answer") && !/[$]|\\[(\[]/.test(text)) {
        try { window.katex.render(text, el, {throwOnError: false}); } catch (e) { /* keep the text */ }
        return;
      }
      window.renderMathInElement(el, {delimiters: math ? DOLLAR : BASE, throwOnError: false,
        ignoredTags: ["script", "noscript", "style", "textarea", "option"]});
    });
  }
  function toggle(head) {
    var box = head.parentElement;
    box.classList.toggle("open");
    if (box.classList.contains("open")) { renderMath(box); }
    head.setAttribute("aria-expanded", box.classList.contains("open") ? "true" : "false");
    markMirror(box);
  }
  document.addEventListener("click", function (event) {
    var head = event.target.closest("[data-toggle]");
    if (head) { toggle(head); }
  });
  document.addEventListener("keydown", function (event) {
    var head = event.target.closest && event.target.closest("[data-toggle]");
    if (head && (event.key === "Enter" || event.key === " ")) { event.preventDefault(); toggle(head); }
  });
  function setAll(open) {
    document.querySelectorAll(".seed, .node").forEach(function (box) { box.classList.toggle("open", open); });
    if (open) { renderMath(document); }
  }
  document.getElementById("expand-all").addEventListener("click", function () { setAll(true); });
  document.getElementById("collapse-all").addEventListener("click", function () { setAll(false); });
  document.querySelectorAll(".seed.open").forEach(renderMath);
  document.getElementById("filter").addEventListener("input", function (event) {
    var needle = event.target.value.toLowerCase();
    document.querySelectorAll(".seed").forEach(function (seed) {
      seed.classList.toggle("hidden", needle !== "" && seed.textContent.toLowerCase().indexOf(needle) < 0);
    });
  });
})();
