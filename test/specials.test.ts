/**
 * A model whose chat format is written in control tokens cannot be read without the file that names
 * them (a container's specials.json): a missing or damaged one used to be silent — the markup was
 * tokenized as plain text, `run` and `chat` exited 0, and `verify` said ok.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Model } from '../src/api/model.js';
import { WasteError } from '../src/util/errors.js';
import { BIN, ROOT, copyContainer, synth } from './helpers.js';

function waste(args: string[], input?: string) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', input });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

const demo = path.join(ROOT, 'models', 'demo');

/** A copy of `src` whose specials.json is `text`, or gone. */
function withSpecials(src: string, text: string | undefined): string {
  const d = copyContainer(src);
  const f = path.join(d, 'specials.json');
  if (text === undefined) fs.rmSync(f);
  else fs.writeFileSync(f, text);
  return d;
}

const specials = (src: string): { id: number; text: string }[] => JSON.parse(fs.readFileSync(path.join(src, 'specials.json'), 'utf8'));

describe('specials.json', () => {
  it('missing: run, chat and verify refuse in one line naming it', () => {
    const d = withSpecials(demo, undefined);
    const file = path.join(d, 'specials.json');
    const line = `${file} is missing, and the chat format (${path.join(d, 'chat_template.jinja')}) is written in the special tokens it names (<|im_user|>, <|im_middle|>, <|im_end|>, …): without it they would be read as plain text`;
    const run = waste(['run', d, 'It was a dark', '-n', '3']);
    assert.equal(run.code, 1);
    assert.equal(run.err, `waste: ${line}\n`);
    assert.equal(run.out, '');
    const chat = waste(['chat', d, '-n', '3'], 'hello\n/quit\n');
    assert.equal(chat.code, 1);
    assert.equal(chat.err, `waste: ${line}\n`);
    const v = waste(['verify', d, '-q']);
    assert.equal(v.code, 1);
    assert.equal(v.out, `FAILED: ${line}\n`);
  });

  it('damaged (valid JSON, but a marker renamed, or nothing named): refused naming the file and the token', async () => {
    const renamed = specials(demo).map((s) => (s.text === '<|im_end|>' ? { ...s, text: '<|im_enf|>' } : s));
    const d = withSpecials(demo, JSON.stringify(renamed));
    const file = path.join(d, 'specials.json');
    const run = waste(['run', d, 'It was a dark', '-n', '3']);
    assert.equal(run.code, 1);
    assert.equal(run.err, `waste: ${file}: names no special token <|im_end|>, which the chat format (${path.join(d, 'chat_template.jinja')}) is written in (the file is damaged, or not this model's)\n`);
    const v = waste(['verify', d, '-q']);
    assert.equal(v.code, 1);
    assert.match(v.out, /^FAILED: .*specials\.json: names no special token <\|im_end\|>/);
    const empty = withSpecials(demo, '[]');
    await assert.rejects(Model.open(empty, { threads: 1 }), (e: unknown) => e instanceof WasteError && e.code === 'E_FORMAT' && e.message.startsWith(`${path.join(empty, 'specials.json')}: names no special token <|im_user|>, <|im_middle|>, <|im_end|>, …`));
  });

  it('altered but still valid (two ids swapped): verify finds it by its checksum; without one, verify says unverified', () => {
    const list = specials(demo);
    const [a, b] = [list.findIndex((s) => s.text === '<|im_end|>'), list.findIndex((s) => s.text === '<|im_user|>')];
    const swapped = list.map((s, i) => (i === a ? { ...s, id: list[b].id } : i === b ? { ...s, id: list[a].id } : s));
    const d = withSpecials(demo, JSON.stringify(swapped, null, 1) + '\n');
    assert.equal(waste(['run', d, 'It was a dark', '-n', '1', '--raw']).code, 0, 'every marker is still named: an open cannot tell');
    const v = waste(['verify', d, '-q']);
    assert.equal(v.code, 1);
    assert.match(v.out, /^FAILED: specials\.json: SHA-256 mismatch with manifest\.json's checksums/);
    // a container written before the tokenizer files were checksummed
    const old = copyContainer(demo);
    const m = JSON.parse(fs.readFileSync(path.join(old, 'manifest.json'), 'utf8'));
    delete m.checksums['specials.json'];
    delete m.manifest_sha256;
    fs.writeFileSync(path.join(old, 'manifest.json'), JSON.stringify(m));
    const u = waste(['verify', old, '-q']);
    assert.equal(u.code, 1);
    assert.match(u.out, /^UNVERIFIED: manifest\.json has no checksum for specials\.json/);
    // a written container checksums what it writes
    const kl = synth({ shape: 'tiny', seed: 83, tokenizer: true }, 'specials-sums');
    assert.deepEqual(Object.keys(JSON.parse(fs.readFileSync(path.join(kl, 'manifest.json'), 'utf8')).checksums).sort(), ['codebooks.bin', 'specials.json', 'tokenizer.model', 'trunk.bin']);
  });

  it('the same for a model on the default chat format and for K3 (XTML)', async () => {
    const kl = synth({ shape: 'tiny', seed: 81, tokenizer: true }, 'specials-kl');
    await assert.rejects(Model.open(withSpecials(kl, undefined), { threads: 1 }), /specials\.json is missing, and the chat format \(Kimi default\) is written in the special tokens it names/);
    const k3 = synth({ shape: 'k3-tiny', seed: 82, tokenizer: true }, 'specials-k3');
    await assert.rejects(Model.open(withSpecials(k3, undefined), { threads: 1 }), /specials\.json is missing, and the chat format \(Kimi K3 XTML\) is written in the special tokens it names \(<\|open\|>/);
  });

  it('whole, it opens; and a format written without control tokens needs none', async () => {
    const ok = waste(['verify', demo, '-q']);
    assert.equal(ok.code, 0, ok.out);
    const d = withSpecials(demo, undefined);
    fs.rmSync(path.join(d, 'chat_template.jinja'));
    fs.writeFileSync(path.join(d, 'chat.json'), JSON.stringify({ user: ['User: ', '\n'], assistant: ['Assistant: ', '\n'], open: 'Assistant: ' }));
    const m = await Model.open(d, { threads: 1 });
    try {
      const ids = m.chatFormat().encode(m.tokenizer(), [{ role: 'user', content: 'hi' }]);
      assert.equal(m.detokenize(ids), 'User: hi\nAssistant: ');
    } finally {
      await m.close();
    }
  });
});
