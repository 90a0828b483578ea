// run_code: Python on a Jupyter kernel (Debian's python3-ipykernel), state kept in the
// default context, stdout, errors and a matplotlib figure as an MCP image.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { call, closeClient, daemonFor } from './lib.mjs';

describe('run_code', () => {
  const d = daemonFor({ before, after });
  let c;
  before(async () => {
    c = await d.client();
  });
  after(async () => {
    await closeClient(c);
  });

  const run = (code, extra = {}) => call(c, 'run_code', { code, ...extra }, { timeout: 60000 });

  it('x = 21, then x * 2 is 42 in the same default context', async () => {
    const a = await run('x = 21');
    assert.ok(!a.isError, JSON.stringify(a));
    const b = await run('x * 2');
    assert.ok(!b.isError, JSON.stringify(b));
    assert.equal(b.structuredContent.text, '42');
    assert.ok(b.content.some((x) => x.type === 'text' && x.text.includes('42')), JSON.stringify(b.content));
    assert.equal(typeof b.structuredContent.execution_count, 'number');
    assert.ok(b.structuredContent.execution_count > a.structuredContent.execution_count,
      `execution counts ${a.structuredContent.execution_count}, ${b.structuredContent.execution_count}`);
  });

  it('language python by name; stdout and stderr apart', async () => {
    const r = await run('import sys\nprint("to out")\nprint("to err", file=sys.stderr)', { language: 'python' });
    assert.ok(!r.isError, JSON.stringify(r));
    assert.equal(r.structuredContent.stdout, 'to out\n');
    assert.equal(r.structuredContent.stderr, 'to err\n');
  });

  it('an exception: isError, its name, value and traceback; the state survives', async () => {
    const r = await run('1 / 0');
    assert.equal(r.isError, true, JSON.stringify(r));
    const e = r.structuredContent.error;
    assert.equal(e?.name, 'ZeroDivisionError', JSON.stringify(r.structuredContent));
    assert.match(e.value, /division by zero/);
    assert.ok(Array.isArray(e.traceback) ? e.traceback.join('\n').length : String(e.traceback).length);
    assert.ok(!/\x1b\[/.test(JSON.stringify(e.traceback)), 'no terminal colours in the traceback');
    const after = await run('x + 1');
    assert.equal(after.structuredContent?.text, '22', JSON.stringify(after));
  });

  it('runs as the command user in the workspace', { skip: process.getuid() !== 0 && 'not root' }, async () => {
    const r = await run('import os\n(os.getuid(), os.getcwd())');
    assert.ok(!r.isError, JSON.stringify(r));
    assert.equal(r.structuredContent.text, `(1000, '${d.ws}')`);
  });

  it('a matplotlib figure comes back as an image content (PNG)', async () => {
    const r = await run([
      'import matplotlib.pyplot as plt',
      'plt.plot([1, 2, 3], [3, 1, 2])',
      'plt.show()',
    ].join('\n'));
    assert.ok(!r.isError, JSON.stringify(r).slice(0, 2000));
    const img = r.content.find((x) => x.type === 'image');
    assert.ok(img, `an image in ${JSON.stringify(r.content.map((x) => x.type))}`);
    assert.equal(img.mimeType, 'image/png');
    const png = Buffer.from(img.data, 'base64');
    assert.deepEqual(png.subarray(0, 8), Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
    assert.ok(png.length > 1000, `a PNG of ${png.length} bytes`);
    assert.equal(r.structuredContent.images, 1);
  });

  it('output, a figure and a result together', async () => {
    const r = await run('import matplotlib.pyplot as plt\nprint("drawn")\nplt.plot([1, 2])\nplt.show()\n6 * 7');
    assert.ok(!r.isError, JSON.stringify(r).slice(0, 2000));
    assert.equal(r.structuredContent.stdout, 'drawn\n');
    assert.equal(r.structuredContent.text, '42');
    assert.equal(r.content.filter((x) => x.type === 'image').length, 1);
    assert.ok(r.content.some((x) => x.type === 'text' && x.text.includes('drawn')));
  });

  it('progress notifications while long code runs, then its result', async () => {
    const events = [];
    const t0 = Date.now();
    const r = await call(c, 'run_code', { code: 'import time\ntime.sleep(2.5)\n6 * 7' },
      { onprogress: (p) => events.push({ at: Date.now() - t0, ...p }), timeout: 60000 });
    const done = Date.now() - t0;
    assert.ok(!r.isError, JSON.stringify(r));
    assert.equal(r.structuredContent.text, '42');
    assert.ok(events.length >= 2, `at least 2 progress notifications: ${JSON.stringify(events)}`);
    assert.ok(events[0].at < done - 500, `the first came while it ran: ${JSON.stringify(events)}`);
    for (let i = 1; i < events.length; i++)
      assert.ok(events[i].progress > events[i - 1].progress, JSON.stringify(events));
  });

  it('a cancellation interrupts the code; the context lives on', async () => {
    await run('y = 5');
    const ac = new AbortController();
    const p = call(c, 'run_code', { code: 'import time\ntime.sleep(60)' },
      { signal: ac.signal, onprogress: () => {}, timeout: 60000 });
    await new Promise((res) => setTimeout(res, 1500));
    const t0 = Date.now();
    ac.abort();
    await assert.rejects(p);
    // The kernel is free again soon (the interrupt reached it), with its state.
    const r = await run('y + 1');
    assert.ok(Date.now() - t0 < 10000, `the context was busy for ${Date.now() - t0} ms`);
    assert.equal(r.structuredContent.text, '6', JSON.stringify(r));
  });
});
