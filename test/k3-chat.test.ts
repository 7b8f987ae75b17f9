/**
 * The library's Chat on a K3 model: K3's format, the reply's content streamed without its markup
 * or reasoning (both kept in the conversation), stop strings on the text read, and a conversation
 * continued turn by turn feeding only its new tokens — a reply that closed its message stands in
 * the history as the ids it was sampled as.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { grammarConstraint } from '../src/constrain/constraint.js';
import { lit, seq } from '../src/constrain/grammar.js';
import { vocabOf } from '../src/constrain/vocab.js';
import { Model } from '../src/api/model.js';
import { synth } from './helpers.js';

const dir = synth({ shape: 'k3-tiny', seed: 41, tokenizer: true }, 'k3-chat');

describe('Chat on a K3 model', () => {
  let m: Model;
  before(async () => {
    m = await Model.open(dir, { threads: 1 });
  });
  after(() => m.close());

  /** Makes the random model write a whole reply: reasoning, a response, the message closed. */
  const closed = (reasoning: string, content: string) => {
    const mark = (t: string) => lit(t, 'special');
    const text = (t: string) => lit(t, 'plain');
    const g = seq([text(reasoning), mark('<|close|>'), text('think'), mark('<|sep|>'), mark('<|open|>'), text('response'), mark('<|sep|>'), text(content), mark('<|close|>'), text('response'), mark('<|sep|>'), mark('<|close|>'), text('message'), mark('<|sep|>')]);
    const end = m.tokenizer().specialId('<|end_of_msg|>')!;
    return grammarConstraint(vocabOf(m.tokenizer()), g, [end]);
  };

  it('streams the content alone, keeps the reasoning, and continues the conversation without feeding it again', async () => {
    const chat = m.chat({ system: 'Be brief.' });
    assert.equal(chat.format.source, 'Kimi K3 XTML');
    const pieces: string[] = [];
    for await (const p of chat.send('Hello', { maxTokens: 60, constraint: closed('let me see', 'Hi there') })) pieces.push(p);
    assert.equal(pieces.join(''), 'Hi there');
    assert.equal(chat.last!.finish, 'stop');
    const reply = chat.messages[2];
    assert.equal(reply.content, 'Hi there');
    assert.equal(reply.reasoning, 'let me see');
    const held = chat.session.position;
    const events = [];
    for await (const e of chat.reply('And then?', { maxTokens: 4, temperature: 1, seed: 1 })) events.push(e);
    assert.equal(chat.reprocessed, 0, 'the history was not fed again');
    assert.ok(chat.session.position > held);
    // thinking is on by default: a random model's free reply is reasoning
    assert.ok(events.every((e) => e.kind === 'reasoning'));
    chat.close();
  });

  it('ends a reply at a stop string in the text it reads, and thinks or not as asked', async () => {
    const chat = m.chat({ thinking: false });
    let text = '';
    const wanted = closedNoThink('one two three');
    for await (const p of chat.send('Count', { maxTokens: 60, constraint: wanted, stop: ['two'] })) text += p;
    assert.equal(text, 'one ');
    assert.equal(chat.last!.finish, 'stop');
    assert.equal(chat.last!.stopString, 'two');
    chat.close();

    function closedNoThink(content: string) {
      const g = seq([lit(content, 'plain'), lit('<|close|>', 'special'), lit('response', 'plain'), lit('<|sep|>', 'special')]);
      return grammarConstraint(vocabOf(m.tokenizer()), g, [m.tokenizer().specialId('<|end_of_msg|>')!]);
    }
  });
});
