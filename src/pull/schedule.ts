/**
 * When each part of a checkpoint can be converted as its shards arrive one after another, and when
 * each shard is used up. Trunk tensors are copied out of their shard as it arrives (they are written
 * into trunk.bin, in name order, only when all are there); a MoE layer is converted as soon as every
 * shard holding one of its experts is on disk; a shard is used up — and deleted — once its trunk
 * tensors are copied and every layer it holds experts of is converted.
 */
export interface ShardUse {
  file: string;
  bytes: number;
  /** Bytes of its trunk tensors (copied out when it arrives). */
  trunkBytes: number;
  /** MoE layers it holds experts of. */
  layers: number[];
}

export interface Schedule {
  /** For each shard in download order: the layers that become convertible once it is on disk. */
  ready: Map<string, number[]>;
  /** The shards that can be deleted after the layers ready with shard i are converted. */
  spentAfter: Map<string, string[]>;
  /** The most source bytes on disk at once (shards present + trunk copies), for the disk check. */
  peakSourceBytes: number;
  /** Every source byte: what "download everything, then convert" keeps beside the container. */
  totalSourceBytes: number;
}

/**
 * `ahead`: shards downloading while the current one's layers convert (0: in turn; 1: the next one,
 * as `waste pull` does). The peak counts them whole, beside what the current step has not yet
 * deleted.
 */
export function schedule(shards: ShardUse[], ahead = 0): Schedule {
  const order = new Map(shards.map((s, i) => [s.file, i]));
  // the last shard (in download order) each layer needs
  const lastOf = new Map<number, number>();
  for (const s of shards) for (const l of s.layers) lastOf.set(l, Math.max(lastOf.get(l) ?? -1, order.get(s.file)!));
  const ready = new Map<string, number[]>(shards.map((s) => [s.file, []]));
  for (const [l, i] of [...lastOf].sort((a, b) => a[0] - b[0])) ready.get(shards[i].file)!.push(l);
  // a shard is spent once the last layer it holds experts of is ready (or at once, if it holds none)
  const spentAfter = new Map<string, string[]>(shards.map((s) => [s.file, []]));
  for (const s of shards) {
    const at = Math.max(order.get(s.file)!, ...s.layers.map((l) => lastOf.get(l)!));
    spentAfter.get(shards[at].file)!.push(s.file);
  }
  let present = 0;
  let trunk = 0;
  let peak = 0;
  for (const [i, s] of shards.entries()) {
    present += s.bytes;
    trunk += s.trunkBytes;
    const inFlight = shards.slice(i + 1, i + 1 + ahead).reduce((a, n) => a + n.bytes, 0);
    peak = Math.max(peak, present + trunk + inFlight);
    for (const f of spentAfter.get(s.file)!) present -= shards[order.get(f)!].bytes;
  }
  return { ready, spentAfter, peakSourceBytes: peak, totalSourceBytes: shards.reduce((a, s) => a + s.bytes, 0) };
}
