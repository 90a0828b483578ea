// Protocol errors over raw HTTP (what no SDK sends): JSON-RPC error codes, the session
// header, Origin, and the bearer token.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { McpError } from '@modelcontextprotocol/sdk/types.js';

import {
  PROTOCOL_VERSIONS, TOKEN, closeClient, daemonFor, initializeRequest, rawPost, rawSession,
  sessionHeaders,
} from './lib.mjs';

describe('protocol errors', () => {
  const d = daemonFor({ before, after });

  it('malformed JSON: -32700, HTTP 400', async () => {
    const r = await rawPost(d, '{"jsonrpc": "2.0", "id": 1, "method": ');
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json?.error?.code, -32700, r.text);
    assert.equal(r.json.id, null);
  });

  it('malformed JSON within a session: -32700, HTTP 400', async () => {
    const s = await rawSession(d);
    const r = await rawPost(d, '{not json', sessionHeaders(s));
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json?.error?.code, -32700, r.text);
  });

  it('unknown method: -32601', async () => {
    const s = await rawSession(d);
    const r = await rawPost(d, { jsonrpc: '2.0', id: 7, method: 'no/such/method', params: {} },
      sessionHeaders(s));
    assert.equal(r.json?.id, 7, r.text);
    assert.equal(r.json?.error?.code, -32601, r.text);
  });

  it('invalid request (no "jsonrpc", a method that is not a string): -32600', async () => {
    const s = await rawSession(d);
    for (const body of [{ id: 8, method: 'tools/list' }, { jsonrpc: '2.0', id: 9, method: 42 }]) {
      const r = await rawPost(d, body, sessionHeaders(s));
      assert.equal(r.json?.error?.code, -32600, `${JSON.stringify(body)}: HTTP ${r.status} ${r.text}`);
    }
  });

  it('unknown tool: -32602 (the SDK rejects with an McpError)', async () => {
    const c = await d.client();
    try {
      await assert.rejects(c.callTool({ name: 'no_such_tool', arguments: {} }), (e) => {
        assert.ok(e instanceof McpError, String(e));
        assert.equal(e.code, -32602);
        return true;
      });
      // The session goes on.
      assert.ok((await c.listTools()).tools.length >= 12);
    } finally {
      await closeClient(c);
    }
  });

  it('no Mcp-Session-Id after initialize: 400; an unknown one: 404', async () => {
    await rawSession(d); // a session exists, but the request does not name it
    const list = { jsonrpc: '2.0', id: 3, method: 'tools/list' };
    const none = await rawPost(d, list, { 'MCP-Protocol-Version': PROTOCOL_VERSIONS[0] });
    assert.equal(none.status, 400, none.text);
    const unknown = await rawPost(d, list, {
      'Mcp-Session-Id': 'f'.repeat(32), 'MCP-Protocol-Version': PROTOCOL_VERSIONS[0],
    });
    assert.equal(unknown.status, 404, unknown.text);
  });

  it('Origin: a foreign one is refused with 403, localhost ones on any port are served', async () => {
    for (const origin of ['http://evil.example', 'https://evil.example:8443',
      'http://localhost.evil.example', 'http://127.0.0.1.evil.example', 'null']) {
      const r = await rawPost(d, initializeRequest(), { Origin: origin });
      assert.equal(r.status, 403, `Origin ${origin}: HTTP ${r.status} ${r.text}`);
      assert.equal(r.headers.get('mcp-session-id'), null, `Origin ${origin}: no session`);
    }
    for (const origin of ['http://localhost', 'http://localhost:5173', 'https://localhost:8443',
      'http://127.0.0.1:6274', 'http://[::1]:3000']) {
      const r = await rawPost(d, initializeRequest(), { Origin: origin });
      assert.equal(r.status, 200, `Origin ${origin}: HTTP ${r.status} ${r.text}`);
    }
    // Within a session too.
    const s = await rawSession(d);
    const r = await rawPost(d, { jsonrpc: '2.0', id: 4, method: 'tools/list' },
      { ...sessionHeaders(s), Origin: 'http://evil.example' });
    assert.equal(r.status, 403, r.text);
  });

  it('Content-Type not JSON: 415; Accept without JSON: 406', async () => {
    const s = await rawSession(d);
    const list = { jsonrpc: '2.0', id: 6, method: 'tools/list' };
    const ct = await rawPost(d, list, { ...sessionHeaders(s), 'Content-Type': 'text/plain' });
    assert.equal(ct.status, 415, ct.text);
    const acc = await rawPost(d, list, { ...sessionHeaders(s), Accept: 'text/html' });
    assert.equal(acc.status, 406, acc.text);
  });

  it('batches: answered as an array in a 2025-03-26 session only', async () => {
    const batch = [{ jsonrpc: '2.0', id: 11, method: 'ping' },
      { jsonrpc: '2.0', id: 12, method: 'tools/list' },
      { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 999 } }];
    const old = await rawSession(d, '2025-03-26');
    const r = await rawPost(d, batch, sessionHeaders(old));
    assert.equal(r.status, 200, r.text);
    const answers = JSON.parse(r.text);
    assert.ok(Array.isArray(answers), r.text);
    assert.deepEqual(answers.map((a) => a.id).sort(), [11, 12], 'one answer per request, none for the notification');
    assert.ok(answers.find((a) => a.id === 12).result.tools.length >= 12);
    const now = await rawSession(d, '2025-11-25');
    const refused = await rawPost(d, batch, sessionHeaders(now));
    assert.notEqual(refused.status, 200, `a batch in a 2025-11-25 session: ${refused.text}`);
    assert.equal(refused.json?.error?.code, -32600, refused.text);
  });

  it('a JSON-RPC response posted by the client is not taken for a request', async () => {
    const s = await rawSession(d);
    // A JSON-RPC response from the client (to no request of the server's): accepted or
    // refused, but never answered with a result, and the session goes on.
    const r = await rawPost(d, { jsonrpc: '2.0', id: 99, result: {} }, sessionHeaders(s));
    assert.ok(r.status === 202 || r.status === 400 || r.status === 200, `HTTP ${r.status}`);
    assert.equal(r.json?.result, undefined, r.text);
    const ok = await rawPost(d, { jsonrpc: '2.0', id: 5, method: 'ping' }, sessionHeaders(s));
    assert.equal(ok.status, 200, ok.text);
    assert.deepEqual(ok.json?.result, {});
  });
});

describe('bearer token', () => {
  const d = daemonFor({ before, after }, { token: true });

  it('without the token: 401, with a wrong one: 401', async () => {
    for (const auth of [undefined, 'Bearer wrong', `Basic ${TOKEN}`, TOKEN]) {
      const res = await fetch(d.url, {
        method: 'POST',
        headers: {
          'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
          ...(auth ? { Authorization: auth } : {}),
        },
        body: JSON.stringify(initializeRequest()),
      });
      const text = await res.text();
      assert.equal(res.status, 401, `Authorization ${auth}: HTTP ${res.status} ${text}`);
      assert.equal(res.headers.get('mcp-session-id'), null);
    }
  });

  it('the SDK with the token in requestInit works; without it, connect fails', async () => {
    const c = await d.client(); // d.authHeaders(): the token
    try {
      const r = await c.callTool({ name: 'run_command', arguments: { command: 'echo authorised' } });
      assert.equal(r.structuredContent?.stdout, 'authorised\n');
      // A request of this session without the token: 401 all the same.
      const res = await fetch(d.url, {
        method: 'POST',
        headers: {
          'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
          'Mcp-Session-Id': c.transport.sessionId,
          'MCP-Protocol-Version': c.transport.protocolVersion,
        },
        body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' }),
      });
      await res.body?.cancel();
      assert.equal(res.status, 401);
    } finally {
      await closeClient(c);
    }
    await assert.rejects(d.client({ headers: {} }), (e) => {
      assert.ok(e.code === 401 || /\b401\b|unauthori[sz]ed/i.test(String(e)), String(e));
      return true;
    });
  });
});
