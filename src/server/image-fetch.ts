import { linkedAbort } from '../util/abort.js';
import { ApiError } from './errors.js';
import { imageRefusal, shownUrl } from './image-parts.js';

export interface FetchLimits {
  /** Most bytes read of the image; the transfer is cut off past it. */
  maxBytes: number;
  /** From the first request to the last byte of the body, redirects included. */
  timeoutMs: number;
  /** Redirects followed (each checked as the first URL is: http or https only). */
  maxRedirects: number;
}

/** Media types a server may send an image as without naming it: the decoder reads what the bytes are. */
const UNNAMED = new Set(['', 'application/octet-stream', 'binary/octet-stream']);

/**
 * An image from an http(s) URL, in at most `maxBytes`, within `timeoutMs`, through at most
 * `maxRedirects` redirects: every failure is the client's 400 naming the part (`where`), and the
 * client leaving stops the transfer.
 */
export async function fetchImage(first: URL, limits: FetchLimits, where: string, signal: AbortSignal): Promise<Uint8Array> {
  const { controller, dispose } = linkedAbort(signal);
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort();
  }, limits.timeoutMs);
  let url = first;
  // named by the URL the client sent: where a redirect led is part of the message
  const fail = (message: string) => imageRefusal(where, `${shownUrl(first.href)}: ${message}`);
  try {
    for (let hop = 0; ; hop++) {
      if (url.protocol !== 'http:' && url.protocol !== 'https:') throw fail(`redirected to ${shownUrl(url.href)}: ${url.protocol} URLs are not fetched`);
      // redirects by hand: each is counted and its scheme checked
      const res = await fetch(url, { redirect: 'manual', signal: controller.signal, headers: { accept: 'image/*' } });
      if (res.status >= 300 && res.status < 400) {
        await drop(res);
        const to = res.headers.get('location');
        if (!to) throw fail(`answered ${res.status} without a Location`);
        if (hop >= limits.maxRedirects) throw fail(`more than ${limits.maxRedirects} redirects`);
        try {
          url = new URL(to, url);
        } catch {
          throw fail(`redirected to "${shownUrl(to)}", which is not a URL`);
        }
        continue;
      }
      if (!res.ok) {
        await drop(res);
        throw fail(`answered ${res.status}${res.statusText ? ` ${res.statusText}` : ''}`);
      }
      const type = (res.headers.get('content-type') ?? '').split(';')[0].trim().toLowerCase();
      if (!type.startsWith('image/') && !UNNAMED.has(type)) {
        await drop(res);
        throw fail(`sent ${type}, not an image`);
      }
      const stated = Number(res.headers.get('content-length') ?? NaN);
      if (stated > limits.maxBytes) {
        await drop(res);
        throw fail(`the image is ${stated} bytes, more than the ${limits.maxBytes} this server takes`);
      }
      return await readCapped(res, limits.maxBytes, fail);
    }
  } catch (e) {
    if (e instanceof ApiError) throw e;
    if (signal.aborted) throw new ApiError(499, 'the client went away while its image was fetched', 'invalid_request_error', 'client_closed');
    if (timedOut) throw fail(`no whole image within ${limits.timeoutMs / 1000} s`);
    throw fail(`could not be fetched (${causeOf(e)})`);
  } finally {
    clearTimeout(timer);
    dispose();
  }
}

/** A body not wanted: its transfer ended (a failure to end it changes nothing for the request). */
const drop = (res: Response) => res.body?.cancel().catch(() => {});

/** The body, refused as soon as it runs past `max` (a Content-Length can lie, or be absent). */
async function readCapped(res: Response, max: number, fail: (m: string) => ApiError): Promise<Uint8Array> {
  if (!res.body) return new Uint8Array(0);
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.length;
    if (total > max) {
      await reader.cancel().catch(() => {});
      throw fail(`the image is more than the ${max} bytes this server takes`);
    }
    chunks.push(value);
  }
  const out = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

/** undici's "fetch failed" hides the reason in its cause (refused, unknown host, reset…). */
function causeOf(e: unknown): string {
  const err = e as { message?: string; cause?: { code?: string; message?: string } };
  const c = err?.cause;
  const text = c?.code ?? c?.message ?? err?.message ?? String(e);
  return text.length > 120 ? `${text.slice(0, 120)}…` : text;
}
