import { unsupported } from '../../util/errors.js';
import type { Fields } from '../../util/fields.js';
import { type KimiConfig, k3Features, parseKimiConfig } from './config.js';

export type KimiLinearConfig = KimiConfig;
export { countKimiParams as countParams } from './config.js';

/** Kimi-Linear's config: the family's, with every K3 feature refused by name (ignoring one would give a wrong answer). */
export function parseKimiLinearConfig(cfg: Fields): KimiLinearConfig {
  const c = parseKimiConfig(cfg, 'kimi-linear');
  const k3 = k3Features(c);
  if (k3.length) throw unsupported(`${cfg.file}: config.${k3[0]} (a Kimi K3 feature, in a config that is not K3's)`);
  return c;
}
