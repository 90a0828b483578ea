// Helpers of the mcp tier: a real sbxd per test file (started on 127.0.0.1 with an
// ephemeral port and a fresh workspace, found ready by its JSON "listening" log line,
// stopped with SIGTERM and checked to exit 0 with no sanitizer report), MCP clients of the
// TypeScript SDK connected to its /mcp endpoint, raw JSON-RPC over fetch for what the SDK
// never sends, and a look at the host's processes through /proc.
//
// $SBXD_BIN: the sbxd under test (tests/mcp/run sets it). $SBXD_WRAP: a command that runs
// sbxd inside something, split on spaces (as the other tiers read it).

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

export const HERE = path.dirname(fileURLToPath(import.meta.url));
export const ROOT = path.resolve(HERE, '..', '..');

// sbxd must log "listening" within this many ms (sanitizer builds start slowly), and exit
// within this many after SIGTERM.
export const START_TIMEOUT_MS = 20000;
export const STOP_TIMEOUT_MS = 20000;
// The token of the daemons started with { token: true }.
export const TOKEN = 'mcp-tier-secret';
// The protocol versions the server accepts, newest first.
export const PROTOCOL_VERSIONS = ['2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05'];
// The tools /mcp offers.
export const TOOL_NAMES = [
  'run_command', 'run_code', 'read_file', 'write_file', 'list_files', 'delete_file',
  'move_file', 'stat_file', 'start_process', 'process_output', 'send_input', 'kill_process',
  'sandbox_usage',
  'search_files', 'find_files', 'edit_file', 'list_ports', 'expose_port',
];

export function sbxdBin() {
  return path.resolve(process.env.SBXD_BIN || path.join(ROOT, 'build', 'sbxd'));
}

export function wrapWords() {
  return (process.env.SBXD_WRAP || '').split(' ').filter(Boolean);
}

const live = new Set(); // daemons started and not yet stopped

// A daemon still running when the test process leaves (a test that threw before its
// after() hook) is killed with it.
process.on('exit', () => {
  for (const d of live) {
    try { d.proc.kill('SIGKILL'); } catch { /* gone */ }
    try { fs.rmSync(d.tmp, { recursive: true, force: true }); } catch { /* best effort */ }
  }
});

export class Sbxd {
  // opts.token: start with SBXD_TOKEN=TOKEN. opts.args: more options. opts.env: more
  // environment variables.
  constructor(opts = {}) {
    this.token = opts.token ? TOKEN : null;
    this.tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sbxd-mcp-')));
    // The command user (uid 1000) must be able to reach the workspace below it.
    fs.chmodSync(this.tmp, 0o755);
    this.ws = path.join(this.tmp, 'ws');
    fs.mkdirSync(this.ws, { mode: 0o755 });
    this.logPath = path.join(this.tmp, 'sbxd.log');
    // setpriv --pdeathsig: sbxd gets SIGTERM should this test process die without
    // stopping it.
    const pdeath = fs.existsSync('/usr/bin/setpriv') ? ['/usr/bin/setpriv', '--pdeathsig', 'TERM'] : [];
    this.argv = [...pdeath, ...wrapWords(), sbxdBin(), '--listen', '127.0.0.1:0', '--grpc-listen', 'off',
      '--log-format', 'json', '--workspace', this.ws, ...(opts.args || [])];
    // A clean environment: only what the test says (and an ASan build's options).
    this.env = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' };
    for (const k of ['ASAN_OPTIONS', 'UBSAN_OPTIONS', 'LSAN_OPTIONS']) {
      if (process.env[k] !== undefined) this.env[k] = process.env[k];
    }
    if (this.token) this.env.SBXD_TOKEN = this.token;
    Object.assign(this.env, opts.env || {});
    this.proc = null;
    this.port = null;
    this.exited = null; // { code, signal } once it has exited
  }

  get url() {
    return `http://127.0.0.1:${this.port}/mcp`;
  }

  async start() {
    fs.accessSync(sbxdBin(), fs.constants.X_OK);
    const log = fs.openSync(this.logPath, 'w');
    try {
      this.proc = spawn(this.argv[0], this.argv.slice(1), {
        env: this.env, cwd: '/', stdio: ['ignore', 'ignore', log],
      });
    } finally {
      fs.closeSync(log);
    }
    live.add(this);
    this.exitPromise = new Promise((resolve) => {
      this.proc.on('exit', (code, signal) => {
        this.exited = { code, signal };
        resolve(this.exited);
      });
    });
    const deadline = Date.now() + START_TIMEOUT_MS;
    while (Date.now() < deadline) {
      const ev = this.logEvents().find((e) => e.event === 'listening' && Number.isInteger(e.port));
      if (ev) {
        this.port = ev.port;
        return this;
      }
      if (this.exited) {
        throw new Error(`sbxd exited during start-up (${JSON.stringify(this.exited)}):\n${this.logText()}`);
      }
      await sleep(20);
    }
    throw new Error(`sbxd did not log "listening" within ${START_TIMEOUT_MS} ms:\n${this.logText()}`);
  }

  logText() {
    try {
      return fs.readFileSync(this.logPath, 'utf8');
    } catch {
      return '';
    }
  }

  logEvents() {
    const evs = [];
    for (const line of this.logText().split('\n')) {
      if (!line.startsWith('{')) continue;
      try {
        evs.push(JSON.parse(line));
      } catch { /* a line cut short while being written */ }
    }
    return evs;
  }

  // SIGTERM, wait, remove the temporary directory. Throws unless sbxd exited 0 with no
  // sanitizer report (and was running until then).
  async stop() {
    if (!this.proc) { // never started (or stopped already)
      if (this.tmp) fs.rmSync(this.tmp, { recursive: true, force: true });
      return;
    }
    const problems = [];
    if (this.exited) problems.push(`sbxd had exited before the SIGTERM (${JSON.stringify(this.exited)})`);
    else this.proc.kill('SIGTERM');
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), STOP_TIMEOUT_MS);
    const st = await this.exitPromise;
    clearTimeout(timer);
    const log = this.logText();
    if (!problems.length && (st.code !== 0 || st.signal)) {
      problems.push(`sbxd did not exit 0 after SIGTERM (${JSON.stringify(st)})`);
    }
    if (/AddressSanitizer|LeakSanitizer|runtime error:/.test(log)) {
      problems.push('sbxd logged a sanitizer report');
    }
    live.delete(this);
    this.proc = null;
    fs.rmSync(this.tmp, { recursive: true, force: true });
    if (problems.length) throw new Error(`${problems.join('; ')}; its log:\n${log.slice(-6000)}`);
  }

  // Headers every raw request of a test needs on this daemon (the token).
  authHeaders() {
    return this.token ? { Authorization: `Bearer ${this.token}` } : {};
  }

  // A connected SDK client. opts.headers: more request headers (default: the token's);
  // opts.name: the client's name.
  async client(opts = {}) {
    const headers = opts.headers || this.authHeaders();
    const transport = new StreamableHTTPClientTransport(new URL(this.url), {
      requestInit: { headers },
    });
    const client = new Client({ name: opts.name || 'sbxd-mcp-tier', version: '1.0.0' },
      { capabilities: {} });
    await client.connect(transport);
    return client;
  }
}

// Start a daemon for a test file: before() starts it, after() stops it (and fails the
// file unless it exits 0). Returns the Sbxd (its fields set once before() has run).
export function daemonFor(t, opts = {}) {
  const d = new Sbxd(opts);
  t.before(async () => {
    await d.start();
  });
  t.after(async () => {
    await d.stop();
  });
  return d;
}

// Close a client, ending its session (DELETE) first.
export async function closeClient(client) {
  try {
    await client.transport.terminateSession();
  } catch { /* the test may have ended it already */ }
  await client.close();
}

// callTool that fails the test on a protocol error, returning the CallToolResult.
export async function call(client, name, args, options) {
  return client.callTool({ name, arguments: args }, undefined, options);
}

// The text of a result's text content items, joined.
export function textOf(result) {
  return (result.content || []).filter((c) => c.type === 'text').map((c) => c.text).join('');
}

// Run a command through the run_command tool (a string: a shell command; an array: argv);
// returns structuredContent, after checking it exited 0 (unless opts.allowFailure).
export async function sh(client, command, opts = {}) {
  const what = Array.isArray(command) ? { argv: command } : { command };
  const r = await call(client, 'run_command', { ...what, ...(opts.args || {}) });
  const s = r.structuredContent;
  if (!opts.allowFailure && (r.isError || !s || s.status !== 'exited' || s.exit_code !== 0)) {
    throw new Error(`run_command ${JSON.stringify(command)} failed: ${JSON.stringify(r)}`);
  }
  return s;
}

// A raw JSON-RPC POST to /mcp. body: an object (sent as JSON) or a string (sent as is).
// Returns { status, headers, text, json } (json: the parsed body when it is JSON, or the
// first JSON message of an event stream).
export async function rawPost(d, body, headers = {}) {
  const res = await fetch(d.url, {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      ...d.authHeaders(),
      ...headers,
    },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return readAnswer(res);
}

async function readAnswer(res) {
  const text = await res.text();
  let json = null;
  const ct = res.headers.get('content-type') || '';
  try {
    if (ct.startsWith('text/event-stream')) {
      const data = text.split('\n').find((l) => l.startsWith('data:'));
      if (data) json = JSON.parse(data.slice(5));
    } else if (text) {
      json = JSON.parse(text);
    }
  } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, text, json };
}

export function initializeRequest(id = 1, version = PROTOCOL_VERSIONS[0]) {
  return {
    jsonrpc: '2.0', id, method: 'initialize',
    params: {
      protocolVersion: version,
      capabilities: {},
      clientInfo: { name: 'sbxd-mcp-tier-raw', version: '1.0.0' },
    },
  };
}

// A raw session: initialize, then notifications/initialized. Returns { id, version }.
export async function rawSession(d, version = PROTOCOL_VERSIONS[0]) {
  const r = await rawPost(d, initializeRequest(1, version));
  if (r.status !== 200) throw new Error(`initialize: HTTP ${r.status}: ${r.text}`);
  const id = r.headers.get('mcp-session-id');
  if (!id) throw new Error('initialize: no Mcp-Session-Id header');
  const negotiated = r.json.result.protocolVersion;
  const n = await rawPost(d, { jsonrpc: '2.0', method: 'notifications/initialized' },
    { 'Mcp-Session-Id': id, 'MCP-Protocol-Version': negotiated });
  if (n.status !== 202 && n.status !== 200) {
    throw new Error(`notifications/initialized: HTTP ${n.status}: ${n.text}`);
  }
  return { id, version: negotiated };
}

// Headers of a request within a raw session.
export function sessionHeaders(s) {
  return { 'Mcp-Session-Id': s.id, 'MCP-Protocol-Version': s.version };
}

// Live (not zombie) processes of this machine whose command line is exactly argv.
export function hostProcs(argv) {
  const want = argv.join('\0');
  const found = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${name}/cmdline`, 'latin1').replace(/\0$/, '');
      if (cmd !== want) continue;
      const st = fs.readFileSync(`/proc/${name}/stat`, 'latin1');
      if (st.slice(st.lastIndexOf(')') + 2, st.lastIndexOf(')') + 3) === 'Z') continue;
      found.push(Number(name));
    } catch { /* gone meanwhile */ }
  }
  return found;
}

// Poll fn() until it returns a truthy value or ms pass; returns its last value.
export async function waitFor(fn, ms, every = 50) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v || Date.now() >= deadline) return v;
    await sleep(every);
  }
}

export { sleep };
