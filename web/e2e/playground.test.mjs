// The playground and the bridge, end to end, in headless Chromium.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { mkdirSync } from 'node:fs';
import {
  WEB, BRIDGE_PORT, TOKEN, SHOTS, startBridge, stopBridge, probe, launch, open, bridgeState, tryWebSocket,
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

test('tabs switch, each says honestly what it is, and a screenshot of each is saved', async () => {
  const page = await open(browser);
  await bridgeState(page, 'connected');
  for (const tab of ['bitnet', 'qwengpu', 'ebpf', 'esp32', 'components']) {
    await page.click(`button[data-tab=${tab}]`);
    await page.waitForSelector(`main[data-panel=${tab}]`);
    assert.equal(await page.getAttribute(`button[data-tab=${tab}]`, 'aria-selected'), 'true');
    if (tab === 'components') {
      await page.waitForSelector('[data-testid=components-page]');
    } else {
      assert.match(await page.textContent('[data-testid=empty-state]'), /Not built yet/);
    }
    if (tab === 'ebpf') {
      const expected = await probe();
      assert.ok((await page.textContent('[data-testid=ebpf-host]')).includes(expected.ebpf.detail));
    }
    assert.ok(page.url().endsWith(`#${tab}`), page.url());
    await page.screenshot({ path: `${SHOTS}/tab-${tab}.png`, fullPage: true });
  }
  // A deep link opens its tab.
  const deep = await open(browser, `?token=${TOKEN}`, '#esp32');
  await deep.waitForSelector('main[data-panel=esp32]');
  page.assertNoErrors();
  deep.assertNoErrors();
  await deep.close();
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
