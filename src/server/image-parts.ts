import type { ChatMessage } from '../chat/format.js';
import { badRequest } from './errors.js';
import type { TurnRequest } from './host.js';

/**
 * An image as a request gives it, before anything is decoded or fetched: base64 bytes with the
 * media type the client named, or an http(s) URL (fetched only when the server allows it).
 */
export type ImageSource = { kind: 'inline'; mediaType: string; base64: string } | { kind: 'remote'; url: URL };

/** An image part of a request, with where it sits (`messages[0].content[1]`), which its errors name. */
export interface RequestImage {
  source: ImageSource;
  where: string;
}

/** A message as parsed: its parts may hold images not yet decoded. */
export type DraftMessage = Omit<ChatMessage, 'parts'> & { parts?: (string | RequestImage)[] };

/** A turn as parsed, its images still to be put through the tower (see ServerImages). */
export type DraftTurn = Omit<TurnRequest, 'messages'> & { messages: DraftMessage[] };

/** The most images one request may carry: each is decoded and put through the tower before the turn. */
export const MAX_IMAGES = 64;

/** URLs shown in errors are cut to this (a client may send a megabyte of one). */
const SHOWN = 120;

export const shownUrl = (u: string) => (u.length > SHOWN ? `${u.slice(0, SHOWN)}…` : u);

const MEDIA_TYPE = /^image\/[a-z0-9][a-z0-9.+-]*$/i;

/** An image part's fault: the message names the part, `param` the field that holds it (OpenAI's error shape). */
export const imageRefusal = (where: string, message: string) => badRequest(`${where}: ${message}`, where.replace(/\[\d+\]$/, ''));
const refuse = imageRefusal;

/** A base64 source (Anthropic's `source.type: "base64"`): its media type must be an image's. */
export function inlineSource(mediaType: string, base64: string, where: string): ImageSource {
  if (!MEDIA_TYPE.test(mediaType)) throw refuse(where, `the media type "${shownUrl(mediaType)}" is not an image's (image/png, image/jpeg, image/gif, image/bmp)`);
  return { kind: 'inline', mediaType: mediaType.toLowerCase(), base64 };
}

/**
 * An image URL as a client sends it: `data:image/…;base64,…`, or http(s) (whether the server
 * fetches it is decided later, by its options). Any other scheme — file:, ftp:, blob: — never.
 */
export function urlSource(url: string, where: string): ImageSource {
  if (/^data:/i.test(url)) {
    const comma = url.indexOf(',');
    // a media type and its parameters are short; a header that runs on is not one
    if (comma < 0 || comma > 256) throw refuse(where, 'a data: URL needs a media type and ";base64," before its data');
    const params = url.slice(5, comma).split(';').map((s) => s.trim());
    if (params[params.length - 1].toLowerCase() !== 'base64') throw refuse(where, 'a data: URL image must be base64 (data:image/png;base64,…)');
    return inlineSource(params[0], url.slice(comma + 1), where);
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw refuse(where, `"${shownUrl(url)}" is not a URL (send a data:image/…;base64,… URL)`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw refuse(where, `${parsed.protocol} URLs are not fetched (send a data: URL, or http(s) where the server allows it)`);
  return { kind: 'remote', url: parsed };
}

/** The request's images in the order the conversation shows them. */
export function draftImages(turn: DraftTurn): RequestImage[] {
  const out: RequestImage[] = [];
  for (const m of turn.messages) for (const p of m.parts ?? []) if (typeof p !== 'string') out.push(p);
  return out;
}

/** A turn that must be text only (a format with no images): the first image part is the client's 400. */
export function textOnly(turn: DraftTurn, why: string): TurnRequest {
  const first = draftImages(turn)[0];
  if (first) throw refuse(first.where, why);
  return { ...turn, messages: turn.messages.map((m) => (m.parts ? { ...m, parts: m.parts as string[] } : (m as ChatMessage))) };
}
