import type { ReplySyntax, ToolCall } from './format.js';
import { takeVisible } from './call-reader.js';

/** A piece of a reply, as it streams: reasoning, content, a tool call starting, or its arguments. */
export type ReplyEvent =
  | { kind: 'reasoning'; text: string }
  | { kind: 'content'; text: string }
  | { kind: 'call'; index: number; id: string; name: string }
  | { kind: 'arguments'; index: number; text: string };

/**
 * What reads a reply as its tokens stream: each token (its id and the text it completes) in, the
 * reply's pieces out. Readers of formats whose structure is decided by token id (K3's) say
 * `byToken`: the caller then matches stop strings on the text they let through, not on the
 * markup in the generation loop, so a stop string can never cut a marker in two.
 */
export interface ReplyReader {
  push(token: number, text: string): ReplyEvent[];
  /** The reply has ended: what was held back. */
  flush(): ReplyEvent[];
  readonly reasoning: string;
  readonly content: string;
  readonly calls: ToolCall[];
  readonly byToken: boolean;
  /** The prompt left the reply inside the reasoning block. */
  readonly startsInReasoning: boolean;
  /** The reply is inside its reasoning block now (a token pushed next is a reasoning token). */
  readonly inReasoning: boolean;
  /** Why each call that did not read (bad JSON, an undeclared function, cut off…) was left in the content as written. */
  readonly rejected?: readonly string[];
}

/**
 * The id of the reply's call number `index` (from 0) where the model writes none: `call_INDEX` by
 * default; a server hands out ids unique across its responses instead.
 */
export type CallIdMaker = (index: number) => string;

export const indexCallId: CallIdMaker = (index) => `call_${index}`;

/** Kimi's tool-call section markers. */
export const KIMI_TOOL_MARKERS = {
  section: '<|tool_calls_section_begin|>',
  sectionEnd: '<|tool_calls_section_end|>',
  call: '<|tool_call_begin|>',
  args: '<|tool_call_argument_begin|>',
  callEnd: '<|tool_call_end|>',
} as const;

export const HERMES_TOOL_MARKERS = { call: '<tool_call>', callEnd: '</tool_call>' } as const;

type Channel = 'reasoning' | 'content' | 'section' | 'header' | 'args' | 'hermes';

/**
 * Splits a reply into reasoning, content and tool calls as its text streams in, by the markup the
 * chat template uses. Text is held back only while its tail could be the start of a marker, so
 * every piece of content is reported once and in order; markup never reaches the content. Never
 * throws on malformed markup: a call whose header or JSON cannot be read is reported as content.
 */
export class ReplyParser {
  private channel: Channel;
  private buf = '';
  private sawText = false;
  private header = '';
  private hermes = '';
  /** Inside a tool-call section (calls made without one go back to content). */
  private inSection = false;
  /** Whitespace in a section, not yet known to be markup or content. */
  /** Whitespace in a section, held back (see takeVisible). */
  gap = '';
  readonly calls: ToolCall[] = [];
  reasoning = '';
  content = '';

  private readonly callId: CallIdMaker;

  constructor(
    private readonly syntax: ReplySyntax,
    opts: { startInReasoning?: boolean; tools?: boolean; callId?: CallIdMaker } = {},
  ) {
    this.channel = opts.startInReasoning && syntax.think ? 'reasoning' : 'content';
    this.callId = opts.callId ?? indexCallId;
    if (!opts.tools) this.syntax = { ...syntax, tools: undefined };
  }

  private markers(): string[] {
    const t = this.syntax.think;
    switch (this.channel) {
      case 'reasoning':
        return t ? [t.close] : [];
      case 'content': {
        const m: string[] = [];
        if (t && !this.sawText) m.push(t.open);
        if (this.syntax.tools === 'kimi') m.push(KIMI_TOOL_MARKERS.section, KIMI_TOOL_MARKERS.call);
        if (this.syntax.tools === 'hermes') m.push(HERMES_TOOL_MARKERS.call);
        return m;
      }
      case 'section':
        return [KIMI_TOOL_MARKERS.call, KIMI_TOOL_MARKERS.sectionEnd];
      case 'header':
        return [KIMI_TOOL_MARKERS.args, KIMI_TOOL_MARKERS.callEnd];
      case 'args':
        return [KIMI_TOOL_MARKERS.callEnd, KIMI_TOOL_MARKERS.sectionEnd];
      case 'hermes':
        return [HERMES_TOOL_MARKERS.callEnd];
    }
  }

  /** Inside the reasoning block (its closing marker, while still held back, counts as inside). */
  get inReasoning(): boolean {
    return this.channel === 'reasoning';
  }

  /** Feed the next piece of the reply's text. */
  push(text: string): ReplyEvent[] {
    this.buf += text;
    const out: ReplyEvent[] = [];
    for (;;) {
      const ms = this.markers();
      let at = -1;
      let marker = '';
      for (const m of ms) {
        const i = this.buf.indexOf(m);
        if (i >= 0 && (at < 0 || i < at)) {
          at = i;
          marker = m;
        }
      }
      if (at < 0) {
        // keep back a tail that could be the start of a marker
        let keep = 0;
        for (const m of ms) for (let k = Math.min(m.length - 1, this.buf.length); k > keep; k--) if (m.startsWith(this.buf.slice(this.buf.length - k))) keep = k;
        this.emit(this.buf.slice(0, this.buf.length - keep), out);
        this.buf = this.buf.slice(this.buf.length - keep);
        return out;
      }
      const t = this.syntax.think;
      if (t && marker === t.open && this.channel === 'content' && this.buf.slice(0, at).trim()) {
        // a reasoning block opens a reply or not at all: after text, "<think>" is text
        this.emit(this.buf.slice(0, at + marker.length), out);
        this.buf = this.buf.slice(at + marker.length);
        continue;
      }
      this.emit(this.buf.slice(0, at), out);
      this.buf = this.buf.slice(at + marker.length);
      this.transition(marker, out);
    }
  }

  /** The reply has ended: report what was held back (an unfinished call's text becomes content). */
  flush(): ReplyEvent[] {
    const out: ReplyEvent[] = [];
    this.emit(this.buf, out);
    this.buf = '';
    if (this.channel === 'header' && this.header.trim()) this.emitText('content', this.header, out);
    if (this.channel === 'hermes' && this.hermes.trim()) this.emitText('content', HERMES_TOOL_MARKERS.call + this.hermes, out);
    this.header = this.hermes = this.gap = '';
    this.channel = 'content';
    return out;
  }

  private emit(text: string, out: ReplyEvent[]): void {
    if (!text) return;
    switch (this.channel) {
      case 'reasoning':
      case 'content':
        this.emitText(this.channel, text, out);
        break;
      case 'header':
        this.header += text;
        break;
      case 'args': {
        const call = this.calls[this.calls.length - 1];
        call.arguments += text;
        out.push({ kind: 'arguments', index: this.calls.length - 1, text });
        break;
      }
      case 'hermes':
        this.hermes += text;
        break;
      case 'section':
        // whitespace between calls is markup; anything else the model wrote there is content (with
        // the whitespace before it, however the pieces fell)
        this.gap += text;
        {
          const shown = takeVisible(this);
          if (shown) this.emitText('content', shown, out);
        }
        break;
    }
  }

  private emitText(kind: 'reasoning' | 'content', text: string, out: ReplyEvent[]): void {
    if (kind === 'content') {
      // a reply that opens with whitespace before its reasoning block still may open it
      if (text.trim()) this.sawText = true;
      this.content += text;
    } else this.reasoning += text;
    const last = out[out.length - 1];
    if (last && last.kind === kind) last.text += text;
    else out.push({ kind, text });
  }

  private transition(marker: string, out: ReplyEvent[]): void {
    const t = this.syntax.think;
    this.gap = '';
    if (t && marker === t.open && this.channel === 'content') this.channel = 'reasoning';
    else if (t && marker === t.close && this.channel === 'reasoning') this.channel = 'content';
    else if (marker === KIMI_TOOL_MARKERS.section) {
      this.inSection = true;
      this.channel = 'section';
    } else if (marker === KIMI_TOOL_MARKERS.call) {
      this.header = '';
      this.channel = 'header';
    } else if (marker === KIMI_TOOL_MARKERS.args) {
      const header = this.header.trim();
      // Kimi's call ids read "functions.NAME:INDEX"
      const m = /^(?:functions\.)?(.+?)(?::\d+)?$/.exec(header);
      const index = this.calls.length;
      const name = m ? m[1] : header;
      const id = header || this.callId(index);
      this.calls.push({ id, name, arguments: '' });
      out.push({ kind: 'call', index, id, name });
      this.channel = 'args';
    } else if (marker === KIMI_TOOL_MARKERS.callEnd) {
      if (this.channel === 'header' && this.header.trim()) this.emitText('content', this.header, out);
      this.channel = this.inSection ? 'section' : 'content';
    } else if (marker === KIMI_TOOL_MARKERS.sectionEnd) {
      this.inSection = false;
      this.channel = 'content';
    } else if (marker === HERMES_TOOL_MARKERS.call) {
      this.hermes = '';
      this.channel = 'hermes';
    } else if (marker === HERMES_TOOL_MARKERS.callEnd) {
      this.channel = 'content';
      this.hermesCall(out);
    }
  }

  private hermesCall(out: ReplyEvent[]): void {
    let doc: unknown;
    try {
      doc = JSON.parse(this.hermes);
    } catch {
      doc = undefined;
    }
    const o = doc as { name?: unknown; arguments?: unknown } | undefined;
    if (!o || typeof o !== 'object' || typeof o.name !== 'string' || Object.keys(o).some((k) => k !== 'name' && k !== 'arguments')) {
      this.emitText('content', HERMES_TOOL_MARKERS.call + this.hermes + HERMES_TOOL_MARKERS.callEnd, out);
      return;
    }
    const index = this.calls.length;
    const args = typeof o.arguments === 'string' ? o.arguments : JSON.stringify(o.arguments ?? {});
    const id = this.callId(index);
    this.calls.push({ id, name: o.name, arguments: args });
    out.push({ kind: 'call', index, id, name: o.name }, { kind: 'arguments', index, text: args });
  }
}
