import assert from 'node:assert/strict';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { Ajv } from 'ajv';
import { vocabOf } from '../src/constrain/vocab.js';
import { ReplyParser } from '../src/chat/reply.js';
import { type ToolDecl, turnConstraint } from '../src/chat/tool-grammar.js';
import type { ReplySyntax } from '../src/chat/format.js';
import { loadTokenizer } from '../src/tokenizer/load.js';
import { Rng } from '../src/util/prng.js';
import { ROOT } from './helpers.js';

const tok = loadTokenizer(path.join(ROOT, 'models/demo'))!;
const vocab = vocabOf(tok);
const END = tok.specialId('<|im_end|>')!;
const TOOLS: ToolDecl[] = [
  { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'], additionalProperties: false } },
  { name: 'add', parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'], additionalProperties: false } },
];
const validators = Object.fromEntries(TOOLS.map((t) => [t.name, new Ajv().compile(t.parameters as object)]));

/** Draw uniformly among the tokens the constraint allows (the model's preferences aside). */
function walk(seed: number, prefix: number[], syntax: ReplySyntax, plan: Parameters<typeof turnConstraint>[0], steps = 3000) {
  const { constraint, forced } = turnConstraint(plan);
  const c = constraint!;
  const rng = new Rng(seed);
  const out: number[] = [];
  for (const t of prefix) {
    c.accept(t);
    out.push(t);
  }
  const logits = new Float32Array(tok.vocabSize);
  for (let i = 0; i < steps; i++) {
    const m = c.mask(logits);
    const allowed: number[] = [];
    for (let t = 0; t < m.length; t++) if (m[t] !== -Infinity) allowed.push(t);
    const t = allowed[Math.floor(rng.float() * allowed.length)];
    c.accept(t);
    if (t === END) break;
    out.push(t);
  }
  // a required call's opening markup is fed with the prompt, not sampled
  const text = forced + tok.decode(out);
  const p = new ReplyParser(syntax, { tools: true, startInReasoning: plan.reasoningFirst });
  p.push(text);
  p.flush();
  return { c, parser: p, text, forced };
}

describe('the constraint of a chat turn', () => {
  const kimi: ReplySyntax = { think: { open: '<think>', close: '</think>' }, tools: 'kimi' };

  it('leaves "auto" replies free until the model opens a tool-call section, then enforces the calls', () => {
    const { constraint, forced } = turnConstraint({ vocab, syntax: kimi, endTokens: [END], reasoningFirst: false, tools: { decls: TOOLS, required: false, parallel: true } });
    assert.equal(forced, '');
    const c = constraint!;
    const logits = new Float32Array(tok.vocabSize).fill(1);
    for (const t of tok.encode('Let me look that up. ')) {
      assert.equal(c.mask(logits), logits, 'free text is not masked');
      c.accept(t);
    }
    for (const seed of [1, 2, 3, 4]) {
      const { parser } = walk(seed, tok.encode('Sure. <|tool_calls_section_begin|>'), kimi, { vocab, syntax: kimi, endTokens: [END], reasoningFirst: false, tools: { decls: TOOLS, required: false, parallel: true } });
      assert.equal(parser.content, 'Sure. ');
      assert.ok(parser.calls.length >= 1 && parser.calls.length <= 4);
      parser.calls.forEach((call, i) => {
        assert.equal(call.id, `functions.${call.name}:${i}`);
        assert.ok(validators[call.name](JSON.parse(call.arguments)), `${call.name} ${call.arguments}`);
      });
    }
  });

  it('makes a required call first, or after the reasoning block when the reply starts in it', () => {
    for (const seed of [5, 6]) {
      const { parser, forced } = walk(seed, [], kimi, { vocab, syntax: kimi, endTokens: [END], reasoningFirst: false, tools: { decls: TOOLS.slice(1), required: true, parallel: false } });
      // one tool: everything up to its arguments is forced
      assert.equal(forced, '<|tool_calls_section_begin|><|tool_call_begin|>functions.add:0<|tool_call_argument_begin|>');
      assert.equal(parser.calls.length, 1);
      assert.equal(parser.calls[0].name, 'add');
      assert.ok(validators.add(JSON.parse(parser.calls[0].arguments)));
    }
    for (const seed of [10, 11, 12]) {
      const { parser, forced } = walk(seed, [], kimi, { vocab, syntax: kimi, endTokens: [END], reasoningFirst: false, tools: { decls: TOOLS, required: true, parallel: true } });
      // several: up to the name
      assert.equal(forced, '<|tool_calls_section_begin|><|tool_call_begin|>functions.');
      assert.ok(parser.calls.length >= 1);
      for (const call of parser.calls) assert.ok(validators[call.name](JSON.parse(call.arguments)), call.arguments);
    }
    const { parser } = walk(7, tok.encode('hmm, numbers</think>'), kimi, { vocab, syntax: kimi, endTokens: [END], reasoningFirst: true, tools: { decls: TOOLS, required: true, parallel: false } });
    assert.equal(parser.reasoning, 'hmm, numbers');
    assert.equal(parser.calls.length, 1);
  });

  it('enforces the response schema, after the reasoning when there is some; Hermes-style calls too', () => {
    const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false };
    const { parser } = walk(8, tok.encode('thinking</think>'), kimi, { vocab, syntax: kimi, endTokens: [END], reasoningFirst: true, schema });
    assert.equal(typeof JSON.parse(parser.content).ok, 'boolean');
    const hermes: ReplySyntax = { tools: 'hermes' };
    for (const decls of [TOOLS, TOOLS.slice(0, 1)]) {
      const h = walk(9, [], hermes, { vocab, syntax: hermes, endTokens: [END], reasoningFirst: false, tools: { decls, required: true, parallel: true } });
      assert.ok(h.forced.startsWith('<tool_call>\n{"name": "'));
      assert.ok(h.parser.calls.length >= 1);
      for (const call of h.parser.calls) assert.ok(validators[call.name](JSON.parse(call.arguments)), call.arguments);
    }
  });

  it('is no constraint at all for free text', () => {
    assert.deepEqual(turnConstraint({ vocab, syntax: kimi, endTokens: [END], reasoningFirst: false }), { forced: '' });
  });
});
