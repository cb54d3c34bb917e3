/* The read pages' drawings: the cards' counts as bars (ECharts) and a card's graph (Cytoscape.js).
   Each reads the JSON its page embeds; with no script the page still lists everything. */
(function () {
  "use strict";

  function embedded(id) {
    var node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : null;
  }

  var font = getComputedStyle(document.body).fontFamily;

  function drawCounts() {
    var box = document.getElementById("counts-chart");
    var data = embedded("counts-data");
    if (!box || !data || !window.echarts) { return; }
    box.style.height = Math.max(160, 48 + 30 * data.keys.length) + "px";
    var chart = window.echarts.init(box, null, { renderer: "svg" });
    chart.setOption({
      aria: { enabled: true },
      textStyle: { fontFamily: font },
      grid: { left: 8, right: 40, top: 8, bottom: 8, containLabel: true },
      tooltip: { trigger: "item" },
      xAxis: { type: "value", minInterval: 1 },
      yAxis: { type: "category", inverse: true, data: data.keys,
               axisLabel: { width: 160, overflow: "truncate" } },
      series: [{ type: "bar", name: data.group_by || "cards", data: data.counts,
                 itemStyle: { color: "#24476b" }, label: { show: true, position: "right" } }]
    });
    box.setAttribute("data-drawn", "true");
    window.addEventListener("resize", function () { chart.resize(); });
  }

  function drawGraph() {
    var box = document.getElementById("graph-canvas");
    var elements = embedded("graph-data");
    if (!box || !elements || !window.cytoscape) { return; }
    var graph = window.cytoscape({
      container: box,
      elements: elements,
      wheelSensitivity: 0.4,
      style: [
        { selector: "node", style: {
          "label": "data(label)", "font-family": font, "font-size": 11, "color": "#1d2430",
          "text-wrap": "wrap", "text-max-width": "120px", "text-valign": "bottom", "text-margin-y": 4,
          "background-color": "#24476b", "width": 18, "height": 18 } },
        { selector: "node.center", style: { "background-color": "#d97706", "width": 28, "height": 28 } },
        { selector: "node.event", style: { "background-color": "#1f6b3a", "shape": "diamond" } },
        { selector: "node.knowledge", style: { "background-color": "#8a4b9a", "shape": "round-rectangle" } },
        { selector: "node[status = 'erased']", style: { "background-color": "#8b95a3" } },
        { selector: "node[status = 'superseded']", style: { "background-opacity": 0.45 } },
        { selector: "edge", style: {
          "label": "data(label)", "font-family": font, "font-size": 9, "color": "#5b6574",
          "curve-style": "bezier", "target-arrow-shape": "triangle", "width": 1.5,
          "line-color": "#9aa4b2", "target-arrow-color": "#9aa4b2", "text-rotation": "autorotate",
          "text-background-color": "#fbfcfd", "text-background-opacity": 1 } },
        { selector: "edge[label = 'contradicts']", style: { "line-color": "#9b1c1c", "target-arrow-color": "#9b1c1c" } },
        { selector: "edge[label = 'supersedes']", style: { "line-style": "dashed" } }
      ],
      layout: { name: "concentric", concentric: function (node) { return 10 - node.data("hop"); },
                levelWidth: function () { return 1; }, minNodeSpacing: 30, animate: false }
    });
    window.addEventListener("resize", function () { graph.resize(); graph.fit(undefined, 30); });
    graph.on("tap", "node", function (event) {
      var href = event.target.data("href");
      if (href) { window.location.assign(href); }
    });
    box.setAttribute("data-drawn", "true");
  }

  drawCounts();
  drawGraph();
}());
