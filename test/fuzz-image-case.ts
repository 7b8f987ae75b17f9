/**
 * The image fuzz cases' handler (run in test/fuzz-child.ts): decode, then make the patches a K3
 * vision tower takes by both routes. A decoded image must be within the limits it was decoded
 * under and agree with itself everywhere; anything else is `invalid`.
 */
import { decodeImage, imageSize } from '../src/image/decode.js';
import { composite, type ImageSpec, rowsFor, toPatches } from '../src/image/preprocess.js';
import { type CaseResult, refusal } from './fuzz-harness.js';

/** K3's vision settings (patch 14, 1024 patches; the release processor's caps). */
export const SPEC: ImageSpec = { patch: 14, maxPatches: 1024, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5], inPatchLimit: 16384, sideLimit: 512, towerLimit: 4096 };

export function imageCase({ bytes, maxPixels }: { bytes: Uint8Array; maxPixels: number }): CaseResult {
  let img;
  try {
    img = decodeImage(bytes, { name: 'fuzz.img', maxPixels });
  } catch (e) {
    return refusal(e);
  }
  const { width: w, height: h } = img;
  const bad = (why: string) => ({ outcome: 'invalid' as const, detail: `${img.format} ${w} x ${h}: ${why}` });
  if (!(Number.isInteger(w) && Number.isInteger(h) && w >= 1 && h >= 1)) return bad('not a size');
  if (w * h > maxPixels) return bad(`more than the ${maxPixels} pixels allowed`);
  if (img.rgb.length !== w * h * 3) return bad(`${img.rgb.length} RGB bytes`);
  if (img.alpha && img.alpha.length !== w * h) return bad(`${img.alpha.length} alpha bytes`);
  try {
    const size = imageSize(bytes, { name: 'fuzz.img' });
    if (size.width !== w || size.height !== h || size.format !== img.format) return bad(`imageSize says ${size.format} ${size.width} x ${size.height}`);
    const flat = composite(img);
    for (const route of ['waste', 'native'] as const) {
      const p = toPatches(flat, SPEC, route);
      if (p.pixels.length !== p.gh * p.gw * 3 * SPEC.patch * SPEC.patch) return bad(`${route}: ${p.pixels.length} values for ${p.gw} x ${p.gh} patches`);
      if (p.gh % 2 || p.gw % 2 || p.rows !== (p.gh / 2) * (p.gw / 2)) return bad(`${route}: ${p.rows} rows for ${p.gw} x ${p.gh} patches`);
      if (p.gh * p.gw > Math.min(route === 'waste' ? SPEC.maxPatches : SPEC.inPatchLimit, SPEC.towerLimit)) return bad(`${route}: ${p.gw} x ${p.gh} patches, past the cap`);
      if (rowsFor(w, h, SPEC, route) !== p.rows) return bad(`${route}: rowsFor says ${rowsFor(w, h, SPEC, route)}, the patches make ${p.rows}`);
      for (let i = 0; i < p.pixels.length; i++) if (!Number.isFinite(p.pixels[i])) return bad(`${route}: value ${i} is ${p.pixels[i]}`);
    }
  } catch (e) {
    // an image that decoded must go through: a refusal here is a fault too
    const r = refusal(e);
    return { outcome: r.outcome === 'error' ? 'invalid' : 'crash', detail: `after decoding ${img.format} ${w} x ${h}: ${r.detail}` };
  }
  return { outcome: 'ok', detail: `${img.format} ${w} x ${h}` };
}
