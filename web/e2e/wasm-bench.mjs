// `cargo xtask wasm-bench`: the BitNet tab's benchmark button for every format on the 125M layout's
// GEMV shapes, in headless Chromium; prints one table. The numbers are the page's own (measured
// with performance.now() inside the tab), read back from its results table.

import { launch, open } from './harness.mjs';

const SHAPES = ['768×3072', '3072×768', '768×768'];
const browser = await launch();
const page = await open(browser, '', '#bitnet');
await page.waitForSelector('[data-testid=bitnet-tab]');
const options = await page.$$eval('[data-testid=bitnet-shape] option', (os) => os.map((o) => [o.value, o.textContent]));
console.log('shape      format  scalar Gw/s  simd128 Gw/s  simd128/scalar  outputs identical');
for (const format of ['TL1', 'TL2', 'I2_S']) {
  for (const shape of SHAPES) {
    const value = options.find(([, text]) => text.startsWith(shape))?.[0];
    if (value === undefined) throw new Error(`the tab offers no ${shape} shape`);
    await page.selectOption('[data-testid=bitnet-format]', format);
    await page.selectOption('[data-testid=bitnet-shape]', value);
    await page.click('[data-testid=bench-run]');
    await page.waitForSelector('[data-testid=bench-results]', { timeout: 300_000 });
    const rows = await page.$$eval('[data-testid=bench-results] tbody tr', (rs) => rs.map((r) => ({
      backend: r.dataset.backend,
      ratio: r.dataset.ratio,
      gws: r.querySelector('[data-testid=bench-gws]').textContent,
      identical: r.querySelector('[data-testid=bench-identical]').textContent,
    })));
    const [scalar, simd] = rows;
    console.log(`${shape.padEnd(10)} ${format.padEnd(6)}  ${scalar.gws.padStart(11)}  ${simd.gws.padStart(12)}  ${simd.ratio.padStart(14)}  ${simd.identical}`);
  }
}
await browser.close();
