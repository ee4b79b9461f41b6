// The playground and the bridge, end to end, in headless Chromium.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { mkdirSync } from 'node:fs';
import {
  WEB, BRIDGE_PORT, TOKEN, SHOTS, MODELS_DIR, startBridge, stopBridge, probe, launch, open, bridgeState, tryWebSocket,
  chart, overlaps, harmonicMean,
} from './harness.mjs';

let browser;
let bridge;

before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  bridge = await startBridge();
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await stopBridge(bridge);
});

test('page loads, wasm starts, the bridge connects and its capabilities appear', async () => {
  const page = await open(browser);
  await bridgeState(page, 'connected');
  const expected = await probe();
  assert.match(await page.textContent('[data-testid=host-version]'), /native-host 0\.1\.0/);
  assert.equal(await page.getAttribute('[data-testid=cap-ebpf]', 'data-available'), String(expected.ebpf.available));
  assert.equal(await page.getAttribute('[data-testid=cap-clang]', 'data-available'), String(expected.clang.available));
  assert.equal(await page.getAttribute('[data-testid=cap-ebpf]', 'title'), expected.ebpf.detail);
  // The token leaves the address bar once read.
  assert.ok(!page.url().includes(TOKEN), page.url());
  // The header's ping measures a real round trip through the bridge.
  await page.waitForFunction(() => /rtt [0-9.]+ ms/.test(document.querySelector('[data-testid=rtt]')?.textContent ?? ''), null, { timeout: 15_000 });
  page.assertNoErrors();
  await page.close();
});

/** The quickest run of each tab, for its screenshot. */
async function prepareForPicture(page, tab) {
  if (tab === 'qwengpu') {
    await page.selectOption('[data-testid=qwengpu-kernel]', { label: 'bitonic_sort' });
    await page.click('[data-testid=qwengpu-run]');
    await page.fill('[data-testid=step-slider]', '12');
    await page.dispatchEvent('[data-testid=step-slider]', 'input');
  } else if (tab === 'ebpf' && (await probe()).ebpf.available) {
    await page.waitForSelector('[data-testid=ebpf-model][data-loaded=true]', { state: 'attached' });
    await page.selectOption('[data-testid=ebpf-model]', 'tiny random Qwen3');
    await page.fill('[data-testid=ebpf-n]', '4');
    await page.dispatchEvent('[data-testid=ebpf-n]', 'change');
    await page.click('[data-testid=ebpf-run]');
    await page.waitForFunction(() => /^done: /.test(document.querySelector('[data-testid=ebpf-summary]').textContent), null, { timeout: 60_000 });
  } else if (tab === 'esp32') {
    await page.click('[data-testid=esp32-run]');
    await page.waitForSelector('[data-testid=esp32-summary]', { timeout: 120_000 });
  }
}

test('tabs switch, each says honestly what it is, and a screenshot of each is saved', async () => {
  const page = await open(browser);
  await bridgeState(page, 'connected');
  for (const tab of ['bitnet', 'qwengpu', 'ebpf', 'esp32', 'components']) {
    await page.click(`button[data-tab=${tab}]`);
    await page.waitForSelector(`main[data-panel=${tab}]`);
    assert.equal(await page.getAttribute(`button[data-tab=${tab}]`, 'aria-selected'), 'true');
    if (tab === 'components') {
      await page.waitForSelector('[data-testid=components-page]');
    } else if (tab === 'bitnet') {
      await page.waitForSelector('[data-testid=bitnet-stepper]');
    } else if (tab === 'ebpf') {
      await page.waitForSelector('[data-testid=ebpf-tab]');
    } else {
      await page.waitForSelector(`[data-testid=${tab}-tab]`);
    }
    if (tab === 'ebpf') {
      const expected = await probe();
      assert.ok((await page.textContent('[data-testid=ebpf-host]')).includes(expected.ebpf.detail));
    }
    assert.ok(page.url().endsWith(`#${tab}`), page.url());
    // The README's pictures (`cargo xtask screenshots` refreshes docs/screenshots from here):
    // each tab after its quickest run, so there is something to see.
    await prepareForPicture(page, tab);
    await page.screenshot({ path: `${SHOTS}/tab-${tab}.png`, fullPage: true, clip: { x: 0, y: 0, width: 1280, height: 1500 } });
  }
  // A deep link opens its tab.
  const deep = await open(browser, `?token=${TOKEN}`, '#esp32');
  await deep.waitForSelector('main[data-panel=esp32]');
  page.assertNoErrors();
  deep.assertNoErrors();
  await deep.close();
  await page.close();
});

test('links: the tab and its choices open from the address bar, and bad values fall back with a note', async () => {
  // Every choice from the link, no note.
  let page = await open(browser, '', '#bitnet?format=TL2&shape=32x224&weights=f32&seed=7');
  await page.waitForFunction(() => /TL2: .*three_k=192 two_k=32/.test(document.querySelector('[data-testid=bitnet-summary]')?.textContent ?? ''));
  assert.equal(await page.inputValue('[data-testid=bitnet-format]'), 'TL2');
  assert.equal(await page.inputValue('[data-testid=bitnet-shape]'), '2');
  assert.equal(await page.inputValue('[data-testid=bitnet-source]'), 'f32');
  assert.equal(await page.inputValue('[data-testid=bitnet-seed]'), '7');
  assert.equal(await page.$('[data-testid=link-note]'), null);
  page.assertNoErrors();
  await page.close();

  // A kernel chosen in the page goes to the address bar and comes back on reload.
  page = await open(browser, '', '#qwengpu?kernel=warp_scan');
  await page.waitForSelector('[data-testid=qwengpu-tab]');
  const label = () => page.$eval('[data-testid=qwengpu-kernel]', (s) => s.selectedOptions[0].textContent);
  assert.equal(await label(), 'warp_scan');
  assert.match(await page.inputValue('[data-testid=qwengpu-cuda]'), /warp_scan/);
  await page.selectOption('[data-testid=qwengpu-kernel]', { label: 'vadd' });
  assert.ok(page.url().endsWith('#qwengpu?kernel=vadd'), page.url());
  await page.reload();
  await page.waitForSelector('[data-testid=qwengpu-tab]');
  assert.equal(await label(), 'vadd');
  // Switching tabs drops the other tab's choices.
  await page.click('button[data-tab=esp32]');
  assert.ok(page.url().endsWith('#esp32'), page.url());
  page.assertNoErrors();
  await page.close();

  // Values the page cannot use: the defaults, and a note naming each.
  page = await open(browser, '', '#bitnet?format=TL9&shape=1x1&seed=-3');
  await page.waitForSelector('[data-testid=link-note]');
  const note = await page.textContent('[data-testid=link-note]');
  for (const bad of ['format="TL9"', 'shape="1x1"', 'seed="-3"']) assert.ok(note.includes(bad), note);
  assert.equal(await page.inputValue('[data-testid=bitnet-format]'), 'TL1');
  assert.equal(await page.inputValue('[data-testid=bitnet-shape]'), '0');
  await page.close();
  page = await open(browser, '', '#nosuchtab?x=1');
  await page.waitForSelector('main[data-panel=bitnet]');
  assert.match(await page.textContent('[data-testid=link-note]'), /tab "nosuchtab" does not exist; showing BitNet LUT/);
  page.assertNoErrors();
  await page.close();
});

test('components: heatmap hover, step controls, timeline, virtual table', async () => {
  const page = await open(browser, `?token=${TOKEN}`, '#components');
  await page.waitForSelector('[data-testid=components-page]');

  // Heatmap: the read-out names the cell under the pointer.
  const canvas = await page.$('[data-testid=heatmap] canvas');
  const box = await canvas.boundingBox();
  const rows = Number(await page.getAttribute('[data-testid=heatmap]', 'data-rows'));
  const cols = Number(await page.getAttribute('[data-testid=heatmap]', 'data-cols'));
  for (const [r, c] of [[0, 0], [10, 20], [rows - 1, cols - 1]]) {
    await page.mouse.move(box.x + (c + 0.5) * (box.width / cols), box.y + (r + 0.5) * (box.height / rows));
    assert.match(await page.textContent('[data-testid=heatmap-readout]'), new RegExp(`^row ${r}, col ${c}: -?\\d+$`));
  }

  // Step controls drive the highlighted cell.
  const position = () => page.textContent('[data-testid=step-position]');
  assert.equal(await position(), 'step 1 / 200');
  for (let i = 0; i < 3; i++) await page.click('[data-testid=step-next]');
  assert.equal(await position(), 'step 4 / 200');
  const style = await page.getAttribute('[data-testid=heatmap-highlight]', 'style');
  assert.ok(style.includes(`left:${(100 * 3) / cols}%`), style);
  await page.click('[data-testid=step-back]');
  assert.equal(await position(), 'step 3 / 200');
  await page.selectOption('[data-testid=step-speed]', '60');
  await page.click('[data-testid=step-play]');
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=step-position]').textContent.split(' ')[1]) > 20);
  await page.click('[data-testid=step-pause]');
  const paused = await position();
  await page.waitForTimeout(300);
  assert.equal(await position(), paused);

  // Timeline: every span drawn; hover names it.
  const spans = await page.$$('[data-testid=timeline-span]');
  assert.equal(spans.length, 40);
  await spans[0].hover();
  assert.match(await page.textContent('[data-testid=timeline-readout]'), /^L0\.rmsnorm: [0-9.]+ µs \(at 0 ns\)$/);
  // The zoom buttons sit clear of the caption's text.
  const label = await (await page.$('[data-testid=timeline-label]')).boundingBox();
  const buttons = await page.$$('.timeline .zoom-controls > *');
  assert.equal(buttons.length, 6);
  for (const b of buttons) {
    const box = await b.boundingBox();
    assert.ok(!overlaps(label, box), `caption ${JSON.stringify(label)} and ${await b.textContent()} ${JSON.stringify(box)}`);
  }

  // Virtual table: 100,000 rows, a few dozen in the DOM, the last one reachable.
  const domRows = () => page.$$eval('.vtable-row', (r) => r.length);
  assert.ok((await domRows()) < 40);
  await page.$eval('[data-testid=vtable-body]', (el) => { el.scrollTop = el.scrollHeight; });
  await page.waitForSelector('.vtable-row[data-row="99999"]');
  assert.ok((await domRows()) < 40);
  assert.match(await page.textContent('[data-testid=vtable-readout]'), /^100000 rows; \d+–100000 in the DOM$/);
  page.assertNoErrors();
  await page.close();
});

test('BitNet tab: step through TL2 qgemm_lut, outputs within the bound, wasm benchmark', async () => {
  const page = await open(browser, `?token=${TOKEN}`, '#bitnet');
  await page.waitForSelector('[data-testid=bitnet-stepper]');
  await page.selectOption('[data-testid=bitnet-format]', 'TL2');
  await page.selectOption('[data-testid=bitnet-shape]', '2'); // 32×224: 192 triplet columns + a 32-column tail
  await page.waitForFunction(() => /TL2: .*three_k=192 two_k=32/.test(document.querySelector('[data-testid=bitnet-summary]')?.textContent ?? ''));
  // 32 rows × 64 triplets / 2 per byte + a widen per BK=192 block, then 32 × 16 pairs / 2 + one widen.
  assert.equal(await page.getAttribute('[data-testid=bitnet-stepper]', 'data-steps'), String(32 * 32 + 1 + 32 * 8 + 1));

  // Each lookup step adds the two highlighted table entries to its row's int16 partial sum.
  const step = async () => {
    const text = await page.textContent('[data-testid=bitnet-step]');
    const values = [...text.matchAll(/entry \d+(?:, sign bit set: negated)?: ([+-]\d+)/g)].map((m) => Number(m[1]));
    const partial = Number(/int16 partial sum of row \d+ = (-?\d+)/.exec(text)[1]);
    const row = Number(await page.getAttribute('[data-testid=bitnet-step]', 'data-row'));
    return { text, values, partial, row };
  };
  const first = await step();
  assert.equal(first.values.length, 2, first.text);
  assert.equal(first.partial, first.values[0] + first.values[1], first.text);
  // The highlighted entries in the two tables hold those values (before the sign).
  const current = await page.$$eval('[data-testid=lut-table] tr[data-current=true]', (rows) => rows.map((r) => Number(r.dataset.value)));
  assert.equal(current.length, 2);
  assert.deepEqual(current.map(Math.abs), first.values.map(Math.abs));
  // Steps on the same row accumulate: byte vectors visit 32 rows, so step 33 is row `first.row` again.
  await page.fill('[data-testid=step-slider]', '32');
  await page.dispatchEvent('[data-testid=step-slider]', 'input');
  const again = await step();
  assert.equal(again.row, first.row, again.text);
  assert.equal(again.partial, first.partial + again.values[0] + again.values[1], again.text);

  // At the last step every output row is the kernel's and within its quantisation bound.
  const last = Number(await page.getAttribute('[data-testid=bitnet-stepper]', 'data-steps')) - 1;
  await page.fill('[data-testid=step-slider]', String(last));
  await page.dispatchEvent('[data-testid=step-slider]', 'input');
  await page.waitForFunction(() => !document.querySelector('[data-testid=out-y]').textContent.startsWith('('));
  const outputs = await page.$$eval('[data-testid=bitnet-outputs] tbody tr', (rows) => rows.map((r) => ({
    y: Number(r.querySelector('[data-testid=out-y]').textContent),
    ref: Number(r.querySelector('[data-testid=out-ref]').textContent),
    bound: Number(r.querySelector('[data-testid=out-bound]').textContent),
  })));
  assert.equal(outputs.length, 32);
  for (const o of outputs) assert.ok(Math.abs(o.y - o.ref) <= o.bound + 2e-5, JSON.stringify(o));
  assert.equal(await page.getAttribute('[data-testid=bitnet-accuracy]', 'data-ok'), 'true');
  await page.screenshot({ path: `${SHOTS}/bitnet-stepper.png`, fullPage: true });

  // A shape a format cannot take is refused with the kernel's reason.
  await page.selectOption('[data-testid=bitnet-format]', 'I2_S');
  assert.match(await page.textContent('[data-testid=bitnet-error]'), /multiple of 128/);

  // The benchmark runs scalar, simd128 and WebGPU in this page, on a seed shape, with identical
  // outputs, and names the adapter.
  await page.selectOption('[data-testid=bitnet-format]', 'TL1');
  await page.selectOption('[data-testid=bitnet-shape]', '4'); // 768×3072
  await page.waitForSelector('[data-testid=bitnet-no-trace]');
  await page.waitForSelector('[data-testid=gpu-status][data-state=ready]', { timeout: 30_000 });
  const adapter = await page.textContent('[data-testid=gpu-status]');
  // Before any benchmark the chart says what will fill it, and draws no bar.
  const before = await chart(page, 'bitnet-bench-chart');
  assert.equal(before.bars.length, 0);
  assert.match(await page.textContent('[data-testid=bitnet-bench-chart] [data-testid=chart-empty]'), /press benchmark/);
  await page.click('[data-testid=bench-run]');
  await page.waitForSelector('[data-testid=bench-results] tr[data-backend=webgpu]', { timeout: 120_000 });
  const bench = await page.$$eval('[data-testid=bench-results] tbody tr', (rows) => rows.map((r) => ({
    backend: r.dataset.backend, ratio: Number(r.dataset.ratio),
    gws: Number(r.querySelector('[data-testid=bench-gws]').textContent),
    identical: r.querySelector('[data-testid=bench-identical]').textContent,
  })));
  assert.deepEqual(bench.map((b) => b.backend), ['scalar', 'simd128', 'webgpu']);
  for (const b of bench) assert.ok(b.gws > 0 && b.identical === 'yes', JSON.stringify(b));
  console.log(`# wasm TL1 768x3072: scalar ${bench[0].gws} Gw/s, simd128 ${bench[1].gws} Gw/s (x${bench[1].ratio}), webgpu ${bench[2].gws} Gw/s`);
  console.log(`# ${adapter}`);
  // The chart draws the same rates: one bar per backend, heights in proportion to the values.
  const drawn = await chart(page, 'bitnet-bench-chart');
  assert.deepEqual(drawn.groups, ['TL1 768×3072']);
  assert.deepEqual(drawn.bars.map((b) => b.series), [0, 1, 2]);
  drawn.bars.forEach((b, i) => assert.ok(Math.abs(b.value - bench[i].gws) <= 5e-4 + 1e-3 * b.value, `${b.value} vs ${bench[i].gws}`));
  assert.equal(await page.$('[data-testid=bitnet-bench-chart] [data-testid=chart-empty]'), null);
  const perUnit = drawn.bars.map((b) => b.height / b.value);
  assert.ok(perUnit.every((u) => Math.abs(u - perUnit[0]) <= 1e-6 * perUnit[0]), perUnit.join());
  await page.screenshot({ path: `${SHOTS}/bitnet-bench-webgpu.png`, fullPage: true });
  // The backend selector runs one backend alone.
  const rowsOf = () => page.$$eval('[data-testid=bench-results] tbody tr', (rows) => rows.map((r) =>
    [r.dataset.backend, r.querySelector('[data-testid=bench-identical]').textContent]));
  await page.selectOption('[data-testid=bench-backend]', 'webgpu');
  await page.click('[data-testid=bench-run]');
  await page.waitForSelector('[data-testid=bench-results] tr[data-backend=webgpu]', { timeout: 120_000 });
  assert.deepEqual(await rowsOf(), [['webgpu', 'yes']]);
  await page.selectOption('[data-testid=bench-backend]', 'simd128');
  await page.click('[data-testid=bench-run]');
  await page.waitForSelector('[data-testid=bench-results] tr[data-backend=simd128]', { timeout: 120_000 });
  assert.deepEqual(await rowsOf(), [['simd128', 'yes']]);
  // The choices are in the address bar, and a reload opens the same view.
  assert.ok(page.url().endsWith('#bitnet?format=TL1&shape=768x3072&weights=ternary&seed=1'), page.url());
  await page.reload();
  await page.waitForSelector('[data-testid=bitnet-no-trace]');
  assert.equal(await page.inputValue('[data-testid=bitnet-format]'), 'TL1');
  assert.equal(await page.inputValue('[data-testid=bitnet-shape]'), '4');
  page.assertNoErrors();
  await page.close();
});

test('BitNet tab: a whole model generates in the page, bitnet.cpp\'s own output and a 125M dummy with tok/s', async () => {
  const page = await open(browser, '', '#bitnet');
  await page.waitForSelector('[data-testid=bitnet-model]');
  // bitnet.cpp's tiny model, its prompt, greedy: the page prints what llama-cli printed.
  await page.fill('[data-testid=bitnet-model-n]', '32');
  await page.dispatchEvent('[data-testid=bitnet-model-n]', 'change');
  await page.click('[data-testid=bitnet-model-run]');
  await page.waitForSelector('[data-testid=bitnet-model-stats][data-done=true]', { timeout: 60_000 });
  const stats = await page.$eval('[data-testid=bitnet-model-stats]', (e) => ({ ...e.dataset }));
  assert.equal(stats.tokens, '32');
  assert.equal(stats.matches, 'true', JSON.stringify(stats));
  assert.ok(Number(stats.tps) > 0);
  console.log(`# wasm: bitnet.cpp's tiny model, ${stats.tps} tok/s`);
  // The chart has each token's rate; together they make the run's.
  const speed = await chart(page, 'bitnet-model-chart');
  assert.deepEqual(speed.points.map((p) => p.x), [...Array(32).keys()].map((i) => i + 1));
  const overall = harmonicMean(speed.points.map((p) => p.value));
  assert.ok(Math.abs(overall - Number(stats.tps)) <= 0.01 + 1e-3 * overall, `${overall} vs ${stats.tps}`);
  // The 125M dummy layout (I2_S), built in the page, then 8 tokens on simd128.
  await page.selectOption('[data-testid=bitnet-model-source]', '2');
  await page.fill('[data-testid=bitnet-model-prompt]', 'hello world');
  await page.fill('[data-testid=bitnet-model-n]', '8');
  await page.dispatchEvent('[data-testid=bitnet-model-n]', 'change');
  await page.click('[data-testid=bitnet-model-run]');
  await page.waitForSelector('[data-testid=bitnet-model-stats][data-done=true]', { timeout: 180_000 });
  const big = await page.$eval('[data-testid=bitnet-model-stats]', (e) => ({ ...e.dataset }));
  assert.ok(Number(big.tokens) >= 1 && Number(big.tps) > 0, JSON.stringify(big));
  assert.match(await page.textContent('[data-testid=bitnet-model-status]'), /11 layers, dim 768, vocab 32002/);
  assert.match(await page.textContent('[data-testid=bitnet-model-text]'), /^ hello world/);
  console.log(`# wasm simd128: 125M dummy I2_S, ${big.tps} tok/s (${await page.textContent('[data-testid=bitnet-model-status]')})`);
  await page.screenshot({ path: `${SHOTS}/bitnet-model.png`, fullPage: true });
  page.assertNoErrors();
  await page.close();
});

test('ESP32 tab: a model split across nodes in the page and on the bridge, with plan, memory, timeline and throughput', async () => {
  const page = await open(browser, `?token=${TOKEN}`, '#esp32');
  await bridgeState(page, 'connected');
  await page.waitForSelector('[data-testid=esp32-tab]');
  // bitnet.cpp's tiny model on nodes with 300 KiB of PSRAM: one block each, two nodes.
  await page.fill('[data-testid=esp32-psram]', '300');
  await page.dispatchEvent('[data-testid=esp32-psram]', 'change');
  const run = async (where) => {
    await page.click('[data-testid=esp32-run]');
    await page.waitForSelector('[data-testid=esp32-summary]', { timeout: 120_000 });
    const summary = await page.$eval('[data-testid=esp32-summary]', (e) => ({ ...e.dataset }));
    assert.equal(summary.tokens, '32', JSON.stringify(summary));
    assert.equal(summary.matches, 'true', JSON.stringify(summary));
    assert.ok(Number(summary.modelled) > 0 && Number(summary.wall) > 0, JSON.stringify(summary));
    assert.equal((await page.$$('[data-testid=esp32-node]')).length, 2);
    const placed = await page.$$eval('[data-testid=esp32-block]', (cells) => cells.map((c) => c.dataset.node));
    assert.deepEqual(placed, ['0', '1']);
    for (const bar of await page.$$eval('[data-testid=esp32-psram-bar], [data-testid=esp32-sram-bar]', (b) => b.map((e) => ({ ...e.dataset })))) {
      assert.ok(Number(bar.used) > 0 && Number(bar.used) <= Number(bar.budget), JSON.stringify(bar));
    }
    // The newest pipeline step: out, blocks, back, for each node.
    assert.equal((await page.$$('[data-testid=timeline-span]')).length, 6);
    // Each node's own account: 32 forwards (the prompt, then 31 tokens).
    assert.equal((await page.textContent('[data-testid=esp32-reports]')).match(/32 forwards/g)?.length, 2);
    // The speed chart: a point per generation step, together the modelled rate of the run.
    const speed = await chart(page, 'esp32-speed-chart');
    const modelled = speed.points.filter((p) => p.series === 0).map((p) => p.value);
    assert.equal(modelled.length, 31, JSON.stringify(speed.points.slice(0, 3)));
    const overall = harmonicMean(modelled);
    assert.ok(Math.abs(overall - Number(summary.modelled)) <= 5e-4 + 1e-3 * overall, `${overall} vs ${summary.modelled}`);
    console.log(`# ESP32 cluster (${where}): ${await page.textContent('[data-testid=esp32-summary]')}`);
  };
  await run('in the page');
  assert.match(await page.textContent('[data-testid=esp32-diagram]'), /in this page/);
  // The same on node processes the bridge starts.
  await page.check('[data-testid=esp32-on-bridge]');
  await run('on the bridge');
  assert.match(await page.textContent('[data-testid=esp32-diagram]'), /127\.0\.0\.1:\d+/);
  assert.match(await page.textContent('[data-testid=esp32-status]'), /bridge/);
  await page.screenshot({ path: `${SHOTS}/esp32.png`, fullPage: true });
  // A long run on a slow link (one node: 256 tokens of KV cache need more than 300 KiB), stopped
  // after its first tokens: the bridge cancels it.
  await page.fill('[data-testid=esp32-psram]', '8192');
  await page.dispatchEvent('[data-testid=esp32-psram]', 'change');
  await page.selectOption('[data-testid=esp32-link]', '115200');
  await page.fill('[data-testid=esp32-tokens]', '256');
  await page.dispatchEvent('[data-testid=esp32-tokens]', 'change');
  await page.click('[data-testid=esp32-run]');
  await page.waitForFunction(() => (document.querySelector('[data-testid=esp32-text]')?.textContent ?? '').length > 'The kernel runs the model.'.length + 2, null, { timeout: 60_000 });
  await page.click('[data-testid=esp32-stop]');
  await page.waitForSelector('[data-testid=esp32-error]', { timeout: 30_000 });
  assert.match(await page.textContent('[data-testid=esp32-error]'), /cancel/);
  assert.equal(await page.$('[data-testid=esp32-summary]'), null);
  // The 125M dummy layout (I2_S), built in the page, on the fewest 8 MiB nodes that hold it.
  await page.uncheck('[data-testid=esp32-on-bridge]');
  await page.selectOption('[data-testid=esp32-model]', '2');
  await page.selectOption('[data-testid=esp32-link]', '921600');
  await page.fill('[data-testid=esp32-prompt]', 'hello world');
  await page.fill('[data-testid=esp32-tokens]', '4');
  await page.dispatchEvent('[data-testid=esp32-tokens]', 'change');
  await page.click('[data-testid=esp32-run]');
  await page.waitForSelector('[data-testid=esp32-summary]', { timeout: 180_000 });
  assert.equal((await page.$$('[data-testid=esp32-node]')).length, 4);
  assert.equal((await page.$$('[data-testid=esp32-block]')).length, 11);
  const big = await page.$eval('[data-testid=esp32-summary]', (e) => ({ ...e.dataset }));
  assert.equal(big.tokens, '4', JSON.stringify(big));
  console.log(`# ESP32 cluster (in the page, 125M I2_S): ${await page.textContent('[data-testid=esp32-summary]')}`);
  // A file from the bridge's models directory goes to the bridge; SmolLM2 is no BitNet model.
  if (MODELS_DIR) {
    const file = await page.$eval('[data-testid=esp32-model]', (s) => [...s.options].find((o) => o.text.toLowerCase().includes('smollm2'))?.value);
    assert.ok(file, 'the models directory\'s files are offered');
    await page.selectOption('[data-testid=esp32-model]', file);
    await page.click('[data-testid=esp32-run]');
    await page.waitForSelector('[data-testid=esp32-error]', { timeout: 60_000 });
    assert.match(await page.textContent('[data-testid=esp32-error]'), /not a BitNet model/);
  }
  // Too little PSRAM for one block: refused with the numbers, nothing runs.
  await page.selectOption('[data-testid=esp32-model]', '0');
  await page.fill('[data-testid=esp32-psram]', '64');
  await page.dispatchEvent('[data-testid=esp32-psram]', 'change');
  await page.click('[data-testid=esp32-run]');
  await page.waitForSelector('[data-testid=esp32-error]', { timeout: 60_000 });
  assert.match(await page.textContent('[data-testid=esp32-error]'), /PSRAM/);
  page.assertNoErrors();
  await page.close();
});

test('eBPF tab: a run in the kernel streams tokens, a timeline of BPF calls, totals and verifier counts', async (t) => {
  const expected = await probe();
  if (!expected.ebpf.available) {
    t.skip(`this host cannot load BPF programs: ${expected.ebpf.detail}`);
    return;
  }
  const page = await open(browser, `?token=${TOKEN}`, '#ebpf');
  await bridgeState(page, 'connected');
  // The bridge's model list arrives; the tiny random model is always offered, last.
  await page.waitForSelector('[data-testid=ebpf-model][data-loaded=true]', { state: 'attached' });
  await page.selectOption('[data-testid=ebpf-model]', 'tiny random Qwen3');
  assert.match(await page.textContent('[data-testid=ebpf-heading]'), /a Qwen3 forward pass/);
  await page.fill('[data-testid=ebpf-ids]', '7, 300, 12');
  await page.fill('[data-testid=ebpf-n]', '6');
  await page.dispatchEvent('[data-testid=ebpf-n]', 'change');
  await page.click('[data-testid=ebpf-run]');
  await page.waitForFunction(() => /^done: /.test(document.querySelector('[data-testid=ebpf-summary]').textContent), null, { timeout: 60_000 });
  const summary = await page.textContent('[data-testid=ebpf-summary]');
  // What the bridge reported loading names the architecture too (it once read "a 1) forward pass").
  assert.match(await page.textContent('[data-testid=ebpf-heading]'), /a Qwen3 forward pass/);
  const calls = Number(/([0-9]+) BPF calls\/token/.exec(summary)[1]);
  assert.ok(calls > 0, summary);
  // 3 prompt ids and 6 generated: one token event per position but the last.
  const tokens = await page.$$eval('[data-testid=ebpf-token]', (ts) => ts.map((t) => t.dataset.prompt));
  assert.deepEqual(tokens, ['true', 'true', 'false', 'false', 'false', 'false', 'false', 'false']);
  // The selected position's timeline has one span per BPF call of that token.
  const spans = await page.$$('[data-testid=timeline-span]');
  assert.ok(spans.length > 0 && spans.length <= calls, `${spans.length} spans, ${calls} calls`);
  // Zoom: ×4 shows a quarter of the token's time, centred, with fewer or as many spans; panning
  // moves the window's start; reset restores the whole token.
  const axis = () => page.$$eval('[data-testid=timeline-axis] span', (s) => s.map((e) => e.textContent));
  const whole = await axis(); // the token's first call's start to its last call's end
  await page.click('[data-testid=timeline-zoom-in]');
  await page.click('[data-testid=timeline-zoom-in]');
  assert.equal(await page.textContent('[data-testid=timeline-zoom]'), '×4');
  const zoomed = await axis();
  assert.notEqual(zoomed[0], whole[0], zoomed.join());
  assert.ok((await page.$$('[data-testid=timeline-span]')).length <= spans.length);
  await page.click('[data-testid=timeline-pan-left]');
  assert.notDeepEqual(await axis(), zoomed);
  await page.click('[data-testid=timeline-zoom-reset]');
  assert.deepEqual(await axis(), whole);
  // The kernel's top-5 beside the f32 reference's; the largest logits agree to the golden model's error.
  const top = await page.$$eval('[data-testid=ebpf-top-row]', (rows) => rows.map((r) => [...r.children].map((c) => Number(c.textContent))));
  assert.equal(top.length, 5);
  assert.ok(Math.abs(top[0][1] - top[0][3]) < 0.05, JSON.stringify(top));
  const ops = await page.$$eval('[data-testid=ebpf-op-total] td:first-child', (tds) => tds.map((t) => t.textContent));
  assert.ok(ops.includes('attention') && ops.some((o) => o.startsWith('q|k|v')), ops.join());
  // The totals as bars: kernel and wall time per operator, as the table says.
  const kernelMs = await page.$$eval('[data-testid=ebpf-op-total] td:nth-child(3)', (tds) => tds.map((t) => Number(t.textContent)));
  const bars = await chart(page, 'ebpf-op-chart');
  assert.deepEqual(bars.groups, ops);
  // Long operator names wrap within their group: no label runs into its neighbour.
  for (let i = 1; i < bars.labelBoxes.length; i++) {
    assert.ok(!overlaps(bars.labelBoxes[i - 1], bars.labelBoxes[i]), `${ops[i - 1]} / ${ops[i]}: ${JSON.stringify(bars.labelBoxes)}`);
  }
  assert.equal(bars.bars.length, 2 * ops.length);
  for (const b of bars.bars.filter((b) => b.series === 0)) {
    assert.ok(Math.abs(b.value - kernelMs[b.group]) <= 0.006, `${ops[b.group]}: ${b.value} vs ${kernelMs[b.group]}`);
  }
  const verifier = await page.$$eval('[data-testid=ebpf-verifier] td:last-child', (tds) => tds.map((t) => Number(t.textContent)));
  assert.ok(verifier.length >= 6 && verifier.every((n) => n > 0), verifier.join());
  await page.screenshot({ path: `${SHOTS}/ebpf-run.png`, fullPage: true });
  // Bad input is refused in the page, by name.
  await page.fill('[data-testid=ebpf-ids]', '7, x');
  await page.click('[data-testid=ebpf-run]');
  assert.match(await page.textContent('[data-testid=ebpf-summary]'), /"x" is not a token id/);
  page.assertNoErrors();
  await page.close();
});

test('eBPF tab: the real SmolLM2 answers a text prompt, every multiply in the kernel', async (t) => {
  const expected = await probe();
  if (!expected.ebpf.available || !MODELS_DIR) {
    t.skip(!MODELS_DIR ? 'no models directory (cargo xtask test provides SmolLM2)' : expected.ebpf.detail);
    return;
  }
  const page = await open(browser, `?token=${TOKEN}`, '#ebpf');
  await bridgeState(page, 'connected');
  // SmolLM2 is the default once the bridge's list arrives.
  await page.waitForSelector('[data-testid=ebpf-model][data-loaded=true]', { state: 'attached' });
  await page.waitForFunction(() => /smollm2/i.test(document.querySelector('[data-testid=ebpf-model]').value), null, { timeout: 10_000 });
  // The heading names what runs: SmolLM2 is a llama.
  assert.match(await page.textContent('[data-testid=ebpf-heading]'), /a llama forward pass/);
  await page.fill('[data-testid=ebpf-text]', 'The capital of France is');
  await page.uncheck('[data-testid=ebpf-chat]');
  await page.fill('[data-testid=ebpf-n]', '3');
  await page.dispatchEvent('[data-testid=ebpf-n]', 'change');
  await page.click('[data-testid=ebpf-run]');
  await page.waitForFunction(() => /^done: /.test(document.querySelector('[data-testid=ebpf-summary]').textContent), null, { timeout: 120_000 });
  assert.match(await page.textContent('[data-testid=ebpf-summary]'), /GGUF llama: 30 layers/);
  assert.match(await page.textContent('[data-testid=ebpf-heading]'), /a llama forward pass/);
  // The prompt as the model's tokenizer split it, and the answer's tokens as text.
  assert.equal(await page.textContent('[data-testid=ebpf-prompt]'), 'The␣capital␣of␣France␣is');
  const answer = await page.$$eval('[data-testid=ebpf-token][data-prompt=false]', (ts) => ts.map((t) => t.textContent).join(''));
  assert.ok(answer.startsWith('␣Paris'), answer);
  await page.screenshot({ path: `${SHOTS}/ebpf-smollm2.png`, fullPage: true });
  page.assertNoErrors();
  await page.close();
});

test('qwenGPU tab: a suite kernel lowers and runs in the page, stepped warp-block by warp-block', async () => {
  // No bridge needed: the page lowers the PTX and runs the interpreter itself.
  const page = await open(browser, '', '#qwengpu');
  await page.waitForSelector('[data-testid=qwengpu-tab]');
  // The register panel has its full width before a run and after: r0 … r14 side by side on one
  // row, the caption on one line.
  const registersLaidOut = async () => {
    const heads = await page.$$eval('[data-testid=qwengpu-reg-head]', (h) => h.map((e) => e.getBoundingClientRect().top));
    assert.equal(heads.length, 15);
    assert.ok(heads.every((y) => Math.abs(y - heads[0]) < 1), `register columns wrap: ${heads.join()}`);
    const caption = await (await page.$('[data-testid=qwengpu-registers] caption')).boundingBox();
    assert.ok(caption.height < 24, `caption on ${caption.height} px`);
  };
  await registersLaidOut();
  const options = await page.$$eval('[data-testid=qwengpu-kernel] option', (o) => o.map((e) => e.textContent));
  assert.ok(options.length >= 49, `${options.length} kernels`);
  await page.selectOption('[data-testid=qwengpu-kernel]', { label: 'bitonic_sort' });
  await page.click('[data-testid=qwengpu-run]');
  const summary = await page.textContent('[data-testid=qwengpu-summary]');
  assert.match(summary, /steps on the interpreter; [0-9]+ ROM blocks of 32; outputs equal the plain Rust version/);
  // The stepper shows the first step: warp 0 ran block 0 with all its lanes; 4 lanes of 15 registers.
  assert.match(await page.textContent('[data-testid=qwengpu-step]'), /step 0: warp 0 ran block 0 with lanes ■■■■/);
  assert.equal((await page.$$('[data-testid=qwengpu-lane]')).length, 4);
  await registersLaidOut();
  assert.ok((await page.$$('[data-testid=qwengpu-rom-block]')).length > 4);
  await page.screenshot({ path: `${SHOTS}/qwengpu-bitonic.png`, fullPage: true });
  // Edited PTX the machine cannot run is refused by line.
  await page.click('summary:has-text("PTX (editable)")');
  const ptx = await page.inputValue('[data-testid=qwengpu-ptx]');
  await page.fill('[data-testid=qwengpu-ptx]', ptx.replace('ld.global.u32', 'ld.local.u32'));
  await page.click('[data-testid=qwengpu-run]');
  assert.match(await page.textContent('[data-testid=qwengpu-summary]'), /PTX line [0-9]+: .*without a local array/);
  page.assertNoErrors();
  await page.close();
});

test('qwenGPU tab: edited CUDA compiles on the host through the bridge, and the page lowers and runs it', async () => {
  const page = await open(browser, `?token=${TOKEN}`, '#qwengpu');
  await bridgeState(page, 'connected');
  await page.selectOption('[data-testid=qwengpu-kernel]', { label: 'vadd' });
  // vadd computes c = a + b; the edit makes it c = a - b, so the outputs must now differ.
  const cuda = await page.inputValue('[data-testid=qwengpu-cuda]');
  assert.ok(cuda.includes('a[i] + b[i]'), cuda);
  await page.fill('[data-testid=qwengpu-cuda]', cuda.replaceAll('a[i] + b[i]', 'a[i] - b[i]'));
  await page.click('[data-testid=qwengpu-cuda-compile]');
  await page.waitForFunction(() => document.querySelector('[data-testid=qwengpu-cuda-status]').textContent.includes('compiled by'));
  await page.click('summary:has-text("PTX (editable)")');
  assert.match(await page.inputValue('[data-testid=qwengpu-ptx]'), /sub\.s32/);
  await page.click('[data-testid=qwengpu-run]');
  assert.match(await page.textContent('[data-testid=qwengpu-summary]'), /outputs DIFFER from the plain Rust version/);
  // A source that would make the host read another file is refused by the bridge.
  await page.fill('[data-testid=qwengpu-cuda]', '#include "/etc/passwd"\n');
  await page.click('[data-testid=qwengpu-cuda-compile]');
  await page.waitForFunction(() => document.querySelector('[data-testid=qwengpu-cuda-status]').textContent.includes('only'));
  assert.match(await page.textContent('[data-testid=qwengpu-cuda-status]'), /line 1: only `#include "qwengpu.h"` may be included/);
  page.assertNoErrors();
  await page.close();
});

test('qwenGPU tab: a conversation with the spliced model launches a kernel through the bridge', async (t) => {
  const page = await open(browser, `?token=${TOKEN}`, '#qwengpu');
  await bridgeState(page, 'connected');
  await page.waitForSelector('[data-testid=qwengpu-chat-model][data-loaded=true]', { state: 'attached' });
  // The tiny random llama needs no download (its text is noise; its machine is the same).
  await page.selectOption('[data-testid=qwengpu-chat-model]', 'tiny random llama');
  await page.selectOption('[data-testid=qwengpu-kernel]', { label: 'reverse' });
  await page.click('[data-testid=qwengpu-chat-run-kernel]');
  assert.equal(await page.inputValue('[data-testid=qwengpu-chat-turn]'), '/run reverse');
  await page.fill('[data-testid=qwengpu-chat-max]', '6');
  await page.dispatchEvent('[data-testid=qwengpu-chat-max]', 'change');
  await page.click('[data-testid=qwengpu-chat-send]');
  const done = () => page.waitForFunction(
    () => /^done: |Error|Busy|BadRequest|Internal/.test(document.querySelector('[data-testid=qwengpu-chat-status]').textContent),
    null,
    { timeout: 180_000 },
  );
  await done();
  assert.match(await page.textContent('[data-testid=qwengpu-chat-status]'), /^done: [0-9]+ positions in the context/);
  const summary = await page.textContent('[data-testid=qwengpu-chat-launch-summary]');
  assert.match(summary, /^reverse: [0-9]+ steps, [0-9]+ tokens \([0-9]+ records and VAL tokens chosen by the model's argmax, the last its end record: warp 5 block 0 lanes 0000\); the arrays are the suite's plain Rust ones/);
  t.diagnostic(summary);
  // Machine tokens and text tokens are told apart, and so are the host's and the model's.
  assert.ok((await page.$$('[data-testid=qwengpu-chat-launch] .tok.val.model')).length > 20);
  assert.ok((await page.$$('[data-testid=qwengpu-chat-launch] .tok.record')).length > 0);
  assert.ok((await page.$$('[data-testid=qwengpu-chat-turn-view] .tok.text.host')).length > 5);
  assert.ok((await page.$$('[data-testid=qwengpu-chat-reply-tokens] .tok.text.model')).length > 0);
  assert.match(await page.textContent('[data-testid=qwengpu-chat-arrays]'), /^The kernel reverse ran in [0-9]+ steps and left array 1 = \[/);
  // The step table holds every step; the rows decoded from the DeltaNet states fill the table.
  const steps = Number(/([0-9]+) steps/.exec(summary)[1]);
  assert.ok(steps > 10, summary);
  const rows = await page.$$eval('[data-testid=qwengpu-chat] .vtable-row', (r) => r.map((e) => e.textContent));
  assert.ok(rows.length > 5 && rows[0].startsWith('1'), rows.join(' | '));
  assert.ok((await page.$$('[data-testid=qwengpu-chat-row]')).length >= 4);
  assert.equal((await page.textContent('[data-testid=qwengpu-chat-rows]')).includes('✗'), false);
  // After the launch every lane's PC row says it exited.
  const pcs = await page.$$eval('[data-testid=qwengpu-chat-pc]', (c) => c.map((e) => e.textContent));
  assert.ok(pcs.length >= 4 && pcs.every((p) => p === 'exited'), pcs.join(' '));
  // The conversation goes on in the same context.
  await page.fill('[data-testid=qwengpu-chat-turn]', 'thanks');
  await page.click('[data-testid=qwengpu-chat-send]');
  await done();
  assert.equal((await page.$$('[data-testid=qwengpu-chat-turn-view]')).length, 2);
  await page.screenshot({ path: `${SHOTS}/qwengpu-chat.png`, fullPage: true });
  page.assertNoErrors();
  await page.close();
});

test('qwenGPU tab: a kernel runs on the compiled layers in the page, state rows beside the interpreter', async (t) => {
  const page = await open(browser, '', '#qwengpu');
  await page.waitForSelector('[data-testid=qwengpu-tab]');
  // warp_scan has shuffles (two passes over the lanes) and divergence.
  await page.selectOption('[data-testid=qwengpu-kernel]', { label: 'warp_scan' });
  await page.selectOption('[data-testid=qwengpu-design]', 'first');
  await page.click('[data-testid=qwengpu-layers-run]');
  await page.waitForFunction(
    () => /decoder layers|error|refused/.test(document.querySelector('[data-testid=qwengpu-layers-summary]').textContent),
    null,
    { timeout: 120_000 },
  );
  const summary = await page.textContent('[data-testid=qwengpu-layers-summary]');
  assert.match(summary, /decoder layers \(9 Gated DeltaNet heads, [0-9]+ SwiGLU MLPs/);
  assert.match(summary, /bit-exact with the interpreter after every step; outputs equal the plain Rust version/);
  const speed = await page.textContent('[data-testid=qwengpu-layers-speed]');
  assert.match(speed, /[0-9]+ steps\/s, [0-9]+ tokens\/s/);
  t.diagnostic(`warp_scan on the compiled layers in the page: ${speed}`);
  const rate = await chart(page, 'qwengpu-speed-chart');
  assert.deepEqual(rate.groups, ['warp_scan']);
  assert.equal(rate.bars.length, 1);
  const said = Number(/([0-9]+) steps\/s/.exec(speed)[1]);
  assert.ok(Math.abs(rate.bars[0].value - said) <= 0.5 + 1e-3 * said, `${rate.bars[0].value} vs ${said}`);
  assert.match(await page.textContent('[data-testid=qwengpu-layers-step]'), /step 0: warp 0 ran block 0 with lanes ■■■■/);
  assert.equal((await page.$$('[data-testid=qwengpu-layers-lane]')).length, 4);
  assert.equal((await page.$$('[data-testid=qwengpu-layers-registers] td.differs')).length, 0);
  // Step to the end: every step's EXEC tokens are listed; some step writes registers.
  const steps = Number((await page.textContent('[data-testid=qwengpu-layers] [data-testid=step-position]')).split('/')[1]);
  assert.ok(steps > 10, `${steps} steps`);
  let changed = 0;
  for (let i = 1; i < steps; i++) {
    await page.click('[data-testid=qwengpu-layers] [data-testid=step-next]');
    assert.ok((await page.$$('[data-testid=qwengpu-layers-tokens] li')).length > 0);
    changed += (await page.$$('[data-testid=qwengpu-layers-registers] td.changed')).length;
    assert.equal((await page.$$('[data-testid=qwengpu-layers-registers] td.differs')).length, 0);
  }
  assert.ok(changed > 0);
  assert.match(await page.textContent('[data-testid=qwengpu-layers-tokens]'), /EXEC thread [0-9]+ · ROM [0-9]+\.[0-9] · /);
  assert.match(await page.textContent('[data-testid=qwengpu-layers-rom]'), /row 0 \(block 0 slot 0\): /);
  await page.screenshot({ path: `${SHOTS}/qwengpu-layers.png`, fullPage: true });
  page.assertNoErrors();
  await page.close();
});

test('qwenGPU tab: by default the kernel runs inside a language model, every token its argmax, the rows read back equal to the interpreter', async (t) => {
  const page = await open(browser, '', '#qwengpu');
  await page.waitForSelector('[data-testid=qwengpu-tab]');
  // The second design is the default; warp_broadcast has a shuffle and a store.
  assert.equal(await page.$eval('[data-testid=qwengpu-design]', (s) => s.value), 'second');
  await page.selectOption('[data-testid=qwengpu-kernel]', { label: 'warp_broadcast' });
  await page.click('[data-testid=qwengpu-spliced-run]');
  await page.waitForFunction(
    () => /decoder layers|error|refused|PTX/.test(document.querySelector('[data-testid=qwengpu-spliced-summary]').textContent),
    null,
    { timeout: 300_000 },
  );
  const summary = await page.textContent('[data-testid=qwengpu-spliced-summary]');
  assert.match(summary, /[0-9]+ decoder layers: [0-9]+ compiled \(/);
  assert.match(summary, /vocabulary [0-9]+ text \+ [0-9]+ machine tokens/);
  assert.match(summary, /outputs equal the plain Rust version; after every step the rows read back equal the interpreter's machine/);
  const speed = await page.textContent('[data-testid=qwengpu-spliced-speed]');
  assert.match(speed, /[0-9]+ ms, [0-9.]+ steps\/s, [0-9]+ tokens\/s/);
  t.diagnostic(`warp_broadcast inside the spliced model in the page: ${speed}`);
  const rate = await chart(page, 'qwengpu-speed-chart');
  assert.deepEqual(rate.groups, ['warp_broadcast']);
  assert.equal(rate.bars.length, 1);
  assert.match(await page.textContent('[data-testid=qwengpu-spliced-step]'), /step 0: warp 0 ran block 0 with lanes ■■■■/);
  assert.match(await page.textContent('[data-testid=qwengpu-spliced-tokens]'), /^record: warp 0, block 0, lanes ■■■■/);
  const steps = Number((await page.textContent('[data-testid=qwengpu-spliced] [data-testid=step-position]')).split('/')[1]);
  assert.ok(steps > 2, `${steps} steps`);
  let vals = 0;
  for (let i = 0; i < steps; i++) {
    if (i > 0) await page.click('[data-testid=qwengpu-spliced] [data-testid=step-next]');
    assert.equal((await page.$$('[data-testid=qwengpu-spliced-lane]')).length, 4);
    assert.equal((await page.$$('[data-testid=qwengpu-spliced-registers] .differs')).length, 0);
    vals += (await page.$$eval('[data-testid=qwengpu-spliced-tokens] li', (l) => l.filter((e) => e.textContent.startsWith('VAL ')).length));
    assert.match(await page.textContent('[data-testid=qwengpu-spliced-memory]'), /All 126 words equal the interpreter's/);
  }
  assert.ok(vals > 0, 'the model chose VAL tokens');
  await page.screenshot({ path: `${SHOTS}/qwengpu-spliced.png`, fullPage: true });
  // The tab left and opened again mounts a new panel; it reuses the page's model and runs again.
  await page.click('button[data-tab=bitnet]');
  await page.waitForSelector('main[data-panel=bitnet]');
  await page.click('button[data-tab=qwengpu]');
  await page.waitForSelector('[data-testid=qwengpu-spliced-run]');
  await page.click('[data-testid=qwengpu-spliced-run]');
  await page.waitForFunction(
    () => /decoder layers|error|refused|PTX/.test(document.querySelector('[data-testid=qwengpu-spliced-summary]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.match(await page.textContent('[data-testid=qwengpu-spliced-summary]'), /after every step the rows read back equal the interpreter's machine/);
  // warp_broadcast on WebGPU (the panel mounted again starts on the first kernel): every token
  // chosen by the GPU's argmax, the rows read back after the last step.
  await page.selectOption('[data-testid=qwengpu-kernel]', { label: 'warp_broadcast' });
  await page.waitForSelector('[data-testid=qwengpu-spliced] [data-testid=gpu-status][data-state=ready]', { timeout: 60_000 });
  await page.selectOption('[data-testid=qwengpu-spliced-backend]', 'webgpu');
  await page.click('[data-testid=qwengpu-spliced-run]');
  await page.waitForFunction(
    () => /decoder layers|error|refused|PTX/.test(document.querySelector('[data-testid=qwengpu-spliced-summary]').textContent),
    null,
    { timeout: 300_000 },
  );
  const onGpu = await page.textContent('[data-testid=qwengpu-spliced-summary]');
  assert.match(onGpu, /argmax on WebGPU \(.+\), one submission a token/);
  assert.match(onGpu, /outputs equal the plain Rust version; after the last step the rows read back equal the interpreter's machine/);
  const gpuSpeed = await page.textContent('[data-testid=qwengpu-spliced-speed]');
  assert.match(gpuSpeed, /^on WebGPU .*: [0-9]+ ms, [0-9.]+ steps\/s, [0-9]+ tokens\/s/);
  t.diagnostic(`warp_broadcast inside the spliced model on WebGPU in the page: ${gpuSpeed}`);
  // A bar in the second design's WebGPU series (the chart's second).
  assert.ok((await chart(page, 'qwengpu-speed-chart')).bars.some((b) => b.series === 1));
  assert.match(await page.textContent('[data-testid=qwengpu-spliced-lane]'), /rows not read back at this step/);
  assert.match(await page.textContent('[data-testid=qwengpu-spliced-memory]'), /not read back at this step/);
  const at = () => page.textContent('[data-testid=qwengpu-spliced] [data-testid=step-position]');
  assert.equal(await at(), `step 1 / ${steps}`);
  for (let i = 1; i < steps; i++) await page.click('[data-testid=qwengpu-spliced] [data-testid=step-next]');
  assert.equal(await at(), `step ${steps} / ${steps}`);
  assert.equal((await page.$$('[data-testid=qwengpu-spliced-lane]')).length, 4);
  assert.equal((await page.$$('[data-testid=qwengpu-spliced-registers] .differs')).length, 0);
  assert.match(await page.textContent('[data-testid=qwengpu-spliced-memory]'), /All 126 words equal the interpreter's/);
  await page.screenshot({ path: `${SHOTS}/qwengpu-spliced-webgpu.png`, fullPage: true });
  page.assertNoErrors();
  await page.close();
});

test('qwenGPU tab: the compiled layers run on WebGPU too, bit-exact with the interpreter', async (t) => {
  const page = await open(browser, '', '#qwengpu');
  await page.waitForSelector('[data-testid=qwengpu-tab]');
  await page.selectOption('[data-testid=qwengpu-kernel]', { label: 'vadd' });
  await page.selectOption('[data-testid=qwengpu-design]', 'first');
  await page.waitForSelector('[data-testid=qwengpu-layers] [data-testid=gpu-status][data-state=ready]', { timeout: 60_000 });
  await page.selectOption('[data-testid=qwengpu-layers-backend]', 'webgpu');
  await page.click('[data-testid=qwengpu-layers-run]');
  await page.waitForFunction(
    () => /decoder layers|error|refused|WebGPU:/.test(document.querySelector('[data-testid=qwengpu-layers-summary]').textContent),
    null,
    { timeout: 300_000 },
  );
  const summary = await page.textContent('[data-testid=qwengpu-layers-summary]');
  assert.match(summary, /bit-exact with the interpreter after every step; outputs equal the plain Rust version/);
  const speed = await page.textContent('[data-testid=qwengpu-layers-speed]');
  assert.match(speed, /^on WebGPU \(.+\), without the check, up to 256 tokens per submission: [0-9]+ ms, [0-9]+ steps\/s, [0-9]+ tokens\/s/);
  assert.match(speed, /GPU time \(timestamp queries\) [0-9.]+ ms|no timestamp queries/);
  t.diagnostic(`vadd on the compiled layers on WebGPU (SwiftShader): ${speed}`);
  assert.equal((await page.$$('[data-testid=qwengpu-layers-registers] td.differs')).length, 0);
  await page.screenshot({ path: `${SHOTS}/qwengpu-layers-webgpu.png`, fullPage: true });
  page.assertNoErrors();
  await page.close();
});

test('websockets without the token or from another origin are refused', async () => {
  const page = await open(browser);
  await bridgeState(page, 'connected');
  const direct = `ws://127.0.0.1:${BRIDGE_PORT}/ws`;
  const proxied = `${WEB.replace('http', 'ws')}/ws`;

  // Control: from the playground's origin with the token, the bridge says hello.
  const ok = await tryWebSocket(page, `${direct}?token=${TOKEN}`);
  assert.deepEqual([ok.opened, ok.frames[0]], [true, 'hello']);
  // No token, or a wrong one: refused at the upgrade (never opens), or through trunk's proxy
  // the upgrade to the bridge fails and not a single frame arrives.
  for (const query of ['', '?token=0000000000000000000000000000dead']) {
    const d = await tryWebSocket(page, `${direct}${query}`);
    assert.equal(d.opened, false, JSON.stringify(d));
    const p = await tryWebSocket(page, `${proxied}${query}`);
    assert.deepEqual(p.frames, [], JSON.stringify(p));
  }

  // Another origin, even holding the token: refused.
  const evil = http.createServer((_, res) => res.end('<!doctype html><title>elsewhere</title>'));
  await new Promise((r) => evil.listen(0, '127.0.0.1', r));
  const other = await browser.newPage();
  await other.goto(`http://127.0.0.1:${evil.address().port}/`);
  const d = await tryWebSocket(other, `${direct}?token=${TOKEN}`);
  assert.equal(d.opened, false, JSON.stringify(d));
  const p = await tryWebSocket(other, `${proxied}?token=${TOKEN}`);
  assert.deepEqual(p.frames, [], JSON.stringify(p));
  await other.close();
  evil.close();
  await page.close();
});

test('the page works without the bridge and reconnects when it returns', async () => {
  // No token at all: the bridge is absent, and browser-only tabs still work.
  const lone = await browser.newPage();
  await lone.goto(`${WEB}/#components`);
  await bridgeState(lone, 'absent');
  assert.match(await lone.textContent('[data-testid=bridge-status]'), /no session token/);
  await lone.waitForSelector('[data-testid=components-page]');
  await lone.click('[data-testid=step-next]');
  assert.equal(await lone.textContent('[data-testid=step-position]'), 'step 2 / 200');
  await lone.close();

  const page = await open(browser);
  await bridgeState(page, 'connected');
  await stopBridge(bridge);
  await bridgeState(page, 'reconnecting');
  await page.click('button[data-tab=components]');
  await page.waitForSelector('[data-testid=components-page]');
  await page.screenshot({ path: `${SHOTS}/bridge-reconnecting.png` });
  bridge = await startBridge();
  await bridgeState(page, 'connected', 30_000);
  page.assertNoErrors();
  await page.close();
});

test('Without WebGPU the tabs say so and benchmark on wasm only', async () => {
  const plain = await launch({ webgpu: false });
  try {
    const page = await open(plain, '', '#bitnet');
    await page.waitForSelector('[data-testid=gpu-status][data-state=unavailable]', { timeout: 30_000 });
    assert.match(await page.textContent('[data-testid=gpu-status]'), /not available in this browser .*wasm only/);
    await page.click('[data-testid=bench-run]');
    await page.waitForSelector('[data-testid=bench-results]', { timeout: 60_000 });
    const backends = await page.$$eval('[data-testid=bench-results] tbody tr', (rows) => rows.map((r) => r.dataset.backend));
    assert.deepEqual(backends, ['scalar', 'simd128']);
    assert.equal(await page.$eval('[data-testid=bench-backend] option[value=webgpu]', (o) => o.disabled), true);
    page.assertNoErrors();
    await page.close();
    // The qwenGPU tab offers WebGPU only where there is an adapter.
    const q = await open(plain, '', '#qwengpu?design=first');
    await q.waitForSelector('[data-testid=qwengpu-layers] [data-testid=gpu-status][data-state=unavailable]', { timeout: 30_000 });
    assert.equal(await q.$eval('[data-testid=qwengpu-layers-backend] option[value=webgpu]', (o) => o.disabled), true);
    q.assertNoErrors();
    await q.close();
  } finally {
    await plain.close();
  }
});
