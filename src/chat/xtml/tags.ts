/**
 * XTML's pieces, K3's prompt markup: a tag is `<|open|>` name attributes `<|sep|>`, a closing tag
 * `<|close|>` name `<|sep|>`, and a message ends with `<|end_of_msg|>` — the brackets are reserved
 * tokens, not characters. A rendered prompt is a list of segments, each tokenized on its own (BPE
 * is not associative: ` role` + `="` + `user` encoded apart is not ` role="user"` encoded whole),
 * markup segments in markup mode and everything else in plain mode. Only the four markers and a
 * media block are ever markup; a tag's name and its attributes are plain segments, as the
 * release's `encoding_k3.py` cuts them.
 */
export const OPEN = '<|open|>';
export const CLOSE = '<|close|>';
export const SEP = '<|sep|>';
export const END_OF_MSG = '<|end_of_msg|>';
export const MARKERS = [OPEN, CLOSE, SEP, END_OF_MSG] as const;

/** The string a caller leaves in a text for each image (the release's image placeholder). */
export const IMAGE_PLACEHOLDER = '<|kimi_image_placeholder|>';

/** A run of prompt text and the tokenizer mode it goes through (`markup` = control strings become control tokens). */
export interface Segment {
  text: string;
  markup: boolean;
}

/** Appends a segment, dropping an empty one (the release never emits them). */
export function push(out: Segment[], text: string, markup = false): void {
  if (text) out.push({ text, markup });
}

/** `&` then `"`, in that order (else the `&` of `&quot;` is escaped again); `<` and `>` stay as they are. */
export function escapeAttr(value: string): string {
  return value.replace(/&/g, '&amp;').replace(/"/g, '&quot;');
}

/** The reverse, `&quot;` first. */
export function unescapeAttr(value: string): string {
  return value.replace(/&quot;/g, '"').replace(/&amp;/g, '&');
}

export function openTag(out: Segment[], name: string, attrs: readonly [string, string][] = []): void {
  push(out, OPEN, true);
  push(out, name);
  for (const [k, v] of attrs) {
    push(out, ` ${k}`);
    push(out, '="');
    push(out, escapeAttr(v));
    push(out, '"');
  }
  push(out, SEP, true);
}

export function closeTag(out: Segment[], name: string): void {
  push(out, CLOSE, true);
  push(out, name);
  push(out, SEP, true);
}

/** The media block K3 puts where an image is, at the image's source size in pixels. */
export function imagePrompt(width: number, height: number): string {
  return `<|media_begin|>image ${width}x${height}<|media_content|><|media_pad|><|media_end|>`;
}

const MEDIA = /^<\|media_begin\|>image \d{1,9}x\d{1,9}<\|media_content\|><\|media_pad\|><\|media_end\|>$/;

/** A segment the format may tokenize in markup mode: a marker, a media block, or the placeholder the release leaves for an image it was given no size for. */
export function isMarkup(text: string): boolean {
  return (MARKERS as readonly string[]).includes(text) || MEDIA.test(text) || text === IMAGE_PLACEHOLDER;
}
