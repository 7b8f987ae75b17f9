import * as fs from 'node:fs';
import * as path from 'node:path';
import { readCheckpointConfig } from '../checkpoint/config.js';
import { SafetensorsSet } from '../checkpoint/safetensors.js';
import { CheckpointWeights } from '../checkpoint/weights.js';
import { type Container, type OpenContainerOptions, openContainer } from '../container/open.js';
import type { ModelConfig } from '../core/model-config.js';
import { excerpt, unsupported } from '../util/errors.js';
import type { Fields } from '../util/fields.js';
import type { Architecture } from './architecture.js';
import { kimiK3 } from './kimi/k3.js';
import { kimiLinear } from './kimi/linear.js';
import { glm4Moe } from './glm4-moe/index.js';
import { mixtral } from './mixtral/index.js';
import { olmoe } from './olmoe/index.js';
import { qwen3Moe } from './qwen3-moe/index.js';
import { gptOss } from './gpt-oss/index.js';
import { deepseekV3 } from './deepseek/index.js';
import { qwen3Next } from './qwen3-next/index.js';
import { textConfig } from './kimi/config.js';
import { CheckpointSource } from './sources/checkpoint-source.js';

/** Every architecture this build runs, the most specific first. */
export const ARCHITECTURES: readonly Architecture[] = [kimiK3, kimiLinear, qwen3Moe, mixtral, olmoe, gptOss, deepseekV3, glm4Moe, qwen3Next];

/** The architecture that runs a config (a manifest's `config`, or a checkpoint's config.json). */
export function architectureOf(cfg: Fields): Architecture {
  const arch = ARCHITECTURES.find((a) => a.claims(cfg));
  if (!arch) {
    const t = textConfig(cfg);
    const type = t.given('model_type') ? excerpt(String(JSON.stringify(t.raw('model_type')))) : '(none)';
    throw unsupported(`${cfg.file}: config.model_type ${type} (this build runs ${ARCHITECTURES.map((a) => a.id).join(', ')})`);
  }
  return arch;
}

/** The architecture of `id` (as a config's `arch` names it). */
export function architecture(id: string): Architecture {
  const a = ARCHITECTURES.find((x) => x.id === id);
  if (!a) throw unsupported(`architecture ${id}`);
  return a;
}

/** Parse a config with the architecture that claims it. */
export function parseModelConfig(cfg: Fields): ModelConfig {
  return architectureOf(cfg).parseConfig(cfg);
}

/** Open a container, its config read by its architecture. */
export function openModelContainer(dir: string, opts: Omit<OpenContainerOptions<ModelConfig>, 'parse'> = {}): Container {
  return openContainer(dir, { ...opts, parse: parseModelConfig });
}

/** A HuggingFace checkpoint folder (config.json and safetensors, no manifest.json), which runs with every weight in f32: the reference. */
export function isCheckpointDir(dir: string): boolean {
  return !fs.existsSync(path.join(dir, 'manifest.json')) && fs.existsSync(path.join(dir, 'config.json'));
}

/** A checkpoint folder opened: its config read by its architecture, its tensors' headers (no weight is read). */
export interface OpenedCheckpoint {
  config: ModelConfig;
  arch: Architecture;
  source: CheckpointSource;
  /** Every tensor's stored dtype and bytes. */
  st: SafetensorsSet;
  close(): void;
}

export function openModelCheckpoint(dir: string): OpenedCheckpoint {
  const { fields } = readCheckpointConfig(dir);
  const arch = architectureOf(fields);
  const config = arch.parseConfig(fields);
  const st = SafetensorsSet.open(dir);
  try {
    return { config, arch, st, source: new CheckpointSource(new CheckpointWeights(st, CheckpointWeights.prefixOf(st), arch.stackedExperts)), close: () => st.close() };
  } catch (e) {
    st.close();
    throw e;
  }
}
