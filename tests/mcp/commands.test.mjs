// run_command: results, errors, the timeout, progress notifications while it runs, and a
// cancellation that kills the command's whole process tree.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import {
  call, closeClient, daemonFor, hostProcs, sh, sleep, textOf, waitFor, wrapWords,
} from './lib.mjs';

// A sleep whose command line is this run's own ("sleep 300.123"), to find it in /proc.
function uniqueSleep(base) {
  return `${base}.${String(process.pid % 1000).padStart(3, '0')}${Math.floor(Math.random() * 1000)}`;
}

describe('run_command', () => {
  const d = daemonFor({ before, after });
  let c;
  before(async () => {
    c = await d.client();
  });
  after(async () => {
    await closeClient(c);
  });

  it('success: stdout, exit 0, no isError, a text summary', async () => {
    const r = await call(c, 'run_command', { command: 'echo hello; echo world' });
    assert.ok(!r.isError, JSON.stringify(r));
    const s = r.structuredContent;
    assert.equal(s.status, 'exited');
    assert.equal(s.exit_code, 0);
    assert.equal(s.stdout, 'hello\nworld\n');
    assert.equal(s.stderr, '');
    assert.equal(s.stdout_truncated, false);
    assert.equal(s.stderr_truncated, false);
    assert.equal(typeof s.duration_ms, 'number');
    assert.equal(r.content[0].type, 'text');
    assert.ok(r.content[0].text.length > 0);
  });

  it('a failing command: its exit code and stderr, isError true', async () => {
    const r = await call(c, 'run_command', { command: 'echo out; echo oops >&2; exit 3' });
    assert.equal(r.isError, true, JSON.stringify(r));
    const s = r.structuredContent;
    assert.equal(s.status, 'exited');
    assert.equal(s.exit_code, 3);
    assert.equal(s.stdout, 'out\n');
    assert.equal(s.stderr, 'oops\n');
    assert.match(textOf(r), /3/, 'the summary names the exit code');
  });

  it('a command killed by a signal: status signaled', async () => {
    const r = await call(c, 'run_command', { command: 'kill -KILL $$' });
    assert.equal(r.isError, true);
    assert.equal(r.structuredContent.status, 'signaled', JSON.stringify(r));
    assert.equal(r.structuredContent.signal === 9 || r.structuredContent.signal === 'SIGKILL' ||
      r.structuredContent.signal === 'KILL', true, `signal ${r.structuredContent.signal}`);
  });

  it('argv, cwd, env and stdin', async () => {
    const a = await sh(c, ['printf', '%s|', 'a b', '$HOME', ';']);
    assert.equal(a.stdout, 'a b|$HOME|;|');
    await sh(c, 'mkdir -p sub/dir');
    const s = await sh(c, 'pwd; echo "$FOO"; cat', {
      args: { cwd: 'sub/dir', env: { FOO: 'bar baz' }, stdin: 'from stdin\n' },
    });
    const lines = s.stdout.split('\n');
    assert.match(lines[0], /\/sub\/dir$/);
    assert.equal(lines[1], 'bar baz');
    assert.equal(lines[2], 'from stdin');
  });

  it('runs as the command user (uid 1000), not as root', { skip: process.getuid() !== 0 && 'not root' }, async () => {
    const s = await sh(c, 'id -u');
    assert.equal(s.stdout, '1000\n');
  });

  it('timeout_ms: status timeout, stopped early', async () => {
    const t0 = Date.now();
    const r = await call(c, 'run_command', { command: 'echo started; sleep 5', timeout_ms: 400 });
    const elapsed = Date.now() - t0;
    assert.equal(r.isError, true, JSON.stringify(r));
    assert.equal(r.structuredContent.status, 'timeout', JSON.stringify(r));
    assert.equal(r.structuredContent.stdout, 'started\n', 'the output up to the timeout is kept');
    assert.ok(elapsed < 3000, `answered after ${elapsed} ms`);
  });

  it('progress notifications arrive while it runs, then the result', async () => {
    const events = [];
    const t0 = Date.now();
    const r = await call(c, 'run_command',
      { command: 'for i in 1 2 3; do echo $i; sleep 0.4; done' },
      { onprogress: (p) => events.push({ at: Date.now() - t0, ...p }), timeout: 20000 });
    const done = Date.now() - t0;
    assert.ok(!r.isError, JSON.stringify(r));
    assert.equal(r.structuredContent.stdout, '1\n2\n3\n');
    assert.ok(events.length >= 2, `at least 2 progress notifications, got ${JSON.stringify(events)}`);
    assert.ok(events[0].at < done - 300,
      `the first progress came while it ran (at ${events[0].at} ms, result at ${done} ms)`);
    for (let i = 1; i < events.length; i++) {
      assert.ok(events[i].progress > events[i - 1].progress,
        `progress increases: ${JSON.stringify(events)}`);
    }
  });

  it('a client cancellation kills the command and everything it started', async () => {
    const s1 = uniqueSleep(300);
    const s2 = uniqueSleep(301);
    const ac = new AbortController();
    const t0 = Date.now();
    const pending = call(c, 'run_command', { command: `sleep ${s1} & sh -c "sleep ${s2}" & wait` },
      { signal: ac.signal, timeout: 30000 });
    const onHost = wrapWords().length === 0; // under $SBXD_WRAP its processes are not ours to see
    if (onHost) {
      const seen = await waitFor(() => hostProcs(['sleep', s1]).length && hostProcs(['sleep', s2]).length, 5000);
      assert.ok(seen, 'both sleeps started');
    } else {
      await sleep(500);
    }
    await sleep(Math.max(0, 500 - (Date.now() - t0)));
    ac.abort('test cancels');
    await assert.rejects(pending, 'the call rejects once cancelled');
    const tAbort = Date.now();
    if (onHost) {
      const gone = await waitFor(() => hostProcs(['sleep', s1]).length === 0 &&
        hostProcs(['sleep', s2]).length === 0, 2000);
      assert.ok(gone, `no sleep left 2 s after the cancel: ${hostProcs(['sleep', s1])} ${hostProcs(['sleep', s2])}`);
    }
    // As the sandbox sees it too (and the session goes on).
    const left = await waitFor(async () => {
      const p = await call(c, 'run_command',
        { command: `pgrep -a -x sleep | grep -F -e "sleep ${s1}" -e "sleep ${s2}" || true` });
      return p.structuredContent?.stdout === '' ? p : null;
    }, Math.max(0, 2000 - (Date.now() - tAbort)) + 200);
    assert.ok(left, 'pgrep inside the sandbox finds no sleep');
  });

  it('the output limit: stdout_truncated, status output_limit or exited', async () => {
    // 3 MiB, over sbxd's default 1 MiB per stream.
    const r = await call(c, 'run_command', { command: 'head -c 3145728 /dev/zero | tr "\\0" x' });
    const s = r.structuredContent;
    assert.equal(s.stdout_truncated, true, JSON.stringify({ ...s, stdout: s.stdout?.length }));
    assert.ok(s.stdout.length > 0 && s.stdout.length <= 1048576, `kept ${s.stdout.length} bytes`);
    assert.ok(/^x+$/.test(s.stdout));
  });

  it('neither command nor argv: a tool error or invalid params', async () => {
    let r;
    try {
      r = await call(c, 'run_command', { cwd: '.' });
    } catch (e) {
      assert.equal(e.code, -32602, String(e));
      return;
    }
    assert.equal(r.isError, true, JSON.stringify(r));
  });
});
