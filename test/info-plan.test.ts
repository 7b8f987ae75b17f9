/**
 * `waste info` and `waste plan` on what `run` and `serve` open: a container (its vision tower
 * described) and a HuggingFace checkpoint folder (run with every weight in f32).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { before, describe, it } from 'node:test';
import { convert } from '../src/convert/convert.js';
import { Model } from '../src/api/model.js';
import { BIN, checkpoint, tmpDir } from './helpers.js';

function waste(...args: string[]) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

function json(...args: string[]) {
  const r = waste(...args, '--json');
  assert.equal(r.code, 0, r.err);
  return JSON.parse(r.out);
}

/** The values of a checkpoint's tensors whose names start with one of `prefixes`, from the safetensors headers themselves. */
function numelOf(dir: string, prefixes: string[]): number {
  let n = 0;
  for (const f of fs.readdirSync(dir).filter((f) => f.endsWith('.safetensors'))) {
    const b = fs.readFileSync(path.join(dir, f));
    const header = JSON.parse(b.subarray(8, 8 + Number(b.readBigUInt64LE(0))).toString('utf8')) as Record<string, { dtype: string; shape: number[] }>;
    for (const [name, t] of Object.entries(header)) if (prefixes.some((p) => name.startsWith(p))) n += t.shape.reduce((a, d) => a * d, 1);
  }
  return n;
}

describe('waste info and plan', () => {
  let k3src = '';
  let k3 = '';
  let kl = '';
  before(async () => {
    k3src = checkpoint({ shape: 'k3-tiny', seed: 3, shards: 1 }, 'hf-k3-info');
    k3 = path.join(tmpDir('info'), 'k3');
    await convert(k3src, k3, { threads: 2 });
    kl = checkpoint({ shape: 'tiny', seed: 5, shards: 2 }, 'hf-kl-info');
  });

  it("info describes a model's vision tower — layers, width, heads, parameters, patches and rows an image, its room as plan reserves it — and says nothing of one a model lacks", () => {
    const params = numelOf(k3src, ['vision_tower.', 'mm_projector.']);
    for (const dir of [k3, k3src]) {
      const v = json('info', dir).vision;
      assert.deepEqual({ ...v, loadedBytes: 0 }, { layers: 2, hidden: 128, heads: 2, parameters: params, patch: 14, maxPatches: 1024, maxRows: 256, loadedBytes: 0, mediaToken: 789 });
      assert.equal(v.loadedBytes, json('plan', dir).vision_bytes, 'the room plan reserves for it');
      const text = waste('info', dir);
      assert.equal(text.code, 0, text.err);
      assert.match(text.out, /\nvision +2 layers × 128 wide, 2 heads; patches of 14 px, up to 1024 an image \(256 rows of the prompt\); [\d.]+ MiB loaded, by the first image\n/);
      assert.match(text.out, new RegExp(`\\nparams .*, and ${params} in the vision tower\\n`));
    }
    assert.equal(json('info', 'demo').vision, null);
    assert.doesNotMatch(waste('info', 'demo').out, /vision/);
  });

  it('info and plan take a HuggingFace checkpoint folder, as run and serve do; plan gives the budget opening it takes', async () => {
    for (const [dir, layers, dtypes] of [
      [kl, 4, ['BF16', 'F32']],
      [k3src, 7, ['BF16', 'F32', 'U8']],
    ] as [string, number, string[]][]) {
      const info = json('info', dir);
      assert.equal(info.kind, 'checkpoint');
      assert.equal(info.layers, layers);
      assert.deepEqual(info.formats.checkpoint, dtypes);
      const files = fs.readdirSync(dir).filter((f) => f.endsWith('.safetensors'));
      assert.equal(info.bytes.files, files.length);
      assert.equal(info.bytes.stored, files.reduce((a, f) => a + fs.statSync(path.join(dir, f)).size, 0) - headerBytes(dir), 'every byte after the headers is a tensor');
      const text = waste('info', dir);
      assert.equal(text.code, 0, text.err);
      assert.match(text.out, /\nformats +a HuggingFace checkpoint \(.*\), run as the unquantized reference/);
      const plan = json('plan', dir, '--threads', '2');
      assert.equal(plan.kind, 'checkpoint');
      assert.equal(plan.total_expert_records, 0, 'nothing streams');
      const m = await Model.open(dir, { threads: 2 });
      try {
        assert.equal(plan.floor_bytes, m.stats().budgetBytes, 'the floor is what opening it takes');
        assert.equal(plan.default_budget_bytes, m.stats().budgetBytes);
      } finally {
        await m.close();
      }
      const shown = waste('plan', dir);
      assert.equal(shown.code, 0, shown.err);
      assert.match(shown.out, /\ndefault budget +\S+ \S+: the floor, every weight resident in f32/);
    }
  });
});

/** The bytes of a checkpoint's safetensors files that are headers, not tensors. */
function headerBytes(dir: string): number {
  let n = 0;
  for (const f of fs.readdirSync(dir).filter((f) => f.endsWith('.safetensors'))) n += 8 + Number(fs.readFileSync(path.join(dir, f)).readBigUInt64LE(0));
  return n;
}
