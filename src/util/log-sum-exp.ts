/** log Σ exp(x), shifted by the maximum so that no term overflows. */
export function logSumExp(x: ArrayLike<number>): number {
  let m = -Infinity;
  for (let i = 0; i < x.length; i++) if (x[i] > m) m = x[i];
  let s = 0;
  for (let i = 0; i < x.length; i++) s += Math.exp(x[i] - m);
  return m + Math.log(s);
}
