import * as fs from 'node:fs';
import * as path from 'node:path';
import type { ModelConfig } from '../core/model-config.js';
import type { Fields } from '../util/fields.js';
import { WasteError, fromSystemError } from '../util/errors.js';
import { checkModelLinks } from '../util/model-dir.js';
import { readBytes } from '../util/read.js';
import { ExpertBank } from './bank.js';
import { bytesChecksum, checkChecksum, checkLength } from './checksums.js';
import { CODEBOOKS, type Codebooks, parseCodebooks } from './codebooks.js';
import { type ExpertQuant, recordLayout } from './format.js';
import { MANIFEST, type Manifest, type TrunkEntry, checkManifestDigest, parseManifest } from './manifest.js';
import { TRUNK, TrunkFile, validateTrunkIndex } from './trunk.js';

const MAX_MANIFEST_BYTES = 256 << 20;
const MAX_CODEBOOK_BYTES = 1 << 30;

/**
 * An open container directory: the validated manifest and config, trunk.bin (open), the decoded
 * codebooks and one open bank per MoE layer. Nothing here has been trusted: every dimension is
 * bounded, every offset checked against the real file sizes, every bank against its shapes.
 */
export interface Container<C extends ModelConfig = ModelConfig> {
  dir: string;
  manifest: Manifest;
  config: C;
  trunk: TrunkFile;
  /** Trunk index by full tensor name. */
  tensors: Map<string, TrunkEntry>;
  quant?: ExpertQuant;
  codebooks?: Codebooks;
  banks: Map<number, ExpertBank>;
  close(): void;
}

export interface OpenContainerOptions<C extends ModelConfig> {
  /** Read the manifest's `config`: the model's architecture knows how (the container does not). */
  parse: (config: Fields) => C;
  /** Check the manifest against its own digest, and hash trunk.bin and codebooks.bin against its checksums (their lengths are always checked). */
  verify?: boolean;
}

export function openContainer<C extends ModelConfig>(dir: string, opts: OpenContainerOptions<C>): Container<C> {
  let st: fs.Stats;
  try {
    st = fs.statSync(dir);
  } catch (e) {
    throw fromSystemError(dir, e);
  }
  if (!st.isDirectory()) throw new WasteError('E_IO', `${dir}: a container is a directory (with ${MANIFEST}, ${TRUNK}, …)`);
  checkModelLinks(dir);

  const manifest = parseManifest(readBytes(path.join(dir, MANIFEST), MAX_MANIFEST_BYTES).toString('utf8'));
  if (opts.verify) checkManifestDigest(manifest);
  const config = opts.parse(manifest.config);

  const opened: { close(): void }[] = [];
  try {
    const trunk = new TrunkFile(path.join(dir, TRUNK));
    opened.push(trunk);
    validateTrunkIndex(manifest.trunk, trunk.size);
    const trunkSum = manifest.checksums.get(TRUNK);
    if (trunkSum) {
      checkLength(TRUNK, trunkSum, trunk.size);
      if (opts.verify) checkChecksum(TRUNK, trunkSum, trunk.checksum());
    }
    const tensors = new Map(manifest.trunk.map((t) => [t.name, t]));

    const banks = new Map<number, ExpertBank>();
    let codebooks: Codebooks | undefined;
    const quant = manifest.expertQuant;
    const moeLayers = config.layerKinds.flatMap((k, i) => (k.ffn === 'moe' ? [i] : []));
    for (const layer of manifest.banks.keys())
      if (config.layerKinds[layer]?.ffn !== 'moe')
        throw new WasteError('E_FORMAT', `${MANIFEST}: layers.${layer} describes an expert bank, but layer ${layer} is not a MoE layer`);
    if (moeLayers.length > 0) {
      if (!quant) throw new WasteError('E_FORMAT', `${MANIFEST}: expert_quant is required for a model with experts`);
      // a routed expert reads and writes its width: the hidden size, or a latent one
      const width = config.expertWidth;
      const { inter, experts } = config.moe;
      if (width % quant.vecDim !== 0 || inter % quant.vecDim !== 0)
        throw new WasteError(
          'E_FORMAT',
          `${MANIFEST}: expert_quant.vec_dim ${quant.vecDim} does not divide the expert width ${width} and moe_intermediate_size ${inter}`,
        );
      const bytes = readBytes(path.join(dir, CODEBOOKS), MAX_CODEBOOK_BYTES);
      codebooks = parseCodebooks(bytes, quant);
      const sum = manifest.checksums.get(CODEBOOKS);
      if (sum) {
        checkLength(CODEBOOKS, sum, bytes.length);
        if (opts.verify) checkChecksum(CODEBOOKS, sum, bytesChecksum(bytes));
      }
      const layout = recordLayout(width, inter, quant);
      for (const layer of moeLayers) {
        const entry = manifest.banks.get(layer);
        if (!entry) throw new WasteError('E_FORMAT', `${MANIFEST}: layers.${layer} is missing; layer ${layer} is a MoE layer`);
        if (entry.experts !== experts)
          throw new WasteError('E_FORMAT', `${MANIFEST}: layers.${layer}.experts is ${entry.experts}; the config says ${experts}`);
        if (entry.codebookBase + 3 * quant.stages > codebooks.count)
          throw new WasteError(
            'E_FORMAT',
            `${MANIFEST}: layers.${layer}.codebook_base ${entry.codebookBase} needs codebooks up to ${entry.codebookBase + 3 * quant.stages}, ${CODEBOOKS} has ${codebooks.count}`,
          );
        const bank = new ExpertBank(dir, entry, layout, quant);
        opened.push(bank);
        banks.set(layer, bank);
      }
    }
    return {
      dir,
      manifest,
      config,
      trunk,
      tensors,
      quant,
      codebooks,
      banks,
      close() {
        for (const o of opened) o.close();
      },
    };
  } catch (e) {
    for (const o of opened) o.close();
    throw e;
  }
}
