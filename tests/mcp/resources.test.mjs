// Resources: the workspace's files as file:// URIs, listed page by page, read, and
// subscribed to (notifications/resources/updated on the session's GET stream).

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';

import { ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import { closeClient, daemonFor, sh, sleep, waitFor } from './lib.mjs';

const MANY = 150; // files, enough for more than one page of any sensible page size
const name = (i) => `f${String(i).padStart(3, '0')}.txt`;

// Every page of resources/list in turn: the resources of each go to page(resources, n,
// nextCursor) (which may change the workspace before the next page is asked for). Returns
// how many pages there were.
async function eachPage(c, page) {
  let cursor;
  let pages = 0;
  do {
    const r = await c.listResources(cursor ? { cursor } : {});
    pages++;
    page(r.resources, pages, r.nextCursor, cursor);
    cursor = r.nextCursor;
  } while (cursor && pages < 1000);
  return pages;
}

describe('resources', () => {
  const d = daemonFor({ before, after });
  let c;
  const ws = (...p) => path.join(d.ws, ...p);
  const uriOf = (...p) => pathToFileURL(ws(...p)).href;
  before(async () => {
    fs.writeFileSync(ws('a.txt'), 'alpha\n');
    for (let i = 0; i < MANY; i++) {
      fs.writeFileSync(ws(name(i)), `${i}\n`);
      fs.chownSync(ws(name(i)), 1000, 1000);
    }
    fs.writeFileSync(ws('bin.dat'), Buffer.from([0, 1, 2, 0xff, 0]));
    for (const p of ['a.txt', 'bin.dat']) fs.chownSync(ws(p), 1000, 1000);
    c = await d.client();
  });
  after(async () => {
    await closeClient(c);
  });

  it('resources/list: every file as a file:// URI, across the pages', async () => {
    const uris = [];
    const pages = await eachPage(c, (resources, n, next, cursor) => {
      for (const res of resources) {
        assert.match(res.uri, /^file:\/\/\//);
        assert.equal(typeof res.name, 'string');
        uris.push(res.uri);
      }
      assert.ok(!cursor || next !== cursor, 'the cursor moves on');
    });
    assert.equal(new Set(uris).size, uris.length, 'no resource twice');
    assert.ok(uris.includes(uriOf('a.txt')), `${uriOf('a.txt')} in ${uris.slice(0, 5)}...`);
    for (let i = 0; i < MANY; i++) {
      const u = uriOf(name(i));
      assert.ok(uris.includes(u), `${u} listed (${uris.length} URIs in ${pages} pages)`);
    }
  });

  it('resources/read: a text file, and a binary one as a blob', async () => {
    const r = await c.readResource({ uri: uriOf('a.txt') });
    assert.equal(r.contents.length, 1);
    assert.equal(r.contents[0].uri, uriOf('a.txt'));
    assert.equal(r.contents[0].text, 'alpha\n');
    const b = await c.readResource({ uri: uriOf('bin.dat') });
    assert.deepEqual(Buffer.from(b.contents[0].blob, 'base64'), Buffer.from([0, 1, 2, 0xff, 0]));
  });

  it('resources/read of a file that is not there: -32002', async () => {
    await assert.rejects(c.readResource({ uri: uriOf('no-such-file') }), (e) => {
      assert.equal(e.code, -32002, String(e));
      return true;
    });
  });

  it('resources/read outside the workspace or of no file: a JSON-RPC error', async () => {
    fs.writeFileSync(path.join(path.dirname(d.ws), 'outside.txt'), 'secret outside\n');
    for (const uri of [pathToFileURL(path.join(path.dirname(d.ws), 'outside.txt')).href,
      'file:///etc/passwd', uriOf('no-such-file'), 'http://127.0.0.1/a.txt']) {
      await assert.rejects(c.readResource({ uri }), (e) => {
        assert.ok(Number.isInteger(e.code), `${uri}: ${e}`);
        assert.ok(!String(e.message).includes('secret outside'));
        return true;
      }, uri);
    }
  });

  it('resources/subscribe: a change made by a command is notified within 5 s', async () => {
    const updates = [];
    c.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
      updates.push({ at: Date.now(), uri: n.params.uri });
    });
    const uri = uriOf('a.txt');
    assert.deepEqual(await c.subscribeResource({ uri }), {});
    // The SDK opens the GET stream once initialized; let it settle.
    await sleep(300);
    const t0 = Date.now();
    await sh(c, 'echo changed >> a.txt');
    const got = await waitFor(() => updates.find((u) => u.uri === uri), 5000);
    assert.ok(got, `notifications/resources/updated for ${uri} within 5 s; got ${JSON.stringify(updates)}`);
    assert.ok(got.at - t0 < 5000);
    const r = await c.readResource({ uri });
    assert.equal(r.contents[0].text, 'alpha\nchanged\n');

    // A file nobody subscribed to: no notification for it.
    await sh(c, 'echo x >> bin.dat');
    await sleep(1000);
    assert.ok(!updates.some((u) => u.uri === uriOf('bin.dat')), JSON.stringify(updates));

    // Unsubscribed: no more notifications for it.
    assert.deepEqual(await c.unsubscribeResource({ uri }), {});
    await sleep(200);
    const n = updates.length;
    await sh(c, 'echo again >> a.txt');
    await sleep(1500);
    assert.equal(updates.length, n, `no notification after unsubscribe: ${JSON.stringify(updates.slice(n))}`);
  });

  it('a subscription of one session is not notified to another', async () => {
    const other = await d.client({ name: 'other' });
    try {
      const seen = [];
      other.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => seen.push(n.params.uri));
      const mine = [];
      c.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => mine.push(n.params.uri));
      const uri = uriOf(name(0));
      await c.subscribeResource({ uri });
      await sleep(300);
      await sh(other, `echo y >> ${name(0)}`);
      assert.ok(await waitFor(() => mine.includes(uri), 5000), 'the subscriber is notified');
      await sleep(300);
      assert.deepEqual(seen, [], 'the other session is not');
    } finally {
      await closeClient(other);
    }
  });
});

// Paging through a tree: directories nested and in name order, one of more than 4096 entries
// (listed in its own order, not sorted), files removed at the cursor between two pages.
describe('resources/list pages over a tree', () => {
  const d = daemonFor({ before, after });
  let c;
  const ws = (...p) => path.join(d.ws, ...p);
  const uriOf = (...p) => pathToFileURL(ws(...p)).href;
  const BIG = 4200;
  const files = [];
  const put = (p) => {
    fs.mkdirSync(path.dirname(ws(p)), { recursive: true });
    fs.writeFileSync(ws(p), `${p}\n`);
    files.push(uriOf(p));
  };
  before(async () => {
    for (let i = 0; i < 30; i++) put(`a/f${i}.txt`);
    for (let i = 0; i < 120; i++) put(`a/b/c/g${i}.txt`);
    put('a/z.txt');
    for (let i = 0; i < BIG; i++) put(`big/h${i}`);
    for (let i = 0; i < 50; i++) put(`m${i}.txt`);
    fs.mkdirSync(ws('empty', 'deeper'), { recursive: true });
    put('zz/last.txt');
    c = await d.client();
  });
  after(async () => {
    await closeClient(c);
  });

  // Every page in turn; before each next page, gone(lastUri) may remove files.
  async function walk(gone = () => {}) {
    const uris = [];
    const pages = await eachPage(c, (resources, n, next) => {
      uris.push(...resources.map((x) => x.uri));
      if (next && resources.length) gone(resources[resources.length - 1].uri, n);
    });
    return { uris, pages };
  }

  it('every file once, in pages, directories walked in name order', async () => {
    const { uris, pages } = await walk();
    assert.ok(pages > BIG / 100, `${pages} pages`);
    assert.equal(uris.length, files.length, `as many as there are files: ${uris.filter((u, i) => uris.indexOf(u) !== i || !files.includes(u))}`);
    assert.deepEqual([...uris].sort(), [...files].sort());
    const at = (p) => uris.indexOf(uriOf(p));
    assert.ok(at('a/b/c/g0.txt') < at('a/f0.txt'), '"b" before "f0.txt" in a/');
    assert.ok(at('a/f9.txt') < at('a/z.txt'));
    assert.ok(at('a/z.txt') < at('big/h0') && at('big/h0') < at('m0.txt'));
    assert.equal(at('zz/last.txt'), uris.length - 1);
  });

  it('a cursor whose file was removed goes on after it; none missed', async () => {
    const removed = new Set();
    const { uris } = await walk((last, page) => {
      // On the first pages (sorted directories) and inside the big one (its own order).
      if (page <= 3 || page === 10) {
        fs.rmSync(new URL(last));
        removed.add(last);
      }
    });
    assert.equal(removed.size, 4);
    const want = files.filter((u) => !removed.has(u));
    const got = new Set(uris);
    for (const u of want) assert.ok(got.has(u), `${u} listed`);
    // The big directory's order cannot say what came after a removed cursor: its files may
    // come twice then, the sorted ones never do.
    const twice = uris.filter((u, i) => uris.indexOf(u) !== i);
    assert.ok(twice.every((u) => u.includes('/big/')), `twice: ${twice.slice(0, 3)}`);
  });

  it('a cursor resources/list did not give: -32602', async () => {
    for (const cursor of ['***', Buffer.from('/etc/passwd').toString('base64'), '']) {
      await assert.rejects(c.listResources({ cursor }), (e) => e.code === -32602, cursor);
    }
  });
});
