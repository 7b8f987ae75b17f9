import { openModelContainer } from '../src/model/registry.js';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Model } from '../src/api/model.js';
import { WasteError, type WasteErrorCode } from '../src/util/errors.js';
import { copyContainer, synth } from './helpers.js';

const good = synth({ shape: 'tiny', seed: 21 }, 'good');

type Json = Record<string, any>;
const IN_NORM = 'model.layers.0.input_layernorm.weight';
const POST_NORM = 'model.layers.0.post_attention_layernorm.weight';
const tensor = (m: Json, name: string): Json => m.trunk.find((t: Json) => t.name === name);
function editManifest(dir: string, edit: (m: Json) => void): void {
  const file = path.join(dir, 'manifest.json');
  const m = JSON.parse(fs.readFileSync(file, 'utf8'));
  edit(m);
  fs.writeFileSync(file, JSON.stringify(m));
}

/** Opening (and running two tokens through) `dir` fails with `code` and a message matching `re`. */
async function assertFails(dir: string, code: WasteErrorCode, re: RegExp, verify = false): Promise<void> {
  let err: unknown;
  try {
    const m = await Model.open(dir, { verify });
    try {
      await m.newSession().forward([1, 2, 3, 4]);
    } finally {
      await m.close();
    }
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof WasteError, `expected a WasteError, got ${err}`);
  assert.equal(err.code, code, err.message);
  assert.match(err.message, re);
  assert.doesNotMatch(err.message, /[\n\r]/, 'one line');
}

describe('container reader', () => {
  it('opens a good container and describes it', () => {
    const c = openModelContainer(good);
    try {
      assert.equal(c.config.layers, 4);
      assert.deepEqual(
        c.config.layerKinds.map((k) => k.attn),
        ['kda', 'kda', 'kda', 'mla'],
      );
      assert.equal(c.banks.size, 3);
      assert.equal(c.codebooks!.count, 27);
    } finally {
      c.close();
    }
  });

  describe('missing files', () => {
    for (const f of ['manifest.json', 'trunk.bin', 'codebooks.bin', 'experts-L2.bin']) {
      it(`${f}`, async () => {
        const d = copyContainer(good);
        fs.rmSync(path.join(d, f));
        await assertFails(d, 'E_IO', new RegExp(`${f.replace('.', '\\.')}: no such file`));
      });
    }
    it('a directory that does not exist', async () => {
      await assertFails('/nonexistent/model', 'E_IO', /no such file/);
    });
    it('a file instead of a directory', async () => {
      await assertFails(path.join(good, 'trunk.bin'), 'E_IO', /a container is a directory/);
    });
  });

  describe('manifest faults name the field', () => {
    const cases: [string, (m: Json) => void, WasteErrorCode, RegExp][] = [
      ['format_version missing', (m) => delete m.format_version, 'E_FORMAT', /format_version is missing/],
      ['format_version 1', (m) => (m.format_version = 1), 'E_FORMAT', /format_version is 1; this build reads container format 0/],
      ['absurd hidden_size', (m) => (m.config.hidden_size = 1e12), 'E_FORMAT', /config\.hidden_size must be an integer in 1\.\.65536 \(got 1000000000000\)/],
      ['absurd layer count', (m) => (m.config.num_hidden_layers = 100000), 'E_FORMAT', /config\.num_hidden_layers must be an integer/],
      ['negative vocab', (m) => (m.config.vocab_size = -3), 'E_FORMAT', /config\.vocab_size/],
      ['hidden_size as a string', (m) => (m.config.hidden_size = '96'), 'E_FORMAT', /config\.hidden_size must be an integer/],
      ['top-k above the experts', (m) => (m.config.num_experts_per_token = 9), 'E_FORMAT', /config\.num_experts_per_token must be an integer in 1\.\.8/],
      ['zero KDA head_dim', (m) => (m.config.linear_attn_config.head_dim = 0), 'E_FORMAT', /linear_attn_config\.head_dim/],
      ['KDA layer out of range', (m) => m.config.linear_attn_config.kda_layers.push(9), 'E_FORMAT', /kda_layers\[3\] must be an integer in 1\.\.4/],
      ['a layer both KDA and MLA', (m) => m.config.linear_attn_config.kda_layers.push(4), 'E_FORMAT', /layer 4 is named by both/],
      ['eps of zero', (m) => (m.config.rms_norm_eps = 0), 'E_FORMAT', /rms_norm_eps/],
      ['a tensor of the wrong shape', (m) => {
        const t = m.trunk.find((x: Json) => x.name === 'model.layers.1.self_attn.q_proj.weight');
        t.shape = [48, 95];
        delete t.bytes;
      }, 'E_FORMAT', /model\.layers\.1\.self_attn\.q_proj\.weight has shape \[48,95\], expected \[48, 96\]/],
      ['a tensor past the end of trunk.bin', (m) => (m.trunk[3].off = 1e9), 'E_FORMAT', /needs bytes 1000000000\.\.\d+ but trunk\.bin has/],
      ['scales past the end of trunk.bin', (m) => (m.trunk.find((t: Json) => t.scale_off).scale_off = 1e9), 'E_FORMAT', /needs scales at/],
      ['declared bytes that disagree', (m) => (m.trunk[2].bytes += 1), 'E_FORMAT', /declares \d+ bytes but its shape and format need/],
      ['a required tensor missing', (m) => (m.trunk = m.trunk.filter((t: Json) => t.name !== 'lm_head.weight')), 'E_FORMAT', /required tensor lm_head\.weight is missing/],
      ['a duplicated tensor', (m) => m.trunk.push(m.trunk[0]), 'E_FORMAT', /appears twice/],
      ['shape with a zero', (m) => (m.trunk[0].shape = [0, 96]), 'E_FORMAT', /trunk\[0\]\.shape/],
      ['a bank file outside the container', (m) => (m.layers['1'].file = '../../etc/passwd'), 'E_FORMAT', /layers\.1\.file must be a plain file name/],
      ['a bank for a dense layer', (m) => (m.layers['0'] = m.layers['1']), 'E_FORMAT', /layers\.0 describes an expert bank, but layer 0 is not a MoE layer/],
      ['a MoE layer without a bank', (m) => delete m.layers['3'], 'E_FORMAT', /layers\.3 is missing/],
      ['a bank of the wrong size', (m) => (m.layers['1'].bytes = 8 * 4096), 'E_FORMAT', /too small for the expert shapes/],
      ['a codebook base past the end', (m) => (m.layers['2'].codebook_base = 25), 'E_FORMAT', /codebook_base 25 needs codebooks up to 34/],
      ['vec_dim that does not divide', (m) => (m.expert_quant.vec_dim = 7), 'E_FORMAT', /vec_dim 7 does not divide/],
      ["index_block past what a kernel's scratch holds", (m) => (m.expert_quant.index_block = 65536), 'E_FORMAT', /index_block must be an integer in 0\.\.4096 \(got 65536\)/],
      ['a Q3G trunk tensor', (m) => (m.trunk[5].fmt = 7), 'E_UNSUPPORTED', /Q3G/],
      ['VQ4P experts', (m) => Object.assign(m.expert_quant, { fmt: 'VQ4P', stages: 4, entries: 64, index_bits: 6 }), 'E_UNSUPPORTED', /VQ4P/],
      ['two tensors on the same bytes', (m) => (tensor(m, IN_NORM).off = tensor(m, POST_NORM).off), 'E_FORMAT', /trunk tensors overlap in trunk\.bin: model\.layers\.0\.(input|post_attention)_layernorm\.weight \(bytes \d+\.\.\d+\) and model\.layers\.0\.(input|post_attention)_layernorm\.weight/],
      ['a tensor one byte into the next', (m) => (tensor(m, POST_NORM).off -= 1), 'E_FORMAT', /trunk tensors overlap in trunk\.bin: model\.layers\.0\.input_layernorm\.weight \(bytes \d+\.\.(\d+)\) and model\.layers\.0\.post_attention_layernorm\.weight/],
      ['scales over another tensor', (m) => (m.trunk.find((t: Json) => t.scale_off !== undefined && !t.name.includes('embed')).scale_off = tensor(m, IN_NORM).off), 'E_FORMAT', /trunk tensors overlap in trunk\.bin: .*input_layernorm\.weight .* and the scales of |trunk tensors overlap in trunk\.bin: the scales of .* and model\.layers\.0\.input_layernorm/],
      ['scales inside their own payload', (m) => {
        const t = m.trunk.find((x: Json) => x.scale_off !== undefined && !x.name.includes('embed'));
        t.scale_off = t.off + 1;
      }, 'E_FORMAT', /trunk tensors overlap in trunk\.bin: (\S+) \(bytes \d+\.\.\d+\) and the scales of \1 /],
      // a K3 feature makes it K3's config, and K3's tensors are then missing
      ['a Kimi K3 feature', (m) => (m.config.routed_expert_hidden_size = 64), 'E_FORMAT', /required tensor model\.layers\.1\.block_sparse_moe\.routed_expert_down_proj\.weight is missing/],
      ['another architecture', (m) => (m.config.model_type = 'llama'), 'E_UNSUPPORTED', /model_type "llama"/],
    ];
    for (const [name, edit, code, re] of cases) {
      it(name, async () => {
        const d = copyContainer(good);
        editManifest(d, edit);
        await assertFails(d, code, re);
      });
    }
    it('not JSON at all', async () => {
      const d = copyContainer(good);
      fs.writeFileSync(path.join(d, 'manifest.json'), '{"format_version": 0, "config": {');
      await assertFails(d, 'E_FORMAT', /manifest\.json: not valid JSON/);
    });
    it('invalid JSON whose parser message quotes lines of it is one line', async () => {
      const d = copyContainer(good);
      const text = fs.readFileSync(path.join(d, 'manifest.json'), 'utf8');
      // an unexpected token makes V8 quote the text around it, line breaks and all
      fs.writeFileSync(path.join(d, 'manifest.json'), text.replace('"format_version": 0', '"format_version": \n\u001b[2J x'));
      await assertFails(d, 'E_FORMAT', /^manifest\.json: not valid JSON \(Unexpected token '\\u001b', .*\\n\\u001b\[2J x.*\)$/);
    });
    it('a byte-order mark before the JSON is refused in one line (the C engine refuses it too)', async () => {
      const d = copyContainer(good);
      const f = path.join(d, 'manifest.json');
      fs.writeFileSync(f, Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), fs.readFileSync(f)]));
      await assertFails(d, 'E_FORMAT', /^manifest\.json: starts with a byte-order mark \(U\+FEFF\), which the C engine refuses; save it as UTF-8 without one$/);
    });
  });

  describe('damaged files', () => {
    it('a truncated expert bank', async () => {
      const d = copyContainer(good);
      const f = path.join(d, 'experts-L2.bin');
      fs.truncateSync(f, fs.statSync(f).size - 4096);
      await assertFails(d, 'E_FORMAT', /experts-L2\.bin: \d+ bytes, but the manifest says \d+ .*truncated/);
    });
    it('a truncated trunk.bin', async () => {
      const d = copyContainer(good);
      const f = path.join(d, 'trunk.bin');
      fs.truncateSync(f, fs.statSync(f).size - 100);
      await assertFails(d, 'E_FORMAT', /but trunk\.bin has/);
    });
    it('a record whose header names the wrong expert', async () => {
      const d = copyContainer(good);
      const f = path.join(d, 'experts-L1.bin');
      const bank = fs.readFileSync(f);
      const rec = bank.length / 8;
      // put expert 5's record where expert 3's should be, and expert 3's at 5
      const r3 = Buffer.from(bank.subarray(3 * rec, 4 * rec));
      bank.copy(bank, 3 * rec, 5 * rec, 6 * rec);
      r3.copy(bank, 5 * rec);
      fs.writeFileSync(f, bank);
      const m = await Model.open(d);
      try {
        // run until a token routes to one of the two swapped experts
        const s = m.newSession();
        await assert.rejects(
          (async () => {
            for (let t = 0; t < 300; t++) await s.forward([t]);
          })(),
          (e: unknown) => e instanceof WasteError && /experts-L1\.bin: layer 1 expert (3|5): record header names layer 1 expert (5|3)/.test(e.message),
        );
      } finally {
        await m.close();
      }
    });
    it('a flipped payload byte is caught by the checksum, naming the record', async () => {
      const d = copyContainer(good);
      const f = path.join(d, 'experts-L3.bin');
      const bank = fs.readFileSync(f);
      const rec = bank.length / 8;
      bank[6 * rec + 1000] ^= 0x10;
      fs.writeFileSync(f, bank);
      const c = openModelContainer(d);
      try {
        const bankL3 = c.banks.get(3)!;
        const buf = new Uint8Array(bankL3.stride);
        assert.doesNotThrow(() => bankL3.read(5, buf, true));
        assert.doesNotThrow(() => bankL3.read(6, buf, false), 'without --verify only the header is checked');
        assert.throws(() => bankL3.read(6, buf, true), /experts-L3\.bin: layer 3 expert 6: checksum mismatch/);
      } finally {
        c.close();
      }
    });
    it('a corrupted record header field', async () => {
      const d = copyContainer(good);
      const f = path.join(d, 'experts-L2.bin');
      const bank = fs.readFileSync(f);
      const rec = bank.length / 8;
      for (let e = 0; e < 8; e++) bank.writeUInt32LE(999, e * rec + 24); // up_off
      fs.writeFileSync(f, bank);
      await assertFails(d, 'E_IO', /experts-L2\.bin: layer 2 expert \d+: record puts up at byte 999; the expert shapes put it at \d+/);
    });
    it('a NaN group scale in the trunk', async () => {
      const d = copyContainer(good);
      const m = JSON.parse(fs.readFileSync(path.join(d, 'manifest.json'), 'utf8'));
      const t = m.trunk.find((x: Json) => x.scale_off !== undefined && !x.name.includes('embed'));
      const f = path.join(d, 'trunk.bin');
      const b = fs.readFileSync(f);
      b.writeUInt16LE(0x7e00, t.scale_off + 2);
      fs.writeFileSync(f, b);
      await assertFails(d, 'E_FORMAT', new RegExp(`tensor ${t.name.replace(/\./g, '\\.')} holds a non-finite group scale at index 1`));
    });
    it('an infinite row scale in an expert record, without --verify', async () => {
      const d = copyContainer(good);
      const f = path.join(d, 'experts-L1.bin');
      const bank = fs.readFileSync(f);
      const rec = bank.length / 8;
      const scaleOff = bank.readUInt32LE(32);
      for (let e = 0; e < 8; e++) bank.writeUInt16LE(0x7c00, e * rec + scaleOff + 10);
      fs.writeFileSync(f, bank);
      await assertFails(d, 'E_IO', /experts-L1\.bin: layer 1 expert \d+: row scale 5 is not a finite number/);
    });
    it('codebooks.bin with a bad magic number', async () => {
      const d = copyContainer(good);
      const f = path.join(d, 'codebooks.bin');
      const b = fs.readFileSync(f);
      b[4 * (16 + 256 * 8 * 2)] ^= 0xff;
      fs.writeFileSync(f, b);
      await assertFails(d, 'E_FORMAT', /codebooks\.bin: codebook 4 \(byte \d+\) has a bad magic number/);
    });
    it('codebooks.bin of a partial length', async () => {
      const d = copyContainer(good);
      const f = path.join(d, 'codebooks.bin');
      fs.truncateSync(f, fs.statSync(f).size - 10);
      await assertFails(d, 'E_FORMAT', /codebooks\.bin: \d+ bytes is not a whole number/);
    });
  });
});
