/**
 * Lists whose length a user or a file decides — a message's token ids, a tokenizer's special
 * tokens, a schema's allOf, a saved chat's messages — are never spread into a call's arguments
 * (or walked by one call per element), where a long one overflowed the stack: V8 takes about a
 * hundred thousand arguments, so each case here is twice that.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { compileSchema } from '../src/constrain/schema-compile.js';
import { Model } from '../src/api/model.js';
import { loadChatFormat } from '../src/chat/format.js';
import { loadTokenizer } from '../src/tokenizer/load.js';
import { ROOT, tmpDir } from './helpers.js';

const DEMO = path.join(ROOT, 'models/demo');
const N = 200_000;

describe('lists longer than a call takes arguments', () => {
  it('a chat format encodes a message of more tokens than that', () => {
    const tok = loadTokenizer(DEMO)!;
    const ids = loadChatFormat(DEMO).encode(tok, [{ role: 'user', content: 'word '.repeat(N) }]);
    assert.ok(ids.length > N, `${ids.length} ids`);
    assert.deepEqual(ids.slice(-3), tok.encode('<|im_end|><|im_assistant|>assistant<|im_middle|>', { markup: true }).slice(-3));
  });

  it('a tokenizer loads with that many special tokens', () => {
    const dir = tmpDir('specials');
    fs.copyFileSync(path.join(DEMO, 'tokenizer.model'), path.join(dir, 'tokenizer.model'));
    const first = loadTokenizer(DEMO)!.vocabSize;
    const specials = Array.from({ length: N }, (_, i) => ({ id: first + i, text: `<|extra_${i}|>` }));
    fs.writeFileSync(path.join(dir, 'specials.json'), JSON.stringify(specials));
    const tok = loadTokenizer(dir)!;
    assert.equal(tok.vocabSize, first + N);
    assert.deepEqual(tok.encode(`<|extra_${N - 1}|>`, { markup: true }), [first + N - 1]);
  });

  it('a schema compiles with an allOf that long', () => {
    const node = compileSchema({ allOf: Array.from({ length: N }, (_, i) => ({ type: 'string', maxLength: 10 + i })) });
    assert.equal(node.sat, true);
    assert.equal(node.alts.length, 1);
    // the conjunction is exact: the tightest of all the maxLengths
    assert.equal(node.alts[0].maxLength, 10);
    const never = compileSchema({ allOf: [...Array.from({ length: N }, () => ({ type: 'string' })), { minLength: 3, maxLength: 1 }] });
    assert.equal(never.sat, false);
  });

  it('a saved chat loads with that many messages', async () => {
    const model = await Model.open(DEMO, { threads: 1 });
    try {
      const chat = model.chat();
      for (let i = 0; i < N; i++) chat.messages.push({ role: i % 2 ? 'assistant' : 'user', content: `m${i}` });
      const file = path.join(tmpDir('chat'), 'long.waste');
      chat.save(file);
      chat.close();
      const again = model.chat();
      again.load(file);
      assert.equal(again.messages.length, N);
      assert.equal(again.messages[N - 1].content, `m${N - 1}`);
      again.close();
    } finally {
      await model.close();
    }
  });
});
