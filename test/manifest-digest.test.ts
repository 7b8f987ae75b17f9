/**
 * manifest.json's own SHA-256 (`manifest_sha256`): no other checksum covers the manifest, and its
 * values say what every other byte means, so a damaged number or name in it used to change the
 * answer while `waste verify` said "ok" (test/fuzz.test.ts found it). Checked by `waste verify`
 * and `--verify`; a manifest edited by hand still opens without them.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { manifestDigest } from '../src/container/checksums.js';
import { Model } from '../src/api/model.js';
import { WasteError } from '../src/util/errors.js';
import { BIN, copyContainer, synth } from './helpers.js';

const good = synth({ shape: 'tiny', seed: 62 }, 'digest');
const manifestFile = (d: string) => path.join(d, 'manifest.json');

function verify(dir: string) {
  const r = spawnSync(process.execPath, [BIN, 'verify', dir, '-q'], { encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

/** The logits after twelve tokens. */
async function answer(dir: string, verify = false): Promise<Float32Array> {
  const m = await Model.open(dir, { threads: 1, ioThreads: 0, warm: false, verify });
  try {
    return Float32Array.from(await m.newSession({ maxContext: 16 }).forward([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]));
  } finally {
    await m.close();
  }
}

/** A copy of the good container whose manifest text went through `edit`. */
function edited(edit: (text: string) => string): string {
  const d = copyContainer(good);
  const text = fs.readFileSync(manifestFile(d), 'utf8');
  const next = edit(text);
  assert.notEqual(next, text);
  fs.writeFileSync(manifestFile(d), next);
  return d;
}

describe("the manifest's own checksum", () => {
  it('every writer records it: the SHA-256 of the document without it, as JSON.stringify writes it', () => {
    const doc = JSON.parse(fs.readFileSync(manifestFile(good), 'utf8'));
    assert.match(doc.manifest_sha256, /^[0-9a-f]{64}$/);
    assert.equal(manifestDigest(doc), doc.manifest_sha256);
    assert.equal(Object.keys(doc).pop(), 'manifest_sha256', 'written last, after the checksums');
  });

  it('one changed digit in a config value changes the answer; waste verify and --verify say the manifest is damaged', async () => {
    const d = edited((t) => t.replace('"rms_norm_eps": 0.00001', '"rms_norm_eps": 0.00101'));
    const [before, after] = [await answer(good), await answer(d)];
    assert.notDeepEqual(after, before, 'the damage changes the answer');
    const r = verify(d);
    assert.equal(r.code, 1, r.out + r.err);
    assert.equal(r.out, 'FAILED: manifest.json: SHA-256 mismatch with its manifest_sha256 (the manifest is damaged, or was edited by hand)\n');
    await assert.rejects(answer(d, true), (e: unknown) => e instanceof WasteError && e.code === 'E_IO' && /manifest_sha256/.test(e.message));
  });

  it("a renamed optional tensor: the model would run without it, and verify says so", async () => {
    const d = edited((t) => t.replace('"model.layers.2.block_sparse_moe.gate.e_score_correction_bias"', '"model.layers.2.block_sparse_moe.gate.a_score_correction_bias"'));
    assert.notDeepEqual(await answer(d), await answer(good));
    assert.equal(verify(d).code, 1);
  });

  it('a manifest re-indented still verifies; one edited by hand with its digest removed opens but is unverified; a malformed digest is refused', async () => {
    const indented = edited((t) => JSON.stringify(JSON.parse(t), null, 4));
    const r = verify(indented);
    assert.equal(r.code, 0, r.out + r.err);
    assert.deepEqual(await answer(indented, true), await answer(good));

    const without = edited((t) => {
      const doc = JSON.parse(t);
      delete doc.manifest_sha256;
      doc.config.rms_norm_eps = 1e-3;
      return JSON.stringify(doc);
    });
    const u = verify(without);
    assert.equal(u.code, 1);
    assert.match(u.out, /^UNVERIFIED: manifest\.json has no manifest_sha256/);
    await answer(without);

    const malformed = edited((t) => t.replace(/"manifest_sha256": "[0-9a-f]{64}"/, '"manifest_sha256": "XYZ"'));
    await assert.rejects(answer(malformed), /manifest\.json: manifest_sha256 must be 64 lower-case hex digits \(got "XYZ"\)/);
  });
});
