/**
 * A reply ends at any end-of-sequence id the model names: config.json's, and those
 * generation_config.json adds, as HuggingFace's generate takes both (gpt-oss names its tool
 * call's end, `<|call|>`, only there).
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Model } from '../src/api/model.js';
import { copyContainer, synth } from './helpers.js';

describe('end-of-sequence ids from generation_config.json', () => {
  it('stop the reply, beside config.json\'s; a malformed list is refused naming the file', async () => {
    const base = synth({ shape: 'tiny', seed: 91, tokenizer: true }, 'stop-ids');
    // what greedy decoding writes without an extra end
    const free = await Model.open(base, { threads: 1 });
    let third: number;
    try {
      const s = free.newSession();
      const gen = s.generate([3, 1, 4, 1, 5], { temperature: 0, maxTokens: 6 });
      let res = await gen.next();
      while (!res.done) res = await gen.next();
      assert.equal(res.value.tokens.length, 6, 'nothing stops it early');
      third = res.value.tokens[2];
      assert.ok(!res.value.tokens.slice(0, 2).includes(third), 'the third token is new');
    } finally {
      await free.close();
    }
    const d = copyContainer(base);
    fs.writeFileSync(path.join(d, 'generation_config.json'), JSON.stringify({ eos_token_id: [third] }));
    const m = await Model.open(d, { threads: 1 });
    try {
      assert.ok(m.stopIds().includes(third));
      for (const id of m.config.eosTokenIds) assert.ok(m.stopIds().includes(id), 'config.json\'s stay');
      const gen = m.newSession().generate([3, 1, 4, 1, 5], { temperature: 0, maxTokens: 6 });
      let res = await gen.next();
      while (!res.done) res = await gen.next();
      assert.equal(res.value.finish, 'stop');
      assert.deepEqual(res.value.tokens.slice(0, 3).length, 3);
      assert.equal(res.value.tokens.length, 3, 'ends at the listed id (the end id is the last token, as with config.json\'s)');
      assert.equal(res.value.tokens[2], third);
    } finally {
      await m.close();
    }
    fs.writeFileSync(path.join(d, 'generation_config.json'), JSON.stringify({ eos_token_id: ['x'] }));
    const bad = await Model.open(d, { threads: 1 });
    try {
      assert.throws(() => bad.stopIds(), /generation_config\.json: "eos_token_id" must be a token id/);
    } finally {
      await bad.close();
    }
  });
});
