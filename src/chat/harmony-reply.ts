import type { ToolCall } from './format.js';
import type { ToolDecl } from './tool-decl.js';
import { jsonObject, scanMarkers, takeVisible } from './call-reader.js';
import { type CallIdMaker, type ReplyEvent, type ReplyReader, indexCallId } from './reply.js';

/** gpt-oss's harmony markers (special tokens of o200k_harmony; read here as the text they decode to). */
export const HARMONY = {
  start: '<|start|>',
  channel: '<|channel|>',
  message: '<|message|>',
  end: '<|end|>',
  return: '<|return|>',
  call: '<|call|>',
  constrain: '<|constrain|>',
} as const;

/** A message's header, as far as it reads: its channel, its recipient, and whether every part of it was understood. */
export function harmonyHeader(raw: string): { channel?: string; recipient?: string; ok: boolean } {
  let channel: string | undefined;
  let recipient: string | undefined;
  let ok = true;
  const re = /<\|channel\|>\s*([^\s<]*)|<\|constrain\|>\s*([^\s<]*)|to=([^\s<]+)|([^\s<]+|<)/g;
  for (let m = re.exec(raw); m; m = re.exec(raw)) {
    if (m[1] !== undefined) {
      channel = m[1] || channel;
      if (!['analysis', 'commentary', 'final'].includes(m[1])) ok = false;
    } else if (m[2] !== undefined) {
      if (!/^\w*$/.test(m[2])) ok = false;
    } else if (m[3] !== undefined) {
      recipient = m[3];
      if (!/^[\w.-]+$/.test(m[3])) ok = false;
    } else if (m[4] !== 'assistant' && m[4] !== 'json' && m[4] !== 'code') ok = false;
  }
  return { channel, recipient, ok };
}

type State = 'between' | 'header' | 'body';
/** Where a message's body goes: reasoning (analysis), content (final, a preamble), or a call's arguments. */
type Route = 'reasoning' | 'content' | 'call';

/**
 * Reads a gpt-oss reply in harmony as it streams: messages `<|channel|>analysis<|message|>…<|end|>`
 * (reasoning), `<|start|>assistant<|channel|>final<|message|>…<|return|>` (content), commentary
 * without a recipient (a preamble: content), and calls
 * `<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>`
 * (the recipient may also stand before the channel). A call goes out whole when its message ends
 * (by `<|call|>`, or the reply's end — `<|call|>` is a stop token and may never be seen) and its
 * arguments are a JSON object naming a declared function; otherwise its message is content, header
 * and all. Never throws; a header the reader cannot make out is content.
 */
export class HarmonyReplyReader implements ReplyReader {
  readonly byToken = false;
  readonly calls: ToolCall[] = [];
  reasoning = '';
  content = '';
  readonly rejected: string[] = [];
  readonly startsInReasoning: boolean;
  private state: State = 'header';
  private buf = '';
  private header = '';
  private route: Route = 'content';
  private recipient = '';
  private args = '';
  /** Whitespace between messages, held back (see takeVisible). */
  gap = '';
  /** How much of the header the prompt wrote (not shown when the header is). */
  private fromPrompt = 0;
  private readonly callId: CallIdMaker;
  private readonly tools: boolean;
  private readonly decls: ReadonlyMap<string, ToolDecl> | undefined;

  /**
   * `prompt`: the prompt's text from its last `<|start|>` on (usually "assistant"), which the reply
   * continues; undefined when the prompt handed over no message (the reply starts between messages).
   */
  constructor(prompt: string | undefined, opts: { tools?: boolean; decls?: readonly ToolDecl[]; callId?: CallIdMaker } = {}) {
    this.callId = opts.callId ?? indexCallId;
    this.tools = opts.tools ?? true;
    this.decls = opts.decls?.length ? new Map(opts.decls.map((d) => [d.name, d])) : undefined;
    if (prompt === undefined) this.state = 'between';
    else {
      this.push(0, prompt);
      // what the prompt wrote is not the reply's
      this.reasoning = this.content = '';
      this.calls.length = 0;
      this.args = '';
      this.fromPrompt = this.header.length;
    }
    this.startsInReasoning = this.inReasoning;
  }

  get inReasoning(): boolean {
    return this.state === 'body' && this.route === 'reasoning';
  }

  private markers(): string[] {
    const H = HARMONY;
    switch (this.state) {
      case 'between':
        return [H.start, H.channel];
      case 'header':
        return [H.message, H.start, H.end, H.return, H.call];
      case 'body':
        return [H.end, H.return, H.call, H.start];
    }
  }

  push(_token: number, text: string): ReplyEvent[] {
    const out: ReplyEvent[] = [];
    if (!text) return out;
    this.buf += text;
    for (;;) {
      const found = scanMarkers(this.buf, this.markers());
      if (!found.marker) {
        this.take(this.buf.slice(0, found.at), out);
        this.buf = this.buf.slice(found.at);
        return out;
      }
      this.take(this.buf.slice(0, found.at), out);
      this.buf = this.buf.slice(found.at + found.marker.length);
      this.transition(found.marker, out);
    }
  }

  flush(): ReplyEvent[] {
    const out: ReplyEvent[] = [];
    this.take(this.buf, out);
    this.buf = '';
    if (this.state === 'header') this.dropHeader(out);
    else if (this.state === 'body') this.endMessage(out);
    this.state = 'between';
    this.gap = '';
    return out;
  }

  private take(text: string, out: ReplyEvent[]): void {
    if (!text) return;
    if (this.state === 'header') this.header += text;
    else if (this.state === 'between') {
      // whitespace between messages is markup; other text is content, with the whitespace before it
      this.gap += text;
      this.text('content', takeVisible(this), out);
    } else if (this.route === 'call') this.args += text;
    else this.text(this.route, text, out);
  }

  private text(kind: 'reasoning' | 'content', text: string, out: ReplyEvent[]): void {
    if (!text) return;
    if (kind === 'content') this.content += text;
    else this.reasoning += text;
    const last = out[out.length - 1];
    if (last && last.kind === kind) last.text += text;
    else out.push({ kind, text });
  }

  private transition(marker: string, out: ReplyEvent[]): void {
    const H = HARMONY;
    this.gap = '';
    if (this.state === 'between') {
      this.state = 'header';
      this.header = marker === H.channel ? marker : '';
      this.fromPrompt = 0;
    } else if (this.state === 'header') {
      if (marker === H.message) this.openMessage(out);
      else {
        // a header abandoned: another message starts, or the reply ends without a body
        this.dropHeader(out);
        this.state = marker === H.start ? 'header' : 'between';
        this.header = '';
        this.fromPrompt = 0;
      }
    } else {
      this.endMessage(out);
      this.state = marker === H.start ? 'header' : 'between';
      this.header = '';
      this.fromPrompt = 0;
    }
  }

  /** A header that never got its body: nothing, when it reads as a header; else what the model wrote, as content. */
  private dropHeader(out: ReplyEvent[]): void {
    const h = this.header;
    this.header = '';
    if (h.trim() && !harmonyHeader(h).ok) this.text('content', h.slice(this.fromPrompt), out);
    this.fromPrompt = 0;
  }

  private openMessage(out: ReplyEvent[]): void {
    const h = harmonyHeader(this.header);
    this.state = 'body';
    this.args = '';
    if (h.recipient && h.ok && this.tools) {
      this.route = 'call';
      this.recipient = h.recipient;
      return;
    }
    // a header not understood is shown with its message, as the model wrote them
    if (!h.ok) this.text('content', this.header.slice(this.fromPrompt) + HARMONY.message, out);
    this.route = h.channel === 'analysis' ? 'reasoning' : 'content';
  }

  private endMessage(out: ReplyEvent[]): void {
    if (this.route !== 'call') return;
    this.route = 'content';
    const name = this.recipient.startsWith('functions.') ? this.recipient.slice('functions.'.length) : this.recipient;
    const args = jsonObject(this.args.trim());
    let why: string | undefined;
    if (args === undefined) why = `harmony: the arguments of ${name} are not a JSON object`;
    else if (!name) why = 'harmony: a call without a function';
    else if (this.decls && !this.decls.has(name)) why = `harmony: a call of ${JSON.stringify(name)}, which is not a declared tool`;
    if (why !== undefined || args === undefined) {
      this.rejected.push(why!);
      this.text('content', this.header.slice(this.fromPrompt) + HARMONY.message + this.args, out);
      this.args = '';
      return;
    }
    const index = this.calls.length;
    const id = this.callId(index);
    this.calls.push({ id, name, arguments: args });
    out.push({ kind: 'call', index, id, name }, { kind: 'arguments', index, text: args });
    this.args = '';
  }
}
