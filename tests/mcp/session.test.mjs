// The session: initialize and version negotiation, the tool list, DELETE, the GET stream,
// and two sessions at once.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import {
  PROTOCOL_VERSIONS, TOOL_NAMES, call, closeClient, daemonFor, hostProcs, initializeRequest,
  rawPost, rawSession, sessionHeaders, sleep, waitFor, wrapWords,
} from './lib.mjs';

describe('session', () => {
  const d = daemonFor({ before, after });

  it('initialize: the newest version, serverInfo sbxd, tools and resources', async () => {
    const c = await d.client();
    try {
      assert.equal(c.getServerVersion()?.name, 'sbxd');
      assert.equal(typeof c.getServerVersion()?.version, 'string');
      assert.equal(c.transport.protocolVersion, PROTOCOL_VERSIONS[0]);
      assert.match(c.transport.sessionId ?? '', /^[\x21-\x7e]+$/, 'a visible-ASCII session id');
      const caps = c.getServerCapabilities();
      assert.ok(caps?.tools, `capabilities ${JSON.stringify(caps)} offer tools`);
      assert.ok(caps?.resources, `capabilities ${JSON.stringify(caps)} offer resources`);
      assert.equal(caps.resources.subscribe, true);
      assert.ok(!caps.resources.listChanged, 'resources.listChanged is false or absent');
      // The session works: ping.
      assert.deepEqual(await c.ping(), {});
    } finally {
      await closeClient(c);
    }
  });

  it('initialize: each supported version is answered as asked, with its own session', async () => {
    const ids = new Set();
    for (const v of PROTOCOL_VERSIONS) {
      const r = await rawPost(d, initializeRequest(1, v));
      assert.equal(r.status, 200, `initialize ${v}: HTTP ${r.status} ${r.text}`);
      assert.equal(r.json?.id, 1);
      assert.equal(r.json?.result?.protocolVersion, v, r.text);
      assert.equal(r.json.result.serverInfo?.name, 'sbxd');
      const id = r.headers.get('mcp-session-id');
      assert.ok(id, `initialize ${v}: an Mcp-Session-Id header`);
      ids.add(id);
    }
    assert.equal(ids.size, PROTOCOL_VERSIONS.length, 'each initialize makes a new session');
  });

  it('initialize with an unknown version: answered with a supported one', async () => {
    const r = await rawPost(d, initializeRequest(1, '2099-01-01'));
    assert.equal(r.status, 200, r.text);
    assert.ok(PROTOCOL_VERSIONS.includes(r.json?.result?.protocolVersion), r.text);
  });

  it('MCP-Protocol-Version: an unsupported one is refused with 400', async () => {
    const s = await rawSession(d);
    const list = { jsonrpc: '2.0', id: 2, method: 'tools/list' };
    const ok = await rawPost(d, list, sessionHeaders(s));
    assert.equal(ok.status, 200, ok.text);
    const bad = await rawPost(d, list, { ...sessionHeaders(s), 'MCP-Protocol-Version': '1999-01-01' });
    assert.equal(bad.status, 400, bad.text);
  });

  it('tools/list: exactly the tools of TOOL_NAMES, each with an object inputSchema', async () => {
    const c = await d.client();
    try {
      const { tools } = await c.listTools();
      const names = tools.map((t) => t.name);
      assert.deepEqual([...names].sort(), [...TOOL_NAMES].sort(), 'the tools offered');
      assert.equal(new Set(names).size, names.length, 'no tool twice');
      for (const t of tools) {
        assert.equal(t.inputSchema?.type, 'object', `${t.name}'s inputSchema`);
        assert.equal(typeof t.description, 'string', `${t.name}'s description`);
      }
      const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
      const props = (n) => Object.keys(byName[n].inputSchema.properties || {});
      for (const p of ['command', 'argv', 'cwd', 'env', 'timeout_ms', 'stdin']) {
        assert.ok(props('run_command').includes(p), `run_command takes ${p}`);
      }
      for (const p of ['path', 'content', 'encoding', 'mode']) {
        assert.ok(props('write_file').includes(p), `write_file takes ${p}`);
      }
      assert.ok(props('run_code').includes('code'));
      assert.ok(props('move_file').includes('from') && props('move_file').includes('to'));
      assert.ok((byName.read_file.inputSchema.required || []).includes('path'));
    } finally {
      await closeClient(c);
    }
  });

  it('DELETE /mcp ends the session: 404 for it afterwards', async () => {
    const c = await d.client();
    const sid = c.transport.sessionId;
    const version = c.transport.protocolVersion;
    await c.transport.terminateSession();
    assert.equal(c.transport.sessionId, undefined, 'the SDK saw the DELETE succeed');
    await c.close();
    const r = await rawPost(d, { jsonrpc: '2.0', id: 2, method: 'tools/list' },
      { 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': version });
    assert.equal(r.status, 404, r.text);
    const again = await fetch(d.url, {
      method: 'DELETE',
      headers: { 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': version, ...d.authHeaders() },
    });
    await again.body?.cancel();
    assert.equal(again.status, 404);
  });

  it('DELETE /mcp kills the commands of the session\'s calls under way', async () => {
    const c = await d.client();
    const arg = `300.${process.pid % 1000}${Math.floor(Math.random() * 1000)}`;
    const pending = call(c, 'run_command', { command: `sleep ${arg}; echo not killed` }, { timeout: 30000 })
      .then((r) => r, (e) => e);
    const onHost = wrapWords().length === 0;
    if (onHost) assert.ok(await waitFor(() => hostProcs(['sleep', arg]).length > 0, 5000), 'sleep started');
    else await sleep(500);
    await c.transport.terminateSession();
    if (onHost) {
      assert.ok(await waitFor(() => hostProcs(['sleep', arg]).length === 0, 2000),
        'no sleep left 2 s after the DELETE');
    }
    const r = await pending;
    assert.ok(!(r?.structuredContent?.stdout || '').includes('not killed'), JSON.stringify(r));
    await c.close();
  });

  it('GET /mcp opens the event stream of a session', async () => {
    const s = await rawSession(d);
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(new Error('no answer to GET /mcp within 5 s')), 5000);
    const res = await fetch(d.url, {
      headers: { Accept: 'text/event-stream', ...sessionHeaders(s), ...d.authHeaders() },
      signal: ac.signal,
    });
    try {
      assert.equal(res.status, 200);
      assert.match(res.headers.get('content-type') || '', /^text\/event-stream/);
      // One stream per session at once.
      const second = await fetch(d.url, {
        headers: { Accept: 'text/event-stream', ...sessionHeaders(s), ...d.authHeaders() },
        signal: AbortSignal.timeout(5000),
      });
      await second.body?.cancel();
      assert.equal(second.status, 409);
    } finally {
      clearTimeout(timer);
      ac.abort();
      await res.body?.cancel().catch(() => {});
    }
    const none = await fetch(d.url, {
      headers: { Accept: 'text/event-stream', 'Mcp-Session-Id': 'no-such-session', ...d.authHeaders() },
    });
    await none.body?.cancel();
    assert.equal(none.status, 404);
  });

  it('two sessions at once: their commands run side by side', async () => {
    const [a, b] = await Promise.all([d.client({ name: 'a' }), d.client({ name: 'b' })]);
    try {
      assert.notEqual(a.transport.sessionId, b.transport.sessionId);
      const t0 = Date.now();
      const [ra, rb] = await Promise.all([
        call(a, 'run_command', { command: 'sleep 1; echo from-a' }),
        call(b, 'run_command', { command: 'sleep 1; echo from-b' }),
      ]);
      const elapsed = Date.now() - t0;
      assert.equal(ra.structuredContent?.stdout, 'from-a\n', JSON.stringify(ra));
      assert.equal(rb.structuredContent?.stdout, 'from-b\n', JSON.stringify(rb));
      assert.ok(elapsed >= 1000, `both slept 1 s (${elapsed} ms)`);
      assert.ok(elapsed < 1800, `the two 1 s commands took ${elapsed} ms together (< 1800)`);
      // Each session still answers after the other ends.
      await closeClient(a);
      const rb2 = await call(b, 'run_command', { command: 'echo still' });
      assert.equal(rb2.structuredContent?.stdout, 'still\n');
    } finally {
      await closeClient(a).catch(() => {});
      await closeClient(b);
    }
  });
});
