import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Model } from '../src/api/model.js';
import { BIN, copyContainer, readF32, sameBits, synth, tmpDir } from './helpers.js';

function waste(...args: string[]) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

/** A failure is one line on stderr starting "waste:", never a stack trace. */
function assertCleanFailure(r: { code: number | null; err: string }, code: number, re: RegExp) {
  assert.equal(r.code, code, r.err);
  assert.match(r.err, re);
  assert.doesNotMatch(r.err, /^\s+at /m, 'no stack trace');
}

describe('CLI', () => {
  const model = synth({ shape: 'tiny', seed: 41 }, 'cli');

  it('--help lists the commands', () => {
    const r = waste('--help');
    assert.equal(r.code, 0);
    for (const c of ['info', 'logits', 'verify', 'synth']) assert.match(r.out, new RegExp(`\\b${c}\\b`));
  });

  it('info prints the architecture, and --json the same as data', () => {
    const text = waste('info', model);
    assert.equal(text.code, 0, text.err);
    assert.match(text.out, /4: 3 KDA \+ 1 MLA/);
    assert.match(text.out, /VQ3R/);
    const j = JSON.parse(waste('info', model, '--json').out);
    assert.equal(j.layers, 4);
    assert.equal(j.pattern, 'KKKM');
    assert.equal(j.moe.experts, 8);
    assert.equal(j.formats.experts.fmt, 'VQ3R');
    assert.ok(j.bytes.expertRecord % 4096 === 0);
  });

  it('logits writes vocab_size float32 values, or one row per id with --all, matching the API', async () => {
    const out = path.join(tmpDir('out'), 'l.bin');
    const ids = [5, 6, 7, 250];
    assert.equal(waste('logits', model, '--ids', ids.join(','), '--out', out).code, 0);
    const last = readF32(out);
    assert.equal(last.length, 300);
    assert.equal(waste('logits', model, '--ids', ids.join(' '), '--out', out, '--all').code, 0);
    const all = readF32(out);
    assert.equal(all.length, 4 * 300);
    assert.equal(waste('logits', model, '--ids', ids.join(','), '--out', out, '--all', '--sequential', '--verify').code, 0);
    assert.ok(sameBits(readF32(out), all), 'one at a time gives the same bits as one prefill');
    const m = await Model.open(model);
    try {
      assert.ok(sameBits(await m.newSession().forward(ids), last));
    } finally {
      await m.close();
    }
  });

  it('verify passes a good container and names the first bad record of a damaged one', () => {
    const ok = waste('verify', model, '-q');
    assert.equal(ok.code, 0, ok.err);
    assert.match(ok.out, /ok: trunk\.bin and codebooks\.bin match their SHA-256; 24 expert records in 3 banks/);
    const d = copyContainer(model);
    const f = path.join(d, 'experts-L2.bin');
    const b = fs.readFileSync(f);
    b[5 * (b.length / 8) + 700] ^= 1;
    fs.writeFileSync(f, b);
    const bad = waste('verify', d, '-q');
    assert.equal(bad.code, 1);
    assert.match(bad.out, /FAILED: experts-L2\.bin: layer 2 expert 5: checksum mismatch/);
  });

  it('a damaged container gives one clear line and exit 1', () => {
    const d = copyContainer(model);
    const f = path.join(d, 'experts-L1.bin');
    fs.truncateSync(f, 4096);
    assertCleanFailure(waste('logits', d, '--ids', '1', '--out', path.join(d, 'x')), 1, /^waste: experts-L1\.bin: 4096 bytes, but the manifest says/);
    assertCleanFailure(waste('info', '/no/such/dir'), 1, /^waste: \/no\/such\/dir: no such file/);
  });

  it('bench runs and reports as JSON (speed is not asserted: benchmarks are not tests)', () => {
    const r = waste('bench', '--dispatch', '--quick', '--json');
    assert.equal(r.code, 0, r.err);
    const j = JSON.parse(r.out);
    assert.ok(j.dispatch.tokensPerSecond[1] > 0 && j.dispatch.tokensPerSecond[2] > 0);
  });

  it('plan prints the floor and refuses a budget below it', () => {
    const j = JSON.parse(waste('plan', model, '--json').out);
    assert.ok(j.floor_bytes > j.trunk_bytes && j.default_budget_bytes >= j.floor_bytes);
    assert.equal(j.working_set_records, 3 * 3);
    // each session reserves its own state, and the floor grows with it (arenas round to whole pages)
    const three = JSON.parse(waste('plan', model, '--json', '--sessions', '3').out);
    assert.equal(three.state_bytes, 3 * j.state_bytes);
    assert.ok(three.floor_bytes > j.floor_bytes + j.state_bytes, `${three.floor_bytes} vs ${j.floor_bytes}`);
    const below = waste('plan', model, '--budget', String(j.floor_bytes - 1));
    assert.equal(below.code, 2, "a budget below the floor is a usage error, as when opening");
    assert.match(below.out, /BELOW the floor/);
    const r = waste('logits', model, '--ids', '1', '--out', path.join(tmpDir('o'), 'x'), '--budget', String(j.floor_bytes - 1));
    assertCleanFailure(r, 2, new RegExp(`below this model's floor of .*\\(${j.floor_bytes} bytes`));
  });

  it('plan --ram plans for a machine of that size, idle, whatever this one holds', () => {
    const tiny = JSON.parse(waste('plan', model, '--json', '--ram', '64G').out);
    assert.equal(tiny.usable_ram_bytes, 64 * 2 ** 30);
    assert.equal(tiny.available_ram_bytes, null, 'another machine: nothing measured of it');
    assert.equal(tiny.default_from, 'expert bytes', 'the demo fits whole in 64 GiB');
    // a machine whose RAM less the margin (1 GiB below 8 GiB) and the process's 0.5 GiB falls between the floor and every expert: the default is what remains
    const j = JSON.parse(waste('plan', model, '--json').out);
    const all = tiny.default_budget_bytes;
    const small = JSON.parse(waste('plan', model, '--json', '--ram', String(Math.ceil((j.floor_bytes + all) / 2) + 1.5 * 2 ** 30)).out);
    assert.ok(small.default_budget_bytes < all && small.default_budget_bytes >= small.floor_bytes, `${small.default_budget_bytes} of ${all}`);
    assert.equal(small.default_from, 'usable RAM');
    const r = waste('plan', model, '--ram', '1G', '--budget', '2G');
    assert.match(r.err, /more than the 1\.00 GiB of usable RAM/);
    assertCleanFailure(waste('plan', model, '--ram', 'lots'), 2, /ram "lots" is not a size/);
  });

  it('bench MODEL reports the streaming numbers as JSON', () => {
    const r = waste('bench', model, '--tokens', '3', '--prompt-tokens', '2', '--json', '--threads', '1');
    assert.equal(r.code, 0, r.err);
    const j = JSON.parse(r.out);
    for (const k of ['decode_tok_s', 'floor_tok_s', 'hit_rate', 'bytes_per_token', 'read_wait_s', 'peak_rss_bytes', 'baseline_rss_bytes', 'budget_bytes', 'odirect', 'prefill_reads', 'prefill_bytes', 'chunk'])
      assert.ok(k in j, k);
    assert.ok(j.decode_tok_s > 0 && j.peak_rss_bytes > j.baseline_rss_bytes);
    // a cold cache: the prompt's experts were read
    assert.ok(j.prefill_reads > 0 && j.prefill_bytes > 0 && j.chunk === 64, JSON.stringify(j));
    // no model and nothing else to measure: the demo model (O_DIRECT where the file system allows it)
    const d = waste('bench', '--tokens', '3', '--prompt-tokens', '2', '--json', '--threads', '1');
    assert.equal(d.code, 0, d.err);
    const dj = JSON.parse(d.out);
    assert.ok(dj.decode_tok_s > 0);
    assert.equal(typeof dj.odirect, 'boolean');
  });

  it('usage errors exit 2', () => {
    assert.equal(waste('logits', model, '--ids', 'abc', '--out', '/tmp/x').code, 2);
    assert.equal(waste('logits', model, '--out', '/tmp/x').code, 2);
    assert.equal(waste('frobnicate').code, 2);
    assertCleanFailure(waste('logits', model, '--ids', '1,300', '--out', '/tmp/x'), 2, /token id 300 is outside the vocabulary/);
  });

  it('text commands on a model without a tokenizer say so before loading it, and print nothing else', () => {
    // `model` is a synthetic container with token ids only
    for (const args of [['run', model, '--raw', 'hello'], ['eval', model, 'hello'], ['perplexity', model, 'hello'], ['chat', model], ['serve', model, '--port', '0']]) {
      const r = waste(...args);
      assert.equal(r.code, 1, args.join(' '));
      assert.equal(r.out, '', args.join(' '));
      assert.match(r.err, /has no tokenizer \(tokenizer\.model, tiktoken\.model or tokenizer\.json\), so it runs token ids only/, args.join(' '));
    }
    // a path that is not there is reported as such, not as a model without a tokenizer
    const missing = waste('run', path.join(tmpDir('gone'), 'nothing-here'), 'hello');
    assert.equal(missing.code, 1);
    assert.match(missing.err, /nothing-here: no such file/);
  });

  it('synth writes a container that opens, and refuses to overwrite without --force', () => {
    const d = path.join(tmpDir('synth'), 'm');
    const r = waste('synth', d, '--layers', '2', '--experts', '4', '--seed', '9', '-q');
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /2 layers/);
    assert.equal(waste('verify', d, '-q').code, 0);
    assertCleanFailure(waste('synth', d, '-q'), 2, /is not empty \(use --force/);
    assert.equal(waste('synth', d, '-q', '--force').code, 0);
  });
});
