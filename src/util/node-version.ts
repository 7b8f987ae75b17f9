/**
 * The Node.js versions waste supports. Node 20 reached its end of life in April 2026; the engine
 * is tested on 22 and 26, and its kernels may use what V8 enables from Node 22 on (relaxed SIMD,
 * memory64), so an older Node is refused at start rather than left to fail somewhere inside.
 */
export const MIN_NODE_MAJOR = 22;

/** Why this Node cannot run waste, in one line, or undefined when it can. */
export function unsupportedNode(version: string = process.versions.node): string | undefined {
  const major = Number(version.split('.')[0]);
  if (Number.isInteger(major) && major >= MIN_NODE_MAJOR) return undefined;
  return `waste needs Node.js ${MIN_NODE_MAJOR} or newer; this is Node.js ${version} (install a current release: https://nodejs.org)`;
}
