import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Model } from '../src/api/model.js';
import { BIN, ROOT, synth, tmpDir } from './helpers.js';

function waste(args: string[], input?: string) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', input });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

describe('CLI: text in, text out', () => {
  const model = synth({ shape: 'tiny', seed: 51, tokenizer: true }, 'text-cli');

  it('run streams a reply, ends with a statistics line, and --json gives the same reply as the library', async () => {
    const r = waste(['run', model, 'the quick brown fox', '-n', '12']);
    assert.equal(r.code, 0, r.err);
    assert.match(r.err, /\[\d+ tokens, [\d.]+ s, [\d.]+ tok\/s \| experts \d+ hit \/ \d+ miss = [\d.]+ % \| [\d.]+ [MG]B read\]/);
    const j = JSON.parse(waste(['run', model, 'the quick brown fox', '-n', '12', '--json']).out);
    assert.ok(['stop', 'length'].includes(j.finish));
    assert.equal(r.out, j.text + '\n');
    const m = await Model.open(model);
    try {
      const chat = m.chat();
      let text = '';
      for await (const piece of chat.send('the quick brown fox', { maxTokens: 12 })) text += piece;
      assert.equal(text, j.text);
    } finally {
      await m.close();
    }
  });

  it('run --raw echoes the prompt and continues it; the prompt can come from --file or stdin; same seed, same text', () => {
    const a = waste(['run', model, 'once upon', '--raw', '-n', '6', '--temp', '0.9', '--seed', '4', '-q']);
    assert.equal(a.code, 0, a.err);
    assert.ok(a.out.startsWith('once upon'));
    const file = path.join(tmpDir('prompt'), 'p.txt');
    fs.writeFileSync(file, 'once upon\n\n');
    assert.equal(waste(['run', model, '--file', file, '--raw', '-n', '6', '--temp', '0.9', '--seed', '4', '-q']).out, a.out);
    assert.equal(waste(['run', model, '--raw', '-n', '6', '--temp', '0.9', '--seed', '4', '-q'], 'once upon\n').out, a.out);
    assert.notEqual(waste(['run', model, 'once upon', '--raw', '-n', '6', '--temp', '0.9', '--seed', '5', '-q']).out, a.out);
  });

  it('tokenize and detokenize work on a model directory and on a bare tokenizer folder, without weights', () => {
    const t = waste(['tokenize', model, 'hello <|im_end|>']);
    assert.equal(t.code, 0, t.err);
    const plain = t.out.trim().split(' ').map(Number);
    const markup = JSON.parse(waste(['tokenize', model, 'hello <|im_end|>', '--markup', '--json']).out) as number[];
    const specials = JSON.parse(fs.readFileSync(path.join(model, 'specials.json'), 'utf8')) as { id: number; text: string }[];
    const imEnd = specials.find((s) => s.text === '<|im_end|>')!.id;
    assert.ok(!plain.includes(imEnd) && markup[markup.length - 1] === imEnd);
    const bare = tmpDir('bare-tok');
    for (const f of ['tokenizer.model', 'specials.json']) fs.copyFileSync(path.join(model, f), path.join(bare, f));
    assert.equal(waste(['tokenize', bare, 'hello <|im_end|>']).out, t.out);
    assert.equal(waste(['detokenize', bare, plain.join(',')]).out, 'hello <|im_end|>\n');
    assert.equal(waste(['detokenize', model, JSON.stringify(markup), '--json']).out, JSON.stringify('hello <|im_end|>') + '\n');
    const bad = waste(['detokenize', bare, '1 2 99999']);
    assert.equal(bad.code, 2);
    assert.match(bad.err, /^waste: item 3 \(99999\) is not a token id of this tokenizer/);
    const none = waste(['tokenize', tmpDir('no-tok'), 'x']);
    assert.equal(none.code, 2);
    assert.match(none.err, /has no tokenizer \(looked for tokenizer\.model, tiktoken\.model and tokenizer\.json\)/);
  });

  it('run --json --logprobs gives each token its log-probability and alternatives, agreeing with eval', () => {
    const j = JSON.parse(waste(['run', model, 'the dog', '--raw', '-n', '5', '--json', '--logprobs', '3']).out);
    assert.equal(j.logprobs.length, j.tokens.length);
    for (const [i, t] of j.logprobs.entries()) {
      assert.equal(t.id, j.tokens[i]);
      assert.equal(t.top.length, 3);
      // greedy: the chosen token is the most likely one
      assert.equal(t.top[0].id, t.id);
      assert.equal(t.top[0].logprob, t.logprob);
      assert.ok(t.logprob <= 0 && t.top[1].logprob <= t.top[0].logprob && t.top[2].logprob <= t.top[1].logprob);
    }
    const e = JSON.parse(waste(['eval', model, 'the dog', '--top', '3', '--json']).out);
    assert.deepEqual(j.logprobs[0].top.map((a: { id: number }) => a.id), e.top.map((a: { id: number }) => a.id));
    for (const [k, a] of e.top.entries()) assert.ok(Math.abs(Math.log(a.prob) - j.logprobs[0].top[k].logprob) < 1e-5);
    const bad = waste(['run', model, 'the dog', '--logprobs', '3']);
    assert.notEqual(bad.code, 0);
    assert.match(bad.err, /--logprobs goes with --json/);
  });

  it('run --logit-bias bans and forces tokens by id', () => {
    const plain = JSON.parse(waste(['run', model, 'the dog', '--raw', '-n', '3', '--json', '--logprobs', '2']).out);
    const [first, second] = plain.logprobs[0].top.map((a: { id: number }) => a.id);
    const banned = JSON.parse(waste(['run', model, 'the dog', '--raw', '-n', '3', '--json', '--logit-bias', `${first}=-100`]).out);
    assert.equal(banned.tokens[0], second);
    const forced = JSON.parse(waste(['run', model, 'the dog', '--raw', '-n', '3', '--json', '--logit-bias', `${first}=-100`, '--logit-bias', '7=100']).out);
    assert.deepEqual(forced.tokens, [7, 7, 7]);
    const bad = waste(['run', model, 'the dog', '--logit-bias', '7']);
    assert.equal(bad.code, 2);
    assert.match(bad.err, /expected ID=BIAS/);
    const beyond = waste(['run', model, 'the dog', '--raw', '--logit-bias', '99999=1']);
    assert.notEqual(beyond.code, 0);
    assert.match(beyond.err, /token 99999, beyond the vocabulary of 300/);
  });

  it('perplexity scores a text by windows, as the library does, and refuses one too short', async () => {
    const text = 'the quick brown fox jumps over the lazy dog. '.repeat(12);
    const j = JSON.parse(waste(['perplexity', model, text, '--window', '16', '--windows', '3', '--json', '-q']).out);
    assert.equal(j.windows, 3);
    assert.equal(j.scored_tokens, 3 * 8);
    const m = await Model.open(model);
    try {
      const { perplexity } = await import('../src/quality/perplexity.js');
      const lib = await perplexity(m, m.tokenize(text), { ctx: 16, windows: 3 });
      assert.equal(j.perplexity, lib.perplexity);
    } finally {
      await m.close();
    }
    // random weights: worse than uniform is possible, but never below 1 or infinite
    assert.ok(j.perplexity > 1 && Number.isFinite(j.perplexity), String(j.perplexity));
    const short = waste(['perplexity', model, 'the dog', '--window', '16']);
    assert.equal(short.code, 2);
    assert.match(short.err, /less than one window of 16/);
  });

  it('eval lists the most likely next tokens, their probabilities summing below 1', () => {
    const j = JSON.parse(waste(['eval', model, 'the dog', '--top', '5', '--json']).out);
    assert.equal(j.top.length, 5);
    assert.equal(j.vocab, 300);
    const sum = j.top.reduce((s: number, t: { prob: number }) => s + t.prob, 0);
    assert.ok(sum > 0 && sum < 1);
    for (let i = 1; i < 5; i++) assert.ok(j.top[i].logit <= j.top[i - 1].logit);
  });

  it('chat: turns, slash commands, save and load, an unknown command does not end it', () => {
    const file = path.join(tmpDir('chat-cli'), 'c.waste');
    const r = waste(['chat', model, '-n', '6', '--system', 'be brief'], `hello\n/stats\n/save ${file}\n/reset\n/load ${file}\nthe fox\n/bogus\n/image photo.png\n/help\n/quit\n`);
    assert.equal(r.code, 0, r.err);
    assert.match(r.err, /chat format: Kimi default/);
    assert.match(r.out, /\d+ tokens in the conversation; last reply \[\d+ tokens/);
    assert.match(r.out, /\(saved \d+ tokens to .*c\.waste\)/);
    assert.match(r.out, /\(conversation cleared\)/);
    assert.match(r.out, /\(loaded 3 messages, \d+ tokens, from .*c\.waste\)/);
    assert.match(r.err, /waste: unknown command \/bogus/);
    assert.match(r.out, /commands: .*\/reset/);
    assert.match(r.err, /waste: this model takes no images/);
    assert.ok(fs.existsSync(file));
  });

  it('a model without a tokenizer says so in one line', () => {
    const bare = synth({ shape: 'tiny', seed: 52 }, 'no-tokenizer');
    const r = waste(['run', bare, 'hi']);
    assert.equal(r.code, 1);
    assert.match(r.err, /^waste: .* has no tokenizer .*so it runs token ids only\n$/);
  });
});
