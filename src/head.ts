/**
 * The batched Gemma output head (hf2q's lm_head_batched / encode_lm_head_into):
 * final RMS norm, the head in the artifact's stored type, then the logit softcap.
 * Row r of an N-row call is bit-identical to the 1-row call on that row, for every N.
 */
import { LmheadError } from "./errors.ts";
import { check, lib, limits } from "./native.ts";
import { hostPhases } from "./phases.ts";
import { GraphSession, type MlxBuffer, type MlxDevice } from "./runtime.ts";
import { expectTyped } from "./typed.ts";

export interface HeadWeights {
  hiddenSize: number;
  vocabSize: number;
  /** output_norm.weight: hiddenSize f32, used exactly as stored (no 1 + w). */
  finalNorm: MlxBuffer;
  /** The head: output.weight, or token_embd.weight when tied (same bytes, no √hidden scale). */
  head: MlxBuffer;
  /** ggml type id of the head as stored. */
  headType: number;
  tied: boolean;
  /** Gemma's final_logit_softcapping, or null for none. */
  finalLogitSoftcapping: number | null;
  rmsNormEps: number;
}

/** The head's host payload: logits only, [rows, vocab] f32, every value finite. */
export class BatchedHeadOut {
  private constructor(
    readonly logits: Float32Array,
    readonly rows: number,
    readonly vocab: number,
  ) {}

  /** The one way to build a BatchedHeadOut: rejects NaN and ±Inf, naming the offset and value. */
  static fromLogits(logits: Float32Array, rows: number, vocab: number): BatchedHeadOut {
    expectTyped(logits, "Float32Array", "BatchedHeadOut.fromLogits: logits");
    if (logits.length !== rows * vocab) {
      throw new LmheadError("invalid_argument", `logits len ${logits.length} != rows*vocab ${rows * vocab}`);
    }
    for (let i = 0; i < logits.length; i++) {
      const v = logits[i]!;
      if (!Number.isFinite(v)) {
        throw new LmheadError("non_finite", `Gemma batched output head: non-finite model logit at offset ${i}: ${v}`);
      }
    }
    return new BatchedHeadOut(logits, rows, vocab);
  }

  /** Row r's logits, zero-copy. */
  row(r: number): Float32Array {
    if (!Number.isInteger(r) || r < 0 || r >= this.rows) throw new LmheadError("out_of_bounds", `row ${r} outside [0, ${this.rows})`);
    return this.logits.subarray(r * this.vocab, (r + 1) * this.vocab);
  }
}

/** Buffers an encoded head writes; they must outlive the session's finish. */
export interface EncodedHead {
  logits: MlxBuffer;
  normed: MlxBuffer;
}

export class MlxModelWeights {
  readonly hiddenSize: number;
  readonly vocabSize: number;
  readonly finalNorm: MlxBuffer;
  readonly head: MlxBuffer;
  readonly headType: number;
  readonly tied: boolean;
  readonly finalLogitSoftcapping: number | null;
  readonly rmsNormEps: number;
  /** Grow-only scratch for lmHeadBatched, so a decode loop does not allocate per step. */
  #scratch: { rows: number; hidden: MlxBuffer; normed: MlxBuffer; logits: MlxBuffer } | null = null;

  constructor(
    readonly device: MlxDevice,
    weights: HeadWeights,
  ) {
    const { hiddenSize, vocabSize, finalNorm, head, headType, tied, finalLogitSoftcapping: cap, rmsNormEps: eps } = weights;
    check(lib.lmh_head_admit(headType, hiddenSize, vocabSize, head.bytes, tied ? 1 : 0), "admit head");
    if (finalNorm.bytes !== hiddenSize * 4) {
      throw new LmheadError("invalid_argument", `final norm is ${finalNorm.bytes} bytes, expected ${hiddenSize * 4} (hidden ${hiddenSize} f32)`);
    }
    if (cap !== null && !(cap > 0 && Number.isFinite(cap))) throw new LmheadError("invalid_argument", `softcap ${cap} is not a finite value > 0`);
    if (!(eps >= 0 && Number.isFinite(eps))) throw new LmheadError("invalid_argument", `rms eps ${eps} is not a finite value >= 0`);
    this.hiddenSize = hiddenSize;
    this.vocabSize = vocabSize;
    this.finalNorm = finalNorm;
    this.head = head;
    this.headType = headType;
    this.tied = tied;
    this.finalLogitSoftcapping = cap;
    this.rmsNormEps = eps;
  }

  /**
   * Logits for n hidden rows ([n, hiddenSize] f32, before the final norm): one session,
   * one wait. n = 0 gives an empty result.
   */
  lmHeadBatched(hiddenRows: Float32Array, n: number): BatchedHeadOut {
    if (!Number.isSafeInteger(n) || n < 0) throw new LmheadError("invalid_argument", `lm_head_batched: n ${n} is not a non-negative integer`);
    const values = this.#logitValues(n);
    expectTyped(hiddenRows, "Float32Array", "lm_head_batched: hidden_rows");
    const expected = n * this.hiddenSize;
    if (hiddenRows.length !== expected) {
      throw new LmheadError("invalid_argument", `lm_head_batched: hidden_rows len ${hiddenRows.length} != n*hidden_size ${expected} (n ${n}, hidden ${this.hiddenSize})`);
    }
    if (n === 0) return BatchedHeadOut.fromLogits(new Float32Array(0), 0, this.vocabSize);

    const scratch = this.#scratchFor(n);
    using hidden = scratch.hidden.view(0, expected * 4);
    using normed = scratch.normed.view(0, expected * 4);
    using logits = scratch.logits.view(0, values * 4);
    hidden.write(hiddenRows);
    const session = GraphSession.begin(this.device);
    try {
      this.#encode(session, hidden, n, normed, logits);
    } catch (e) {
      session.abort();
      throw e;
    }
    hostPhases.time("headWait", () => session.finish());
    const out = hostPhases.time("headReadback", () => logits.readF32(0, values));
    return BatchedHeadOut.fromLogits(out, n, this.vocabSize);
  }

  /**
   * Encodes the head into an open session, reading n rows of hiddenBuf (which earlier
   * work in the session may have written). Returns the buffers that must outlive the
   * session's finish; read `logits` after it.
   */
  encodeLmHeadInto(session: GraphSession, hiddenBuf: MlxBuffer, n: number): EncodedHead {
    if (!Number.isSafeInteger(n) || n <= 0) throw new LmheadError("invalid_argument", `encode_lm_head_into: n ${n} is not a positive integer`);
    const values = this.#logitValues(n);
    const normed = this.device.allocBuffer(n * this.hiddenSize * 4);
    const logits = this.device.allocBuffer(values * 4);
    try {
      this.#encode(session, hiddenBuf, n, normed, logits);
    } catch (e) {
      normed.free();
      logits.free();
      throw e;
    }
    return { logits, normed };
  }

  #encode(session: GraphSession, hidden: MlxBuffer, n: number, normed: MlxBuffer, logits: MlxBuffer): void {
    session.rmsNorm(hidden, this.finalNorm, normed, n, this.hiddenSize, this.rmsNormEps);
    session.matvec(normed, this.head, this.headType, logits, n, this.hiddenSize, this.vocabSize);
    if (this.finalLogitSoftcapping !== null) session.softcap(logits, n * this.vocabSize, this.finalLogitSoftcapping);
  }

  /** n·vocab, refused before any allocation when it overflows or n is past the row limit (never truncated). */
  #logitValues(n: number): number {
    const values = n * this.vocabSize;
    if (!Number.isSafeInteger(values * 4)) throw new LmheadError("overflow", `n ${n} x vocab ${this.vocabSize} logits overflow`);
    if (n > limits.maxRows) throw new LmheadError("out_of_bounds", `n ${n} rows exceeds the limit of ${limits.maxRows} per call`);
    return values;
  }

  #scratchFor(n: number) {
    if (this.#scratch && this.#scratch.rows >= n) return this.#scratch;
    const old = this.#scratch;
    const rows = Math.max(n, old ? Math.min(old.rows * 2, 1024) : 1);
    this.#scratch = {
      rows,
      hidden: this.device.allocBuffer(rows * this.hiddenSize * 4),
      normed: this.device.allocBuffer(rows * this.hiddenSize * 4),
      logits: this.device.allocBuffer(this.#logitValues(rows) * 4),
    };
    if (old) for (const b of [old.hidden, old.normed, old.logits]) b.free();
    return this.#scratch;
  }

  /** Frees the scratch buffers (the weights belong to whoever created them). */
  [Symbol.dispose](): void {
    if (this.#scratch) for (const b of [this.#scratch.hidden, this.#scratch.normed, this.#scratch.logits]) b.free();
    this.#scratch = null;
  }
}
