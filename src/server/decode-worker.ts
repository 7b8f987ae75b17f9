/**
 * The image decoder's thread (see DecoderThread): a large image takes seconds to decode, which on
 * the server's own thread would stall every request, /health included.
 */
import { parentPort } from 'node:worker_threads';
import { decodeImage } from '../image/decode.js';
import { WasteError } from '../util/errors.js';
import type { DecodeJob, DecodeReply } from './decode-thread.js';

/** A view that owns its whole buffer, so transferring it detaches nothing else (Buffers share pools). */
const own = (a: Uint8Array) => (a.byteOffset === 0 && a.byteLength === a.buffer.byteLength ? a : a.slice());

parentPort!.on('message', (job: DecodeJob) => {
  let reply: DecodeReply;
  try {
    const img = decodeImage(job.bytes, { name: job.name, maxPixels: job.maxPixels });
    const rgb = own(img.rgb);
    const alpha = img.alpha ? own(img.alpha) : undefined;
    reply = { id: job.id, image: { width: img.width, height: img.height, rgb, ...(alpha ? { alpha } : {}) } };
    parentPort!.postMessage(reply, [rgb.buffer as ArrayBuffer, ...(alpha ? [alpha.buffer as ArrayBuffer] : [])]);
  } catch (e) {
    reply = { id: job.id, error: { message: (e as Error)?.message ?? String(e), image: e instanceof WasteError && e.code === 'E_IMAGE' } };
    parentPort!.postMessage(reply);
  }
});
