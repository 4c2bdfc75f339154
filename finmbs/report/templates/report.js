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
  function toggle(head) {
    var box = head.parentElement;
    box.classList.toggle("open");
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
  }
  document.getElementById("expand-all").addEventListener("click", function () { setAll(true); });
  document.getElementById("collapse-all").addEventListener("click", function () { setAll(false); });
  document.getElementById("filter").addEventListener("input", function (event) {
    var needle = event.target.value.toLowerCase();
    document.querySelectorAll(".seed").forEach(function (seed) {
      seed.classList.toggle("hidden", needle !== "" && seed.textContent.toLowerCase().indexOf(needle) < 0);
    });
  });
})();
