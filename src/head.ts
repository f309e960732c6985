/**
 * The batched Gemma output head (hf2q's lm_head_batched / encode_lm_head_into):
 * final RMS norm, the head in the artifact's stored type, then the logit softcap.
 * Row r of an N-row call is bit-identical to the 1-row call on that row, for every N.
 */
import { LmheadError } from "./errors.ts";
import { check, lib, limits } from "./native.ts";
import { hostPhases } from "./phases.ts";
import { GraphSession, type HostPin, type MlxBuffer, type MlxDevice } from "./runtime.ts";
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

/**
 * Rows whose logits hold NaN or ±Inf. lmHeadBatched throws it with every such row, so a caller
 * (the decode loop) can fail the requests of those rows and run the others again.
 */
export class NonFiniteRowsError extends LmheadError {
  constructor(
    /** Row indices of the call, ascending. */
    readonly rows: readonly number[],
    /** Rows in the call. */
    readonly n: number,
    /** The first bad row's first bad logit, in words. */
    detail: string,
  ) {
    super("non_finite", `Gemma batched output head: non-finite logits in row${rows.length > 1 ? "s" : ""} ${rows.join(", ")} of ${n} (${detail})`);
  }
}

/** Row indices whose count of non-finite values is not zero. */
function badRows(counts: Uint32Array, n: number): number[] {
  const bad: number[] = [];
  for (let r = 0; r < n; r++) if (counts[r] !== 0) bad.push(r);
  return bad;
}

/** Host scan for logits the caller built (fromLogits): non-finite values per row. */
function countNonFinite(logits: Float32Array, n: number, vocab: number): Uint32Array {
  const counts = new Uint32Array(n);
  for (let r = 0; r < n; r++) {
    // v * 0 is 0 for every finite v and NaN otherwise: one branch per row, not per value.
    let probe = 0;
    const end = (r + 1) * vocab;
    for (let i = r * vocab; i < end; i++) probe += logits[i]! * 0;
    if (probe !== 0) counts[r] = 1;
  }
  return counts;
}

/** Why row r's logits are not finite, in words: its input, its norm, or its logits. */
function describeRow(r: number, logits: Float32Array, vocab: number, hiddenRows?: Float32Array, hidden?: number): string {
  if (hiddenRows !== undefined && hidden !== undefined) {
    const x = hiddenRows.subarray(r * hidden, (r + 1) * hidden);
    const at = x.findIndex((v) => !Number.isFinite(v));
    if (at >= 0) return `row ${r}: hidden value ${at} is ${x[at]}`;
    let squares = Math.fround(0);
    for (const v of x) squares = Math.fround(squares + Math.fround(v * v));
    if (!Number.isFinite(squares)) return `row ${r}: its RMS is too large to normalise in f32 (sum of squares overflows; NUMERICS.md §4)`;
  }
  const row = logits.subarray(r * vocab, (r + 1) * vocab);
  const at = row.findIndex((v) => !Number.isFinite(v));
  return `row ${r}: logit ${at} is ${row[at]}`;
}

/** BatchedHeadOut's constructor for this module (set in its static block); `current` is null for logits the caller owns. */
let makeOut: (logits: Float32Array, rows: number, vocab: number, current: (() => boolean) | null) => BatchedHeadOut;

/**
 * The head's host payload: logits only, [rows, vocab] f32, every value finite. Logits that
 * lmHeadBatched lends (zero-copy, without an `out` array) stay valid until the next call on the
 * same weights; reading them after that is an LmheadError ("stale"), never other data.
 */
export class BatchedHeadOut {
  readonly #logits: Float32Array;
  readonly #current: (() => boolean) | null;

  static {
    makeOut = (logits, rows, vocab, current) => new BatchedHeadOut(logits, rows, vocab, current);
  }

  private constructor(
    logits: Float32Array,
    readonly rows: number,
    readonly vocab: number,
    current: (() => boolean) | null,
  ) {
    this.#logits = logits;
    this.#current = current;
  }

  /** Wraps caller-owned logits: rejects a wrong length, and NaN or ±Inf naming the rows. */
  static fromLogits(logits: Float32Array, rows: number, vocab: number): BatchedHeadOut {
    expectTyped(logits, "Float32Array", "BatchedHeadOut.fromLogits: logits");
    if (logits.length !== rows * vocab) {
      throw new LmheadError("invalid_argument", `logits len ${logits.length} != rows*vocab ${rows * vocab}`);
    }
    const bad = badRows(countNonFinite(logits, rows, vocab), rows);
    if (bad.length > 0) throw new NonFiniteRowsError(bad, rows, describeRow(bad[0]!, logits, vocab));
    return new BatchedHeadOut(logits, rows, vocab, null);
  }

  /** All rows' logits, [rows, vocab]. */
  get logits(): Float32Array {
    if (this.#current !== null && !this.#current()) {
      throw new LmheadError("stale", "these logits were lent by lmHeadBatched and a later call on the same weights overwrote them: copy them, or pass an out array, to keep them");
    }
    return this.#logits;
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
  /** n u32: the NaN and ±Inf logits of each row; a row with any is not a valid result. */
  nonFinite: MlxBuffer;
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
  /** Grow-only scratch for lmHeadBatched, so a decode loop neither allocates nor makes views per step. */
  #scratch: Scratch | null = null;
  /** lmHeadBatched calls so far: logits it lent stay valid while this is unchanged. */
  #calls = 0;

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
   *
   * With `out` (n·vocab f32) the logits are read into it. Without, they are lent: valid
   * until the next call on these weights, after which reading them is an LmheadError
   * ("stale"). Where the host sees the device's memory (the CPU) they are the device's own
   * output, zero-copy; elsewhere (a GPU) they are read back into one host array that the
   * weights keep, so a decode loop neither allocates nor first-touches n·vocab values per
   * call. Rows holding NaN or ±Inf throw a NonFiniteRowsError naming them.
   */
  lmHeadBatched(hiddenRows: Float32Array, n: number, out?: Float32Array): BatchedHeadOut {
    if (!Number.isSafeInteger(n) || n < 0) throw new LmheadError("invalid_argument", `lm_head_batched: n ${n} is not a non-negative integer`);
    const values = this.#logitValues(n);
    expectTyped(hiddenRows, "Float32Array", "lm_head_batched: hidden_rows");
    const expected = n * this.hiddenSize;
    if (hiddenRows.length !== expected) {
      throw new LmheadError("invalid_argument", `lm_head_batched: hidden_rows len ${hiddenRows.length} != n*hidden_size ${expected} (n ${n}, hidden ${this.hiddenSize})`);
    }
    if (out !== undefined) {
      expectTyped(out, "Float32Array", "lm_head_batched: out");
      if (out.length !== values) throw new LmheadError("invalid_argument", `lm_head_batched: out len ${out.length} != n*vocab ${values} (n ${n}, vocab ${this.vocabSize})`);
    }
    const call = ++this.#calls;
    if (n === 0) return makeOut(out ?? new Float32Array(0), 0, this.vocabSize, null);

    const scratch = this.#scratchFor(n);
    const views = this.#viewsFor(scratch, n);
    views.hidden.write(hiddenRows);
    const session = GraphSession.begin(this.device);
    try {
      this.#encode(session, views.hidden, n, views.normed, views.logits, views.counts);
    } catch (e) {
      session.abort();
      throw e;
    }
    const deviceNs = hostPhases.time("headWait", () => session.finish());
    if (deviceNs !== null) hostPhases.add("headDevice", deviceNs);

    // The device counted each row's NaN and ±Inf logits; the host reads n words.
    const bad = hostPhases.time("headCheck", () => {
      if (scratch.hostCounts) return badRows(scratch.hostCounts, n);
      const counts = new Uint32Array(n);
      views.counts.readInto(counts);
      return badRows(counts, n);
    });
    const logits = out ?? scratch.hostLogits.subarray(0, values);
    if (out !== undefined || !this.device.hostVisible) hostPhases.time("headReadback", () => views.logits.readInto(logits));
    const current = out === undefined ? () => this.#calls === call : null;
    if (bad.length > 0) throw new NonFiniteRowsError(bad, n, describeRow(bad[0]!, logits, this.vocabSize, hiddenRows, this.hiddenSize));
    return makeOut(logits, n, this.vocabSize, current);
  }

  /**
   * Encodes the head into an open session, reading n rows of hiddenBuf (which earlier
   * work in the session may have written). Returns the buffers that must outlive the
   * session's finish; read `logits` after it.
   */
  encodeLmHeadInto(session: GraphSession, hiddenBuf: MlxBuffer, n: number): EncodedHead {
    if (!Number.isSafeInteger(n) || n <= 0) throw new LmheadError("invalid_argument", `encode_lm_head_into: n ${n} is not a positive integer`);
    const values = this.#logitValues(n);
    const encoded = {
      normed: this.device.allocBuffer(n * this.hiddenSize * 4),
      logits: this.device.allocBuffer(values * 4),
      nonFinite: this.device.allocBuffer(n * 4),
    };
    try {
      this.#encode(session, hiddenBuf, n, encoded.normed, encoded.logits, encoded.nonFinite);
    } catch (e) {
      for (const b of Object.values(encoded)) b.free();
      throw e;
    }
    return encoded;
  }

  /** Norm, head, softcap, then each row's count of non-finite logits (the device checks, not the host). */
  #encode(session: GraphSession, hidden: MlxBuffer, n: number, normed: MlxBuffer, logits: MlxBuffer, counts: MlxBuffer): void {
    session.rmsNorm(hidden, this.finalNorm, normed, n, this.hiddenSize, this.rmsNormEps);
    session.matvec(normed, this.head, this.headType, logits, n, this.hiddenSize, this.vocabSize);
    if (this.finalLogitSoftcapping !== null) session.softcap(logits, n * this.vocabSize, this.finalLogitSoftcapping);
    session.countNonFinite(logits, counts, n, this.vocabSize);
  }

  /** n·vocab, refused before any allocation when it overflows or n is past the row limit (never truncated). */
  #logitValues(n: number): number {
    const values = n * this.vocabSize;
    if (!Number.isSafeInteger(values * 4)) throw new LmheadError("overflow", `n ${n} x vocab ${this.vocabSize} logits overflow`);
    if (n > limits.maxRows) throw new LmheadError("out_of_bounds", `n ${n} rows exceeds the limit of ${limits.maxRows} per call`);
    return values;
  }

  #scratchFor(n: number): Scratch {
    if (this.#scratch && this.#scratch.rows >= n) return this.#scratch;
    const old = this.#scratch;
    const rows = Math.max(n, old ? Math.min(old.rows * 2, 1024) : 1);
    const logitBytes = this.#logitValues(rows) * 4;
    // Lent logits live in JS-owned memory, so a lent array can never outlive them; shared
    // memory, because an ArrayBuffer could be transferred away from under the device (or the
    // readback). Where the host sees the device's memory it is the logits buffer itself;
    // elsewhere the readback's target, pinned so the copy runs at the bus's rate.
    const hostLogits = new Float32Array(new SharedArrayBuffer(logitBytes));
    const hostCounts = this.device.hostVisible ? new Uint32Array(new SharedArrayBuffer(rows * 4)) : null;
    const pin = this.device.hostVisible ? null : this.device.pinHost(new Uint8Array(hostLogits.buffer));
    this.#scratch = {
      pin,
      rows,
      hidden: this.device.allocBuffer(rows * this.hiddenSize * 4),
      normed: this.device.allocBuffer(rows * this.hiddenSize * 4),
      logits: this.device.hostVisible ? this.device.wrapHost(new Uint8Array(hostLogits.buffer)) : this.device.allocBuffer(logitBytes),
      counts: hostCounts ? this.device.wrapHost(new Uint8Array(hostCounts.buffer)) : this.device.allocBuffer(rows * 4),
      hostLogits,
      hostCounts,
      views: [],
    };
    if (old) freeScratch(old);
    return this.#scratch;
  }

  /** The views of the first n rows of each scratch buffer, made on first use and kept. */
  #viewsFor(scratch: Scratch, n: number): ScratchViews {
    let views = scratch.views[n];
    if (views === undefined) {
      const rowBytes = n * this.hiddenSize * 4;
      views = {
        hidden: scratch.hidden.view(0, rowBytes),
        normed: scratch.normed.view(0, rowBytes),
        logits: scratch.logits.view(0, n * this.vocabSize * 4),
        counts: scratch.counts.view(0, n * 4),
      };
      scratch.views[n] = views;
    }
    return views;
  }

  /** Frees the scratch buffers (the weights belong to whoever created them). */
  [Symbol.dispose](): void {
    if (this.#scratch) freeScratch(this.#scratch);
    this.#scratch = null;
  }
}

interface ScratchViews {
  hidden: MlxBuffer;
  normed: MlxBuffer;
  logits: MlxBuffer;
  /** Per row: its NaN and ±Inf logits, counted on the device. */
  counts: MlxBuffer;
}

interface Scratch extends ScratchViews {
  /** Capacity in rows. */
  rows: number;
  /** Lent logits: the memory of `logits` when the device's buffers are host-visible, else its readback. */
  hostLogits: Float32Array;
  /** The memory of `counts` when the device's buffers are host-visible. */
  hostCounts: Uint32Array | null;
  /** hostLogits pinned for the readback, where the device's buffers are not host-visible. */
  pin: HostPin | null;
  /** Views of the first n rows, by n. */
  views: (ScratchViews | undefined)[];
}

function freeScratch(scratch: Scratch): void {
  for (const v of scratch.views) if (v) for (const b of [v.hidden, v.normed, v.logits, v.counts]) b.free();
  for (const b of [scratch.hidden, scratch.normed, scratch.logits, scratch.counts]) b.free();
  scratch.pin?.unpin();
}
