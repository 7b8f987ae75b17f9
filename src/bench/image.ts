import { Model, type OpenOptions } from '../api/model.js';
import { expandPads } from '../model/media.js';
import { readImageFile } from '../image/decode.js';
import { type ImageRoute, rowsFor } from '../image/preprocess.js';
import { WasteError } from '../util/errors.js';
import { MAX_IMAGE_PATCHES } from '../engine/options.js';
import { table } from './measure.js';

export interface ImageBenchResult {
  model: string;
  image: string;
  width: number;
  height: number;
  route: ImageRoute;
  patches: number;
  rows: number;
  /** Loading the tower (the first image's extra cost). */
  tower_load_s: number;
  /** One pass through the tower, best of the runs. */
  tower_s: number;
  /** Prefill of a prompt holding the image's rows, and of a text prompt as long. */
  prefill_image_s: number;
  prefill_text_s: number;
  /** Image rows in the prompt for typical sizes, by route. */
  rows_for: { size: string; waste: number; native: number; native_max: number }[];
  /** The most patches an image may become as opened (--image-patches). */
  image_patches: number;
  threads: number;
}

/**
 * What an image costs: the tower's time (first load apart), and the prefill of its rows next to a
 * text prompt of the same length, measured one after the other in one run.
 */
export async function benchImage(model: string, file: string, opts: OpenOptions & { route?: ImageRoute; runs?: number; log?: (s: string) => void }): Promise<ImageBenchResult> {
  const { route = 'waste', runs = 3, log, ...open } = opts;
  const m = await Model.open(model, open);
  try {
    const v = m.vision;
    if (!v) throw new WasteError('E_UNSUPPORTED', `${model} takes no images (it has no vision tower, or --no-vision was given)`);
    // decoded once: the model keeps encodings by the file's bytes, and each run must pass the tower
    const pixels = readImageFile(file);
    let t = performance.now();
    const first = await m.encodeImage(pixels, { route });
    const firstS = (performance.now() - t) / 1000;
    let best = Infinity;
    for (let i = 0; i < runs; i++) {
      t = performance.now();
      await m.encodeImage(pixels, { route });
      best = Math.min(best, (performance.now() - t) / 1000);
    }
    log?.(`tower: ${first.gh} x ${first.gw} patches, ${first.count} rows, ${best.toFixed(3)} s`);
    const text = Array.from({ length: first.count + 2 }, (_, i) => (i * 7919 + 11) % Math.min(v.mediaToken, m.config.vocab));
    const withImage = expandPads([text[0], v.mediaToken, text[1]], v.mediaToken, [first]);
    const prefill = async (ids: number[], images = [first]) => {
      let b = Infinity;
      for (let i = 0; i < runs; i++) {
        const s = m.newSession();
        const t0 = performance.now();
        await s.forward(ids, ids === withImage ? { images } : {});
        b = Math.min(b, (performance.now() - t0) / 1000);
        s.close();
      }
      return b;
    };
    const prefillImage = await prefill(withImage);
    const prefillText = await prefill(text);
    const sizes: [number, number][] = [
      [256, 256],
      [640, 480],
      [896, 896],
      [1280, 720],
      [1920, 1080],
      [4032, 3024],
    ];
    return {
      model,
      image: file,
      width: first.width,
      height: first.height,
      route,
      patches: first.gh * first.gw,
      rows: first.count,
      tower_load_s: Math.max(0, firstS - best),
      tower_s: best,
      prefill_image_s: prefillImage,
      prefill_text_s: prefillText,
      rows_for: sizes.map(([w, h]) => ({ size: `${w}x${h}`, waste: rowsFor(w, h, v, 'waste'), native: rowsFor(w, h, v, 'native'), native_max: rowsFor(w, h, { ...v, towerLimit: MAX_IMAGE_PATCHES }, 'native') })),
      image_patches: v.towerLimit,
      threads: m.threads,
    };
  } finally {
    await m.close();
  }
}

export function renderImageBench(r: ImageBenchResult): string {
  const n = r.rows + 2;
  return (
    `${r.image}: ${r.width} x ${r.height}, route ${r.route}: ${r.patches} patches, ${r.rows} rows in the prompt (${r.threads} threads)\n` +
    `tower ${r.tower_s.toFixed(3)} s (loading it first: ${r.tower_load_s.toFixed(3)} s)\n` +
    `prefill of ${n} positions holding the image ${r.prefill_image_s.toFixed(3)} s, of ${n} text tokens ${r.prefill_text_s.toFixed(3)} s\n` +
    table(
      r.rows_for.map((x) => [x.size, x.waste, x.native, x.native_max]),
      ['image', 'rows (waste)', `rows (native, ${r.image_patches} patches)`, `rows (native, ${MAX_IMAGE_PATCHES} patches)`],
    )
  );
}
