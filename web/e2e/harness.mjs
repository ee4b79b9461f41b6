// Shared pieces of the end-to-end tests: the bridge process, the browser, small page helpers.
// `cargo xtask test` serves the playground (trunk serve) and passes these variables.

import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chromium } from 'playwright-core';
import assert from 'node:assert/strict';

export const WEB = process.env.E2E_WEB_URL ?? 'http://127.0.0.1:18080';
export const BRIDGE_PORT = Number(process.env.E2E_BRIDGE_PORT ?? 18787);
export const NATIVE_HOST = process.env.NATIVE_HOST_BIN ?? '../../target/debug/native-host';
export const SHOTS = process.env.E2E_SCREENSHOTS ?? '../../target/e2e/screenshots';
export const TOKEN = randomBytes(16).toString('hex');
/** The bridge's models directory (the fetched SmolLM2), where `cargo xtask test` provides one. */
export const MODELS_DIR = process.env.E2E_MODELS_DIR;

/** Starts `native-host serve` on the e2e port, allowing the page's origin; resolves once listening. */
export function startBridge() {
  const models = MODELS_DIR ? ['--models-dir', MODELS_DIR] : [];
  const proc = spawn(NATIVE_HOST, ['serve', '--bind', `127.0.0.1:${BRIDGE_PORT}`, '--allow-origin', WEB, ...models], {
    env: { ...process.env, NATIVE_HOST_TOKEN: TOKEN },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`bridge did not start:\n${out}`)), 30_000);
    proc.stdout.on('data', (d) => {
      out += d;
      if (out.includes('listening on ')) {
        clearTimeout(timer);
        resolve(proc);
      }
    });
    proc.stderr.on('data', (d) => { out += d; });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`bridge exited (${code}):\n${out}`)); });
  });
}

export function stopBridge(proc) {
  if (!proc || proc.exitCode !== null) return Promise.resolve();
  return new Promise((resolve) => { proc.once('exit', resolve); proc.kill('SIGTERM'); });
}

/** `native-host probe`: the capabilities the page must show, from the same binary, independently. */
export function probe() {
  return new Promise((resolve, reject) => {
    const p = spawn(NATIVE_HOST, ['probe']);
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    p.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`probe exited ${code}`))));
  });
}

/**
 * Headless Chromium. WebGPU is on (SwiftShader's Vulkan on a machine without a GPU) unless
 * `webgpu: false`, which gives a browser without an adapter: the tabs must say so and use wasm.
 */
export function launch({ webgpu = true } = {}) {
  const common = ['--no-sandbox', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'];
  const gpu = webgpu
    ? ['--enable-unsafe-webgpu', '--enable-features=Vulkan', '--use-webgpu-adapter=swiftshader']
    : ['--disable-gpu', '--disable-features=WebGPU'];
  return chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: [...common, ...gpu] });
}

/** Opens the playground and fails on any uncaught page error (a Rust panic shows up as one). */
export async function open(browser, query = `?token=${TOKEN}`, hash = '') {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error' && /panicked/.test(m.text())) errors.push(m.text()); });
  await page.goto(`${WEB}/${query}${hash}`);
  page.assertNoErrors = () => assert.deepEqual(errors, []);
  return page;
}

export async function bridgeState(page, state, timeout = 20_000) {
  await page.waitForSelector(`[data-testid=bridge-status][data-state=${state}]`, { timeout });
}

/**
 * Opens a websocket from inside `page` and reports what happened within 4 s:
 * whether it opened, the frames it got, and how it closed.
 */
export function tryWebSocket(page, url) {
  return page.evaluate((url) => new Promise((resolve) => {
    const r = { opened: false, frames: [], closeCode: null };
    const ws = new WebSocket(url);
    ws.onopen = () => {
      r.opened = true;
      ws.send(JSON.stringify({ type: 'hello', protocol: 1, client: 'e2e' }));
    };
    ws.onmessage = (e) => r.frames.push(JSON.parse(e.data).type);
    ws.onclose = (e) => { r.closeCode = e.code; resolve(r); };
    setTimeout(() => { ws.close(); resolve(r); }, 4000);
  }), url);
}

/** What the chart `testid` draws: its bars, points and group labels, with the values they carry. */
export function chart(page, testid) {
  return page.$eval(`[data-testid=${testid}]`, (fig) => ({
    bars: [...fig.querySelectorAll('[data-testid=chart-bar]')].map((b) => ({
      group: Number(b.dataset.group), series: Number(b.dataset.series), value: Number(b.dataset.value), height: Number(b.getAttribute('height')),
    })),
    points: [...fig.querySelectorAll('[data-testid=chart-point]')].map((p) => ({
      series: Number(p.dataset.series), x: Number(p.dataset.x), value: Number(p.dataset.value),
    })),
    groups: [...fig.querySelectorAll('[data-testid=chart-group]')].map((g) => g.dataset.label),
    // Where each group's label is drawn, to check that none runs into another.
    labelBoxes: [...fig.querySelectorAll('[data-testid=chart-group]')].map((g) => {
      const r = g.getBoundingClientRect();
      return { x: r.x, y: r.y, width: r.width, height: r.height };
    }),
  }));
}

/** Whether two bounding boxes share any area. */
export function overlaps(a, b) {
  return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
}

/** The rate of a run from its per-token rates: tokens over the sum of their times. */
export function harmonicMean(rates) {
  return rates.length / rates.reduce((s, r) => s + 1 / r, 0);
}
