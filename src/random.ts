/**
 * The seeded pseudo-random generators of lmhead, all in one place. Same seed, same stream, on
 * every platform: the default artifact's checksum and every seeded test depend on it.
 *   - SplitMix32: one word of state, cheap to seed; per-request streams, per-row
 *     perturbations, workloads, test data, and the seeding of Rng.
 *   - Rng: xoshiro128** (Blackman & Vigna), the bulk generator of synthetic weights.
 */

/** murmur3's 32-bit finalizer: every input bit affects every output bit. */
export function mix32(x: number): number {
  let z = x >>> 0;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}

/** A 32-bit hash of a string (FNV-1a over UTF-16 code units, then mix32). */
export function hash32(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return mix32(h);
}

/** SplitMix32's Weyl step, 2^32/φ. */
const weylStep = 0x9e3779b9;

/** SplitMix32: a Weyl sequence (step 2^32/φ) through mix32. */
export class SplitMix32 {
  #state: number;

  constructor(seed: number) {
    this.#state = seed >>> 0;
  }

  /** Restarts the stream at `seed`, so a hot loop can reuse one generator. */
  reseed(seed: number): void {
    this.#state = seed >>> 0;
  }

  /** Next 32 random bits as an unsigned integer. */
  u32(): number {
    this.#state = (this.#state + weylStep) >>> 0;
    return mix32(this.#state);
  }

  /** Uniform in [0, 1), 32 bits of resolution. */
  float(): number {
    return this.u32() / 4294967296;
  }

  /** The next words.length outputs of u32(), into words: a hot loop's stream without a call per word. */
  fill(words: Uint32Array): void {
    let state = this.#state;
    for (let i = 0; i < words.length; i++) {
      state = (state + weylStep) >>> 0;
      words[i] = mix32(state);
    }
    this.#state = state;
  }
}

/** xoshiro128**, its four state words seeded through SplitMix32. */
export class Rng {
  #a: number;
  #b: number;
  #c: number;
  #d: number;

  constructor(seed: number) {
    const seeder = new SplitMix32(seed);
    this.#a = seeder.u32();
    this.#b = seeder.u32();
    this.#c = seeder.u32();
    this.#d = seeder.u32();
  }

  /** Next 32 random bits as an unsigned integer. */
  u32(): number {
    const r = Math.imul(rotl(Math.imul(this.#b, 5), 7), 9);
    const t = this.#b << 9;
    this.#c ^= this.#a;
    this.#d ^= this.#b;
    this.#b ^= this.#c;
    this.#a ^= this.#d;
    this.#c ^= t;
    this.#d = rotl(this.#d, 11);
    return r >>> 0;
  }

  /** Uniform in [0, 1), 32 bits of resolution. */
  float(): number {
    return this.u32() / 4294967296;
  }

  /** Fills `out` with random bytes: each 32-bit draw gives 4 bytes, little-endian. */
  fill(out: Uint8Array): void {
    const words = out.byteLength >>> 2;
    if (out.byteOffset % 4 === 0) {
      const w = new Uint32Array(out.buffer, out.byteOffset, words);
      for (let i = 0; i < words; i++) w[i] = this.u32();
    } else {
      const dv = new DataView(out.buffer, out.byteOffset, out.byteLength);
      for (let i = 0; i < words; i++) dv.setUint32(i * 4, this.u32(), true);
    }
    const tail = out.byteLength - words * 4;
    if (tail > 0) {
      const r = this.u32();
      for (let i = 0; i < tail; i++) out[words * 4 + i] = (r >>> (8 * i)) & 0xff;
    }
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}
