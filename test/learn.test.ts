import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { before, describe, it } from 'node:test';
import { Model, type OpenOptions } from '../src/api/model.js';
import { readHotlist } from '../src/experts/hotlist.js';
import { BIN, copyContainer, synth } from './helpers.js';

/**
 * The learned hot set: the commands that decode save what the cache holds to usage.waste at the
 * end (atomically, merged with what was there), the next open loads it, and nothing about it can
 * fail a run — a directory that cannot be written, a damaged file, a run killed halfway.
 */
const dir = synth({ shape: 'tiny', seed: 52, experts: 24, layers: 6, tokenizer: true, config: { num_experts_per_token: 4 } }, 'learn');
const prompt = [5, 17, 200, 3, 99, 42, 7, 7, 250, 11];
const decode = [33, 44, 55, 66, 77, 88];

function waste(args: string[], input?: string) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', input });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

async function decodeOnce(d: string, opts: OpenOptions, asked?: Set<number>) {
  const m = await Model.open(d, { threads: 1, ...opts });
  if (asked) m.observeRoutes((layer, route) => route.forEach((e) => asked.add(layer * 65536 + e)));
  try {
    const s = m.newSession();
    await s.forward(prompt);
    for (const id of decode) await s.forward([id]);
    return m.stats();
  } finally {
    await m.close();
  }
}

const noTemporaries = (d: string) => assert.deepEqual(fs.readdirSync(d).filter((f) => f.includes('.tmp-')), []);
const experts = (d: string) => {
  const m = JSON.parse(fs.readFileSync(path.join(d, 'manifest.json'), 'utf8')) as { config: { num_experts: number } };
  return m.config.num_experts;
};

/** An expert of layer 1 that decoding the test's sequence never asks for. */
async function unaskedExpert(d: string, budget: number): Promise<number> {
  const asked = new Set<number>();
  await decodeOnce(d, { budget }, asked);
  let unused = 0;
  while (asked.has(65536 + unused)) unused++;
  assert.ok(unused < experts(d));
  return unused;
}

/** A hotlist naming one expert of layer 1 with `hits`, and nothing else. */
function oneEntryHotlist(file: string, expert: number, hits: number): void {
  const buf = Buffer.alloc(32);
  buf.writeUInt32LE(0x47535557, 0);
  buf.writeUInt32LE(1, 4);
  buf.writeUInt16LE(1, 16);
  buf.writeUInt16LE(expert, 18);
  buf.writeUInt32LE(hits, 20);
  fs.writeFileSync(file, buf);
}

describe('learning the hot set', () => {
  let budget = 0;
  before(async () => {
    const probe = await Model.open(dir, { threads: 1 });
    // room for a few layers' experts, not all of them: what is warm decides hits
    budget = probe.plan.floorBytes + 200_000;
    await probe.close();
  });

  it('learn: true writes usage.waste at close, with no temporary left, and the next open warms from it', async () => {
    const d = copyContainer(dir);
    const file = path.join(d, 'usage.waste');
    const cold = await decodeOnce(d, { budget, learn: true });
    assert.ok(fs.existsSync(file));
    noTemporaries(d);
    const listed = readHotlist(file, () => experts(d), 6 * experts(d));
    assert.ok(listed.length > 0 && listed.length <= cold.slots, `${listed.length} entries for ${cold.slots} slots`);
    const warm = await decodeOnce(d, { budget });
    assert.ok(warm.warmed > 0, 'warmed from the learned hotlist');
    assert.ok(warm.hits > cold.hits, `warm ${warm.hits} hits vs cold ${cold.hits}`);
    // learn off (the library's default): the file is left as it was
    const bytes = fs.readFileSync(file);
    await decodeOnce(d, { budget });
    assert.deepEqual(fs.readFileSync(file), bytes);
  });

  it('a model that computed nothing leaves the hotlist as it was', async () => {
    const d = copyContainer(dir);
    await decodeOnce(d, { budget, learn: true });
    const bytes = fs.readFileSync(path.join(d, 'usage.waste'));
    const m = await Model.open(d, { threads: 1, budget, learn: true });
    await m.close();
    assert.deepEqual(fs.readFileSync(path.join(d, 'usage.waste')), bytes);
  });

  it('merges with the hotlist already there: an expert no longer held stays at half its count', async () => {
    const d = copyContainer(dir);
    const file = path.join(d, 'usage.waste');
    // an expert of layer 1 this run never asks for, in a hotlist with a large count
    const unused = await unaskedExpert(d, budget);
    oneEntryHotlist(file, unused, 1000);
    // not warmed, never asked for: not held when the run ends
    await decodeOnce(d, { budget, learn: true, warm: false });
    const after = readHotlist(file, () => experts(d), 6 * experts(d));
    assert.deepEqual(after.find((e) => e.layer === 1 && e.expert === unused), { layer: 1, expert: unused, hits: 500, last: 0 });
    assert.ok(after.length > 1, 'and the run added what it learned');
    assert.ok(after.every((e) => e.hits > 0));
  });

  it('a directory that cannot be written is a warning, and close() still succeeds', async () => {
    const d = copyContainer(dir);
    const warnings: string[] = [];
    // root writes anywhere a mode allows, so as root the file is put under a regular file instead
    const root = process.getuid?.() === 0;
    const file = root ? path.join(d, 'manifest.json', 'usage.waste') : path.join(d, 'usage.waste');
    if (!root) fs.chmodSync(d, 0o555);
    try {
      await decodeOnce(d, { budget, learn: true, usageFile: file, warn: (w) => warnings.push(w) });
    } finally {
      if (!root) fs.chmodSync(d, 0o755);
    }
    assert.equal(warnings.length, 1);
    assert.match(warnings[0], /^the learned hot set was not saved to .*usage\.waste \((EACCES|EROFS|EPERM|ENOTDIR)/);
    assert.ok(!fs.existsSync(path.join(d, 'usage.waste')));
    noTemporaries(d);
  });

  it('a damaged or truncated hotlist is ignored at open and replaced by a good one', async () => {
    const d = copyContainer(dir);
    const file = path.join(d, 'usage.waste');
    await decodeOnce(d, { budget, learn: true });
    const good = fs.readFileSync(file);
    for (const bad of [good.subarray(0, good.length - 7), Buffer.concat([Buffer.from('XXXX'), good.subarray(4)]), Buffer.alloc(0)]) {
      fs.writeFileSync(file, bad);
      const s = await decodeOnce(d, { budget, learn: true });
      assert.equal(s.warmed, 0);
      assert.ok(readHotlist(file, () => experts(d), 6 * experts(d)).length > 0, 'rewritten whole');
    }
  });

  it('waste run learns by default, --no-learn does not, and the next run starts warm', () => {
    const d = copyContainer(dir);
    const file = path.join(d, 'usage.waste');
    const args = ['run', d, 'the quick brown fox', '--raw', '-n', '6', '--budget', String(budget), '--threads', '1', '--json'];
    const off = waste([...args, '--no-learn']);
    assert.equal(off.code, 0, off.err);
    assert.ok(!fs.existsSync(file), '--no-learn writes nothing');
    const cold = JSON.parse(waste(args).out);
    assert.ok(fs.existsSync(file), 'learned by default');
    const warm = JSON.parse(waste(args).out);
    assert.equal(warm.text, cold.text);
    assert.ok(warm.stats.hits > cold.stats.hits, `warm ${warm.stats.hits} hits vs cold ${cold.stats.hits}`);
  });

  it('waste chat learns at the end of the conversation', () => {
    const d = copyContainer(dir);
    const r = waste(['chat', d, '-n', '4', '--budget', String(budget)], 'hello\n/quit\n');
    assert.equal(r.code, 0, r.err);
    assert.ok(fs.existsSync(path.join(d, 'usage.waste')));
  });

  /** `waste serve d` with `args`, once it has answered one completion. */
  async function serveOnce(d: string, args: string[]) {
    const child = spawn(process.execPath, [BIN, 'serve', d, '--port', '0', '-q', '--budget', String(budget), ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    const url = await new Promise<string>((resolve, reject) => {
      child.stderr.on('data', (b) => {
        err += b;
        const m = /listening on (http:\/\/\S+)/.exec(err);
        if (m) resolve(m[1]);
      });
      child.on('exit', () => reject(new Error(`serve exited: ${err}`)));
    });
    const r = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: 'once upon', max_tokens: 4 }) });
    assert.equal(r.status, 200);
    await r.json();
    return { child, err: () => err };
  }

  it('waste serve learns when it shuts down', async () => {
    const d = copyContainer(dir);
    const { child, err } = await serveOnce(d, []);
    assert.ok(!fs.existsSync(path.join(d, 'usage.waste')), 'not before it ends');
    const code = await new Promise<number | null>((resolve) => {
      child.on('exit', (c) => resolve(c));
      child.kill('SIGTERM');
    });
    assert.equal(code, 0, err());
    assert.ok(fs.existsSync(path.join(d, 'usage.waste')));
  });

  it('saving again while open merges with the hotlist from before the first save (an earlier entry stays at half, not a quarter), or with what another process wrote since', async () => {
    const d = copyContainer(dir);
    const file = path.join(d, 'usage.waste');
    const unused = await unaskedExpert(d, budget);
    oneEntryHotlist(file, unused, 1000);
    const m = await Model.open(d, { threads: 1, budget, learn: true, warm: false });
    const entry = () => readHotlist(file, () => experts(d), 6 * experts(d)).find((e) => e.layer === 1 && e.expert === unused);
    try {
      const s = m.newSession();
      await s.forward(prompt);
      m.saveUsage();
      for (const id of decode) await s.forward([id]);
      m.saveUsage();
      assert.deepEqual(entry(), { layer: 1, expert: unused, hits: 500, last: 0 });
      // another process writes the file meanwhile: the next save merges with what it wrote
      oneEntryHotlist(file, unused, 64);
      m.saveUsage();
      assert.deepEqual(entry(), { layer: 1, expert: unused, hits: 32, last: 0 });
      // removed meanwhile: what it listed is gone
      fs.rmSync(file);
      m.saveUsage();
      assert.equal(entry(), undefined);
    } finally {
      await m.close();
    }
  });

  it('learnEvery saves the hot set while the model is open, between forward passes', async () => {
    const d = copyContainer(dir);
    const file = path.join(d, 'usage.waste');
    const m = await Model.open(d, { threads: 1, budget, learn: true, learnEvery: 1 });
    try {
      const s = m.newSession();
      await s.forward(prompt);
      for (const id of decode) await s.forward([id]);
      // the timer fires on its own: the test only waits, as a caller would (the bound guards a hang)
      for (let i = 0; i < 600 && !fs.existsSync(file); i++) await new Promise((r) => setTimeout(r, 100));
      assert.ok(fs.existsSync(file), 'saved while open');
      noTemporaries(d);
      assert.ok(readHotlist(file, () => experts(d), 6 * experts(d)).length > 0);
    } finally {
      await m.close();
    }
  });

  it('waste serve --learn-every keeps what it learned when it is killed', async () => {
    const d = copyContainer(dir);
    const file = path.join(d, 'usage.waste');
    const { child } = await serveOnce(d, ['--learn-every', '1']);
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    try {
      for (let i = 0; i < 600 && !fs.existsSync(file); i++) await new Promise((r) => setTimeout(r, 100));
      assert.ok(fs.existsSync(file), 'saved while serving');
    } finally {
      child.kill('SIGKILL');
      await exited;
    }
    assert.ok(readHotlist(file, () => experts(d), 6 * experts(d)).length > 0, 'a whole hotlist after SIGKILL');
  });

  it('a save removes the temporary a writer killed mid-save left, and keeps a live one\'s', async () => {
    const d = copyContainer(dir);
    const file = path.join(d, 'usage.waste');
    // a process that has exited: its pid is free (and not reused within this test)
    const gone = spawnSync(process.execPath, ['-e', 'console.log(process.pid)'], { encoding: 'utf8' });
    const stale = `${file}.tmp-${Number(gone.stdout.trim())}`;
    const live = `${file}.tmp-${process.ppid}`;
    fs.writeFileSync(stale, 'half a hotlist');
    fs.writeFileSync(live, 'another writer, mid-save');
    await decodeOnce(d, { budget, learn: true });
    assert.ok(!fs.existsSync(stale), 'the dead writer\'s temporary is removed');
    assert.ok(fs.existsSync(live), 'a live writer\'s temporary is left alone');
    assert.ok(readHotlist(file, () => experts(d), 6 * experts(d)).length > 0);
  });

  it('a run killed before its end leaves the earlier hotlist whole', async () => {
    const d = copyContainer(dir);
    const file = path.join(d, 'usage.waste');
    await decodeOnce(d, { budget, learn: true });
    const before = fs.readFileSync(file);
    const child = spawn(process.execPath, [BIN, 'run', d, 'once upon a time', '--raw', '-n', '4000', '--budget', String(budget)], { stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    // killed once it is generating (its prompt is echoed as generation starts); a run that ended
    // first would have failed the test below
    const started = await Promise.race([new Promise<boolean>((resolve) => child.stdout.once('data', () => resolve(true))), exited.then(() => false)]);
    assert.ok(started, 'the run started');
    child.kill('SIGKILL');
    await exited;
    assert.deepEqual(fs.readFileSync(file), before);
    noTemporaries(d);
  });
});
