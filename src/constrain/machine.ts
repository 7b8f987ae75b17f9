/**
 * The matcher behind constrained sampling: a set of parser configurations, each an immutable stack
 * of frames (a persistent linked list), advanced byte by byte. Nondeterminism — anyOf, a number
 * that may go on or end, keys sharing a prefix — is kept as several configurations side by side;
 * since nothing is ever mutated, a configuration costs one small object per step to extend, and the
 * sets along a trie walk share everything beneath their tops.
 */
export abstract class Frame {
  /** Whether the frame takes bytes itself (else it only expands into other frames). */
  declare consumes: boolean;
  /** A grammar literal: the only kind of frame a special token's text may be matched by. */
  declare literal: boolean;
  /** A literal only special tokens may spell (an ordinary token's bytes never step it). */
  declare specialOnly: boolean;
  /** Moves on byte b, for a configuration whose top is this frame: each is passed to k. */
  byte(_b: number, _s: Stack, _k: Sink): void {}
  /** Moves that take no byte (expanding into children, or ending here). */
  eps(_s: Stack, _k: Sink): void {}
  /** This frame once the frame above it has ended, given what that one produced (an object key). */
  resume(_result: string): Frame {
    return this;
  }
  /**
   * If this frame is inside string text that any plain characters may extend (no quote, backslash
   * or control byte), how many characters it takes; else -1. Masking allows every plain token that
   * fits without stepping through it.
   */
  freeChars(): number {
    return -1;
  }
}

// on the prototype, so making a frame (one per configuration per byte) sets no fields for them
Frame.prototype.consumes = true;
Frame.prototype.literal = false;
Frame.prototype.specialOnly = false;

/** A frame that takes no bytes itself: it expands into others, or waits for the one above it to end. */
export abstract class Expander extends Frame {}
Expander.prototype.consumes = false;

export class Stack {
  constructor(
    readonly frame: Frame,
    readonly next: Stack | null,
  ) {}
}

/** The configurations a step leads to, closed under moves that take no byte. */
export class Sink {
  readonly stacks: Stack[] = [];
  /** The empty stack was reached: what has been read is a whole match. */
  accept = false;

  /** Go to configuration s: record it if its top takes bytes, and follow its other moves. */
  enter(s: Stack | null): void {
    if (s === null) {
      this.accept = true;
      return;
    }
    if (s.frame.consumes) this.stacks.push(s);
    s.frame.eps(s, this);
  }

  /** The top of s has ended (producing result, if any): continue with what lies below it. */
  pop(s: Stack, result?: string): void {
    const n = s.next;
    if (n === null) this.accept = true;
    else this.enter(result === undefined ? n : new Stack(n.frame.resume(result), n.next));
  }
}

export interface StateSet {
  readonly stacks: readonly Stack[];
  readonly accept: boolean;
}

/**
 * The configurations after byte b, or null when none survives. litOnly: b is a special token's, so
 * only grammar literals may take it; else only frames that ordinary tokens may step.
 */
export function step(set: StateSet, b: number, litOnly: boolean): StateSet | null {
  const k = new Sink();
  return stepInto(set, b, litOnly, k) ? k : null;
}

/** step into a sink the caller owns (a trie walk reuses one per depth): whether anything survived. */
export function stepInto(set: StateSet, b: number, litOnly: boolean, k: Sink): boolean {
  k.stacks.length = 0;
  k.accept = false;
  const stacks = set.stacks;
  for (let i = 0; i < stacks.length; i++) {
    const s = stacks[i];
    if (litOnly ? s.frame.literal : !s.frame.specialOnly) s.frame.byte(b, s, k);
  }
  return k.stacks.length > 0 || k.accept;
}

/** A byte sequence matched by position (a grammar literal, or JSON's own null/true/false). */
export class LitFrame extends Frame {
  constructor(
    readonly bytes: Uint8Array,
    readonly at: number,
    literal: boolean,
    specialOnly = false,
  ) {
    super();
    this.literal = literal;
    if (specialOnly) this.specialOnly = true;
  }

  override byte(b: number, s: Stack, k: Sink): void {
    if (b !== this.bytes[this.at]) return;
    if (this.at + 1 === this.bytes.length) k.pop(s);
    else k.enter(new Stack(new LitFrame(this.bytes, this.at + 1, this.literal, this.specialOnly), s.next));
  }
}
