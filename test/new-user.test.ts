/**
 * What a new user meets first: the name `demo`, commands that need no model argument, options
 * checked as the CLI checks its flags, a budget larger than the machine, exact tokenizing of a
 * file, synthetic models that run every command, and a chat that says when a reply is empty.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Model } from '../src/api/model.js';
import { usableRam } from '../src/engine/ram.js';
import { DEMO_MODEL } from '../src/store/names.js';
import { KIMI_SPECIALS } from '../src/model/kimi/synth.js';
import { synthVocabulary } from '../src/synth/tokenizer.js';
import { loadTokenizer } from '../src/tokenizer/load.js';
import { WasteError } from '../src/util/errors.js';
import { BIN, checkpoint, synth, tmpDir } from './helpers.js';

function waste(args: string[], opts: { input?: string; cwd?: string } = {}) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', input: opts.input, cwd: opts.cwd ?? tmpDir('cwd') });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

describe('the name demo, and commands without a model', () => {
  it('`waste run demo "Hi"` runs the shipped model from any directory', () => {
    const r = waste(['run', 'demo', 'Hi', '-n', '4']);
    assert.equal(r.code, 0, r.err);
    assert.match(r.err, /\[\d+ tokens/);
  });

  it('info, plan, verify and tokenize default to the demo model, as run does', () => {
    const info = waste(['info', '--json']);
    assert.equal(info.code, 0, info.err);
    assert.equal(JSON.parse(info.out).path, DEMO_MODEL);
    const plan = waste(['plan', '--json']);
    assert.equal(plan.code, 0, plan.err);
    assert.ok(JSON.parse(plan.out).floor_bytes > 0);
    const verify = waste(['verify', '-q']);
    assert.equal(verify.code, 0, verify.err);
    assert.match(verify.out, /^ok: trunk.bin, codebooks.bin, tokenizer.model, specials.json, chat_template.jinja and generation_config.json match their SHA-256/);
    const tok = waste(['tokenize', 'Hello world', '--json']);
    assert.equal(tok.code, 0, tok.err);
    assert.deepEqual(JSON.parse(tok.out), loadTokenizer(DEMO_MODEL)!.encode('Hello world'));
    assert.deepEqual(JSON.parse(waste(['tokenize', 'demo', 'Hello world', '--json']).out), JSON.parse(tok.out));
  });

  it('a directory called demo is ./demo; the bare name is the shipped model', () => {
    const cwd = tmpDir('has-demo');
    fs.mkdirSync(path.join(cwd, 'demo'));
    assert.equal(waste(['info', '--json', 'demo'], { cwd }).code, 0);
    const own = waste(['info', './demo'], { cwd });
    assert.equal(own.code, 1);
    assert.match(own.err, /^waste: demo\/manifest.json: no such file\n$/);
  });

  it('the chat banner names the model, and an empty reply says so', () => {
    // the end of the turn forced as the first token: a reply with no text
    const r = waste(['chat', '--logit-bias', '4091=100', '-n', '5'], { input: 'Hello\n' });
    assert.equal(r.code, 0, r.err);
    assert.match(r.err, /^waste chat: demo \(chat format/);
    assert.doesNotMatch(r.err, /undefined/);
    assert.match(r.out, /^\(empty reply\)\n/);
  });
});

describe('waste tokenize reads a file exactly', () => {
  it('keeps the last newline of a file and of standard input', () => {
    const f = path.join(tmpDir('tok'), 'text.txt');
    fs.writeFileSync(f, 'a line\n\n');
    const tok = loadTokenizer(DEMO_MODEL)!;
    const want = tok.encode('a line\n\n');
    assert.deepEqual(JSON.parse(waste(['tokenize', '--file', f, '--json']).out), want);
    assert.deepEqual(JSON.parse(waste(['tokenize', 'demo', '--json'], { input: 'a line\n\n' }).out), want);
  });

  it('refuses bytes that are not UTF-8 rather than changing them', () => {
    const f = path.join(tmpDir('tok'), 'latin1.txt');
    fs.writeFileSync(f, Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x0a]));
    const r = waste(['tokenize', '--file', f]);
    assert.equal(r.code, 2);
    assert.equal(r.err, `waste: ${f} is not UTF-8 text\n`);
  });
});

describe('open() checks its options as the CLI checks its flags', () => {
  for (const [opts, pattern] of [
    [{ chunk: 0 }, /the prefill chunk \(chunk\) must be an integer in 1\.\.4096 \(got 0\)/],
    [{ chunk: 2.5 }, /the prefill chunk \(chunk\) must be an integer in 1\.\.4096 \(got 2\.5\)/],
    [{ threads: 0 }, /threads must be an integer in 1\.\.256/],
    [{ maxContext: -1 }, /context length \(maxContext\) must be an integer/],
    [{ lookahead: Number.NaN }, /lookahead must be an integer in 0\.\.64 \(got NaN\)/],
    [{ lookaheadLayers: 9 }, /lookahead layers \(lookaheadLayers\) must be an integer in 0\.\.8 \(got 9\)/],
    [{ lookaheadLayers: 1.5 }, /lookahead layers \(lookaheadLayers\) must be an integer in 0\.\.8 \(got 1\.5\)/],
    [{ lookaheadLayers: '2' }, /lookahead layers \(lookaheadLayers\) must be an integer in 0\.\.8 \(got "2"\)/],
    [{ learnEvery: -1 }, /seconds between saves of the learned hot set \(learnEvery\) must be an integer in 0\.\.604800 \(got -1\)/],
    [{ budget: 0 }, /budget must be a number of bytes, at least 1 \(got 0\)/],
    [{ cachePolicy: 'fifo' }, /cachePolicy must be one of lfru, lru, lfuda \(got "fifo"\)/],
    [{ verify: 'yes' }, /verify must be true or false/],
    [{ sessions: 2000 }, /sessions must be an integer in 1\.\.1024/],
    [{ chunks: 16 }, /unknown open option "chunks" \(known: budget, /],
  ] as [Record<string, unknown>, RegExp][])
    it(JSON.stringify(opts, (_k, v) => (Number.isNaN(v) ? 'NaN' : v)), async () => {
      await assert.rejects(Model.open('demo', opts), (e: unknown) => e instanceof WasteError && e.code === 'E_ARG' && pattern.test(e.message));
    });

  it('a budget above the machine is lowered to usable RAM, and the caller told', async () => {
    const warnings: string[] = [];
    const m = await Model.open('demo', { budget: 2 ** 50, warn: (w) => warnings.push(w) });
    try {
      const usable = usableRam().usable;
      assert.equal(m.stats().budgetBytes, usable);
      assert.equal(warnings.length, 1);
      assert.match(warnings[0], /^the budget of 1\.00 PiB|^the budget of 1024\.0 TiB/);
      assert.match(warnings[0], /is more than the [\d.]+ [GMT]iB of usable RAM on this machine; using /);
    } finally {
      await m.close();
    }
    // past 2^53 bytes too: a size is lowered, never refused for being large
    const huge = await Model.open('demo', { budget: 1e21, warn: () => {} });
    assert.equal(huge.stats().budgetBytes, usableRam().usable);
    await huge.close();
    const r = waste(['eval', 'Hi', '--budget', '1048576G']);
    assert.equal(r.code, 0, r.err);
    assert.match(r.err, /^waste: warning: the budget of 1024\.0 TiB is more than the [\d.]+ GiB of usable RAM on this machine; using [\d.]+ GiB\n/);
  });
});

describe('synthetic models run every command', () => {
  it("the synthetic tokenizer covers the model's whole vocabulary, every id with its own text", () => {
    const v = synthVocabulary(163_840, KIMI_SPECIALS);
    assert.equal(v.ranks.length + v.specials.length, 163_840);
    assert.equal(new Set(v.ranks.map((r) => Buffer.from(r).toString('latin1'))).size, v.ranks.length);
  });

  it('run and eval on a synthetic model whose vocabulary is far larger than its fixed sentence', () => {
    const dir = synth({ shape: 'tiny', seed: 8, tokenizer: true, config: { vocab_size: 5000 } }, 'big-vocab');
    const tok = loadTokenizer(dir, { modelVocab: 5000 })!;
    assert.equal(tok.vocabSize, 5000);
    for (const id of [300, 2500, 4992]) assert.ok(tok.decode([id]).length > 0, `id ${id}`);
    const run = waste(['run', dir, '--raw', 'hello', '-n', '12', '--temp', '1', '--seed', '3']);
    assert.equal(run.code, 0, run.err);
    const ev = waste(['eval', dir, 'hello']);
    assert.equal(ev.code, 0, ev.err);
  });
});

describe('a session is all or nothing', () => {
  it('a bad id or a full context anywhere in a long input leaves the session as it was', async () => {
    const m = await Model.open('demo', { maxContext: 256, sessions: 2 });
    try {
      const s = m.session();
      const ids = Array.from({ length: 200 }, (_, i) => 10 + i);
      await assert.rejects(s.forward([...ids.slice(0, 150), 99999]), /token id 99999 is outside the vocabulary/);
      assert.equal(s.position, 0);
      assert.equal(s.history.length, 0);
      await assert.rejects(s.forward([...ids, ...ids]), /context is full: 400 tokens would exceed the context length of 256/);
      assert.equal(s.position, 0);
      // and it still runs
      assert.equal((await s.forward(ids)).length, m.config.vocab);
      assert.equal(s.position, 200);
    } finally {
      await m.close();
    }
  });

  it('a session closed while its forward pass waits for another never runs it', async () => {
    const m = await Model.open('demo', { sessions: 2 });
    try {
      const b = m.session();
      const a = m.session();
      const long = b.forward(Array.from({ length: 640 }, (_, i) => 10 + (i % 3000)));
      const queued = a.forward([1, 2, 3]).then(
        () => 'ran',
        (e: Error) => e.message,
      );
      a.close();
      const c = m.session(); // takes the state a gave back
      await long;
      assert.equal(await queued, 'the session has been closed');
      assert.equal(c.position, 0, "a's pass ran on the state c now holds");
    } finally {
      await m.close();
    }
  });
});

describe('waste convert and a FIFO in its work directory', () => {
  it('a FIFO in place of the job record is refused, not waited on', { skip: spawnSync('mkfifo', ['--version']).status === 0 ? false : 'no mkfifo' }, () => {
    const src = checkpoint({ shape: 'tiny', seed: 61 }, 'fifo-ck');
    const out = path.join(tmpDir('fifo-out'), 'model');
    fs.mkdirSync(`${out}.partial`);
    spawnSync('mkfifo', [path.join(`${out}.partial`, 'convert.json')]);
    const r = waste(['convert', src, out, '-q']);
    assert.equal(r.code, 0, r.err);
    assert.ok(fs.existsSync(path.join(out, 'manifest.json')));
  });
});
