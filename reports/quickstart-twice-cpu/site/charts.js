(function () {
  function draw() {
    document.querySelectorAll("div.vega[data-spec]").forEach(function (el) {
      var spec = JSON.parse(document.getElementById(el.getAttribute("data-spec")).textContent);
      vegaEmbed(el, spec, {actions: false, renderer: "svg", tooltip: {theme: "light"}})
        .then(function () { el.setAttribute("data-drawn", "yes"); })
        .catch(function (e) { el.textContent = "This chart could not be drawn: " + e; console.error(e); });
    });
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", draw); } else { draw(); }
})();
