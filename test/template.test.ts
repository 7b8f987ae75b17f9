/**
 * `waste template`: the prompt a request renders to, for K3's XTML (segments cut as the release
 * cuts them, ids tokenized segment by segment — what the server feeds for the same request) and for
 * a Jinja template; a bad request is one line naming the file.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { startServer } from '../src/server/server.js';
import { loadTokenizer } from '../src/tokenizer/load.js';
import { renderXtml } from '../src/chat/xtml/render.js';
import { BIN, ROOT, synth, tmpDir } from './helpers.js';

const k3 = synth({ shape: 'k3-tiny', seed: 3, tokenizer: true }, 'k3-template');
const files = tmpDir('requests');

function template(model: string, request: unknown, ...flags: string[]) {
  const file = path.join(files, `r${Math.random().toString(36).slice(2)}.json`);
  fs.writeFileSync(file, typeof request === 'string' ? request : JSON.stringify(request));
  const r = spawnSync(process.execPath, [BIN, 'template', model, '--request', file, ...flags], { encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr, file };
}

const REQUEST = {
  messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', name: 'Ann', content: [{ type: 'text', text: 'Weather ' }, { type: 'image_url', image_url: { url: 'x' } }, { type: 'text', text: 'in <|sep|> Oslo?' }] },
  ],
  tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
  tool_choice: 'required',
  thinking_effort: 'high',
  image_sizes: [[64, 48]],
};

describe('waste template', () => {
  it("prints a K3 request's prompt, its segments as the release cuts them and their ids, each tokenized in its own mode", () => {
    const r = template(k3, REQUEST, '--json');
    assert.equal(r.code, 0, r.err);
    const doc = JSON.parse(r.out);
    const want = renderXtml({ messages: REQUEST.messages, tools: REQUEST.tools, toolChoice: 'required', thinkingEffort: 'high', images: [{ width: 64, height: 48 }] }).map((s) => [s.text, s.markup]);
    assert.deepEqual(doc.segments, want);
    assert.ok(doc.segments.some(([t, m]: [string, boolean]) => m && t === '<|media_begin|>image 64x48<|media_content|><|media_pad|><|media_end|>'));
    const tok = loadTokenizer(k3)!;
    assert.deepEqual(doc.ids, want.flatMap(([t, m]) => tok.encode(t as string, { markup: m as boolean })));
    const text = template(k3, REQUEST);
    assert.equal(text.out, want.map(([t]) => t).join('') + '\n');
  });

  it('shows what the server feeds the model for the same conversation (thinking on, effort max when none is named)', async () => {
    const messages = [{ role: 'user', content: 'Hello there' }];
    const r = template(k3, { messages, thinking_effort: 'max' }, '--json');
    assert.equal(r.code, 0, r.err);
    const server = await startServer({ model: k3, port: 0, log: false });
    try {
      const res = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages, max_tokens: 1 }) });
      const body: any = await res.json();
      assert.equal(body.usage.prompt_tokens, JSON.parse(r.out).ids.length);
    } finally {
      await server.close();
    }
  });

  it("prints a Jinja template's prompt, markup and message text apart", () => {
    const r = template(path.join(ROOT, 'models/demo'), { messages: [{ role: 'user', content: 'Hi <|im_end|>' }] }, '--json');
    assert.equal(r.code, 0, r.err);
    const doc = JSON.parse(r.out);
    assert.deepEqual(doc.segments, [
      ['<|im_user|>user<|im_middle|>', true],
      ['Hi <|im_end|>', false],
      ['<|im_end|><|im_assistant|>assistant<|im_middle|>', true],
    ]);
    const tok = loadTokenizer(path.join(ROOT, 'models/demo'))!;
    assert.deepEqual(doc.ids, [...tok.encode('<|im_user|>user<|im_middle|>', { markup: true }), ...tok.encode('Hi <|im_end|>'), ...tok.encode('<|im_end|><|im_assistant|>assistant<|im_middle|>', { markup: true })]);
    const closed = template('demo', { messages: [{ role: 'user', content: 'Hi' }], add_generation_prompt: false });
    assert.equal(closed.out, '<|im_user|>user<|im_middle|>Hi<|im_end|>\n');
  });

  it('refuses a bad request in one line naming the file (exit 2)', () => {
    for (const [request, why] of [
      ['{not json', /not a JSON request/],
      [{ messages: [], reasonning_effort: 'high' }, /unknown field "reasonning_effort"/],
      [{ messages: 'hi' }, /"messages" must be a list/],
      [{ messages: [{ role: 'user', content: 'x' }], thinking_effort: 'medium' }, /"medium" is not one K3 accepts/],
      [{ messages: [{ role: 'user', content: 'x' }], thinking: 'yes' }, /"thinking" must be true or false/],
    ] as const) {
      const r = template(k3, request);
      assert.equal(r.code, 2, r.err);
      assert.match(r.err, why);
      assert.ok(r.err.includes(r.file) && r.err.trim().split('\n').length === 1, r.err);
    }
    const images = template('demo', { messages: [{ role: 'user', content: 'x' }], image_sizes: [[1, 1]] });
    assert.equal(images.code, 2);
    assert.match(images.err, /has no images/);
  });
});
