/**
 * A model directory's symlinks must stay inside it (or, for a HuggingFace cache snapshot, inside its
 * repository folder): `chat_template.jinja -> /etc/passwd` used to be read and used. Each file the
 * engine opens from a model directory is covered, and links that stay inside still work.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Model } from '../src/api/model.js';
import { convert } from '../src/convert/convert.js';
import { openModelContainer } from '../src/model/registry.js';
import { loadChatFormat } from '../src/chat/format.js';
import { loadTokenizer } from '../src/tokenizer/load.js';
import { readGenerationDefaults } from '../src/checkpoint/generation-config.js';
import { WasteError } from '../src/util/errors.js';
import { BIN, ROOT, checkpoint, copyContainer, tmpDir } from './helpers.js';

const demo = path.join(ROOT, 'models', 'demo');

function waste(args: string[]) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

/** A copy of the demo model whose `name` is a symlink to an identical copy of that file outside it. */
function linkedOut(name: string): { dir: string; link: string; target: string } {
  const dir = copyContainer(demo);
  const target = path.join(fs.realpathSync(tmpDir('outside')), name);
  fs.renameSync(path.join(dir, name), target);
  const link = path.join(dir, name);
  fs.symlinkSync(target, link);
  return { dir, link, target };
}

const message = (link: string, target: string, root: string) => `${link}: a symlink to ${target}, outside the model's directory (${root}); a model's links must stay inside it`;

async function logits(dir: string): Promise<Float32Array> {
  const m = await Model.open(dir, { threads: 1 });
  try {
    return await m.newSession().forward(m.tokenize('It was a dark'));
  } finally {
    await m.close();
  }
}

describe("a model's symlinks", () => {
  it('chat_template.jinja -> /etc/passwd: run, chat, template and verify refuse in one line', { skip: !fs.existsSync('/etc/passwd') && 'no /etc/passwd' }, () => {
    const dir = copyContainer(demo);
    const link = path.join(dir, 'chat_template.jinja');
    fs.rmSync(link);
    fs.symlinkSync('/etc/passwd', link);
    const line = message(link, fs.realpathSync('/etc/passwd'), fs.realpathSync(dir));
    const request = path.join(tmpDir('request'), 'r.json');
    fs.writeFileSync(request, JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] }));
    for (const args of [['run', dir, 'hello', '-n', '2'], ['chat', dir, '-n', '2'], ['template', dir, '--request', request], ['verify', dir, '-q']]) {
      const r = waste(args);
      assert.equal(r.code, 1, `${args[0]}: ${r.err}`);
      assert.equal(r.err, `waste: ${line}\n`, args[0]);
    }
  });

  it('every file the engine opens from the directory, linked out, is refused by name', async () => {
    for (const name of ['manifest.json', 'trunk.bin', 'codebooks.bin', 'experts-L3.bin', 'tokenizer.model', 'specials.json', 'generation_config.json', 'chat_template.jinja']) {
      const { dir, link, target } = linkedOut(name);
      const want = message(link, target, fs.realpathSync(dir));
      await assert.rejects(Model.open(dir, { threads: 1 }), (e: unknown) => e instanceof WasteError && e.code === 'E_IO' && e.message === want, name);
    }
    // what is read without opening the model: the tokenizer, the chat format, the sampling settings
    for (const [name, read] of [['tokenizer.model', loadTokenizer], ['chat_template.jinja', loadChatFormat], ['generation_config.json', readGenerationDefaults]] as const) {
      const { dir, link, target } = linkedOut(name);
      assert.throws(() => read(dir), { message: message(link, target, fs.realpathSync(dir)) }, name);
    }
    // the learned hot set, read at open
    const d = copyContainer(demo);
    const usage = path.join(fs.realpathSync(tmpDir('usage')), 'usage.waste');
    fs.writeFileSync(usage, '');
    fs.symlinkSync(usage, path.join(d, 'usage.waste'));
    assert.throws(() => openModelContainer(d), { message: message(path.join(d, 'usage.waste'), usage, fs.realpathSync(d)) });
  });

  it('links that stay inside the directory are fine, and the model answers as without them', async () => {
    const dir = copyContainer(demo);
    fs.mkdirSync(path.join(dir, 'parts'));
    for (const name of ['trunk.bin', 'chat_template.jinja', 'specials.json']) {
      fs.renameSync(path.join(dir, name), path.join(dir, 'parts', name));
      fs.symlinkSync(path.join('parts', name), path.join(dir, name));
    }
    assert.deepEqual(await logits(dir), await logits(demo));
    // a link to the model directory itself is fine: it is resolved first
    const alias = path.join(tmpDir('alias'), 'model');
    fs.symlinkSync(dir, alias);
    assert.deepEqual(await logits(alias), await logits(demo));
  });

  it("a HuggingFace cache snapshot (links into the repository's blobs/) opens and converts; a link out of the repository folder does not", async () => {
    const ck = checkpoint({ shape: 'tiny', seed: 91 }, 'links-ck');
    const repo = path.join(tmpDir('hf-cache'), 'models--org--tiny');
    const snap = path.join(repo, 'snapshots', '0123abcd');
    fs.mkdirSync(path.join(repo, 'blobs'), { recursive: true });
    fs.mkdirSync(snap, { recursive: true });
    fs.readdirSync(ck).forEach((f, i) => {
      fs.copyFileSync(path.join(ck, f), path.join(repo, 'blobs', `blob${i}`));
      fs.symlinkSync(path.join('..', '..', 'blobs', `blob${i}`), path.join(snap, f));
    });
    const m = await Model.open(snap, { threads: 1 });
    await m.close();
    const out = path.join(tmpDir('converted'), 'tiny');
    await convert(snap, out, { threads: 1 });
    openModelContainer(out).close();
    // outside the repository folder: refused, by convert as by open
    const target = path.join(fs.realpathSync(tmpDir('elsewhere')), 'config.json');
    fs.copyFileSync(path.join(ck, 'config.json'), target);
    fs.rmSync(path.join(snap, 'config.json'));
    fs.symlinkSync(target, path.join(snap, 'config.json'));
    const want = message(path.join(snap, 'config.json'), target, fs.realpathSync(repo));
    await assert.rejects(Model.open(snap, { threads: 1 }), { message: want });
    await assert.rejects(convert(snap, path.join(tmpDir('converted'), 'again'), { threads: 1 }), { message: want });
  });
});
