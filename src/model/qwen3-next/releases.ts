import type { KnownRelease } from '../release.js';

const GiB = 2 ** 30;

/**
 * Qwen3-Next's releases. Checkpoint bytes are the parameters in bf16: 79.67 B counted from the
 * config by `waste info`, plus about 1.64 B in the MTP layer the model does not run (one MoE
 * decoder layer and its projection, stored all the same); the shard count as the repositories list
 * it (a dry run of the full repository name reads the real listing); container and floor measured
 * on a full-shape sparse synthetic container (`waste synth --shape qwen3-next-80b-a3b --sparse`,
 * `waste plan --ctx 4096`). Qwen3.5's releases are not listed: their checkpoints keep the language
 * model under `model.language_model.` with stacked experts, which this build does not read yet
 * (its real-width shape `qwen3.5-397b-a17b` plans at a 5.47 GiB floor and a 151.5 GB container).
 */
const NEXT_80B = {
  checkpointBytes: 162.6e9,
  shards: 41,
  // 2.36 B parameters outside the routed experts, bf16
  trunkSourceBytes: 4.73e9,
  containerBytes: 30.73e9,
  floorBytes: 1.54 * GiB,
  parameters: '80 B, 3.9 B active',
};

export const QWEN3_NEXT_RELEASES: KnownRelease[] = [
  { short: 'qwen3-next-80b-a3b', repo: 'Qwen/Qwen3-Next-80B-A3B-Instruct', ...NEXT_80B },
  { short: 'qwen3-next-80b-a3b-thinking', repo: 'Qwen/Qwen3-Next-80B-A3B-Thinking', ...NEXT_80B },
];
