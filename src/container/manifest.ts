import { Fields, type Json } from '../util/fields.js';
import { unsupported, WasteError } from '../util/errors.js';
import { CHECKSUMS_KEY, type FileChecksum, MANIFEST_DIGEST_KEY, manifestDigest } from './checksums.js';
import { type ExpertQuant, FORMAT_VERSION, Fmt, fmtName } from './format.js';

/**
 * `manifest.json`, structurally validated: every number is bounded and typed before anything
 * sizes an allocation from it. Cross-checks against the files (trunk.bin size, bank sizes) and
 * against the model's config happen in open.ts, where both sides are known.
 */
export interface Manifest {
  arch: string;
  tensorPrefix: string;
  /** The model's config (verbatim from the release), as a field reader. */
  config: Fields;
  expertQuant?: ExpertQuant;
  /** Expert banks by MoE layer number. */
  banks: Map<number, BankEntry>;
  trunk: TrunkEntry[];
  /** SHA-256 and length by file name (`checksums`; empty from a writer that predates the key). */
  checksums: Map<string, FileChecksum>;
  /** Sizes only (`waste synth --sparse`): the trunk and banks are holes, nothing can run on it. */
  sparse: boolean;
  /** `manifest_sha256` and the digest of the document as read (absent from a writer that predates the key). */
  digest?: { stated: string; actual: string };
}

export interface BankEntry {
  layer: number;
  file: string;
  experts: number;
  bytes: number;
  codebookBase: number;
}

export interface TrunkEntry {
  name: string;
  fmt: number;
  off: number;
  shape: number[];
  /** Element count. */
  numel: number;
  /** Quantization group (Q8G/Q4G only). */
  group: number;
  /** Start of the f16 group scales (Q8G/Q4G only). */
  scaleOff: number;
  /** Declared byte count, when the manifest states one. */
  bytes?: number;
}

export const MANIFEST = 'manifest.json';
const MAX_MANIFEST_TENSORS = 1 << 20;
const MAX_DIM = 1 << 26;

export function parseManifest(text: string): Manifest {
  // JSON parsers may skip a byte-order mark; the C engine's does not (it finds no format_version)
  if (text.charCodeAt(0) === 0xfeff)
    throw new WasteError('E_FORMAT', `${MANIFEST}: starts with a byte-order mark (U+FEFF), which the C engine refuses; save it as UTF-8 without one`);
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw new WasteError('E_FORMAT', `${MANIFEST}: not valid JSON (${(e as Error).message})`);
  }
  const m = Fields.root(MANIFEST, doc);

  if (!m.given('format_version'))
    throw new WasteError('E_FORMAT', `${MANIFEST}: format_version is missing; this is not a WASTE container, or predates format v0`);
  const version = m.raw('format_version');
  if (version !== FORMAT_VERSION)
    throw new WasteError(
      'E_FORMAT',
      `${MANIFEST}: format_version is ${JSON.stringify(version)}; this build reads container format ${FORMAT_VERSION}`,
    );

  const arch = m.str('arch', '', 256);
  const config = m.object('config');
  // a config still nested as a K3 checkpoint's is means its language model's tensors carry the
  // checkpoint's prefix (as the C engine reads such a manifest)
  const tensorPrefix = m.str('tensor_prefix', config.given('text_config') ? 'language_model.' : '', 256);

  const eq = m.optionalObject('expert_quant');
  const expertQuant = eq ? parseExpertQuant(eq) : undefined;

  const banks = new Map<number, BankEntry>();
  const layers = m.optionalObject('layers');
  if (layers) {
    for (const key of Object.keys(layers.obj)) {
      if (!/^(0|[1-9][0-9]{0,3})$/.test(key)) throw layers.fail(key, 'is not a layer number');
      const e = layers.object(key);
      const file = e.str('file', undefined, 255);
      if (!isPlainFileName(file)) throw e.fail('file', 'must be a plain file name inside the container', file);
      banks.set(Number(key), {
        layer: Number(key),
        file,
        experts: e.int('experts', 1, 65536),
        bytes: e.int('bytes', 1, Number.MAX_SAFE_INTEGER),
        codebookBase: e.int('codebook_base', 0, 65535),
      });
    }
  }

  const trunk: TrunkEntry[] = [];
  const seen = new Set<string>();
  const list = m.array('trunk', MAX_MANIFEST_TENSORS);
  list.forEach((raw: Json, i: number) => {
    const t = m.child(raw, `trunk[${i}]`);
    const name = t.str('name', undefined, 512);
    if (seen.has(name)) throw t.fail('name', 'appears twice in the trunk index', name);
    seen.add(name);
    const fmt = t.int('fmt', 0, 255);
    const shapeRaw = t.intList('shape', 1, MAX_DIM, 4);
    if (!shapeRaw || shapeRaw.length < 1) throw t.fail('shape', `must list 1 to 4 dimensions, each 1..${MAX_DIM}`);
    let numel = 1;
    for (const d of shapeRaw) numel *= d;
    if (numel > 2 ** 40) throw t.fail('shape', 'describes more than 2^40 elements', shapeRaw);
    const entry: TrunkEntry = {
      name,
      fmt,
      off: t.int('off', 0, Number.MAX_SAFE_INTEGER),
      shape: shapeRaw,
      numel,
      group: 0,
      scaleOff: 0,
      bytes: t.given('bytes') ? t.int('bytes', 0, Number.MAX_SAFE_INTEGER) : undefined,
    };
    if (fmt === Fmt.Q8G || fmt === Fmt.Q4G) {
      entry.group = t.int('group', 1, 65536, 128);
      // the kernels' exact integer sums are sized for groups of at most 1024 (the format writes 128)
      if (entry.group % 32 !== 0 || entry.group > 1024)
        throw unsupported(`${MANIFEST}: trunk[${i}] (${name}) has group ${entry.group}; groups must be a multiple of 32, at most 1024`);
      entry.scaleOff = t.int('scale_off', 0, Number.MAX_SAFE_INTEGER);
    } else if (fmt !== Fmt.F32 && fmt !== Fmt.F16) {
      throw unsupported(`${MANIFEST}: trunk[${i}] (${name}) is stored as ${fmtName(fmt)}; trunk tensors may be F32, F16, Q8G or Q4G`);
    }
    trunk.push(entry);
  });

  const checksums = new Map<string, FileChecksum>();
  const sums = m.optionalObject(CHECKSUMS_KEY);
  if (sums) {
    for (const file of Object.keys(sums.obj)) {
      if (!isPlainFileName(file)) throw sums.fail(file, 'is not a plain file name inside the container');
      const e = sums.object(file);
      const sha256 = e.str('sha256', undefined, 64);
      if (!/^[0-9a-f]{64}$/.test(sha256)) throw e.fail('sha256', 'must be 64 lower-case hex digits', sha256);
      checksums.set(file, { sha256, bytes: e.int('bytes', 0, Number.MAX_SAFE_INTEGER) });
    }
  }

  let digest: Manifest['digest'];
  if (m.given(MANIFEST_DIGEST_KEY)) {
    const stated = m.str(MANIFEST_DIGEST_KEY, undefined, 64);
    if (!/^[0-9a-f]{64}$/.test(stated)) throw m.fail(MANIFEST_DIGEST_KEY, 'must be 64 lower-case hex digits', stated);
    digest = { stated, actual: manifestDigest(doc as Record<string, unknown>) };
  }

  return { arch, tensorPrefix, config, expertQuant, banks, trunk, checksums, sparse: m.bool('sparse', false), digest };
}

/**
 * The manifest against its own `manifest_sha256` (`--verify` and `waste verify`; not at every open,
 * so a manifest edited by hand still opens). A damaged value in it — a config number, a tensor's
 * offset or name — would otherwise change the answer with every file's checksum intact.
 */
export function checkManifestDigest(m: Manifest): void {
  if (m.digest && m.digest.stated !== m.digest.actual)
    throw new WasteError('E_IO', `${MANIFEST}: SHA-256 mismatch with its ${MANIFEST_DIGEST_KEY} (the manifest is damaged, or was edited by hand)`);
}

function isPlainFileName(name: string): boolean {
  return name.length <= 255 && /^[A-Za-z0-9._-]+$/.test(name) && name !== '.' && name !== '..';
}

function parseExpertQuant(eq: Fields): ExpertQuant {
  const name = eq.str('fmt', 'VQ3R', 32);
  const indexBits = eq.int('index_bits', 1, 64, 8);
  if (name === 'VQ4P' || indexBits !== 8)
    throw unsupported(`${MANIFEST}: expert_quant ${name} with ${indexBits}-bit indices (this build computes VQ3R and VQ2R experts)`);
  if (name !== 'VQ3R' && name !== 'VQ2R')
    throw unsupported(`${MANIFEST}: expert_quant.fmt "${name}" (this build computes VQ3R and VQ2R experts)`);
  return {
    name,
    stages: eq.int('stages', 1, 8, 3),
    vecDim: eq.int('vec_dim', 1, 64, 8),
    entries: eq.int('entries', 1, 256, 256),
    // Every writer blocks by 64 rows and the C engine assumes 64 when the key is absent.
    // (at most 4096: a kernel keeps a block's row sums, 4 bytes a row, in a thread's 64 KiB scratch)
    indexBlock: eq.int('index_block', 0, 4096, 64),
    indexBits,
  };
}
