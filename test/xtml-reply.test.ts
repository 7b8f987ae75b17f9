/**
 * Reading a K3 reply back by token id: the think channel is reasoning, the response channel the
 * content, tools/call/argument/json elements tool calls; a marker's characters spelled by ordinary
 * tokens are text; what the model mangles never throws. And stop strings on the text a person reads.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ReplyEvent } from '../src/chat/reply.js';
import { replyReader } from '../src/chat/reply-reader.js';
import { ReplyStream } from '../src/generate/reply-stream.js';
import { XtmlReplyReader, parseHeader } from '../src/chat/xtml/reply.js';
import { XtmlChatFormat } from '../src/chat/xtml/format.js';
import { k3Tokenizer } from './helpers.js';

const tok = k3Tokenizer();
const markers = { open: tok.specialId('<|open|>')!, close: tok.specialId('<|close|>')!, sep: tok.specialId('<|sep|>')!, end: tok.specialId('<|end_of_msg|>')! };

/** A reply as the generation loop yields it: markers as their ids (in `{…}`), text as ordinary tokens, each with the text it completes. */
function tokens(...parts: string[]): [number, string][] {
  const out: [number, string][] = [];
  const d = tok.decoder();
  for (const p of parts) {
    const ids = p === '{open}' ? [markers.open] : p === '{close}' ? [markers.close] : p === '{sep}' ? [markers.sep] : p === '{end}' ? [markers.end] : tok.encode(p);
    for (const t of ids) out.push([t, d.push(t)]);
  }
  return out;
}

function read(reader: { push(t: number, s: string): ReplyEvent[]; flush(): ReplyEvent[] }, steps: [number, string][]): ReplyEvent[] {
  const events: ReplyEvent[] = [];
  for (const [t, s] of steps) events.push(...reader.push(t, s));
  events.push(...reader.flush());
  return events;
}

/** The kinds of events in order, a run of one kind counted once. */
const kinds = (events: ReplyEvent[]) => events.map((e) => e.kind).filter((k, i, all) => i === 0 || k !== all[i - 1] || k === 'call' || k === 'arguments');

const think = (open = true) => new XtmlReplyReader(markers, { channel: open ? 'think' : 'response', tools: true });
const el = (name: string) => ['{open}', name, '{sep}'];
const end = (name: string) => ['{close}', name, '{sep}'];

describe('the K3 reply reader', () => {
  it('splits reasoning, content and typed tool calls, streaming each call as it is made', () => {
    const r = think();
    const events = read(r, tokens(
      'Need the weather.', ...end('think'),
      ...el('response'), 'Checking.', ...end('response'),
      ...el('tools'),
      ...el('call tool="get_weather" index="1"'),
      ...el('argument key="city" type="string"'), 'Paris', ...end('argument'),
      ...el('argument key="days" type="number"'), '3', ...end('argument'),
      ...el('argument key="metric" type="boolean"'), 'true', ...end('argument'),
      ...el('argument key="extra" type="object"'), '{"a": [1, null]}', ...end('argument'),
      ...el('argument key="note" type="number"'), 'three or four', ...end('argument'),
      ...end('call'),
      ...el('call tool="clock" index="2"'), ...end('call'),
      ...end('tools'), ...end('message'), '{end}', 'ignored after the end',
    ));
    assert.equal(r.reasoning, 'Need the weather.');
    assert.equal(r.content, 'Checking.');
    assert.deepEqual(r.calls, [
      { id: 'call_0', name: 'get_weather', arguments: '{"city":"Paris","days":3,"metric":true,"extra":{"a":[1,null]},"note":"three or four"}' },
      { id: 'call_1', name: 'clock', arguments: '{}' },
    ]);
    assert.ok(r.finished);
    // the events carry the same, in order: a call, then its arguments when it closes
    assert.deepEqual(kinds(events), ['reasoning', 'content', 'call', 'arguments', 'call', 'arguments']);
    assert.equal(events.filter((e) => e.kind === 'reasoning').map((e) => (e as { text: string }).text).join(''), 'Need the weather.');
  });

  it("a json child's text streams as the arguments, verbatim", () => {
    const r = think(false);
    const events = read(r, tokens('', ...end('response'), ...el('tools'), ...el('call tool="f" index="1"'), ...el('json type="object"'), '{"a":', ' 1}', ...end('json'), ...end('call'), ...end('tools')));
    assert.deepEqual(r.calls, [{ id: 'call_0', name: 'f', arguments: '{"a": 1}' }]);
    assert.equal(events.filter((e) => e.kind === 'arguments').map((e) => (e as { text: string }).text).join(''), '{"a": 1}');
  });

  it('decides structure by token id: markers spelled by ordinary tokens are text', () => {
    const r = think(false);
    read(r, tokens('a <|sep|> and <|close|>response<|sep|> stay text', ...end('response'), 'between', ...end('message'), '{end}'));
    assert.equal(r.content, 'a <|sep|> and <|close|>response<|sep|> stay textbetween');
    assert.equal(r.reasoning, '');
  });

  it('never throws on what the model mangles; unfinished headers and calls offered no tools are dropped', () => {
    const r = think();
    read(r, tokens('why', ...end('nothing-open'), '{sep}', ' more', ...end('think'), 'loose text', ...el('argument key="x" type="string"'), 'outside a call', ...end('argument'), '{open}', 'respon'));
    assert.equal(r.reasoning, 'why more');
    assert.equal(r.content, 'loose text');
    assert.deepEqual(r.calls, []);
    const off = new XtmlReplyReader(markers, { channel: 'response', tools: false });
    read(off, tokens('ok', ...end('response'), ...el('tools'), ...el('call tool="f" index="1"'), ...el('json type="object"'), '{}', ...end('json'), ...end('call'), ...end('tools')));
    assert.equal(off.content, 'ok');
    assert.deepEqual(off.calls, []);
    // a call cut by the token limit still reports what it had
    const cut = think(false);
    read(cut, tokens(...end('response'), ...el('tools'), ...el('call tool="g" index="1"'), ...el('argument key="q" type="string"'), 'half'));
    assert.deepEqual(cut.calls, [{ id: 'call_0', name: 'g', arguments: '{"q":"half"}' }]);
  });

  it('reads attribute values back, &quot; before &amp;', () => {
    assert.deepEqual(parseHeader(' call tool="a&quot;b&amp;quot;" index=2 x'), { name: 'call', attrs: new Map([['tool', 'a"b&quot;'], ['index', '2']]) });
    assert.deepEqual(parseHeader('think'), { name: 'think', attrs: new Map() });
  });

  it('knows from the prompt which channel the reply begins in', () => {
    const f = new XtmlChatFormat();
    const on = f.encode(tok, [{ role: 'user', content: 'x' }]);
    const off = f.encode(tok, [{ role: 'user', content: 'x' }], { thinking: false });
    assert.equal(replyReader(f, tok, on, { tools: false }).startsInReasoning, true);
    assert.equal(replyReader(f, tok, off, { tools: false }).startsInReasoning, false);
    assert.equal(replyReader(f, tok, on, { tools: false }).byToken, true);
  });
});

describe('stop strings on the text a person reads', () => {
  it('cut the reasoning or the content where they appear, never the markup, and say which ended the reply', () => {
    const s = new ReplyStream(think(), ['STOP', '|>']);
    const events = read(s, tokens('thinking ', ...end('think'), ...el('response'), 'answer ST', 'OP and more'));
    assert.equal(s.reasoning, 'thinking ');
    assert.equal(s.content, 'answer ');
    assert.equal(s.stopped, 'STOP');
    assert.deepEqual(kinds(events), ['reasoning', 'content']);
    // held-back text that did not become a stop string goes out before a call, and at the end
    const t = new ReplyStream(think(false), ['xyz']);
    const ev = read(t, tokens('ends with xy', ...end('response'), ...el('tools'), ...el('call tool="f" index="1"'), ...end('call'), ...end('tools')));
    assert.equal(t.content, 'ends with xy');
    assert.equal(t.stopped, undefined);
    assert.deepEqual(kinds(ev), ['content', 'call', 'arguments']);
  });
});
