/**
 * Kimi K3's checkpoint through the converter: its nested config and prefix, its MXFP4 experts
 * (decoded exactly; a scale byte that is not a number refused), its vision tower carried at 8 bits
 * with vision.json, K3's special tokens; resumable byte for byte; and the container against the
 * checkpoint's own f32 forward pass.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { before, describe, it } from 'node:test';
import { MXFP4_GROUP, decodeMxfp4, encodeMxfp4 } from '../src/checkpoint/mxfp4.js';
import { SafetensorsSet } from '../src/checkpoint/safetensors.js';
import { CheckpointWeights } from '../src/checkpoint/weights.js';
import { Fmt } from '../src/container/format.js';
import { convert } from '../src/convert/convert.js';
import { visionFormat, visionShape } from '../src/convert/plan.js';
import { Model } from '../src/api/model.js';
import { measureQuality } from '../src/quality/quality.js';
import { openModelContainer } from '../src/model/registry.js';
import { decodeRecordMatrix } from '../src/quant/decode.js';
import { WasteError } from '../src/util/errors.js';
import { checkpoint, containerDigest, tmpDir } from './helpers.js';

describe('MXFP4', () => {
  const one = (packed: number[], scale: number, cols = MXFP4_GROUP) => {
    const p = new Uint8Array(cols / 2);
    p.set(packed);
    const out = new Float32Array(cols);
    decodeMxfp4(p, Uint8Array.of(...new Array(cols / MXFP4_GROUP).fill(scale)), 1, cols, out, 'test');
    return [...out];
  };

  it('the even column in the low nibble, the sign in bit 3, the eight E2M1 magnitudes', () => {
    // codes 0..7 then 8..15 (negative), two a byte
    const bytes = [0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe];
    assert.deepEqual(one(bytes, 127).slice(0, 16), [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6]);
  });

  it('the E8M0 scale 2^(e − 127), at its edges; 0xFF (not a number) is refused, naming the tensor', () => {
    assert.deepEqual(one([0x02], 128).slice(0, 2), [2, 0]);
    assert.deepEqual(one([0x20], 126).slice(0, 2), [0, 0.5]);
    assert.equal(one([0x02], 254)[0], 2 ** 127);
    // OCP MX: e = 0 is 2^-127, not zero
    assert.equal(one([0x07], 0)[0], 6 * 2 ** -127);
    assert.throws(() => one([0x07], 255), (e: unknown) => e instanceof WasteError && /test: row 0 group 0 has the E8M0 scale 0xFF, which is not a number/.test(e.message));
  });

  it('values it can represent come back exactly', () => {
    const cols = 64;
    const x = new Float32Array(3 * cols);
    const grid = [0, 0.5, 1, 1.5, 2, 3, 4, 6];
    for (let i = 0; i < x.length; i++) x[i] = grid[i % 8] * (i % 3 ? 1 : -1) * 2 ** ((i >> 5) - 2);
    const { packed, scales } = encodeMxfp4(x, 3, cols);
    const back = new Float32Array(x.length);
    decodeMxfp4(packed, scales, 3, cols, back, 'test');
    assert.deepEqual([...back].map(Math.abs), [...x].map(Math.abs));
  });
});

describe('waste convert: a Kimi K3 checkpoint', () => {
  const src = checkpoint({ shape: 'k3-tiny', seed: 3, shards: 3 }, 'hf-k3');
  const out = path.join(tmpDir('conv-k3'), 'model');
  let digest: string;
  before(async () => {
    await convert(src, out, { threads: 2 });
    digest = containerDigest(out);
  });

  it('is laid out as K3’s release: nested config, language_model. prefix, MXFP4 experts, a vision tower', () => {
    const cfg = JSON.parse(fs.readFileSync(path.join(src, 'config.json'), 'utf8'));
    assert.equal(cfg.architectures[0], 'KimiK3ForConditionalGeneration');
    assert.ok(cfg.text_config.attn_res_block_size > 0);
    const st = SafetensorsSet.open(src);
    try {
      assert.equal(st.info('language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_packed').dtype, 'U8');
      assert.ok(st.has('vision_tower.patch_embed.proj.weight'));
      const w = new CheckpointWeights(st, CheckpointWeights.prefixOf(st));
      assert.equal(w.prefix, 'language_model.');
      assert.deepEqual(w.info('model.layers.1.block_sparse_moe.experts.0.w2.weight').shape, [64, 64]);
    } finally {
      st.close();
    }
  });

  it('writes a container with the config flattened, the prefix, the vision tower at 8 bits, vision.json and K3’s specials', () => {
    const m = JSON.parse(fs.readFileSync(path.join(out, 'manifest.json'), 'utf8'));
    assert.equal(m.arch, 'kimi-k3');
    assert.equal(m.tensor_prefix, 'language_model.');
    assert.equal(m.config.hidden_size, 128);
    assert.equal(m.config._outer.architectures[0], 'KimiK3ForConditionalGeneration');
    assert.equal(m.config.text_config, undefined);
    const t = (name: string) => m.trunk.find((x: { name: string }) => x.name === name);
    // the 2-D matrices they act as; vectors and matrices below 65,536 values stay F32
    assert.deepEqual(t('vision_tower.patch_embed.proj.weight').shape, [128, 588]);
    assert.equal(t('vision_tower.patch_embed.proj.weight').fmt, Fmt.Q8G);
    assert.deepEqual(t('vision_tower.patch_embed.pos_emb.weight').shape, [64, 128]);
    assert.equal(t('vision_tower.encoder.blocks.0.norm0.weight').fmt, Fmt.F32);
    assert.equal(t('vision_tower.encoder.blocks.0.wqkv.weight').fmt, Fmt.F32);
    assert.equal(t('vision_tower.encoder.blocks.0.mlp.fc0.weight').fmt, Fmt.Q8G);
    // the release's sizes are 8-bit, whatever --trunk-bits says
    assert.equal(visionFormat(visionShape('vision_tower.patch_embed.proj.weight', [1024, 3, 14, 14])), Fmt.Q8G);
    assert.deepEqual(visionShape('vision_tower.patch_embed.proj.weight', [1024, 3, 14, 14]), [1024, 588]);
    assert.deepEqual(visionShape('vision_tower.patch_embed.pos_emb.weight', [64, 64, 1024]), [4096, 1024]);
    assert.equal(visionFormat([4096, 1024]), Fmt.Q8G);
    assert.equal(t('language_model.model.embed_tokens.weight').fmt, Fmt.Q8G);
    const vision = JSON.parse(fs.readFileSync(path.join(out, 'vision.json'), 'utf8'));
    assert.deepEqual([vision.vt_hidden_size, vision.text_hidden_size, vision.media_placeholder_token_id, vision.max_patches], [128, 128, 1024 - 256 + 21, 1024]);
    assert.deepEqual(vision.image_mean, [0.5, 0.5, 0.5]);
    assert.ok(fs.existsSync(path.join(out, 'preprocessor_config.json')));
    const specials = JSON.parse(fs.readFileSync(path.join(out, 'specials.json'), 'utf8'));
    assert.deepEqual(specials.find((s: { text: string }) => s.text === '<|end_of_msg|>'), { id: 770, text: '<|end_of_msg|>' });
    assert.equal(JSON.parse(fs.readFileSync(path.join(out, 'generation_config.json'), 'utf8')).temperature, 1);
  });

  it('encodes the MXFP4 experts at the latent width: 3 bits a weight, about VQ3R’s usual error', () => {
    const st = SafetensorsSet.open(src);
    const c = openModelContainer(out);
    try {
      assert.equal(c.config.arch, 'kimi-k3');
      const w = new CheckpointWeights(st, 'language_model.');
      let num = 0;
      let den = 0;
      for (const [L, bank] of c.banks) {
        assert.deepEqual(bank.layout.shapes.map((s) => [s.rows, s.cols]), [[64, 64], [64, 64], [64, 64]]);
        const buf = new Uint8Array(bank.stride);
        for (let e = 0; e < bank.experts; e++) {
          const rec = bank.read(e, buf, true);
          for (const k of [0, 1, 2] as const) {
            const W = decodeRecordMatrix(rec, bank.layout, c.quant!, c.codebooks!, k);
            const R = w.readF32(`model.layers.${L}.block_sparse_moe.experts.${e}.${['w1', 'w3', 'w2'][k]}.weight`);
            for (let i = 0; i < R.length; i++) {
              num += (W[i] - R[i]) ** 2;
              den += R[i] ** 2;
            }
          }
        }
      }
      const err = Math.sqrt(num / den);
      assert.ok(err > 0.08 && err < 0.2, `expert weight error ${err}`);
    } finally {
      c.close();
      st.close();
    }
  });

  it('runs close to the checkpoint’s own f32 forward pass (waste quality on K3)', async () => {
    const ids = Array.from({ length: 128 }, (_, i) => (i * 7919) % 768);
    const r = await measureQuality(src, out, ids, { ctx: 64 });
    // random weights: next-token distributions are nearly flat, and the routed experts carry VQ3R's error
    assert.ok(r.kl.mean > 0.01 && r.kl.mean < 0.4, `KL ${r.kl.mean}`);
    assert.equal(r.router.length, 6);
    for (const x of r.router) assert.ok(x.agreement > 0.5, `layer ${x.layer}: ${x.agreement}`);
    const m = await Model.open(out);
    try {
      assert.equal(m.arch.id, 'kimi-k3');
    } finally {
      await m.close();
    }
  });

  it('resumes after an interruption and ends byte-identical', async () => {
    for (const stopAt of [3, 20]) {
      const dst = path.join(tmpDir('resume-k3'), 'model');
      let reports = 0;
      await assert.rejects(
        convert(src, dst, {
          threads: 1,
          onProgress: () => {
            if (++reports === stopAt) throw new Error('interrupted');
          },
        }),
        /interrupted/,
      );
      assert.ok(!fs.existsSync(dst));
      const r = await convert(src, dst, { threads: 2 });
      assert.equal(r.resumed, true);
      assert.equal(containerDigest(dst), digest, `stopped at report ${stopAt}`);
    }
  });

  it('a damaged MXFP4 scale is one error naming the tensor, and nothing is published', async () => {
    const bad = tmpDir('hf-k3-bad');
    for (const f of fs.readdirSync(src)) fs.copyFileSync(path.join(src, f), path.join(bad, f));
    const st = SafetensorsSet.open(bad);
    const name = 'language_model.model.layers.2.block_sparse_moe.experts.3.w3.weight_scale';
    const t = st.info(name);
    st.close();
    const fd = fs.openSync(t.file, 'r+');
    fs.writeSync(fd, Uint8Array.of(0xff), 0, 1, t.offset + 5);
    fs.closeSync(fd);
    const dst = path.join(tmpDir('bad-out'), 'model');
    await assert.rejects(convert(bad, dst, { threads: 1 }), (e: unknown) => e instanceof WasteError && e.message.includes('layers.2.block_sparse_moe.experts.3.w3.weight_packed: row 2 group 1 has the E8M0 scale 0xFF'));
    assert.ok(!fs.existsSync(dst));
  });
});
