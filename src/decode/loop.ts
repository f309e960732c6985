/**
 * A continuous-batching decode loop over S slots (hf2q's slot-aware batched decode, head only).
 *
 * Requests arrive on the loop's step clock (an arrival schedule), wait in a queue, are admitted
 * into the lowest free slot, and are evicted once they have their tokens. Each step gathers the
 * active slots' hidden rows (in slot order) into one [n, hidden] array, calls the head once,
 * picks a token per row, and feeds it back as that request's next input. Rows move as slots
 * free up (a request's row index changes over its life), which is what the head's row-identity
 * contract must survive.
 */
import type { MlxModelWeights } from "../head.ts";
import { LmheadError } from "../errors.ts";
import { hostPhases } from "../phases.ts";
import type { HiddenContext, HiddenSource } from "./hidden.ts";
import { hash32, type SplitMix32 } from "../random.ts";
import { greedy, requestRng, Sampler, type Sampling } from "./sampling.ts";

export interface DecodeRequest {
  /** Unique within a loop. */
  id: string;
  /** The input token of the first step. */
  firstToken: number;
  /** Tokens to generate (>= 1). */
  maxNewTokens: number;
  /** Default greedy. */
  sampling?: Sampling;
  /** The step (loop clock) at which the request arrives; default the clock when submitted. */
  arrivalStep?: number;
  /** Tokens that end the request early (the token is kept). */
  stopTokens?: readonly number[];
}

/** One generated token, reported after the step's finalize. */
export interface TokenEvent {
  id: string;
  slot: number;
  /** Row of the head call, and how many rows that call had. */
  row: number;
  rows: number;
  step: number;
  /** 0 for the first generated token. */
  position: number;
  inputToken: number;
  token: number;
  /** This row's logits: a view into the step's head output (do not keep it past the callback unless copied). */
  logits: Float32Array;
}

export interface StepEvent {
  step: number;
  /** Head calls so far, this one included. */
  calls: number;
  rows: number;
  headNs: number;
  finalizeNs: number;
  admitted: readonly string[];
  finished: readonly string[];
}

export interface RequestResult {
  id: string;
  tokens: number[];
  arrivalStep: number;
  admittedStep: number | null;
  finishedStep: number | null;
  /** The slot it ran in (null: never admitted). */
  slot: number | null;
  /** Why it ended; null when the run stopped first. */
  reason: "length" | "stop" | null;
}

export interface DecodeStats {
  /** Head calls. */
  calls: number;
  /** Tokens generated (Σ rows over calls). */
  slotTokens: number;
  /** Rows and head time (ns, the whole lmHeadBatched call) of each call. */
  rowsPerCall: number[];
  headNsPerCall: number[];
  /** Totals over the run, ns. */
  gatherNs: number;
  headNs: number;
  finalizeNs: number;
  /** Wall time of the steps (gather + head + finalize + bookkeeping), ns. */
  wallNs: number;
  admissions: number;
  evictions: number;
  /** Largest rows in one call. */
  maxRows: number;
}

export interface DecodeLoopOptions {
  slots: number;
  hiddenSource: HiddenSource;
  onToken?: (event: TokenEvent) => void;
  onStep?: (event: StepEvent) => void;
}

interface Active {
  request: DecodeRequest;
  context: HiddenContext;
  sampling: Sampling;
  rng: SplitMix32 | null;
  stop: ReadonlySet<number> | null;
  result: RequestResult;
  inputToken: number;
}

export class DecodeLoop {
  readonly slots: number;
  readonly hidden: number;
  readonly vocab: number;
  readonly hiddenSource: HiddenSource;
  /** The step clock: arrivals are scheduled on it; it advances one per head call, and jumps over idle time. */
  #clock = 0;
  #seq = 0;
  readonly #pending: { request: DecodeRequest; arrival: number; seq: number }[] = [];
  readonly #slotState: (Active | null)[];
  readonly #results = new Map<string, RequestResult>();
  /** [slots, hidden] gather buffer, and its [n, hidden] prefixes: no allocation per step. */
  readonly #rows: Float32Array;
  readonly #prefixes: Float32Array[];
  readonly #rowSlot: Int32Array;
  readonly #picked: Int32Array;
  readonly #sampler = new Sampler();
  readonly #stats: DecodeStats = {
    calls: 0, slotTokens: 0, rowsPerCall: [], headNsPerCall: [], gatherNs: 0, headNs: 0, finalizeNs: 0, wallNs: 0,
    admissions: 0, evictions: 0, maxRows: 0,
  };

  constructor(
    readonly weights: MlxModelWeights,
    readonly options: DecodeLoopOptions,
  ) {
    const { slots, hiddenSource } = options;
    if (!Number.isSafeInteger(slots) || slots < 1) throw new LmheadError("invalid_argument", `slots ${slots} is not a positive integer`);
    if (hiddenSource.hidden !== weights.hiddenSize) {
      throw new LmheadError("invalid_argument", `hidden source gives ${hiddenSource.hidden} values per row, the head needs ${weights.hiddenSize}`);
    }
    this.slots = slots;
    this.hidden = weights.hiddenSize;
    this.vocab = weights.vocabSize;
    this.hiddenSource = hiddenSource;
    this.#slotState = Array.from({ length: slots }, () => null);
    this.#rows = new Float32Array(slots * this.hidden);
    this.#prefixes = Array.from({ length: slots }, (_, i) => this.#rows.subarray(0, (i + 1) * this.hidden));
    this.#rowSlot = new Int32Array(slots);
    this.#picked = new Int32Array(slots);
  }

  /** The current step of the clock. */
  get clock(): number {
    return this.#clock;
  }

  get pending(): number {
    return this.#pending.length;
  }

  get active(): number {
    return this.#slotState.reduce((n, s) => n + (s ? 1 : 0), 0);
  }

  /** Queues a request; it is admitted at its arrival step (or later, when a slot is free). */
  submit(request: DecodeRequest): void {
    const { id, firstToken, maxNewTokens } = request;
    if (typeof id !== "string" || id.length === 0) throw new LmheadError("invalid_argument", `request id must be a non-empty string`);
    if (this.#results.has(id)) throw new LmheadError("invalid_argument", `request id '${id}' submitted twice`);
    if (!Number.isInteger(firstToken) || firstToken < 0 || firstToken >= this.vocab) {
      throw new LmheadError("out_of_bounds", `request '${id}': first token ${firstToken} outside the vocabulary [0, ${this.vocab})`);
    }
    if (!Number.isSafeInteger(maxNewTokens) || maxNewTokens < 1) throw new LmheadError("invalid_argument", `request '${id}': maxNewTokens ${maxNewTokens} is not a positive integer`);
    const arrival = request.arrivalStep ?? this.#clock;
    if (!Number.isSafeInteger(arrival) || arrival < 0) throw new LmheadError("invalid_argument", `request '${id}': arrivalStep ${arrival} is not an integer >= 0`);
    const entry = { request, arrival: Math.max(arrival, this.#clock), seq: this.#seq++ };
    // Keep the queue ordered by (arrival, submission order).
    let at = this.#pending.length;
    while (at > 0 && this.#pending[at - 1]!.arrival > entry.arrival) at--;
    this.#pending.splice(at, 0, entry);
    this.#results.set(id, { id, tokens: [], arrivalStep: entry.arrival, admittedStep: null, finishedStep: null, slot: null, reason: null });
  }

  /** True when nothing is running or queued. */
  get done(): boolean {
    return this.#pending.length === 0 && this.active === 0;
  }

  /**
   * Runs one step: admits arrivals, gathers, one head call, finalize, evicts. Returns null
   * (and does nothing) when no request is running or queued. Idle time before the next
   * arrival is skipped.
   */
  step(): StepEvent | null {
    const t0 = Bun.nanoseconds();
    let admitted = this.#admit();
    if (this.active === 0) {
      if (this.#pending.length === 0) return null;
      this.#clock = this.#pending[0]!.arrival; // nothing to do until then
      admitted = admitted.concat(this.#admit());
    }
    const stats = this.#stats;
    const hidden = this.hidden;

    // Gather the active slots' rows, in slot order.
    const tg = Bun.nanoseconds();
    let n = 0;
    for (let s = 0; s < this.slots; s++) {
      const a = this.#slotState[s];
      if (!a) continue;
      this.hiddenSource.fill(this.#rows, n * hidden, a.context, a.inputToken, a.result.tokens.length);
      this.#rowSlot[n++] = s;
    }

    // One head call for all of them.
    const th = Bun.nanoseconds();
    const out = this.weights.lmHeadBatched(this.#prefixes[n - 1]!, n);
    const tf = Bun.nanoseconds();

    // Finalize: one token per row.
    hostPhases.time("finalize", () => {
      for (let r = 0; r < n; r++) {
        const a = this.#slotState[this.#rowSlot[r]!]!;
        this.#picked[r] = this.#sampler.pick(out.row(r), a.sampling, a.rng);
      }
    });
    const te = Bun.nanoseconds();

    // Feed back, report, evict.
    const step = this.#clock;
    const finished: string[] = [];
    for (let r = 0; r < n; r++) {
      const slot = this.#rowSlot[r]!;
      const a = this.#slotState[slot]!;
      const token = this.#picked[r]!;
      const position = a.result.tokens.length;
      a.result.tokens.push(token);
      this.options.onToken?.({ id: a.request.id, slot, row: r, rows: n, step, position, inputToken: a.inputToken, token, logits: out.row(r) });
      a.inputToken = token;
      const stopped = a.stop?.has(token) ?? false;
      if (stopped || a.result.tokens.length >= a.request.maxNewTokens) {
        a.result.reason = stopped ? "stop" : "length";
        a.result.finishedStep = step;
        this.#slotState[slot] = null;
        stats.evictions++;
        finished.push(a.request.id);
      }
    }
    this.#clock++;

    const headNs = tf - th;
    stats.calls++;
    stats.slotTokens += n;
    stats.rowsPerCall.push(n);
    stats.headNsPerCall.push(headNs);
    stats.gatherNs += th - tg;
    stats.headNs += headNs;
    stats.finalizeNs += te - tf;
    stats.maxRows = Math.max(stats.maxRows, n);
    stats.wallNs += Bun.nanoseconds() - t0;
    const event: StepEvent = { step, calls: stats.calls, rows: n, headNs, finalizeNs: te - tf, admitted, finished };
    this.options.onStep?.(event);
    return event;
  }

  /** Steps until every request is done, or `maxCalls` head calls have run. */
  run(opts: { maxCalls?: number } = {}): DecodeReport {
    const maxCalls = opts.maxCalls ?? Infinity;
    while (this.#stats.calls < maxCalls && this.step() !== null) {
      // each step reports through the callbacks
    }
    return this.report();
  }

  /** Results (in submission order) and statistics so far. */
  report(): DecodeReport {
    return { results: [...this.#results.values()].map((r) => ({ ...r, tokens: [...r.tokens] })), stats: structuredClone(this.#stats) };
  }

  #admit(): string[] {
    const admitted: string[] = [];
    while (this.#pending.length > 0 && this.#pending[0]!.arrival <= this.#clock) {
      const slot = this.#slotState.indexOf(null);
      if (slot < 0) break;
      const { request } = this.#pending.shift()!;
      const sampling = request.sampling ?? greedy;
      const result = this.#results.get(request.id)!;
      result.admittedStep = this.#clock;
      result.slot = slot;
      this.#slotState[slot] = {
        request,
        context: { id: request.id, key: hash32(request.id) },
        sampling,
        rng: requestRng(sampling, request.id),
        stop: request.stopTokens && request.stopTokens.length > 0 ? new Set(request.stopTokens) : null,
        result,
        inputToken: request.firstToken,
      };
      this.#stats.admissions++;
      admitted.push(request.id);
    }
    return admitted;
  }
}

export interface DecodeReport {
  results: RequestResult[];
  stats: DecodeStats;
}
