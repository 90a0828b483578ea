// The MCP Inspector's CLI mode as a second, independent client:
//   mcp-inspector --cli URL --transport http --method tools/list

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { HERE, daemonFor } from './lib.mjs';

const INSPECTOR = path.join(HERE, 'node_modules', '.bin', 'mcp-inspector');

// Run the inspector's CLI; resolves { code, stdout, stderr } (never rejects on a status).
function inspector(args, timeout = 60000) {
  return new Promise((resolve) => {
    execFile(INSPECTOR, args, {
      timeout, maxBuffer: 16 << 20, cwd: HERE, env: { ...process.env, NO_COLOR: '1' },
    }, (err, stdout, stderr) => {
      resolve({ code: err ? (err.code ?? err.signal) : 0, stdout, stderr });
    });
  });
}

// The JSON the CLI prints (its whole stdout).
function parsed(out) {
  try {
    return JSON.parse(out.stdout);
  } catch {
    assert.fail(`the inspector printed no JSON (status ${out.code}):\n${out.stdout}\n${out.stderr}`);
  }
}

describe('MCP Inspector CLI', () => {
  const d = daemonFor({ before, after });

  it('tools/list over Streamable HTTP lists run_command and the rest', async () => {
    const out = await inspector(['--cli', d.url, '--transport', 'http', '--method', 'tools/list']);
    assert.equal(out.code, 0, `status ${out.code}:\n${out.stdout}\n${out.stderr}`);
    assert.ok(out.stdout.includes('run_command'), out.stdout);
    const names = parsed(out).tools.map((t) => t.name);
    for (const n of ['run_command', 'run_code', 'read_file', 'write_file', 'start_process']) {
      assert.ok(names.includes(n), `${n} in ${names}`);
    }
  });

  it('tools/call run_command through the inspector', async () => {
    const out = await inspector(['--cli', d.url, '--transport', 'http', '--method', 'tools/call',
      '--tool-name', 'run_command', '--tool-arg', 'command=echo via-inspector']);
    assert.equal(out.code, 0, `status ${out.code}:\n${out.stdout}\n${out.stderr}`);
    const r = parsed(out);
    assert.equal(r.structuredContent?.stdout, 'via-inspector\n', out.stdout);
  });

  it('resources/list through the inspector', async () => {
    const out = await inspector(['--cli', d.url, '--transport', 'http', '--method', 'resources/list']);
    assert.equal(out.code, 0, `status ${out.code}:\n${out.stdout}\n${out.stderr}`);
    assert.ok(Array.isArray(parsed(out).resources), out.stdout);
  });
});
