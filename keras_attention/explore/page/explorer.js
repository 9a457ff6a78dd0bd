"use strict";
// The attention explorer's page: plain JavaScript and SVG, no libraries.
// window.EXPLORER holds {info, answer, static}: the run's description and,
// in a standalone file, the answer to draw; the server answers the rest.
(function () {
  const data = window.EXPLORER;
  const info = data.info;
  const $ = (id) => document.getElementById(id);
  const SVG_NS = "http://www.w3.org/2000/svg";
  const FONT = "14px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
  const HEAD_COLOURS = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd",
  ];
  const KIND_NAMES = {
    encoder_self_attention: "encoder self-attention",
    decoder_self_attention: "decoder self-attention (masked)",
    decoder_cross_attention: "cross-attention: decoder to source",
    self_attention: "self-attention",
  };
  const ACTIONS = {
    translation: "Translate",
    classification: "Classify",
    language_model: "Complete",
    embedding: "Embed",
  };
  const INPUTS = {
    translation: "Sentence to translate",
    classification: "Text to classify",
    language_model: "Prompt to complete",
    embedding: "Text to embed",
  };
  // The most lines the head view draws from one query token for one head:
  // a long input still draws at once.
  const LINES_PER_TOKEN = 12;
  const MIN_LINE_WEIGHT = 0.01;

  const state = {
    answer: null, view: null, kind: null, layer: 0, head: "mean", step: 0,
    timer: null, heads: [],
  };

  // --- Small helpers ---

  function svg(tag, attributes, parent) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, value);
    if (parent) parent.appendChild(node);
    return node;
  }

  function text(parent, x, y, content, attributes) {
    const node = svg("text", Object.assign({ x, y, "font-size": 14 }, attributes || {}), parent);
    node.textContent = content;
    return node;
  }

  const measure = document.createElement("canvas").getContext("2d");
  function textWidth(content) {
    measure.font = FONT;
    return measure.measureText(content).width;
  }

  // White to deep blue: the weight of a cell or a token.
  function colour(weight) {
    const w = Math.max(0, Math.min(1, weight));
    const low = [247, 251, 255], high = [8, 48, 107];
    const mix = low.map((l, i) => Math.round(l + (high[i] - l) * w));
    return `rgb(${mix[0]},${mix[1]},${mix[2]})`;
  }
  const inkOn = (weight) => (weight > 0.5 ? "#ffffff" : "#1d2330");
  const format = (weight) => weight.toFixed(3);

  function show(id, visible) { $(id).hidden = !visible; }

  function message(id, content) {
    $(id).textContent = content || "";
    show(id, Boolean(content));
  }

  // The rows of one layer of `kind`: one head's, or the mean over heads.
  function matrix(kind, layer, head) {
    const heads = state.answer.attention[kind][layer];
    if (head !== "mean") return heads[head];
    return heads[0].map((row, i) =>
      row.map((_, j) => heads.reduce((sum, h) => sum + h[i][j], 0) / heads.length));
  }

  // The tokens that label the rows and the columns of `kind`.
  function labels(kind) {
    const sides = { source: state.answer.source_tokens, target: state.answer.target_tokens };
    const [rows, columns] = state.answer.axes[kind];
    return [sides[rows], sides[columns]];
  }

  function headCount(kind) { return state.answer.attention[kind][0].length; }
  function layerCount(kind) { return state.answer.attention[kind].length; }

  function options(select, entries, value) {
    select.replaceChildren(...entries.map(([v, label]) => {
      const option = document.createElement("option");
      option.value = String(v);
      option.textContent = label;
      return option;
    }));
    select.value = String(value);
  }

  // --- Asking the server ---

  async function ask() {
    const content = $("text").value;
    if (!content.trim()) {
      message("error", "The text is empty: type a sentence.");
      return;
    }
    $("go").disabled = true;
    message("status", "working…");
    const started = performance.now();
    try {
      const response = await fetch("api/answer", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ text: content, beam_size: Number($("beam").value) }),
      });
      const answer = await response.json();
      if (!response.ok) {
        message("error", answer.error || `The server answered ${response.status}.`);
        message("status", "");
        return;
      }
      present(answer);
      const total = Math.round(performance.now() - started);
      message("status", `answered in ${total} ms (the model: ${Math.round(answer.seconds * 1000)} ms)`);
    } catch (error) {
      message("error", "The explorer's server does not answer: is it still running?");
      message("status", "");
    } finally {
      $("go").disabled = false;
    }
  }

  // --- An answer: the output, then the views ---

  function present(answer) {
    state.answer = answer;
    stop();
    message("error", "");
    message("notice", answer.notice);
    presentOutput(answer);
    const kinds = Object.keys(answer.attention);
    state.kind = answer.steps || kinds[kinds.length - 1];
    options($("kind"), kinds.map((k) => [k, KIND_NAMES[k] || k]), state.kind);
    setLayers();
    state.step = 0;
    const steps = stepCount();
    $("step").max = String(Math.max(0, steps - 1));
    $("step").value = "0";
    const canStep = Boolean(answer.steps) && steps > 0;
    document.querySelector('[data-view="steps"]').hidden = !canStep;
    show("explore", true);
    const keep = state.view && (state.view !== "steps" || canStep);
    setView(keep ? state.view : canStep ? "steps" : "heads");
  }

  function setLayers() {
    const layers = layerCount(state.kind);
    state.layer = layers - 1;
    options($("layer"), [...Array(layers).keys()].map((l) => [l, `${l + 1} of ${layers}`]), state.layer);
    const heads = headCount(state.kind);
    state.head = "mean";
    const entries = heads === 1 ? [["mean", "the one attention"]]
      : [["mean", "mean of heads"], ...[...Array(heads).keys()].map((h) => [h, `head ${h + 1}`])];
    options($("head"), entries, "mean");
    state.heads = Array(heads).fill(true);
  }

  function presentOutput(answer) {
    const result = $("result");
    result.replaceChildren();
    const label = (content) => {
      const span = document.createElement("span");
      span.className = "label";
      span.textContent = content;
      return span;
    };
    const body = $("hypotheses").querySelector("tbody");
    body.replaceChildren();
    show("hypotheses", false);
    show("probabilities", false);
    if (answer.task === "translation") {
      result.append(label("translation"), answer.translation);
      answer.hypotheses.forEach((h, i) => {
        const row = body.insertRow();
        row.insertCell().textContent = String(i + 1);
        row.insertCell().textContent = h.text;
        const score = row.insertCell();
        score.textContent = h.score.toFixed(3);
        score.className = "score";
      });
      show("hypotheses", answer.hypotheses.length > 1);
    } else if (answer.task === "classification") {
      result.append(label("label"), answer.label);
      const bars = $("probabilities");
      bars.replaceChildren(...Object.entries(answer.probabilities).map(([name, p]) => {
        const bar = document.createElement("div");
        bar.className = "bar";
        const fill = document.createElement("span");
        fill.className = "fill";
        fill.style.width = `${(100 * p).toFixed(1)}%`;
        const track = document.createElement("span");
        track.append(fill);
        const nameCell = document.createElement("span");
        nameCell.textContent = name;
        const value = document.createElement("span");
        value.textContent = p.toFixed(3);
        bar.append(nameCell, track, value);
        return bar;
      }));
      show("probabilities", true);
    } else if (answer.task === "embedding") {
      const shown = answer.embedding.slice(0, 8).map((v) => v.toFixed(3)).join(", ");
      const more = answer.embedding.length > 8 ? ", …" : "";
      result.append(
        label("vector"),
        `${answer.embedding.length} values, length ${answer.norm.toFixed(3)}: [${shown}${more}]`,
      );
    } else {
      const completion = document.createElement("strong");
      completion.textContent = answer.completion;
      result.append(label("completion"), answer.text, " → ", completion);
    }
    show("output", true);
  }

  function setView(view) {
    state.view = view;
    for (const tab of document.querySelectorAll("#tabs button")) {
      tab.setAttribute("aria-selected", String(tab.dataset.view === view));
    }
    if (view === "steps") state.kind = state.answer.steps;
    else state.kind = $("kind").value;
    $("kind").parentElement.hidden = view === "steps";
    $("head-label").hidden = view === "heads" || view === "model";
    show("step-controls", view === "steps");
    show("legend", view === "heads");
    draw();
  }

  function draw() {
    if (!state.answer) return;
    stopIfDone();
    const view = $("view");
    view.replaceChildren();
    message("readout", "\u00a0");
    const drawers = { steps: drawSteps, heads: drawHeads, model: drawModel, map: drawMap };
    view.appendChild(drawers[state.view]());
  }

  // --- Step-through: the seed's picture, one output token at a time ---

  function stepCount() {
    const a = state.answer;
    if (a.task === "translation") return a.target_tokens.length;
    if (a.task === "language_model") return Math.max(0, a.source_tokens.length - a.prompt_length);
    return 0;
  }

  // Lays tokens out in lines no wider than `width`; returns their boxes.
  function flow(tokens, x0, y0, width) {
    const boxes = [];
    let x = x0, y = y0;
    for (const token of tokens) {
      const w = textWidth(token) + 14;
      if (x + w > x0 + width && x > x0) { x = x0; y += 34; }
      boxes.push({ x, y, w, h: 26 });
      x += w + 6;
    }
    return boxes;
  }

  function drawTokenBox(parent, token, box, weight, attributes) {
    const group = svg("g", attributes, parent);
    svg("rect", {
      x: box.x, y: box.y, width: box.w, height: box.h, rx: 5,
      fill: weight === null ? "#ffffff" : colour(weight), stroke: "#c4cbd6",
    }, group);
    text(group, box.x + box.w / 2, box.y + 18, token, {
      "text-anchor": "middle", fill: weight === null ? "#1d2330" : inkOn(weight),
    });
    return group;
  }

  function drawSteps() {
    const a = state.answer;
    const width = 900;
    const root = svg("svg", { class: "steps", width, "font-size": 14 });
    const count = stepCount();
    const t = Math.min(state.step, Math.max(0, count - 1));
    const rows = matrix(state.kind, state.layer, state.head);
    let keys, weights, produced, outputs, outputIndex;
    if (a.task === "translation") {
      keys = a.source_tokens;
      weights = rows[t];
      outputs = a.target_tokens;
      outputIndex = t;
      produced = outputs[t];
    } else {
      const position = a.prompt_length + t;  // the token produced at this step
      keys = a.source_tokens.slice(0, position);
      weights = rows[position - 1].slice(0, position);
      outputs = null;
      produced = a.source_tokens[position];
    }
    const strongest = weights.indexOf(Math.max(...weights));
    text(root, 10, 22, a.task === "translation" ? "source: the encoder's states"
      : "the tokens so far", { fill: "#5b6475" });
    const keyBoxes = flow(keys, 10, 34, width - 20);
    const keysBottom = keyBoxes.length ? keyBoxes[keyBoxes.length - 1].y + 26 : 34;
    const outputTop = keysBottom + 90;
    text(root, 10, outputTop - 12, a.task === "translation" ? "output: the decoder, step by step"
      : "produced at this step", { fill: "#5b6475" });
    let current;
    if (outputs) {
      const boxes = flow(outputs, 10, outputTop, width - 20);
      outputs.forEach((token, i) => {
        const g = drawTokenBox(root, token, boxes[i], null, {
          class: "token output" + (i === outputIndex ? " current" : ""),
          "data-index": i, opacity: i > outputIndex ? 0.3 : 1,
        });
        if (i === outputIndex) {
          g.querySelector("rect").setAttribute("stroke", "#1f5fbf");
          g.querySelector("rect").setAttribute("stroke-width", 3);
        }
      });
      current = boxes[outputIndex];
    } else {
      current = flow([produced], 10, outputTop, width - 20)[0];
      const g = drawTokenBox(root, produced, current, null, { class: "token output current" });
      g.querySelector("rect").setAttribute("stroke", "#1f5fbf");
      g.querySelector("rect").setAttribute("stroke-width", 3);
    }
    // Lines from the token being produced to what it attends to.
    const lines = svg("g", {}, root);
    keys.forEach((_, j) => {
      if (weights[j] < MIN_LINE_WEIGHT) return;
      svg("line", {
        x1: current.x + current.w / 2, y1: current.y,
        x2: keyBoxes[j].x + keyBoxes[j].w / 2, y2: keyBoxes[j].y + 26,
        stroke: "#1f5fbf", "stroke-opacity": Math.min(1, weights[j] * 1.5),
        "stroke-width": 1 + 5 * weights[j],
      }, lines);
    });
    keys.forEach((token, j) => {
      const g = drawTokenBox(root, token, keyBoxes[j], weights[j], {
        class: "token source" + (j === strongest ? " strongest" : ""),
        "data-index": j, "data-weight": format(weights[j]),
      });
      if (j === strongest) {
        g.querySelector("rect").setAttribute("stroke", "#d62728");
        g.querySelector("rect").setAttribute("stroke-width", 3);
      }
      g.addEventListener("mouseenter", () =>
        message("readout", `${produced} ← ${token}: ${format(weights[j])}`));
    });
    root.setAttribute("height", current.y + 50);
    root.setAttribute("viewBox", `0 0 ${width} ${current.y + 50}`);
    $("step-label").textContent = `step ${t + 1} of ${count}: ${produced}` +
      ` (most attended: ${keys[strongest]}, ${format(weights[strongest])})`;
    return root;
  }

  function setStep(step) {
    state.step = step;
    $("step").value = String(step);
    draw();
  }

  function play() {
    if (state.timer) { stop(); return; }
    if (state.step >= stepCount() - 1) setStep(0);
    $("play").textContent = "❚❚ pause";
    $("play").setAttribute("aria-label", "pause");
    state.timer = setInterval(() => {
      if (state.step >= stepCount() - 1) { stop(); return; }
      setStep(state.step + 1);
    }, 800);
  }

  function stop() {
    if (state.timer) clearInterval(state.timer);
    state.timer = null;
    $("play").textContent = "▶ play";
    $("play").setAttribute("aria-label", "play");
  }

  function stopIfDone() {
    if (state.timer && state.view !== "steps") stop();
  }

  // --- Head view: lines from each query token to the keys it attends to ---

  function drawLegend() {
    const legend = $("legend");
    legend.replaceChildren(...state.heads.map((on, h) => {
      const button = document.createElement("button");
      button.type = "button";
      button.dataset.head = String(h);
      button.setAttribute("aria-pressed", String(on));
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = HEAD_COLOURS[h % HEAD_COLOURS.length];
      button.append(swatch, headCount(state.kind) === 1 ? "attention" : `head ${h + 1}`);
      button.addEventListener("click", () => {
        state.heads[h] = !state.heads[h];
        draw();
      });
      return button;
    }));
  }

  function drawHeads() {
    drawLegend();
    const [queries, keys] = labels(state.kind);
    const heads = state.answer.attention[state.kind][state.layer];
    const [rowName, columnName] = state.answer.axes[state.kind];
    const [rowTitle, columnTitle] = [`${rowName} (queries)`, `${columnName} (keys)`];
    // Wide enough for the longest token and for the column's title.
    const left = Math.max(...queries.map(textWidth), textWidth(rowTitle), 40) + 20;
    const right = Math.max(...keys.map(textWidth), textWidth(columnTitle), 40) + 20;
    const gap = 260, rowHeight = 20, top = 30;
    const width = left + gap + right;
    const height = top + rowHeight * Math.max(queries.length, keys.length) + 10;
    const root = svg("svg", { class: "heads", width, height, viewBox: `0 0 ${width} ${height}` });
    text(root, left - 10, 18, rowTitle, { "text-anchor": "end", fill: "#5b6475" });
    text(root, left + gap + 10, 18, columnTitle, { fill: "#5b6475" });
    const y = (i) => top + rowHeight * i + rowHeight / 2;
    const lines = svg("g", {}, root);
    heads.forEach((rows, h) => {
      if (!state.heads[h]) return;
      const stroke = HEAD_COLOURS[h % HEAD_COLOURS.length];
      rows.forEach((row, i) => {
        const strongest = row.map((w, j) => [w, j]).filter(([w]) => w >= MIN_LINE_WEIGHT)
          .sort((p, q) => q[0] - p[0]).slice(0, LINES_PER_TOKEN);
        for (const [w, j] of strongest) {
          svg("line", {
            x1: left, y1: y(i), x2: left + gap, y2: y(j), stroke,
            "stroke-opacity": Math.min(1, w), "stroke-width": 1 + 2 * w,
            "data-query": i, "data-key": j, "data-head": h,
          }, lines);
        }
      });
    });
    const focus = (attribute, index) => {
      root.classList.add("focused");
      for (const line of lines.children) {
        line.classList.toggle("focus", line.getAttribute(attribute) === String(index));
      }
    };
    const unfocus = () => root.classList.remove("focused");
    queries.forEach((token, i) => {
      const node = text(root, left - 10, y(i) + 5, token,
        { "text-anchor": "end", class: "token query", "data-index": i });
      node.addEventListener("mouseenter", () => focus("data-query", i));
      node.addEventListener("mouseleave", unfocus);
    });
    keys.forEach((token, j) => {
      const node = text(root, left + gap + 10, y(j) + 5, token,
        { class: "token key", "data-index": j });
      node.addEventListener("mouseenter", () => focus("data-key", j));
      node.addEventListener("mouseleave", unfocus);
    });
    return root;
  }

  // --- Heat maps: one large, or every layer and head as small ones ---

  // The weights as an image, one pixel a cell (drawn large, pixelated).
  function heatImage(rows) {
    const canvas = document.createElement("canvas");
    canvas.width = Math.max(1, rows[0].length);
    canvas.height = Math.max(1, rows.length);
    const context = canvas.getContext("2d");
    const image = context.createImageData(canvas.width, canvas.height);
    rows.forEach((row, i) => row.forEach((w, j) => {
      const [r, g, b] = colour(w).slice(4, -1).split(",").map(Number);
      const k = 4 * (i * canvas.width + j);
      image.data.set([r, g, b, 255], k);
    }));
    context.putImageData(image, 0, 0);
    return canvas.toDataURL("image/png");
  }

  function heatMap(parent, rows, x, y, cellWidth, cellHeight, attributes) {
    return svg("image", Object.assign({
      href: heatImage(rows), x, y,
      width: rows[0].length * cellWidth, height: rows.length * cellHeight,
      preserveAspectRatio: "none", style: "image-rendering: pixelated",
    }, attributes || {}), parent);
  }

  function drawMap() {
    const [queries, keys] = labels(state.kind);
    const rows = matrix(state.kind, state.layer, state.head);
    const cell = Math.max(3, Math.min(28, Math.floor(640 / Math.max(queries.length, keys.length))));
    const every = Math.ceil(14 / cell);  // label every n-th token when cells are small
    const left = Math.max(...queries.map(textWidth), 30) + 16;
    const top = Math.max(...keys.map(textWidth), 30) + 16;
    const width = left + cell * keys.length + 20;
    const height = top + cell * queries.length + 20;
    const root = svg("svg", { class: "map", width, height, viewBox: `0 0 ${width} ${height}` });
    const image = heatMap(root, rows, left, top, cell, cell, { class: "heat" });
    queries.forEach((token, i) => {
      if (i % every === 0) {
        text(root, left - 6, top + cell * i + cell / 2 + 5, token, { "text-anchor": "end" });
      }
    });
    keys.forEach((token, j) => {
      if (j % every !== 0) return;
      const x = left + cell * j + cell / 2 + 5, y = top - 6;
      text(root, x, y, token, { transform: `rotate(-90 ${x} ${y})` });
    });
    image.addEventListener("mousemove", (event) => {
      const box = image.getBoundingClientRect();
      const i = Math.floor((event.clientY - box.top) / (box.height / queries.length));
      const j = Math.floor((event.clientX - box.left) / (box.width / keys.length));
      if (rows[i] === undefined || rows[i][j] === undefined) return;
      message("readout", `${queries[i]} → ${keys[j]}: ${format(rows[i][j])}`);
    });
    return root;
  }

  function drawModel() {
    const [queries, keys] = labels(state.kind);
    const layers = state.answer.attention[state.kind];
    const size = 110, gap = 14, labelWidth = 70, top = 24;
    const heads = layers[0].length;
    const cellWidth = size / keys.length, cellHeight = size / queries.length;
    const width = labelWidth + heads * (size + gap);
    const height = top + layers.length * (size + gap);
    const root = svg("svg", { class: "cell-grid", width, height, viewBox: `0 0 ${width} ${height}` });
    for (let h = 0; h < heads; h += 1) {
      text(root, labelWidth + h * (size + gap) + size / 2, 16, heads === 1 ? "attention" : `head ${h + 1}`,
        { "text-anchor": "middle", fill: "#5b6475" });
    }
    layers.forEach((layer, l) => {
      const y = top + l * (size + gap);
      text(root, 4, y + size / 2, `layer ${l + 1}`, { fill: "#5b6475" });
      layer.forEach((rows, h) => {
        const x = labelWidth + h * (size + gap);
        const image = heatMap(root, rows, x, y, cellWidth, cellHeight,
          { "data-layer": l, "data-head": h });
        image.addEventListener("click", () => {
          state.layer = l;
          state.head = h;
          $("layer").value = String(l);
          $("head").value = heads === 1 ? "mean" : String(h);
          if (heads === 1) state.head = "mean";
          setView("map");
        });
        image.addEventListener("mouseenter", () =>
          message("readout", `layer ${l + 1}, ${heads === 1 ? "attention" : `head ${h + 1}`}: click to open it large`));
      });
    });
    return root;
  }

  // --- Downloads: the current view as SVG or PNG ---

  function currentSvg() {
    const node = $("view").querySelector("svg").cloneNode(true);
    node.setAttribute("xmlns", SVG_NS);
    node.setAttribute("font-family", "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif");
    const background = document.createElementNS(SVG_NS, "rect");
    for (const [k, v] of Object.entries({ width: "100%", height: "100%", fill: "#ffffff" })) {
      background.setAttribute(k, v);
    }
    node.insertBefore(background, node.firstChild);
    for (const line of node.querySelectorAll("line")) line.removeAttribute("class");
    node.classList.remove("focused");
    return new XMLSerializer().serializeToString(node);
  }

  function save(blob, name) {
    const link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = name;
    document.body.appendChild(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 1000);
  }

  function downloadSvg() {
    save(new Blob([currentSvg()], { type: "image/svg+xml" }), `attention-${state.view}.svg`);
  }

  function downloadPng() {
    const source = currentSvg();
    const picture = new Image();
    picture.onload = () => {
      const canvas = document.createElement("canvas");
      const scale = 2;
      canvas.width = picture.width * scale;
      canvas.height = picture.height * scale;
      const context = canvas.getContext("2d");
      context.scale(scale, scale);
      context.drawImage(picture, 0, 0);
      canvas.toBlob((blob) => save(blob, `attention-${state.view}.png`), "image/png");
    };
    picture.src = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(source);
  }

  // --- Start ---

  function start() {
    $("about").textContent = `${info.model} (${info.task.replace("_", " ")}) from ${info.run};` +
      ` it reads at most ${info.max_input_length} tokens.`;
    $("text-label").textContent = INPUTS[info.task];
    $("go").textContent = ACTIONS[info.task];
    const beams = [...Array(info.max_beam_size).keys()].map((k) => [k + 1, k === 0 ? "1 (greedy)" : String(k + 1)]);
    options($("beam"), beams, Math.min(info.beam_size, info.max_beam_size));
    $("beam-label").hidden = info.task !== "translation";
    $("go").addEventListener("click", ask);
    $("text").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); ask(); }
    });
    for (const tab of document.querySelectorAll("#tabs button")) {
      tab.addEventListener("click", () => setView(tab.dataset.view));
    }
    $("kind").addEventListener("change", () => { state.kind = $("kind").value; setLayers(); draw(); });
    $("layer").addEventListener("change", () => { state.layer = Number($("layer").value); draw(); });
    $("head").addEventListener("change", () => {
      const value = $("head").value;
      state.head = value === "mean" ? "mean" : Number(value);
      draw();
    });
    $("step").addEventListener("input", () => { stop(); setStep(Number($("step").value)); });
    $("play").addEventListener("click", play);
    $("download-svg").addEventListener("click", downloadSvg);
    $("download-png").addEventListener("click", downloadPng);
    if (data.static) {
      $("text").value = data.answer.text;
      $("text").readOnly = true;
      $("go").hidden = true;
      $("beam-label").hidden = true;
      $("help").textContent = "A standalone page: this text's answer is stored in the file; " +
        "run python -m keras_attention.explore to ask about others.";
      present(data.answer);
    } else {
      $("help").textContent = "Type a text and press Enter. Every weight drawn is the model's own, " +
        "read from its attention layers.";
    }
  }

  start();
  window.explorer = { state, present, setView, setStep };
})();
