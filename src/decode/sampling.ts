/**
 * Token selection after the head (hf2q does it on the host, outside the head): greedy argmax
 * with ties to the lowest index, or temperature / top-k sampling from a per-request seeded
 * PRNG, so a request's tokens are a function of its own logits and seed only, never of the
 * other slots.
 */
import { LmheadError } from "../errors.ts";
import { check, lib } from "../native.ts";
import { hash32, mix32, SplitMix32 } from "../random.ts";
import { expectTyped } from "../typed.ts";

export type Sampling =
  | { kind: "greedy" }
  | {
      kind: "sample";
      /** > 0 (a temperature of 0 is greedy: parseSampling turns it into { kind: "greedy" }). */
      temperature: number;
      /** Candidates kept, the highest logits first; 0 keeps the whole vocabulary. */
      topK: number;
      /** u32 base seed; each request mixes its own key in. */
      seed: number;
    };

export const greedy: Sampling = Object.freeze({ kind: "greedy" });

/**
 * Parses "greedy" or "temp:T,topk:K,seed:S" (any order, each part optional: temperature 1,
 * top-k 40, seed 0). Throws an LmheadError naming the bad part.
 */
export function parseSampling(text: string): Sampling {
  const spec = text.trim();
  if (spec === "greedy") return greedy;
  let temperature = 1;
  let topK = 40;
  let seed = 0;
  const seen = new Set<string>();
  for (const part of spec.split(",")) {
    const m = /^\s*([a-z]+)\s*:\s*(\S+)\s*$/.exec(part);
    if (!m) throw bad(text, `'${part}' is not key:value`);
    const [, key, value] = m as unknown as [string, string, string];
    if (seen.has(key)) throw bad(text, `'${key}' given twice`);
    seen.add(key);
    const num = Number(value);
    switch (key) {
      case "temp":
        if (!(num >= 0) || !Number.isFinite(num)) throw bad(text, `temp ${value} is not a finite number >= 0`);
        temperature = num;
        break;
      case "topk":
        if (!Number.isSafeInteger(num) || num < 0) throw bad(text, `topk ${value} is not an integer >= 0`);
        topK = num;
        break;
      case "seed":
        if (!Number.isSafeInteger(num) || num < 0 || num > 0xffffffff) throw bad(text, `seed ${value} is not a u32`);
        seed = num;
        break;
      default:
        throw bad(text, `unknown key '${key}' (known: temp, topk, seed)`);
    }
  }
  if (temperature === 0) return greedy;
  return { kind: "sample", temperature, topK, seed };
}

function bad(text: string, why: string): LmheadError {
  return new LmheadError("invalid_argument", `bad sampling '${text}': ${why}; expected greedy or temp:T,topk:K,seed:S`);
}

export function samplingText(s: Sampling): string {
  return s.kind === "greedy" ? "greedy" : `temp:${s.temperature},topk:${s.topK},seed:${s.seed}`;
}

const argmaxIndex = new Uint32Array(1);

/**
 * Index of the largest value; ties go to the lowest index (hf2q's GPU argmax contract), a NaN
 * is never taken unless it comes first. Native (liblmhead's vector loop).
 */
export function argmax(values: Float32Array): number {
  expectTyped(values, "Float32Array", "argmax: values");
  if (values.length === 0) throw new LmheadError("invalid_argument", "argmax: values is empty");
  return argmaxRows(values, 1, argmaxIndex)[0]!;
}

/**
 * `argmax` of each of the `rows` rows of `values` into `into` (at least `rows` long), at once
 * on a pool of native threads. On an H200 host, 64 rows of 262144 fresh from the GPU took
 * about 2 ms, against 12-14 ms one row at a time natively and 16-24 ms in JavaScript
 * (bench/results/cuda-h200.md).
 */
export function argmaxRows(values: Float32Array, rows: number, into: Uint32Array): Uint32Array {
  expectTyped(values, "Float32Array", "argmaxRows: values");
  expectTyped(into, "Uint32Array", "argmaxRows: into");
  if (!Number.isSafeInteger(rows) || rows < 1 || values.length % rows !== 0 || values.length === 0 || into.length < rows) {
    throw new LmheadError("invalid_argument", `argmaxRows: ${values.length} values, ${rows} rows and ${into.length} indices: expected whole non-empty rows and an index per row`);
  }
  check(lib.lmh_argmax_rows(values, rows, values.length / rows, into), "argmax");
  return into;
}

/**
 * Each row's k largest values, largest first, ties to the lower index (the insertion loop the
 * sampler once ran in JavaScript, natively: one vector compare rejects most of a row), whole
 * rows at once on a pool of native threads: for row r of `values` (`rows` rows) with ks[r] > 0,
 * its indices into indices[r·kMax, +ks[r]) and its values into kept[r·kMax, +ks[r]). Rows
 * with ks[r] = 0 are left alone.
 */
export function topKRows(values: Float32Array, rows: number, ks: Uint32Array, kMax: number, indices: Uint32Array, kept: Float32Array): void {
  expectTyped(values, "Float32Array", "topKRows: values");
  expectTyped(ks, "Uint32Array", "topKRows: ks");
  expectTyped(indices, "Uint32Array", "topKRows: indices");
  expectTyped(kept, "Float32Array", "topKRows: kept");
  if (!Number.isSafeInteger(rows) || rows < 1 || values.length % rows !== 0 || values.length === 0 || ks.length < rows ||
      !Number.isSafeInteger(kMax) || kMax < 1 || kMax > values.length / rows || indices.length < rows * kMax || kept.length < rows * kMax) {
    throw new LmheadError("invalid_argument", `topKRows: ${values.length} values, ${rows} rows, ${ks.length} ks, k up to ${kMax}, ${indices.length} indices and ${kept.length} kept values: expected whole non-empty rows, a k per row and room for rows x k values`);
  }
  check(lib.lmh_top_k_rows(values, rows, values.length / rows, ks, kMax, indices, kept), "top-k");
}

/** The k a sampled row of `vocab` logits keeps: 0 where it takes the whole vocabulary (top-k 0, or at least the row). */
export function topKOf(sampling: Sampling & { kind: "sample" }, vocab: number): number {
  return sampling.topK === 0 || sampling.topK >= vocab ? 0 : sampling.topK;
}

/**
 * A token from a row's top k (kept[offset, +k), largest first, and their indices): softmax at
 * temperature t over them, walked best first, with one draw from `rng`.
 */
export function pickTopK(kept: Float32Array, indices: Uint32Array, offset: number, k: number, t: number, rng: SplitMix32): number {
  const max = kept[offset]!;
  let sum = 0;
  for (let j = 0; j < k; j++) sum += Math.exp((kept[offset + j]! - max) / t);
  const target = rng.float() * sum;
  let acc = 0;
  for (let j = 0; j < k; j++) {
    acc += Math.exp((kept[offset + j]! - max) / t);
    if (acc > target) return indices[offset + j]!;
  }
  return indices[offset]!;
}

/**
 * A sampler with reusable scratch (no allocation per token once sized). `pick` consumes
 * exactly one random draw from `rng` per sampled token.
 */
export class Sampler {
  #idx = new Uint32Array(0);
  #val = new Float32Array(0);
  readonly #k = new Uint32Array(1);

  /** Picks a token from one row of logits. */
  pick(logits: Float32Array, sampling: Sampling, rng: SplitMix32 | null): number {
    expectTyped(logits, "Float32Array", "sampler: logits");
    if (sampling.kind === "greedy") return argmax(logits);
    if (rng === null) throw new LmheadError("invalid_argument", "sampling needs a request rng");
    const k = topKOf(sampling, logits.length);
    if (k === 0) return this.#full(logits, sampling.temperature, rng);
    if (this.#idx.length < k) {
      this.#idx = new Uint32Array(k);
      this.#val = new Float32Array(k);
    }
    this.#k[0] = k;
    topKRows(logits, 1, this.#k, k, this.#idx, this.#val);
    return pickTopK(this.#val, this.#idx, 0, k, sampling.temperature, rng);
  }

  /** Softmax over the whole vocabulary, walked in index order. */
  #full(logits: Float32Array, t: number, rng: SplitMix32): number {
    const max = logits[argmax(logits)]!;
    let sum = 0;
    for (let i = 0; i < logits.length; i++) sum += Math.exp((logits[i]! - max) / t);
    const target = rng.float() * sum;
    let acc = 0;
    for (let i = 0; i < logits.length; i++) {
      acc += Math.exp((logits[i]! - max) / t);
      if (acc > target) return i;
    }
    return argmax(logits); // rounding left target at the very top: the most likely token
  }
}

/** The PRNG of one request: its sampling seed mixed with its id, so equal seeds still give each request its own stream. */
export function requestRng(sampling: Sampling, id: string): SplitMix32 | null {
  if (sampling.kind === "greedy") return null;
  return new SplitMix32(mix32(sampling.seed ^ Math.imul(hash32(id), 0x9e3779b1)));
}
