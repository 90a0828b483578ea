// The background process tools: start_process, send_input, process_output, kill_process.

import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';

import { call, closeClient, daemonFor, hostProcs, textOf, waitFor, wrapWords } from './lib.mjs';

function ok(r, what) {
  assert.ok(!r.isError, `${what}: ${JSON.stringify(r)}`);
  assert.ok(r.structuredContent, `${what}: structuredContent`);
  return r.structuredContent;
}

// A process_output result: isError exactly when the process has ended other than by
// exiting 0 (as run_command's).
function outputOf(r, what) {
  const s = r.structuredContent;
  assert.ok(s, `${what}: structuredContent in ${JSON.stringify(r)}`);
  const failed = !s.running && (s.status !== 'exited' || s.exit_code !== 0);
  assert.equal(!!r.isError, failed, `${what}: isError ${r.isError} for ${JSON.stringify(s)}`);
  return s;
}

// process_output until the process has ended (wait_ms long-polls), all output gathered.
async function untilEnded(c, id, ms = 10000) {
  const deadline = Date.now() + ms;
  let offset = 0;
  let output = '';
  for (;;) {
    const s = outputOf(await call(c, 'process_output', { id, offset, wait_ms: 1000 }), 'process_output');
    assert.equal(s.id, id);
    output += s.output;
    assert.ok(s.next_offset >= offset, `next_offset ${s.next_offset} after ${offset}`);
    offset = s.next_offset;
    if (!s.running) return { ...s, output };
    assert.ok(Date.now() < deadline, `process ${id} still running after ${ms} ms: ${output}`);
  }
}

describe('process tools', () => {
  const d = daemonFor({ before, after });
  let c;
  before(async () => {
    c = await d.client();
  });
  after(async () => {
    await closeClient(c);
  });

  it('cat: send_input "hi\\n" with eof, its output, then it ends with 0', async () => {
    const st = ok(await call(c, 'start_process', { command: 'cat' }), 'start_process');
    assert.ok(st.id !== undefined && st.id !== '', `an id: ${JSON.stringify(st)}`);
    assert.ok(Number.isInteger(st.pid) && st.pid > 0, `a pid: ${JSON.stringify(st)}`);
    const before = outputOf(await call(c, 'process_output', { id: st.id }), 'process_output');
    assert.equal(before.running, true, 'cat waits for its input');
    ok(await call(c, 'send_input', { id: st.id, data: 'hi\n', eof: true }), 'send_input');
    const end = await untilEnded(c, st.id);
    assert.equal(end.output, 'hi\n');
    assert.equal(end.status, 'exited');
    assert.equal(end.exit_code, 0);
  });

  it('process_output from next_offset gives only what came after', async () => {
    const st = ok(await call(c, 'start_process', {
      argv: ['sh', '-c', 'echo one; sleep 0.5; echo two'],
    }), 'start_process');
    const first = await waitFor(async () => {
      const s = outputOf(await call(c, 'process_output', { id: st.id, wait_ms: 1000 }), 'output');
      return s.output.includes('one') ? s : null;
    }, 3000);
    assert.ok(first, 'the first line came');
    assert.equal(first.output, 'one\n');
    const rest = await untilEnded(c, st.id);
    assert.equal(rest.output, 'one\ntwo\n', 'the whole output from offset 0 ... ');
    const tail = outputOf(await call(c, 'process_output', { id: st.id, offset: first.next_offset }), 'tail');
    assert.equal(tail.output, 'two\n');
    assert.equal(tail.running, false);
  });

  it('cwd and env of a started process', async () => {
    const st = ok(await call(c, 'start_process', {
      command: 'pwd; echo "$GREETING"', cwd: '.', env: { GREETING: 'hello there' },
    }), 'start');
    const end = await untilEnded(c, st.id);
    assert.equal(end.output.split('\n')[1], 'hello there');
    assert.equal(end.output.split('\n')[0], d.ws.replace(/\/$/, ''));
  });

  it('kill_process: a sleep 100 is gone, status signaled', async () => {
    const arg = `100.${process.pid % 1000}${Math.floor(Math.random() * 1000)}`;
    const st = ok(await call(c, 'start_process', { argv: ['sleep', arg] }), 'start sleep');
    const onHost = wrapWords().length === 0;
    if (onHost) {
      assert.ok(await waitFor(() => hostProcs(['sleep', arg]).length > 0, 3000), 'sleep runs');
    }
    const running = outputOf(await call(c, 'process_output', { id: st.id }), 'output');
    assert.equal(running.running, true);
    ok(await call(c, 'kill_process', { id: st.id, signal: 'KILL' }), 'kill_process');
    const end = await untilEnded(c, st.id, 5000);
    assert.ok(['signaled', 'killed'].includes(end.status), `status ${end.status}`);
    if (onHost) {
      assert.ok(await waitFor(() => hostProcs(['sleep', arg]).length === 0, 2000), 'no sleep left');
    }
  });

  it('kill_process with TERM, and with no signal named', async () => {
    for (const signal of ['TERM', undefined]) {
      const st = ok(await call(c, 'start_process', { command: 'sleep 100' }), 'start');
      ok(await call(c, 'kill_process', { id: st.id, signal }), `kill ${signal}`);
      const end = await untilEnded(c, st.id, 5000);
      assert.ok(['signaled', 'killed'].includes(end.status), `kill ${signal}: status ${end.status}`);
    }
  });

  it('timeout_ms of a started process ends it', async () => {
    const st = ok(await call(c, 'start_process', { command: 'sleep 30', timeout_ms: 300 }), 'start');
    const end = await untilEnded(c, st.id, 5000);
    assert.equal(end.status, 'timeout');
  });

  it('sandbox_usage: E2B\'s metrics\' names, a running background process counted', async () => {
    const first = ok(await call(c, 'sandbox_usage', {}), 'sandbox_usage');
    const st = ok(await call(c, 'start_process', { command: 'sleep 30' }), 'start');
    const r = await call(c, 'sandbox_usage', {});
    const u = ok(r, 'sandbox_usage');
    for (const k of ['cpu_count', 'cpu_used_pct', 'mem_used', 'mem_total', 'disk_used', 'disk_total']) {
      assert.equal(typeof u[k], 'number', `${k} in ${JSON.stringify(u)}`);
    }
    assert.ok(u.cpu_count >= 1 && u.mem_used > 0 && u.disk_total >= u.disk_used, JSON.stringify(u));
    assert.equal(u.processes_running, first.processes_running + 1, JSON.stringify(u));
    assert.match(textOf(r), /background process/);
    const bad = await call(c, 'sandbox_usage', { what: 1 });
    assert.equal(bad.isError, true, JSON.stringify(bad));
    ok(await call(c, 'kill_process', { id: st.id }), 'kill');
  });

  it('list_ports and expose_port: a server a process started, and what it may not expose', async () => {
    // A port free now (a random one may be an outgoing connection's, in the ephemeral range).
    const port = await new Promise((resolve, reject) => {
      const s = net.createServer();
      s.once('error', reject);
      s.listen(0, '127.0.0.1', () => {
        const p = s.address().port;
        s.close(() => resolve(p));
      });
    });
    const st = ok(await call(c, 'start_process',
      { command: `python3 -m http.server ${port} --bind 127.0.0.1` }), 'start');
    let mine;
    for (let i = 0; i < 100 && !mine; i++) {
      const l = ok(await call(c, 'list_ports', {}), 'list_ports');
      mine = l.ports.find((p) => p.port === port);
      if (!mine) await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(mine, `port ${port} listed`);
    assert.equal(mine.process_id, st.id);
    assert.equal(mine.proxy, true);
    const e = ok(await call(c, 'expose_port', { port }), 'expose_port');
    assert.equal(e.path, `/proxy/${port}/`);
    assert.equal(e.url, null, 'no --public-url: the path alone');
    // sbxd's own port, and a port nothing listens on: tool errors naming why.
    const own = ok(await call(c, 'list_ports', {}), 'list_ports').ports.find((p) => p.sbxd);
    const r = await call(c, 'expose_port', { port: own.port });
    assert.equal(r.isError, true, JSON.stringify(r));
    assert.match(textOf(r), /sbxd's own/);
    ok(await call(c, 'kill_process', { id: st.id }), 'kill');
    // The signal is sent at once; the listener goes when the process has ended.
    await untilEnded(c, st.id, 5000);
    let gone = false;
    for (let i = 0; i < 100 && !gone; i++) {
      gone = !ok(await call(c, 'list_ports', {}), 'list_ports').ports.some((p) => p.port === port);
      if (!gone) await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(gone, `port ${port} still listed after its process ended`);
    const none = await call(c, 'expose_port', { port });
    assert.equal(none.isError, true, JSON.stringify(none));
  });

  it('an unknown process id: tool errors', async () => {
    for (const [tool, args] of [['process_output', {}], ['send_input', { data: 'x' }], ['kill_process', {}]]) {
      const r = await call(c, tool, { id: 'no-such-process', ...args });
      assert.equal(r.isError, true, `${tool}: ${JSON.stringify(r)}`);
    }
  });
});
