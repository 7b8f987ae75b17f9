/**
 * `waste pull` as a user runs it from a terminal, against a local stand-in for the hub: a dry run
 * leaves the store as it was, and the progress bar redraws in place on an 80-column terminal.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { barLine } from '../src/cli/progress.js';
import { BIN, checkpoint, tmpDir } from './helpers.js';
import { HubServer } from './hub-server.js';

const REPO = 'test-org/tiny-moe';
const KL = { shape: 'tiny' as const, config: { hidden_size: 256, vocab_size: 512, intermediate_size: 384, moe_intermediate_size: 64, kv_lora_rank: 64, linear_attn_config: { num_heads: 4, head_dim: 64 } } };

/** A command's output as it arrives, without blocking this process (whose event loop serves the hub). */
function run(cmd: string, args: string[], env: NodeJS.ProcessEnv): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const c = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    c.stdout.on('data', (d) => (stdout += d));
    c.stderr.on('data', (d) => (stderr += d));
    c.on('close', (status) => resolve({ status, stdout, stderr }));
  });
}

/** Every file and directory under `dir` (none when it does not exist). */
function tree(dir: string): string[] {
  return fs.existsSync(dir) ? (fs.readdirSync(dir, { recursive: true }) as string[]).sort() : [];
}

describe('waste pull from a terminal', () => {
  let hub: HubServer;
  before(async () => {
    hub = await new HubServer(REPO, checkpoint({ ...KL, seed: 35, shards: 3 }, 'hub-src')).start();
  });
  after(async () => {
    await hub.stop();
  });

  it('--dry-run writes nothing into the store (nor leaves a scratch behind): the pull after it starts fresh', async () => {
    const home = path.join(tmpDir('home'), 'waste');
    const tmp = tmpDir('tmp');
    const env = { ...process.env, WASTE_HOME: home, HF_ENDPOINT: hub.url, TMPDIR: tmp };
    const dry = await run(process.execPath, [BIN, 'pull', '--dry-run', REPO], env);
    assert.equal(dry.status, 0, dry.stderr);
    assert.match(dry.stdout, /disk at peak/);
    assert.deepEqual(tree(home), [], 'the store is as it was');
    assert.deepEqual(tree(tmp), [], 'the dry run cleaned up after itself');
    const pull = await run(process.execPath, [BIN, 'pull', REPO], env);
    assert.equal(pull.status, 0, pull.stderr);
    assert.doesNotMatch(pull.stderr, /resuming/);
    assert.match(pull.stdout, /^stored tiny-moe in .*; fetched [^,]*; /m);
    assert.doesNotMatch(pull.stdout, /resumed/);
  });

  const hasScript = spawnSync('script', ['--version']).status === 0;
  it('the bar redraws in place on an 80-column terminal: every redraw fits the line', { skip: hasScript ? false : 'no script(1) for a pseudo-terminal' }, async () => {
    // a slow link, so the bar is drawn while the shards are fetched (their names make the longest notes)
    hub.bytesPerSecond = 4 << 20;
    try {
      const cmd = `stty cols 80 rows 24; exec "${process.execPath}" "${BIN}" pull ${REPO} --threads 1`;
      const r = await run('script', ['-qfec', cmd, '/dev/null'], { ...process.env, WASTE_HOME: tmpDir('home'), HF_ENDPOINT: hub.url });
      assert.equal(r.status, 0, r.stdout);
      const redraws = r.stdout
        .split(/\r\n|\r|\n/)
        .map((s) => s.replace(/\x1b\[[0-9;]*[A-Za-z]/g, ''))
        .filter((s) => s.startsWith('pull ['));
      assert.ok(redraws.some((s) => s.includes('fetching')), `the bar was drawn while fetching: ${JSON.stringify(redraws)}`);
      for (const s of redraws) assert.ok([...s].length <= 79, `${[...s].length} columns: ${s}`);
    } finally {
      hub.bytesPerSecond = Infinity;
    }
  });
});

describe('a progress bar fitted to a terminal', () => {
  it('takes the longest text that fits beside a full bar, else narrows the bar and cuts the end; never the last column', () => {
    const long = ' 12.5%  1.40 GiB/11.3 GiB  1 min 3 s elapsed, 7 min 21 s left  fetching model-00001-of-00003.safetensors';
    const short = ' 12.5%  1.40 GiB/11.3 GiB  7 min 21 s left  fetching model-00001-of-00003.safetensors';
    assert.equal(barLine('pull', 0.125, [long, short], 200), `pull [###.....................] ${long}`);
    assert.equal(barLine('pull', 0.125, [long, short], 125), `pull [###.....................] ${short}`);
    for (const cols of [20, 40, 60, 80, 100]) {
      const line = barLine('pull', 0.125, [long, short], cols);
      assert.ok([...line].length <= cols - 1, `${cols}: ${line}`);
      assert.ok(line.startsWith('pull ['), line);
    }
    assert.equal(barLine('pull', 0.5, [long, short], 80), `pull [####....] ${short}`.slice(0, 78) + '…');
  });
});
