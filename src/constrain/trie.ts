/**
 * A byte trie of token spellings in flat typed arrays (children as sibling lists), so a vocabulary
 * of 160k tokens costs a few megabytes rather than a Map per node, and masking can walk it depth
 * first, dropping a whole subtree as soon as its prefix is rejected.
 */
export class ByteTrie {
  /** The byte on the edge into each node (the root's is unused). */
  readonly byte: Uint8Array;
  readonly firstChild: Int32Array;
  readonly nextSibling: Int32Array;
  /** Tokens spelled exactly by the path to a node: tokens[tokStart .. tokStart + tokCount). */
  readonly tokStart: Int32Array;
  readonly tokCount: Int32Array;
  readonly tokens: Int32Array;
  readonly nodes: number;

  /** The trie of the given token ids (none may be empty). */
  constructor(ids: ArrayLike<number>, bytesOf: (id: number) => Uint8Array) {
    // sorting the spellings lets the trie be built in one pass: each token shares its longest
    // common prefix with the one before it, and children arrive in byte order
    const keys: string[] = new Array(ids.length);
    let total = 1;
    for (let i = 0; i < ids.length; i++) {
      keys[i] = Buffer.from(bytesOf(ids[i])).toString('latin1');
      total += keys[i].length;
    }
    const order = Array.from({ length: ids.length }, (_, i) => i).sort((a, b) => (keys[a] < keys[b] ? -1 : keys[a] > keys[b] ? 1 : 0));
    this.byte = new Uint8Array(total);
    this.firstChild = new Int32Array(total).fill(-1);
    this.nextSibling = new Int32Array(total).fill(-1);
    this.tokStart = new Int32Array(total);
    this.tokCount = new Int32Array(total);
    this.tokens = new Int32Array(ids.length);
    const lastChild = new Int32Array(total).fill(-1);
    const path: number[] = [0];
    let nodes = 1;
    let prev = '';
    for (let t = 0; t < order.length; t++) {
      const key = keys[order[t]];
      let lcp = 0;
      const most = Math.min(prev.length, key.length);
      while (lcp < most && prev.charCodeAt(lcp) === key.charCodeAt(lcp)) lcp++;
      for (let d = lcp; d < key.length; d++) {
        const parent = path[d];
        const n = nodes++;
        this.byte[n] = key.charCodeAt(d);
        if (lastChild[parent] < 0) this.firstChild[parent] = n;
        else this.nextSibling[lastChild[parent]] = n;
        lastChild[parent] = n;
        path[d + 1] = n;
      }
      const at = path[key.length];
      if (this.tokCount[at] === 0) this.tokStart[at] = t;
      this.tokCount[at]++;
      this.tokens[t] = ids[order[t]];
      prev = key;
    }
    this.nodes = nodes;
  }
}
