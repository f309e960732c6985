/**
 * Where a decode step's hidden rows come from. A real model runs its body; this package has
 * only the head, so the default source stands in for the body: the embedding row of the
 * previous token scaled by √hidden (as Gemma scales embeddings at the gather; the head itself
 * never scales) plus a deterministic per-request, per-position perturbation. That keeps slots
 * distinct even when they feed the same token, and lets the loop run on any artifact.
 *
 * The perturbation is large (by default 16× the scaled row's RMS): with a tied head the row
 * of the input token is the head row it best matches (its logit is about √hidden standard
 * deviations above the rest), so a small perturbation would make every request echo its first
 * token forever. At 16× the previous token still shifts every logit, but the next token is not
 * simply the last one.
 */
import { LmheadError } from "../errors.ts";
import type { EmbeddingTable } from "../model.ts";
import { mix32, SplitMix32 } from "../random.ts";
import { expectTyped } from "../typed.ts";

export type { EmbeddingTable };

/** What a HiddenSource knows about the request a row belongs to. */
export interface HiddenContext {
  /** The request id. */
  id: string;
  /** hash32(id), precomputed. */
  key: number;
}

export interface HiddenSource {
  readonly hidden: number;
  /**
   * Writes the hidden row (before the final norm) for `request` at `position`, whose input
   * token is `token`, into out[offset, offset + hidden). It must depend on nothing else, so
   * a request's rows are the same whether it runs alone or next to other slots.
   */
  fill(out: Float32Array, offset: number, request: HiddenContext, token: number, position: number): void;
}

export interface EmbeddingSourceOptions {
  /** Scale of the embedding row (default √hidden, Gemma's embedding scale). */
  scale?: number;
  /** RMS of the (uniform) perturbation, relative to the RMS of the scaled row (default 16). */
  perturbation?: number;
}

/** The default source: embedding(token)·√hidden + a per-request, per-position perturbation (uniform, zero-mean, RMS = perturbation × RMS of the scaled row). */
export class EmbeddingHiddenSource implements HiddenSource {
  readonly hidden: number;
  readonly scale: number;
  readonly perturbation: number;
  /** The embedding row being decoded, and its perturbation's random words, reused for every fill. */
  readonly #row: Float32Array;
  readonly #words: Uint32Array;
  readonly #noise = new SplitMix32(0);

  constructor(
    readonly embedding: EmbeddingTable,
    opts: EmbeddingSourceOptions = {},
  ) {
    this.hidden = embedding.hidden;
    this.scale = opts.scale ?? Math.sqrt(embedding.hidden);
    this.perturbation = opts.perturbation ?? 16;
    if (!Number.isFinite(this.scale) || !Number.isFinite(this.perturbation) || this.perturbation < 0) {
      throw new LmheadError("invalid_argument", `hidden source: scale ${this.scale} and perturbation ${this.perturbation} must be finite (perturbation >= 0)`);
    }
    this.#row = new Float32Array(this.hidden);
    this.#words = new Uint32Array(this.hidden);
  }

  fill(out: Float32Array, offset: number, request: HiddenContext, token: number, position: number): void {
    expectTyped(out, "Float32Array", "hidden source: out");
    if (!Number.isSafeInteger(offset) || offset < 0 || offset + this.hidden > out.length) {
      throw new LmheadError("out_of_bounds", `hidden source: row [${offset}, ${offset + this.hidden}) outside out's ${out.length} values`);
    }
    if (!Number.isInteger(token) || token < 0 || token >= this.embedding.vocab) {
      throw new LmheadError("out_of_bounds", `token ${token} outside the vocabulary [0, ${this.embedding.vocab})`);
    }
    const row = this.embedding.row(token, this.#row);
    const hidden = this.hidden;
    if (row.length !== hidden) throw new LmheadError("invalid_argument", `embedding row has ${row.length} values, expected ${hidden}`);
    const scale = this.scale;
    let sumSq = 0;
    for (let k = 0; k < hidden; k++) sumSq += row[k]! * row[k]!;
    // Uniform in ±half has RMS half/√3.
    const half = this.perturbation * Math.abs(scale) * Math.sqrt((3 * sumSq) / hidden);
    const step = (2 * half) / 4294967296;
    // One stream per (request, position), on a reused generator: no allocation per row.
    const noise = this.#noise;
    noise.reseed(mix32(request.key ^ Math.imul(position + 1, 0x85ebca6b)));
    const words = this.#words;
    noise.fill(words);
    for (let k = 0; k < hidden; k++) out[offset + k] = row[k]! * scale + (words[k]! * step - half);
  }
}

/** An embedding table over a decoded [vocab, hidden] f32 array (tests; small heads). */
export function denseEmbedding(values: Float32Array, vocab: number, hidden: number, typeId = 0): EmbeddingTable {
  expectTyped(values, "Float32Array", "dense embedding: values");
  if (values.length !== vocab * hidden) throw new LmheadError("invalid_argument", `embedding has ${values.length} values, expected ${vocab}·${hidden}`);
  return { vocab, hidden, typeId, row: (token) => values.subarray(token * hidden, (token + 1) * hidden) };
}
