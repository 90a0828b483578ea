// The file tools: write_file, read_file, list_files, move_file, stat_file, delete_file,
// each checked against what is on disk, and paths that leave the workspace.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { call, closeClient, daemonFor, textOf } from './lib.mjs';

// A mode as sbxd writes it ("0644") or as a number, as its permission bits.
function modeBits(m) {
  return (typeof m === 'string' ? parseInt(m, 8) : m) & 0o7777;
}

function assertError(r, what) {
  assert.equal(r.isError, true, `${what}: a tool error, got ${JSON.stringify(r)}`);
  assert.ok(textOf(r).length > 0, `${what}: the error says why`);
}

function assertOk(r, what) {
  assert.ok(!r.isError, `${what}: ${JSON.stringify(r)}`);
  assert.ok(r.structuredContent, `${what}: structuredContent`);
  return r.structuredContent;
}

describe('file tools', () => {
  const d = daemonFor({ before, after });
  let c;
  const ws = (...p) => path.join(d.ws, ...p);
  before(async () => {
    c = await d.client();
  });
  after(async () => {
    await closeClient(c);
  });

  it('write_file then read_file: UTF-8 text round trip, on disk as written', async () => {
    const text = 'héllo, wörld ✓\nsecond line\n';
    const w = assertOk(await call(c, 'write_file', { path: 'hello.txt', content: text }), 'write');
    assert.equal(w.path, 'hello.txt');
    assert.equal(w.size, Buffer.byteLength(text));
    assert.equal(fs.readFileSync(ws('hello.txt'), 'utf8'), text);

    const r = await call(c, 'read_file', { path: 'hello.txt' });
    const s = assertOk(r, 'read');
    assert.equal(r.content[0].type, 'text');
    assert.equal(r.content[0].text, text);
    assert.equal(s.path, 'hello.txt');
    assert.equal(s.size, Buffer.byteLength(text));
    assert.equal(s.offset, 0);
    assert.equal(s.length, Buffer.byteLength(text));
    assert.equal(s.encoding, 'utf8');
    assert.equal(s.eof, true);
  });

  it('read_file with offset and length: that slice, eof false before the end', async () => {
    fs.writeFileSync(ws('abc.txt'), 'abcdefghij');
    const r = await call(c, 'read_file', { path: 'abc.txt', offset: 2, length: 4 });
    const s = assertOk(r, 'read slice');
    // The file's bytes are the first text item whole (a note for the reader, if any,
    // comes as an item of its own).
    assert.equal(r.content[0].type, 'text');
    assert.equal(r.content[0].text, 'cdef');
    assert.equal(s.offset, 2);
    assert.equal(s.length, 4);
    assert.equal(s.size, 10);
    assert.equal(s.eof, false);
    const tail = await call(c, 'read_file', { path: 'abc.txt', offset: 7 });
    assert.equal(tail.content[0].text, 'hij');
    assert.equal(tail.structuredContent.eof, true);
  });

  it('binary with NUL bytes: written from base64, read back as an embedded blob', async () => {
    const bytes = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x00, 0x00, 0xff, 0xfe, 0x41, 0x00, 0x0a, 0xc3]);
    const w = assertOk(await call(c, 'write_file', {
      path: 'blob.bin', content: bytes.toString('base64'), encoding: 'base64',
    }), 'write base64');
    assert.equal(w.size, bytes.length);
    assert.deepEqual(fs.readFileSync(ws('blob.bin')), bytes);

    const r = await call(c, 'read_file', { path: 'blob.bin' });
    const s = assertOk(r, 'read binary');
    assert.equal(s.encoding, 'base64');
    assert.equal(s.size, bytes.length);
    const res = r.content.find((x) => x.type === 'resource');
    assert.ok(res, `an embedded resource in ${JSON.stringify(r.content)}`);
    assert.equal(typeof res.resource.blob, 'string');
    assert.deepEqual(Buffer.from(res.resource.blob, 'base64'), bytes);
    assert.match(res.resource.uri, /blob\.bin$/);
  });

  it('write_file with a mode, over an existing file', async () => {
    assertOk(await call(c, 'write_file', { path: 'run.sh', content: '#!/bin/sh\necho ran\n', mode: '0755' }),
      'write 0755');
    assert.equal(fs.statSync(ws('run.sh')).mode & 0o777, 0o755);
    const st = assertOk(await call(c, 'stat_file', { path: 'run.sh' }), 'stat');
    assert.equal(modeBits(st.mode), 0o755);
    const r = await call(c, 'run_command', { command: './run.sh' });
    assert.equal(r.structuredContent?.stdout, 'ran\n', JSON.stringify(r));
    assertOk(await call(c, 'write_file', { path: 'run.sh', content: 'short' }), 'overwrite');
    assert.equal(fs.readFileSync(ws('run.sh'), 'utf8'), 'short');
  });

  it('a file the test made as root (0644) is read as it is', async () => {
    fs.writeFileSync(ws('rootfile.txt'), 'made by root\n', { mode: 0o644 });
    const r = await call(c, 'read_file', { path: 'rootfile.txt' });
    assert.equal(textOf(r), 'made by root\n', JSON.stringify(r));
    const st = assertOk(await call(c, 'stat_file', { path: 'rootfile.txt' }), 'stat');
    assert.equal(st.uid, fs.statSync(ws('rootfile.txt')).uid);
  });

  it('list_files: entries with type, size, mode and time; depth', async () => {
    fs.mkdirSync(ws('tree', 'deeper'), { recursive: true });
    fs.writeFileSync(ws('tree', 'top.txt'), '12345');
    fs.writeFileSync(ws('tree', 'deeper', 'leaf.txt'), 'leaf');
    for (const p of ['tree', 'tree/deeper', 'tree/top.txt', 'tree/deeper/leaf.txt']) {
      fs.chownSync(ws(p), 1000, 1000);
    }
    const s = assertOk(await call(c, 'list_files', {}), 'list .');
    assert.ok(Array.isArray(s.entries));
    assert.equal(s.truncated, false);
    const top = (e) => path.basename(e.path);
    const hello = s.entries.find((e) => top(e) === 'hello.txt');
    assert.ok(hello, `hello.txt in ${JSON.stringify(s.entries)}`);
    assert.equal(hello.type, 'file');
    assert.equal(hello.size, fs.statSync(ws('hello.txt')).size);
    assert.equal(modeBits(hello.mode), fs.statSync(ws('hello.txt')).mode & 0o777);
    assert.ok(!Number.isNaN(Date.parse(hello.modified_at)), `modified_at ${hello.modified_at}`);
    assert.equal(s.entries.find((e) => top(e) === 'tree')?.type, 'directory');
    assert.ok(!s.entries.some((e) => top(e) === 'top.txt'), 'depth 1 does not descend');

    const one = assertOk(await call(c, 'list_files', { path: 'tree' }), 'list tree');
    const names = one.entries.map(top).sort();
    assert.deepEqual(names, ['deeper', 'top.txt']);
    assert.equal(one.entries.find((e) => top(e) === 'top.txt').size, 5);

    const deep = assertOk(await call(c, 'list_files', { path: 'tree', depth: 3 }), 'list tree depth 3');
    const leaf = deep.entries.find((e) => top(e) === 'leaf.txt');
    assert.ok(leaf, `leaf.txt at depth 3 in ${JSON.stringify(deep.entries)}`);
    assert.match(leaf.path, /deeper\/leaf\.txt$/);

    // The text block after the summary: the same entries, a line each, in the same order.
    const raw = await call(c, 'list_files', { path: 'tree', depth: 3 });
    const lines = deep.entries.map((e) => `${e.path}${e.type === 'directory' ? '/' : ''}  ${e.size}\n`);
    assert.equal(raw.content[1].type, 'text');
    assert.equal(raw.content[1].text, lines.join(''));
  });

  it('list_files: a symlink inside as its target, marked; one out or broken as itself', async () => {
    fs.mkdirSync(ws('lnk', 'd'), { recursive: true });
    fs.writeFileSync(ws('lnk', 'f'), 'twelve bytes');
    fs.writeFileSync(ws('lnk', 'd', 'in.txt'), 'in');
    fs.symlinkSync('f', ws('lnk', 'to-file'));
    fs.symlinkSync('d', ws('lnk', 'to-dir'));
    fs.symlinkSync('/etc', ws('lnk', 'abs'));
    fs.symlinkSync('nowhere', ws('lnk', 'broken'));
    const s = assertOk(await call(c, 'list_files', { path: d.ws + '/lnk', depth: 2 }), 'list lnk');
    const by = Object.fromEntries(s.entries.map((e) => [e.path, e]));
    assert.equal(by['lnk/to-file'].type, 'file', JSON.stringify(by));
    assert.equal(by['lnk/to-file'].size, 12);
    assert.equal(by['lnk/to-file'].symlink, true);
    assert.equal(by['lnk/to-dir'].type, 'directory');
    assert.equal(by['lnk/to-dir'].symlink, true);
    assert.equal(by['lnk/abs'].type, 'symlink');
    assert.equal(by['lnk/broken'].type, 'symlink');
    assert.equal(by['lnk/f'].symlink, undefined);
    assert.ok(by['lnk/d/in.txt'], 'a real directory is walked into');
    assert.ok(!by['lnk/to-dir/in.txt'], 'a linked directory is not walked into');
  });

  it('move_file: renamed on disk; overwrite only when asked', async () => {
    fs.writeFileSync(ws('from.txt'), 'payload');
    fs.writeFileSync(ws('target.txt'), 'old');
    fs.chownSync(ws('from.txt'), 1000, 1000);
    fs.chownSync(ws('target.txt'), 1000, 1000);
    assertOk(await call(c, 'move_file', { from: 'from.txt', to: 'moved.txt' }), 'move');
    assert.ok(!fs.existsSync(ws('from.txt')));
    assert.equal(fs.readFileSync(ws('moved.txt'), 'utf8'), 'payload');

    assertError(await call(c, 'move_file', { from: 'moved.txt', to: 'target.txt' }), 'move over');
    assert.equal(fs.readFileSync(ws('target.txt'), 'utf8'), 'old');
    assert.ok(fs.existsSync(ws('moved.txt')));
    assertOk(await call(c, 'move_file', { from: 'moved.txt', to: 'target.txt', overwrite: true }),
      'move over with overwrite');
    assert.equal(fs.readFileSync(ws('target.txt'), 'utf8'), 'payload');
    assert.ok(!fs.existsSync(ws('moved.txt')));
  });

  it('stat_file: a file, a directory, a symlink followed and not', async () => {
    const f = assertOk(await call(c, 'stat_file', { path: 'target.txt' }), 'stat file');
    assert.equal(f.path, 'target.txt');
    assert.equal(f.name, 'target.txt');
    assert.equal(f.type, 'file');
    assert.equal(f.size, 7);
    assert.equal(f.uid, 1000);
    assert.equal(f.gid, 1000);
    assert.ok(!Number.isNaN(Date.parse(f.modified_at)));
    // The same object as GET /files/PATH?stat=true answers, its etag and nlink included.
    const rest = await fetch(`http://127.0.0.1:${d.port}/files/target.txt?stat=true`, {
      headers: d.authHeaders(),
    });
    assert.equal(rest.status, 200);
    assert.deepEqual(f, await rest.json());
    assert.equal(f.nlink, 1);
    assert.match(f.etag, /^".+"$/);
    assert.equal(assertOk(await call(c, 'stat_file', { path: 'tree' }), 'stat dir').type, 'directory');

    fs.symlinkSync('target.txt', ws('link'));
    const l = assertOk(await call(c, 'stat_file', { path: 'link', follow: false }), 'stat link');
    assert.equal(l.type, 'symlink');
    assert.equal(l.symlink_target, 'target.txt');
    const lf = assertOk(await call(c, 'stat_file', { path: 'link', follow: true }), 'stat link followed');
    assert.equal(lf.type, 'file');
    assert.equal(lf.size, 7);

    assertError(await call(c, 'stat_file', { path: 'no-such-file' }), 'stat missing');
  });

  it('delete_file: a file; a non-empty directory only with recursive', async () => {
    assertOk(await call(c, 'delete_file', { path: 'target.txt' }), 'delete file');
    assert.ok(!fs.existsSync(ws('target.txt')));
    assertError(await call(c, 'delete_file', { path: 'tree' }), 'delete non-empty dir');
    assert.ok(fs.existsSync(ws('tree', 'deeper', 'leaf.txt')));
    assertOk(await call(c, 'delete_file', { path: 'tree', recursive: true }), 'delete -r');
    assert.ok(!fs.existsSync(ws('tree')));
    assertError(await call(c, 'delete_file', { path: 'tree' }), 'delete missing');
  });

  it('paths that leave the workspace: tool errors, nothing read or written', async () => {
    // <tmp>/sbxd.log is one level above the workspace.
    const outside = path.join(path.dirname(d.ws), 'outside.txt');
    fs.writeFileSync(outside, 'secret outside\n', { mode: 0o644 });
    fs.symlinkSync('..', ws('up'));
    for (const p of ['../outside.txt', 'up/outside.txt', outside, '/etc/passwd',
      'sub/../../outside.txt']) {
      const r = await call(c, 'read_file', { path: p });
      assertError(r, `read_file ${p}`);
      assert.ok(!JSON.stringify(r).includes('secret outside'), `read_file ${p} leaked`);
      assert.ok(!JSON.stringify(r).includes('root:x:0:0'), `read_file ${p} leaked`);
    }
    for (const p of ['../escaped.txt', 'up/escaped.txt', path.join(path.dirname(d.ws), 'escaped.txt')]) {
      assertError(await call(c, 'write_file', { path: p, content: 'x' }), `write_file ${p}`);
    }
    assert.ok(!fs.existsSync(path.join(path.dirname(d.ws), 'escaped.txt')), 'nothing written outside');
    assertError(await call(c, 'delete_file', { path: '../outside.txt' }), 'delete_file ..');
    assertError(await call(c, 'move_file', { from: 'hello.txt', to: '../moved-out.txt' }), 'move_file out');
    assertError(await call(c, 'move_file', { from: '../outside.txt', to: 'in.txt' }), 'move_file in');
    assertError(await call(c, 'stat_file', { path: '../outside.txt' }), 'stat_file ..');
    assertError(await call(c, 'list_files', { path: '..' }), 'list_files ..');
    assertError(await call(c, 'list_files', { path: 'up' }), 'list_files through a symlink out');
    assert.equal(fs.readFileSync(outside, 'utf8'), 'secret outside\n');
    assert.ok(fs.existsSync(ws('hello.txt')));
    assert.ok(!fs.existsSync(ws('in.txt')));
  });
  it('search_files: literal by default, context, type, .git passed over; find_files by glob', async () => {
    fs.mkdirSync(ws('srch', 'pkg'), { recursive: true });
    fs.mkdirSync(ws('srch', '.git'), { recursive: true });
    fs.writeFileSync(ws('srch', 'pkg', 'a.py'), 'one\nx = f(a.b) $HOME\nthree\n');
    fs.writeFileSync(ws('srch', 'pkg', 'b.c'), 'f(a.b) $HOME\n');
    fs.writeFileSync(ws('srch', '.git', 'c.py'), 'f(a.b) $HOME\n');
    let s = assertOk(await call(c, 'search_files',
      { pattern: 'f(a.b) $HOME', path: 'srch', context: 1, type: 'py' }), 'search');
    assert.equal(s.matches.length, 1);
    assert.deepEqual(s.matches[0], {
      path: 'srch/pkg/a.py', line: 2, column: 5, text: 'x = f(a.b) $HOME', before: ['one'],
      after: ['three'],
    });
    assert.equal(s.truncated, false);
    s = assertOk(await call(c, 'search_files',
      { pattern: '^F\\(', path: 'srch', regex: true, ignore_case: true }), 'regex');
    assert.deepEqual(s.matches.map((m) => m.path), ['srch/pkg/b.c']);
    s = assertOk(await call(c, 'find_files', { pattern: '**/*.py', path: 'srch' }), 'find');
    assert.deepEqual(s.entries, [{ path: 'srch/pkg/a.py', type: 'file', size: 27 }]);
    assertError(await call(c, 'search_files', { pattern: '(a', regex: true }), 'a bad regex');
    assertError(await call(c, 'find_files', { pattern: '*', path: '../..' }), 'a path out');
  });
});

describe('read_file by lines, edit_file', () => {
  const d = daemonFor({ before, after });
  let c;
  const ws = (...p) => path.join(d.ws, ...p);
  before(async () => {
    c = await d.client();
  });
  after(async () => {
    await closeClient(c);
  });

  it('tools/list: edit_file with its schemas and hints; read_file takes limit', async () => {
    const { tools } = await c.listTools();
    const e = tools.find((t) => t.name === 'edit_file');
    assert.ok(e, 'edit_file is listed');
    assert.equal(e.outputSchema.type, 'object');
    assert.ok(e.outputSchema.required.includes('etag'));
    assert.equal(e.annotations.readOnlyHint, false);
    assert.equal(e.annotations.destructiveHint, true);
    assert.ok(e.inputSchema.properties.edits && e.inputSchema.properties.replace_all);
    const r = tools.find((t) => t.name === 'read_file');
    assert.ok(r.inputSchema.properties.limit, 'read_file has limit');
  });

  it('read_file with offset and limit: those lines, numbered on request', async () => {
    fs.writeFileSync(ws('log.txt'), Array.from({ length: 50 }, (_, i) => `line ${i + 1}`).join('\n') + '\n');
    const r = await call(c, 'read_file', { path: 'log.txt', offset: 10, limit: 3 });
    const s = assertOk(r, 'read lines');
    assert.equal(r.content[0].text, 'line 10\nline 11\nline 12\n');
    assert.equal(s.first_line, 10);
    assert.equal(s.last_line, 12);
    assert.equal(s.eof, false);
    const n = await call(c, 'read_file', { path: 'log.txt', offset: 49, limit: 10, numbers: true });
    assert.equal(n.content[0].text, '    49\tline 49\n    50\tline 50\n');
    assert.equal(n.structuredContent.eof, true);
    assertError(await call(c, 'read_file', { path: 'log.txt', offset: 51, limit: 1 }), 'past the end');
    assertError(await call(c, 'read_file', { path: 'log.txt', limit: 0 }), 'limit 0');
    assertError(await call(c, 'read_file', { path: 'log.txt', limit: 2, length: 4 }), 'limit and length');
    fs.writeFileSync(ws('nul.bin'), Buffer.from([0x61, 0, 0x0a]));
    assertError(await call(c, 'read_file', { path: 'nul.bin', limit: 2 }), 'binary by lines');
  });

  it('edit_file: once, replace_all, several at once, with the new etag and lines', async () => {
    // Written as the command user (a file of root's, made from here, is not the user's to edit).
    assertOk(await call(c, 'write_file', { path: 'e.py', content: 'a = 1\nb = 2\nb = 2\n', mode: '0640' }), 'write');
    const s = assertOk(await call(c, 'edit_file', { path: 'e.py', old: 'a = 1', new: 'a = 10' }), 'edit');
    assert.equal(s.replacements, 1);
    assert.deepEqual(s.lines, [{ start: 1, end: 1 }]);
    assert.equal(fs.readFileSync(ws('e.py'), 'utf8'), 'a = 10\nb = 2\nb = 2\n');
    assert.equal(fs.statSync(ws('e.py')).mode & 0o777, 0o640);
    const st = assertOk(await call(c, 'stat_file', { path: 'e.py' }), 'stat');
    assert.equal(st.etag, s.etag);

    const many = assertOk(await call(c, 'edit_file', {
      path: 'e.py', edits: [{ old: 'b = 2', new: 'b = 3', replace_all: true }, { old: 'a = 10\n', new: '' }],
    }), 'edits');
    assert.equal(many.replacements, 3);
    assert.equal(fs.readFileSync(ws('e.py'), 'utf8'), 'b = 3\nb = 3\n');
    // The old_string/new_string spelling of coding agents' tools.
    assertOk(await call(c, 'edit_file', { path: 'e.py', old_string: 'b = 3\nb', new_string: 'c = 3\nb' }), 'long keys');
    assert.equal(fs.readFileSync(ws('e.py'), 'utf8'), 'c = 3\nb = 3\n');
  });

  it('edit_file refusals: ambiguous, missing, stale if_match, out of the workspace; nothing changes', async () => {
    assertOk(await call(c, 'write_file', { path: 'r.txt', content: 'x\nx\n' }), 'write');
    const amb = await call(c, 'edit_file', { path: 'r.txt', old: 'x', new: 'y' });
    assertError(amb, 'ambiguous');
    assert.match(textOf(amb), /2 times/);
    const miss = await call(c, 'edit_file', { path: 'r.txt', old: 'zz', new: 'y' });
    assertError(miss, 'missing');
    assert.match(textOf(miss), /not found/);
    assertError(await call(c, 'edit_file', { path: 'r.txt', edits: [{ old: 'x\nx', new: 'y' }, { old: 'q', new: 'r' }] }),
      'all or nothing');
    assertError(await call(c, 'edit_file', { path: 'r.txt', old: '', new: 'y' }), 'empty old');
    assertError(await call(c, 'edit_file', { path: 'r.txt', old: 'x\nx', new: 'y', if_match: '"0-0-0"' }), 'stale');
    assert.equal(fs.readFileSync(ws('r.txt'), 'utf8'), 'x\nx\n');
    const outside = path.join(path.dirname(d.ws), 'edit-outside.txt');
    fs.writeFileSync(outside, 'secret\n');
    fs.symlinkSync(outside, ws('out-link'));
    for (const p of ['../edit-outside.txt', 'out-link', outside]) {
      assertError(await call(c, 'edit_file', { path: p, old: 'secret', new: 'public' }), `edit ${p}`);
    }
    assert.equal(fs.readFileSync(outside, 'utf8'), 'secret\n');
    assert.deepEqual(fs.readdirSync(d.ws).filter((n) => n.startsWith('.sbxd-upload-')), []);
  });
});
