/** DeepSeek-V3's routed experts: `model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight`. */
export function deepseekExpertTensor(layer: number, e: number, kind: 0 | 1 | 2): string {
  return `model.layers.${layer}.mlp.experts.${e}.${['gate_proj', 'up_proj', 'down_proj'][kind]}.weight`;
}

/** The layer whose routed experts a tensor holds, or undefined for any other tensor. */
export function deepseekExpertLayerOf(name: string): number | undefined {
  const m = /(?:^|\.)layers\.(\d+)\.mlp\.experts\.\d+\./.exec(name);
  return m ? Number(m[1]) : undefined;
}
