/**
 * `waste template` shows each family's rendering by its release's own template: a synthetic model
 * of each family with the real chat template dropped in renders a request as Python's Jinja2
 * renders it (the goldens of test/template-golden), its special tokens (bos_token, eos_token) taken
 * from the model's config and specials.json as Hugging Face takes them from the tokenizer.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { templateSpecials } from '../src/chat/format.js';
import { loadTokenizer } from '../src/tokenizer/load.js';
import { BIN, ROOT, synth, tmpDir } from './helpers.js';

const FIXTURES = path.join(ROOT, 'test', 'fixtures', 'templates');
const GOLDEN = path.join(ROOT, 'test', 'golden', 'templates');
const files = tmpDir('family-requests');
const requests: { name: string; messages: unknown[]; vars?: Record<string, unknown> }[] = JSON.parse(fs.readFileSync(path.join(FIXTURES, 'requests.json'), 'utf8')).requests;

/** Each family's tiny synthetic shape and the release template it runs with (Kimi-Linear and K2 share K2's). */
const FAMILIES: { shape: string; template: string; bos?: string }[] = [
  { shape: 'qwen3-moe-tiny', template: 'qwen3-hybrid' },
  { shape: 'qwen3-moe-tiny', template: 'qwen3-instruct-2507' },
  { shape: 'qwen3-moe-tiny', template: 'qwen3-thinking-2507' },
  { shape: 'qwen3-moe-tiny', template: 'qwen3-coder' },
  { shape: 'mixtral-tiny', template: 'mixtral-8x7b-instruct', bos: '<s>' },
  { shape: 'deepseek-v3-tiny', template: 'deepseek-v3.1', bos: '<｜begin▁of▁sentence｜>' },
  { shape: 'kimi-k2-tiny', template: 'kimi-k2-instruct' },
  { shape: 'tiny', template: 'kimi-k2-instruct' },
  { shape: 'gpt-oss-tiny', template: 'gpt-oss' },
  { shape: 'glm4-moe-tiny', template: 'glm-4.6' },
  // a Qwen3 template on Qwen3-Next (its release's own template is not among the fixtures)
  { shape: 'qwen3-next-tiny', template: 'qwen3-instruct-2507' },
];

function template(model: string, request: unknown) {
  const file = path.join(files, `r${Math.random().toString(36).slice(2)}.json`);
  fs.writeFileSync(file, JSON.stringify(request));
  const r = spawnSync(process.execPath, [BIN, 'template', model, '--request', file, '--json'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout) as { segments: [string, boolean][]; ids: number[] };
}

/** The day harmony's system message names (strftime_now) is the day the test runs. */
const undated = (s: string) => s.replace(/Current date: \d{4}-\d{2}-\d{2}/, 'Current date: D');

describe("waste template shows each family's rendering by its release's template", () => {
  for (const f of FAMILIES) {
    it(`${f.shape} with ${f.template}`, () => {
      const dir = synth({ shape: f.shape, seed: 1, tokenizer: true }, f.shape);
      fs.writeFileSync(path.join(dir, 'chat_template.jinja'), fs.readFileSync(path.join(FIXTURES, `${f.template}.jinja`)));
      const golden = JSON.parse(fs.readFileSync(path.join(GOLDEN, `${f.template}.json`), 'utf8')).cases;
      if (f.bos) assert.equal(templateSpecials(dir).bos_token, f.bos);
      for (const name of ['plain', 'system', 'multi-turn', 'thinking-off', 'continue']) {
        const req = requests.find((r) => r.name === name)!;
        const body = { messages: req.messages, ...(req.vars?.thinking !== undefined ? { thinking: req.vars.thinking } : {}) };
        const out = template(dir, body);
        const want = golden[name];
        if ('error' in want) continue;
        assert.equal(undated(out.segments.map(([t]) => t).join('')), undated(want.text), `${name}`);
        if (f.bos) {
          // the BOS the template prints is the BOS token, not its text
          const tok = loadTokenizer(dir)!;
          assert.equal(out.ids[0], tok.specialId(f.bos));
        }
      }
    });
  }

  it("takes bos_token and eos_token from a checkpoint's tokenizer_config.json (a string, or an added token's content), and leaves out one it does not set", () => {
    const dir = tmpDir('tcfg');
    fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify({ bos_token: { content: '<s>', lstrip: false }, eos_token: '</s>' }));
    assert.deepEqual(templateSpecials(dir), { bos_token: '<s>', eos_token: '</s>' });
    fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify({ bos_token: null, eos_token: '<|im_end|>' }));
    assert.deepEqual(templateSpecials(dir), { eos_token: '<|im_end|>' });
  });
});
