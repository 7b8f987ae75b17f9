import { WasteError } from '../../util/errors.js';
import { type ChatFormat, type ChatMessage, type EncodeOptions, type PromptSegment, type ReplySyntax, messageImages } from '../format.js';
import type { Tokenizer } from '../../tokenizer/tokenizer.js';
import { renderXtml } from './render.js';
import { CLOSE, END_OF_MSG, MARKERS, OPEN, SEP, type Segment, isMarkup, openTag } from './tags.js';

/**
 * OpenAI's effort names → K3's `thinking_effort` (low, high, max). K3 has no middle value (its note
 * lists `medium`, its code refuses it), so `medium` — what many clients send by default — rounds up.
 */
const EFFORTS: Record<string, string> = { minimal: 'low', low: 'low', medium: 'high', high: 'high', xhigh: 'max', max: 'max' };

/**
 * Whether K3 thinks and how hard, from a turn's options: `thinking` (else chat_template_kwargs'
 * `thinking`, else on — the release's default); with thinking on, chat_template_kwargs'
 * `thinking_effort` (K3's own value, checked by the renderer), else `effort` mapped by EFFORTS,
 * else `max`, which is what the release's `apply_chat_template` writes when it is given none.
 */
export function xtmlThinking(opts: EncodeOptions): { thinking: boolean; effort?: string } {
  const vars = opts.vars ?? {};
  const thinking = opts.thinking ?? (typeof vars.thinking === 'boolean' ? vars.thinking : true);
  if (!thinking) return { thinking };
  const own = vars.thinking_effort;
  if (own !== undefined && own !== null) {
    if (typeof own !== 'string') throw new WasteError('E_FORMAT', 'chat_template_kwargs.thinking_effort must be a string (low, high or max)');
    return { thinking, effort: own };
  }
  if (opts.effort === undefined) return { thinking, effort: 'max' };
  const effort = EFFORTS[opts.effort];
  if (!effort) throw new WasteError('E_FORMAT', `reasoning effort ${JSON.stringify(opts.effort)} has no K3 counterpart (${Object.keys(EFFORTS).join(', ')})`);
  return { thinking, effort };
}

/** A message in the shape the renderer takes (OpenAI's). */
function openai(m: ChatMessage): Record<string, unknown> {
  const multi = m.parts && (m.parts.length > 1 || m.parts.some((p) => typeof p !== 'string'));
  const content = multi ? m.parts!.map((p) => (typeof p === 'string' ? { type: 'text', text: p } : { type: 'image' })) : m.content;
  const out: Record<string, unknown> = { role: m.role, content };
  if (m.name !== undefined) out.name = m.name;
  if (m.role === 'tool' && m.toolCallId !== undefined) out.tool_call_id = m.toolCallId;
  if (m.role === 'assistant') {
    if (m.reasoning) out.reasoning_content = m.reasoning;
    if (m.toolCalls?.length) out.tool_calls = m.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
  }
  return out;
}

/** The ids of K3's four markers; a tokenizer without them would spell the markup as text, silently wrong. */
export function markerIds(tok: Tokenizer): { open: number; close: number; sep: number; end: number } {
  const [open, close, sep, end] = MARKERS.map((m) => {
    const id = tok.specialId(m);
    if (id === undefined) throw new WasteError('E_FORMAT', `the tokenizer has no special token ${m}, which K3's format is made of (specials.json)`);
    return id;
  });
  return { open, close, sep, end };
}

/**
 * Whether a reply the model generated can stand in the conversation as its ids: it closed its
 * message (`<|close|>message<|sep|>`, the end token after it is the format's), and its first
 * closing tag is of the channel this rendering opens (a reply generated with thinking on cannot
 * stand in a conversation rendered with it off, nor the other way round).
 */
function reusable(tok: Tokenizer, ids: readonly number[], channel: string): boolean {
  const k = markerIds(tok);
  if (ids.length < 3 || ids[ids.length - 1] !== k.sep || ids.includes(k.end)) return false;
  const last = ids.lastIndexOf(k.close);
  if (last < 0 || tok.decode(ids.slice(last + 1, -1)) !== 'message') return false;
  const first = ids.indexOf(k.close);
  const sep = ids.indexOf(k.sep, first);
  return tok.decode(ids.slice(first + 1, sep)) === channel;
}

/**
 * Kimi K3's own prompt format (src/tokenizer/xtml/render.ts), tokenized segment by segment: the
 * four markers and media blocks in markup mode, every other segment — tag names, attributes,
 * everything anyone wrote — in plain mode, so no message can forge a marker. A reply the model
 * generated here keeps its ids when it can stand as they are (see `reusable`), so a conversation
 * continued turn by turn feeds only its new tokens.
 */
export class XtmlChatFormat implements ChatFormat {
  readonly source = 'Kimi K3 XTML';
  readonly assistantEnd = END_OF_MSG;
  readonly syntax: ReplySyntax = { think: { open: `${OPEN}think${SEP}`, close: `${CLOSE}think${SEP}` }, tools: 'xtml' };

  render(messages: ChatMessage[], opts: EncodeOptions = {}, tok?: Tokenizer): PromptSegment[] {
    const { thinking, effort } = xtmlThinking(opts);
    const spans: [number, number][] = [];
    const images = messageImages(messages).map((i) => ({ width: i.width, height: i.height }));
    const segs = renderXtml(
      {
        messages: messages.map(openai),
        // images come only as parts: a placeholder someone typed stays text
        ...(images.length ? { images, placeholdersInText: false } : {}),
        tools: opts.tools,
        toolChoice: typeof opts.toolChoice === 'string' ? opts.toolChoice : undefined,
        responseFormat: opts.responseFormat,
        thinking,
        thinkingEffort: effort,
        addGenerationPrompt: opts.open ?? true,
        continueFinal: opts.continueFinal,
      },
      { spans },
    );
    const out: PromptSegment[] = [];
    const channel = thinking ? 'think' : 'response';
    let from = 0;
    messages.forEach((m, i) => {
      // a continued message is rendered open, never as the closed reply its ids were
      if (!(tok && m.role === 'assistant' && m.ids && reusable(tok, m.ids, channel)) || (opts.continueFinal && i === messages.length - 1)) return;
      const [s, e] = spans[i];
      for (const seg of segs.slice(from, s)) out.push(prompt(seg));
      // the message's opening as the generation prompt wrote it, then what the model wrote
      const head: Segment[] = [];
      openTag(head, 'message', [['role', 'assistant'], ...(m.name ? ([['name', m.name]] as [string, string][]) : [])]);
      openTag(head, channel);
      for (const seg of head) out.push(prompt(seg));
      out.push({ kind: 'ids', ids: m.ids }, { kind: 'markup', text: END_OF_MSG });
      from = e;
    });
    for (const seg of segs.slice(from)) out.push(prompt(seg));
    return out;
  }

  encode(tok: Tokenizer, messages: ChatMessage[], opts: EncodeOptions = {}): number[] {
    return tokenizeXtml(tok, this.render(messages, opts, tok));
  }
}

/** Rendered segments as ids, each tokenized on its own in its own mode (a tokenizer without K3's markers is refused). */
export function tokenizeXtml(tok: Tokenizer, segments: readonly PromptSegment[]): number[] {
  markerIds(tok);
  const out: number[] = [];
  for (const s of segments) {
    const ids = s.kind === 'ids' ? s.ids : tok.encode(s.text, { markup: s.kind === 'markup' });
    for (const id of ids) out.push(id);
  }
  return out;
}

/** A renderer segment for tokenizing: only the format's own markup reaches markup mode, whatever the renderer was given. */
export function prompt(s: Segment): PromptSegment {
  if (s.markup && !isMarkup(s.text)) throw new WasteError('E_FORMAT', `K3's format produced markup that is not a marker or a media block (${JSON.stringify(s.text.slice(0, 40))})`);
  return { kind: s.markup ? 'markup' : 'text', text: s.text };
}
