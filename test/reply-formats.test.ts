import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ROOT } from './helpers.js';
import { describe, it } from 'node:test';
import type { ReplyEvent, ReplyReader } from '../src/chat/reply.js';
import { readerFor, replyReader } from '../src/chat/reply-reader.js';
import { type ChatFormat, JinjaChatFormat } from '../src/chat/format.js';
import { promptOptions } from '../src/server/prompt-options.js';
import type { TurnRequest } from '../src/server/host.js';
import type { Tokenizer } from '../src/tokenizer/tokenizer.js';
import { type ReplySyntax, replySyntaxOf } from '../src/chat/syntax.js';
import type { ToolDecl } from '../src/chat/tool-decl.js';
import { glmValue, qwenCoderValue } from '../src/chat/call-reader.js';

const THINK = { open: '<think>', close: '</think>' };
const SYNTAX: Record<string, ReplySyntax> = {
  qwen3: { think: THINK, tools: 'hermes' },
  'qwen3-coder': { tools: 'qwen-xml' },
  glm: { think: THINK, tools: 'glm' },
  deepseek: { think: THINK, tools: 'deepseek' },
  kimi: { think: THINK, tools: 'kimi' },
  harmony: { tools: 'harmony' },
  mistral: { tools: 'mistral' },
};

const TOOLS: ToolDecl[] = [
  { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' }, unit: { type: 'string', enum: ['c', 'f'] } } } },
  { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string' } } } },
  {
    name: 'write_file',
    parameters: {
      type: 'object',
      properties: { path: { type: 'string' }, content: { type: 'string' }, mode: { type: 'integer' }, ratio: { type: 'number' }, overwrite: { type: 'boolean' }, tags: { type: 'array' }, meta: { type: 'object' }, note: { type: ['string', 'null'] } },
    },
  },
];

interface Opts {
  startInReasoning?: boolean;
  harmonyPrompt?: string;
  tools?: boolean;
  decls?: ToolDecl[];
}

function reader(format: string, o: Opts = {}): ReplyReader {
  return readerFor(SYNTAX[format], { tools: o.tools ?? true, decls: o.decls, startInReasoning: o.startInReasoning, harmonyPrompt: format === 'harmony' ? (o.harmonyPrompt ?? 'assistant') : undefined });
}

/** Feed `pieces` one by one; everything read, and the events merged by kind (checked to add up to it). */
function feed(format: string, pieces: string[], o: Opts = {}) {
  const r = reader(format, o);
  const events: ReplyEvent[] = [];
  for (const p of pieces) events.push(...r.push(0, p));
  events.push(...r.flush());
  const sum = { reasoning: '', content: '', calls: [] as { id: string; name: string; arguments: string }[] };
  for (const e of events) {
    if (e.kind === 'reasoning' || e.kind === 'content') sum[e.kind] += e.text;
    else if (e.kind === 'call') sum.calls[e.index] = { id: e.id, name: e.name, arguments: '' };
    else sum.calls[e.index].arguments += e.text;
  }
  const got = { reasoning: r.reasoning, content: r.content, calls: r.calls.map((c) => ({ ...c })) };
  assert.deepEqual(sum, got, `the events add up to what was read (${format})`);
  return got;
}

/** What `reply` reads as: the same whole, at every split into two, and char by char (each checked). */
function read(format: string, reply: string, o: Opts = {}) {
  const whole = feed(format, [reply], o);
  for (let cut = 1; cut < reply.length; cut++) assert.deepEqual(feed(format, [reply.slice(0, cut), reply.slice(cut)], o), whole, `${format}: cut at ${cut} of ${JSON.stringify(reply)}`);
  assert.deepEqual(feed(format, [...reply], o), whole, `${format}: char by char`);
  return whole;
}

const call = (index: number, name: string, args: unknown, id = `call_${index}`) => ({ id, name, arguments: typeof args === 'string' ? args : JSON.stringify(args) });

describe('reply formats: which syntax a template writes', () => {
  it('tells each family by its template markers', () => {
    assert.deepEqual(replySyntaxOf('{{ "<think>" }}{{ "</think>" }}<tool_call>'), { think: THINK, tools: 'hermes' });
    assert.deepEqual(replySyntaxOf('<tool_call>\n<function={{ name }}>\n<parameter={{ k }}>'), { tools: 'qwen-xml' });
    assert.deepEqual(replySyntaxOf('<think></think><tool_call>{{ name }}<arg_key>{{ k }}</arg_key><arg_value>'), { think: THINK, tools: 'glm' });
    assert.deepEqual(replySyntaxOf("{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'}}<think></think>"), { think: THINK, tools: 'deepseek' });
    assert.deepEqual(replySyntaxOf('<|tool_calls_section_begin|><|tool_call_begin|>'), { tools: 'kimi' });
    assert.deepEqual(replySyntaxOf('<|start|>assistant<|channel|>final<|message|>'), { tools: 'harmony' });
    assert.deepEqual(replySyntaxOf('[AVAILABLE_TOOLS] [/AVAILABLE_TOOLS][TOOL_CALLS] '), { tools: 'mistral' });
    assert.deepEqual(replySyntaxOf('[INST] {{ m.content }} [/INST]'), {});
  });
});

describe('Qwen3 <tool_call> JSON (Qwen3 MoE, Qwen3-Next, 2507)', () => {
  it('reads reasoning, content and several calls, at any split', () => {
    const r = read(
      'qwen3',
      '<think>\nThe user wants the weather in two cities.\n</think>\n\nI will check both.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo", "unit": "c"}}\n</tool_call>',
      { decls: TOOLS },
    );
    assert.equal(r.reasoning, '\nThe user wants the weather in two cities.\n');
    assert.equal(r.content.trim(), 'I will check both.');
    assert.deepEqual(r.calls, [call(0, 'get_weather', { city: 'Paris' }), call(1, 'get_weather', { city: 'Tokyo', unit: 'c' })]);
  });

  it('starts in the reasoning a thinking template opened in the prompt', () => {
    const r = read('qwen3', 'Just greet.\n</think>\n\nHello!', { startInReasoning: true });
    assert.deepEqual([r.reasoning, r.content], ['Just greet.\n', '\n\nHello!']);
  });

  it('keeps malformed calls as text', () => {
    assert.equal(read('qwen3', 'x<tool_call>{"name": "f", "arguments": {</tool_call>y').content, 'x<tool_call>{"name": "f", "arguments": {</tool_call>y');
    assert.equal(read('qwen3', 'stray </tool_call> and </think>').content, 'stray </tool_call> and </think>');
    assert.equal(read('qwen3', '<tool_call>\n{"name": "get_wea').content, '<tool_call>\n{"name": "get_wea');
  });
});

describe("Qwen3-Coder's XML function calls", () => {
  const reply =
    'I will write the file.\n<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/a.py\n</parameter>\n<parameter=content>\ndef f():\n    return "<x>"\n\n</parameter>\n' +
    '<parameter=mode>\n420\n</parameter>\n<parameter=ratio>\n0.5\n</parameter>\n<parameter=overwrite>\nTrue\n</parameter>\n<parameter=tags>\n["a", "b"]\n</parameter>\n<parameter=meta>\n{\'k\': None}\n</parameter>\n<parameter=note>\nnull\n</parameter>\n</function>\n</tool_call>';

  it('types each value by the schema, as Qwen\'s parser does', () => {
    const r = read('qwen3-coder', reply, { decls: TOOLS });
    assert.equal(r.content, 'I will write the file.\n');
    assert.deepEqual(r.calls, [call(0, 'write_file', { path: 'src/a.py', content: 'def f():\n    return "<x>"\n', mode: 420, ratio: 0.5, overwrite: true, tags: ['a', 'b'], meta: { k: null }, note: null })]);
    // without the schemas every value is its text
    assert.deepEqual(JSON.parse(read('qwen3-coder', reply).calls[0].arguments).mode, '420');
    assert.equal(qwenCoderValue('12', { type: 'number' }), 12);
    assert.equal(qwenCoderValue('1.5x', { type: 'number' }), '1.5x');
    assert.equal(qwenCoderValue('seven', { type: 'integer' }), 'seven');
  });

  it('reads two calls, and a parameter whose closing tag is missing', () => {
    const r = read('qwen3-coder', '<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>', { decls: TOOLS });
    assert.deepEqual(r.calls, [call(0, 'get_time', { zone: 'UTC' }), call(1, 'get_weather', { city: 'Oslo', days: 2 })]);
  });

  it('keeps what does not read as text', () => {
    const unknown = '<tool_call>\n<function=rm_rf>\n<parameter=path>\n/\n</parameter>\n</function>\n</tool_call>';
    assert.deepEqual(read('qwen3-coder', unknown, { decls: TOOLS }), { reasoning: '', content: unknown, calls: [] });
    const r = reader('qwen3-coder', { decls: TOOLS });
    r.push(0, unknown);
    r.flush();
    assert.deepEqual(r.rejected, ["Qwen3-Coder's <function=…>: a call of \"rm_rf\", which is not a declared tool"]);
    const cut = '<tool_call>\n<function=get_time>\n<parameter=zone>\nUT';
    assert.deepEqual(read('qwen3-coder', cut, { decls: TOOLS }), { reasoning: '', content: cut, calls: [] });
    const noFunction = '<tool_call>\n{"name": "get_time"}\n</tool_call>';
    assert.equal(read('qwen3-coder', noFunction).content, noFunction);
  });
});

describe("GLM-4.5's <arg_key>/<arg_value> calls", () => {
  it('reads reasoning, content and calls, values JSON-decoded when the schema says non-string', () => {
    const r = read(
      'glm',
      '<think>Need the weather and the time.</think>\nLet me look that up.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>\n<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value>8</arg_value>\n</tool_call>',
      { decls: TOOLS },
    );
    assert.equal(r.reasoning, 'Need the weather and the time.');
    assert.equal(r.content.trim(), 'Let me look that up.');
    // "8" stays a string: the schema says zone is one
    assert.deepEqual(r.calls, [call(0, 'get_weather', { city: 'Beijing', days: 3 }), call(1, 'get_time', { zone: '8' })]);
  });

  it("reads GLM-4.7's calls without newlines, and a call with no arguments", () => {
    const r = read('glm', '<tool_call>write_file<arg_key>tags</arg_key><arg_value>["x"]</arg_value><arg_key>overwrite</arg_key><arg_value>false</arg_value></tool_call><tool_call>get_time</tool_call>', { decls: TOOLS });
    assert.deepEqual(r.calls, [call(0, 'write_file', { tags: ['x'], overwrite: false }), call(1, 'get_time', {})]);
    assert.equal(glmValue('{bad', { type: 'object' }), '{bad');
  });

  it('keeps what does not read as text', () => {
    for (const bad of ['<tool_call>get_weather\n<arg_key>city</arg_key>Paris</tool_call>', '<tool_call>\n</tool_call>', '<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Par', '<tool_call>nope\n</tool_call>'])
      assert.deepEqual(read('glm', bad, { decls: TOOLS }), { reasoning: '', content: bad, calls: [] }, bad);
  });
});

describe("DeepSeek's tool-call markers (V3, R1, V3.1)", () => {
  const B = '<｜tool▁calls▁begin｜>';
  const E = '<｜tool▁calls▁end｜>';
  const C = '<｜tool▁call▁begin｜>';
  const CE = '<｜tool▁call▁end｜>';
  const S = '<｜tool▁sep｜>';

  it("reads V3.1's calls, after reasoning the prompt opened", () => {
    const r = read('deepseek', `The user needs two lookups.</think>Let me check.${B}${C}get_weather${S}{"city": "Hangzhou"}${CE}${C}get_time${S}{"zone": "CST"}${CE}${E}`, { startInReasoning: true, decls: TOOLS });
    assert.deepEqual([r.reasoning, r.content], ['The user needs two lookups.', 'Let me check.']);
    assert.deepEqual(r.calls, [call(0, 'get_weather', '{"city": "Hangzhou"}'), call(1, 'get_time', '{"zone": "CST"}')]);
  });

  it("reads V3's and R1's fenced calls", () => {
    const r = read('deepseek', `${B}${C}function${S}get_weather\n\`\`\`json\n{"city": "Hangzhou"}\n\`\`\`${CE}\n${C}function${S}get_time\n\`\`\`json\n{}\n\`\`\`${CE}${E}`);
    assert.deepEqual(r.calls, [call(0, 'get_weather', '{"city": "Hangzhou"}'), call(1, 'get_time', {})]);
    assert.equal(r.content, '');
  });

  it('reads a call the reply ended before its closing markers, and keeps what does not read as text', () => {
    assert.deepEqual(read('deepseek', `${B}${C}get_time${S}{"zone": "CST"}`).calls, [call(0, 'get_time', '{"zone": "CST"}')]);
    assert.equal(read('deepseek', `${B}${C}get_time${S}{"zone": "C`).content, `${C}get_time${S}{"zone": "C`);
    assert.equal(read('deepseek', `${B}${C}get_time{"zone": "C"}${CE}${E}`).content, `${C}get_time{"zone": "C"}${CE}`);
    assert.equal(read('deepseek', `a${CE}b${E}c`).content, `a${CE}b${E}c`);
    assert.equal(read('deepseek', `${C}nope${S}{}${CE}`, { decls: TOOLS }).content, `${C}nope${S}{}${CE}`);
  });
});

describe("Kimi K2's tool-call section", () => {
  it('reads K2-Thinking: reasoning, content, then calls with their own ids', () => {
    const r = read(
      'kimi',
      '<think>Two cities.</think>Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{"city": "Rome"}<|tool_call_end|><|tool_calls_section_end|>',
    );
    assert.deepEqual([r.reasoning, r.content], ['Two cities.', 'Checking.']);
    assert.deepEqual(r.calls, [call(0, 'get_weather', '{"city": "Paris"}', 'functions.get_weather:0'), call(1, 'get_weather', '{"city": "Rome"}', 'functions.get_weather:1')]);
  });

  it('keeps calls whose id or arguments do not read as text', () => {
    for (const bad of [
      '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>{"zone": <|tool_call_end|><|tool_calls_section_end|>',
      '<|tool_call_begin|>functions.get_time:0<|tool_call_end|>',
      '<|tool_call_begin|>functions.nope:0<|tool_call_argument_begin|>{}<|tool_call_end|>',
      '<|tool_call_begin|>two words<|tool_call_argument_begin|>{}<|tool_call_end|>',
    ]) {
      const r = read('kimi', bad, { decls: TOOLS });
      assert.deepEqual(r.calls, [], bad);
      assert.ok(r.content.includes('<|tool_call_begin|>') && r.content.includes('<|tool_call_end|>'), r.content);
    }
    assert.equal(read('kimi', 'a<|tool_call_end|>b<|tool_call_argument_begin|>c<|tool_calls_section_end|>').content, 'a<|tool_call_end|>b<|tool_call_argument_begin|>c<|tool_calls_section_end|>');
  });
});

describe("gpt-oss's harmony channels", () => {
  it('reads analysis as reasoning and final as content', () => {
    const r = read('harmony', '<|channel|>analysis<|message|>Simple greeting.<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>');
    assert.deepEqual(r, { reasoning: 'Simple greeting.', content: 'Hello! How can I help?', calls: [] });
  });

  it('reads a call, its recipient after the channel or before it, ended by <|call|> or by the reply', () => {
    const a = read('harmony', '<|channel|>analysis<|message|>Need weather. Use tool.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"San Francisco"}<|call|>', { decls: TOOLS });
    assert.deepEqual(a, { reasoning: 'Need weather. Use tool.', content: '', calls: [call(0, 'get_weather', { city: 'San Francisco' })] });
    const b = read('harmony', ' to=functions.get_time<|channel|>commentary json<|message|>{"zone": "UTC"}');
    assert.deepEqual(b.calls, [call(0, 'get_time', '{"zone": "UTC"}')]);
  });

  it('reads a preamble (commentary without a recipient) as content, then the call', () => {
    const r = read('harmony', '<|channel|>commentary<|message|>Checking both cities.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Oslo"}<|call|>');
    assert.deepEqual([r.content, r.calls], ['Checking both cities.', [call(0, 'get_weather', { city: 'Oslo' })]]);
  });

  it('follows a prompt that opened a channel', () => {
    const r = read('harmony', 'thinking on.<|end|><|start|>assistant<|channel|>final<|message|>Done.', { harmonyPrompt: 'assistant<|channel|>analysis<|message|>' });
    assert.deepEqual([r.reasoning, r.content], ['thinking on.', 'Done.']);
    assert.equal(reader('harmony', { harmonyPrompt: 'assistant<|channel|>analysis<|message|>' }).startsInReasoning, true);
    assert.equal(reader('harmony').startsInReasoning, false);
  });

  it('keeps malformed calls and headers as text', () => {
    const bad = read('harmony', '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":', { decls: TOOLS });
    assert.deepEqual([bad.calls, bad.content], [[], '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":']);
    const unknown = read('harmony', '<|channel|>commentary to=functions.nope<|message|>{}<|call|>', { decls: TOOLS });
    assert.deepEqual([unknown.calls, unknown.content], [[], '<|channel|>commentary to=functions.nope<|message|>{}']);
    const garbage = read('harmony', 'hello there<|message|>body<|end|>');
    assert.equal(garbage.content, 'hello there<|message|>body');
    const stray = read('harmony', '<|channel|>final<|message|>a<|call|>b<|end|>c');
    assert.equal(stray.content, 'ab<|end|>c');
  });

  it('reads calls as text when no tools were offered', () => {
    const r = read('harmony', '<|channel|>commentary to=functions.get_weather<|message|>{"city":"Oslo"}<|call|>', { tools: false });
    assert.deepEqual([r.calls, r.content], [[], '{"city":"Oslo"}']);
  });
});

describe("Mistral's [TOOL_CALLS] (Mixtral 8x22B Instruct)", () => {
  it('reads the list of calls that ends the reply, with the ids the model wrote', () => {
    const r = read('mistral', 'Sure. [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123XYZ"}, {"name": "get_time", "arguments": {"zone": "CET"}}]', { decls: TOOLS });
    assert.equal(r.content, 'Sure. ');
    assert.deepEqual(r.calls, [call(0, 'get_weather', { city: 'Paris' }, 'abc123XYZ'), call(1, 'get_time', { zone: 'CET' })]);
    assert.deepEqual(read('mistral', '[TOOL_CALLS] [{"name": "get_time", "arguments": {}}]</s>').calls, [call(0, 'get_time', {})]);
  });

  it('keeps what does not read as text', () => {
    for (const bad of ['[TOOL_CALLS] [{"name": "get_time", "arguments": {', '[TOOL_CALLS] [{"name": "nope", "arguments": {}}]', '[TOOL_CALLS] [{"arguments": {}}]'])
      assert.deepEqual(read('mistral', bad, { decls: TOOLS }), { reasoning: '', content: bad, calls: [] }, bad);
  });
});

// —— damaged replies: a seeded fuzz over each format ——

/** Mulberry32: a small seeded generator, so a failure names the case it can be rerun from. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const MARKERS: Record<string, string[]> = {
  qwen3: ['<think>', '</think>', '<tool_call>', '</tool_call>', '{', '}', '"'],
  'qwen3-coder': ['<tool_call>', '</tool_call>', '<function=get_time>', '</function>', '<parameter=zone>', '</parameter>', '\n'],
  glm: ['<think>', '</think>', '<tool_call>', '</tool_call>', '<arg_key>', '</arg_key>', '<arg_value>', '</arg_value>'],
  deepseek: ['<think>', '</think>', '<｜tool▁calls▁begin｜>', '<｜tool▁calls▁end｜>', '<｜tool▁call▁begin｜>', '<｜tool▁call▁end｜>', '<｜tool▁sep｜>', '```'],
  kimi: ['<think>', '</think>', '<|tool_calls_section_begin|>', '<|tool_calls_section_end|>', '<|tool_call_begin|>', '<|tool_call_argument_begin|>', '<|tool_call_end|>'],
  mistral: ['[TOOL_CALLS]', '</s>', '[', ']', '{', '}', '"'],
  harmony: ['<|start|>', '<|channel|>', '<|message|>', '<|end|>', '<|return|>', '<|call|>', '<|constrain|>', ' to=functions.get_time', 'analysis', 'final'],
};

/** One well-formed reply per format, with words w1… a reader must never lose. */
const SEEDS: Record<string, string> = {
  qwen3: '<think>w1 w2</think>w3\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "w4"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "w5"}}\n</tool_call>',
  'qwen3-coder': 'w1\n<tool_call>\n<function=get_time>\n<parameter=zone>\nw2\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=days>\nw3\n</parameter>\n</function>\n</tool_call>',
  glm: '<think>w1</think>w2\n<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value>w3</arg_value>\n</tool_call>\n<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>w4</arg_value>\n</tool_call>',
  deepseek: '<think>w1</think>w2<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"zone": "w3"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "w4"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
  kimi: '<think>w1</think>w2<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>{"zone": "w3"}<|tool_call_end|><|tool_calls_section_end|>w4',
  mistral: 'w1 [TOOL_CALLS] [{"name": "get_time", "arguments": {"zone": "w2"}}, {"name": "get_weather", "arguments": {"city": "w3"}, "id": "w4"}]',
  harmony: '<|channel|>analysis<|message|>w1 w2<|end|><|start|>assistant<|channel|>commentary<|message|>w3<|end|><|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{"zone":"w4"}<|call|><|start|>assistant<|channel|>final<|message|>w5<|return|>',
};

function damage(reply: string, markers: string[], r: () => number): string {
  let s = reply;
  const n = 1 + Math.floor(r() * 4);
  for (let k = 0; k < n; k++) {
    const i = Math.floor(r() * (s.length + 1));
    const j = Math.min(s.length, i + Math.floor(r() * 24));
    switch (Math.floor(r() * 6)) {
      case 0: // cut the reply short
        s = s.slice(0, i);
        break;
      case 1: // drop a span
        s = s.slice(0, i) + s.slice(j);
        break;
      case 2: // a marker where it does not belong
        s = s.slice(0, i) + markers[Math.floor(r() * markers.length)] + s.slice(i);
        break;
      case 3: // a span repeated
        s = s.slice(0, j) + s.slice(i, j) + s.slice(j);
        break;
      case 4: // a piece of a marker
        {
          const m = markers[Math.floor(r() * markers.length)];
          s = s.slice(0, i) + m.slice(0, 1 + Math.floor(r() * m.length)) + s.slice(i);
        }
        break;
      default: // two spans swapped
        s = s.slice(j) + s.slice(i, j) + s.slice(0, i);
    }
  }
  return s;
}

describe('damaged replies in every format: never a throw, never a lost word, the same at any split', () => {
  for (const format of Object.keys(SEEDS)) {
    it(format, () => {
      const cases = Number(process.env.WASTE_FUZZ_CASES ?? 400);
      for (let seed = 1; seed <= cases; seed++) {
        const r = rng(seed * 7919 + format.length);
        const reply = damage(SEEDS[format], MARKERS[format], r);
        const o: Opts = { decls: r() < 0.5 ? TOOLS : undefined, startInReasoning: r() < 0.2, tools: r() < 0.9 };
        const at = `${format}, seed ${seed}: ${JSON.stringify(reply)}`;
        let whole: ReturnType<typeof feed>;
        try {
          whole = feed(format, [reply], o);
        } catch (e) {
          assert.fail(`${at}: ${(e as Error).stack}`);
        }
        // random splits, and char by char, read the same
        const pieces: string[] = [];
        for (let i = 0; i < reply.length; ) {
          const n = 1 + Math.floor(r() * 6);
          pieces.push(reply.slice(i, i + n));
          i += n;
        }
        assert.deepEqual(feed(format, pieces, o), whole, `${at}: split ${JSON.stringify(pieces)}`);
        assert.deepEqual(feed(format, [...reply], o), whole, `${at}: char by char`);
        // every word the model wrote is somewhere: reasoning, content, a call's name or arguments
        const out = [whole.reasoning, whole.content, ...whole.calls.flatMap((c) => [c.id, c.name, c.arguments])].join('\u0000');
        for (const w of reply.match(/w\d+/g) ?? []) assert.ok(out.includes(w), `${at}: ${w} was lost (${JSON.stringify(whole)})`);
        // markup of a call never reaches an argument's JSON undecoded: every call's arguments are an object
        for (const c of whole.calls) assert.equal(typeof JSON.parse(c.arguments), 'object', at);
      }
    });
  }
});

// —— one place: a chat format's template decides the reader every front end gets ——

/** A tokenizer of one id per UTF-16 unit: enough for what replyReader reads of a prompt (its text). */
const charTok = {
  kind: 'huggingface',
  vocabSize: 65536,
  specials: new Map<number, string>(),
  encode: (text: string) => [...text].flatMap((c) => [...Array(c.length).keys()].map((i) => c.charCodeAt(i))),
  decode: (ids: ArrayLike<number>) => String.fromCharCode(...Array.from(ids)),
  specialId: () => undefined,
  decoder: () => ({ push: (id: number) => String.fromCharCode(id), flush: () => '' }),
  tokenBytes: (id: number) => new TextEncoder().encode(String.fromCharCode(id)),
} as unknown as Tokenizer;

/** A template fragment in a family's shape: its turns, its generation prompt, and (in a branch never taken) its reply markup. */
function familyTemplate(turn: [string, string], open: string, markup: string): string {
  return `{% for m in messages %}${turn[0]}{{ m.role }}\n{{ m.content }}${turn[1]}{% endfor %}{% if add_generation_prompt %}${open}{% endif %}{% if false %}${markup}{% endif %}`;
}

describe('reply formats: the reader a chat format hands every front end', () => {
  const cases: { family: string; template: string; reply: string; want: { reasoning: string; content: string; calls: unknown[] } }[] = [
    {
      family: 'Qwen3-2507 thinking (the prompt opens <think>)',
      template: familyTemplate(['<|im_start|>', '<|im_end|>\n'], '<|im_start|>assistant\n<think>\n', '<think></think><tool_call></tool_call>'),
      reply: 'Weather needed.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
      want: { reasoning: 'Weather needed.\n', content: '\n\n', calls: [call(0, 'get_weather', { city: 'Paris' })] },
    },
    {
      family: 'Qwen3-Coder',
      template: familyTemplate(['<|im_start|>', '<|im_end|>\n'], '<|im_start|>assistant\n', '<tool_call>\n<function=x>\n<parameter=y>\n'),
      reply: '<tool_call>\n<function=get_weather>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>',
      want: { reasoning: '', content: '', calls: [call(0, 'get_weather', { days: 2 })] },
    },
    {
      family: 'GLM-4.5',
      template: familyTemplate(['<|', '|>'], '<|assistant|>', '<think></think><tool_call>x<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>'),
      reply: '\n<think>Look it up.</think>\n<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>',
      want: { reasoning: 'Look it up.', content: '\n\n', calls: [call(0, 'get_weather', { days: 2 })] },
    },
    {
      family: 'DeepSeek-V3.1 thinking',
      template: familyTemplate(['<｜', '｜>'], '<｜Assistant｜><think>', "{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'}}</think>"),
      reply: 'Need it.</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"zone": "UTC"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
      want: { reasoning: 'Need it.', content: '', calls: [call(0, 'get_time', '{"zone": "UTC"}')] },
    },
    {
      family: 'gpt-oss',
      template: familyTemplate(['<|start|>', '<|end|>'], '<|start|>assistant', '<|channel|>final<|message|>'),
      reply: '<|channel|>analysis<|message|>Use the tool.<|end|><|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{"zone":"UTC"}',
      want: { reasoning: 'Use the tool.', content: '', calls: [call(0, 'get_time', { zone: 'UTC' })] },
    },
  ];
  for (const c of cases)
    it(c.family, () => {
      const format = new JinjaChatFormat(c.template, c.family);
      const prompt = format.encode(charTok, [{ role: 'user', content: 'Weather?' }], { open: true });
      const r = replyReader(format, charTok, prompt, { tools: true, decls: TOOLS });
      const events: ReplyEvent[] = [];
      for (const ch of c.reply) events.push(...r.push(0, ch));
      events.push(...r.flush());
      assert.deepEqual({ reasoning: r.reasoning, content: r.content, calls: r.calls }, c.want);
      // what ends the reply: harmony's turn ends with <|return|>, not with the <|end|> of a message
      if (c.family === 'gpt-oss') assert.equal(format.assistantEnd, '<|return|>');
    });
});

describe('reply formats the engine reads but cannot constrain yet', () => {
  const req = (over: Record<string, unknown>) => ({ messages: [{ role: 'user', content: 'x' }], tools: TOOLS, toolChoice: 'auto', ...over }) as unknown as TurnRequest;
  const fmt = (syntax: ReplySyntax) => ({ syntax, source: 'probe' }) as unknown as ChatFormat;

  it('refuses tool_choice required or named, and a harmony JSON answer, rather than leave them unenforced', () => {
    for (const tools of ['qwen-xml', 'glm', 'deepseek', 'harmony', 'mistral'] as const) {
      assert.doesNotThrow(() => promptOptions(req({}), fmt({ tools })));
      assert.throws(() => promptOptions(req({ toolChoice: 'required' }), fmt({ tools })), /tool_choice: .* cannot be required/);
      assert.throws(() => promptOptions(req({ toolChoice: { name: 'get_time' } }), fmt({ tools })), /tool_choice/);
    }
    assert.throws(() => promptOptions(req({ tools: [], schema: { type: 'object' } }), fmt({ tools: 'harmony' })), /response_format/);
    assert.doesNotThrow(() => promptOptions(req({ tools: [], schema: { type: 'object' } }), fmt({ think: THINK, tools: 'glm' })));
    assert.doesNotThrow(() => promptOptions(req({ toolChoice: 'required' }), fmt({ tools: 'hermes' })));
  });
});

describe('the releases\' own templates pick their reply format', () => {
  // the fixtures of test/fixtures/templates (their sources in its README): each one's calls and reasoning as its family writes them
  const want: Record<string, { tools?: string; think: boolean }> = {
    'deepseek-v3.1.jinja': { tools: 'deepseek', think: true },
    'glm-4.6.jinja': { tools: 'glm', think: true },
    'gpt-oss.jinja': { tools: 'harmony', think: false },
    'kimi-k2-instruct.jinja': { tools: 'kimi', think: false },
    'mixtral-8x7b-instruct.jinja': { think: false },
    'qwen3-coder.jinja': { tools: 'qwen-xml', think: false },
    'qwen3-hybrid.jinja': { tools: 'hermes', think: true },
    'qwen3-instruct-2507.jinja': { tools: 'hermes', think: true },
    'qwen3-thinking-2507.jinja': { tools: 'hermes', think: true },
  };
  for (const [file, w] of Object.entries(want))
    it(file, () => {
      const s = replySyntaxOf(fs.readFileSync(path.join(ROOT, 'test', 'fixtures', 'templates', file), 'utf8'));
      assert.equal(s.tools, w.tools);
      assert.equal(!!s.think, w.think);
    });
});
