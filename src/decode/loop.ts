/**
 * A continuous-batching decode loop over S slots (hf2q's slot-aware batched decode, head only).
 *
 * Requests arrive on the loop's step clock (an arrival schedule), wait in a queue, are admitted
 * into the lowest free slot, and are evicted once they have their tokens. Each step gathers the
 * active slots' hidden rows (in slot order) into one [n, hidden] array, calls the head once,
 * picks a token per row, and feeds it back as that request's next input. Rows move as slots
 * free up (a request's row index changes over its life), which is what the head's row-identity
 * contract must survive.
 *
 * One request cannot stop the others: a request whose hidden row cannot be made, whose logits
 * come back non-finite, or whose onToken callback throws ends alone with reason "error"; the
 * other rows of that step run again without it, and by row identity give the same bits. A
 * finished request is handed to the caller (in the step's event and run()'s results) and the
 * loop keeps nothing of it, so a long-running loop holds only what is queued or running, its id
 * can be submitted again, and its statistics stay a fixed size.
 */
import { NonFiniteRowsError, type BatchedHeadOut, type MlxModelWeights } from "../head.ts";
import { LmheadError } from "../errors.ts";
import { hostPhases } from "../phases.ts";
import { hash32, type SplitMix32 } from "../random.ts";
import { LogHistogram, type Quantiles } from "./histogram.ts";
import type { HiddenContext, HiddenSource } from "./hidden.ts";
import { argmaxRows, greedy, pickTopK, requestRng, Sampler, topKOf, topKRows, type Sampling } from "./sampling.ts";

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
  /** Rows of the step's head call (after dropping failed rows). */
  rows: number;
  headNs: number;
  finalizeNs: number;
  admitted: readonly string[];
  /** Requests that ended in this step, handed over: the loop keeps nothing of them. */
  finished: readonly RequestResult[];
}

export interface RequestResult {
  id: string;
  tokens: number[];
  arrivalStep: number;
  admittedStep: number;
  finishedStep: number;
  /** The slot it ran in. */
  slot: number;
  /** Why it ended: its length, a stop token, or an error (see `error`). */
  reason: "length" | "stop" | "error";
  /** What failed, for reason "error": its hidden row, its logits, or the onToken callback. */
  error: string | null;
}

/** Counters of a loop's life, in fixed memory. */
export interface DecodeStats {
  /** Head calls that returned logits. */
  calls: number;
  /** Head calls run again without the rows that came back non-finite. */
  retries: number;
  /** Tokens generated (Σ rows over calls). */
  slotTokens: number;
  /** callsByRows[r]: calls with r rows (r <= slots). */
  callsByRows: number[];
  /** Totals over the run, ns; headNs is the whole lmHeadBatched call. */
  gatherNs: number;
  headNs: number;
  finalizeNs: number;
  /** Head time per call, ns (from a histogram: within 1% of the exact value). */
  headNsQuantiles: Quantiles;
  /** Wall time of the steps (gather + head + finalize + bookkeeping), ns. */
  wallNs: number;
  admissions: number;
  /** Requests ended by their length or a stop token, and by an error. */
  finished: number;
  failed: number;
  /** Largest rows in one call. */
  maxRows: number;
}

export interface DecodeLoopOptions {
  slots: number;
  hiddenSource: HiddenSource;
  /** Each token, after its step's state is updated; a throw ends that request (reason "error"). */
  onToken?: (event: TokenEvent) => void;
  /** Each step, once complete; a throw propagates out of step() and run() (the event holds the step's results). */
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

interface Pending {
  request: DecodeRequest;
  arrival: number;
}

/** What run() returns: the requests that ended during the run, and the loop's statistics. */
export interface DecodeReport {
  results: RequestResult[];
  stats: DecodeStats;
}

export class DecodeLoop {
  readonly slots: number;
  readonly hidden: number;
  readonly vocab: number;
  readonly hiddenSource: HiddenSource;
  /** The step clock: arrivals are scheduled on it; it advances one per step, and jumps over idle time. */
  #clock = 0;
  /** Queued requests from #pendingHead on, ordered by (arrival, submission). */
  readonly #pending: Pending[] = [];
  #pendingHead = 0;
  readonly #slotState: (Active | null)[];
  #active = 0;
  /** Ids queued or running: the only requests the loop holds. */
  readonly #inFlight = new Set<string>();
  /** Requests that ended outside a step's event (a failed gather before the head threw), handed over by the next step. */
  #ended: RequestResult[] = [];
  /** [slots, hidden] gather buffer, and its [n, hidden] prefixes: no allocation per step. */
  readonly #rows: Float32Array;
  readonly #prefixes: Float32Array[];
  readonly #rowSlot: Int32Array;
  readonly #picked: Int32Array;
  /** Each row's argmax in a step with a greedy row. */
  readonly #argmaxes: Uint32Array;
  /** Each row's top-k in a step with a top-k sampled row: its k (0: none), then [slots, kMax] indices and values. */
  readonly #ks: Uint32Array;
  #topIndices = new Uint32Array(0);
  #topKept = new Float32Array(0);
  /** Sampled rows over the whole vocabulary. */
  readonly #sampler = new Sampler();
  readonly #headNs = new LogHistogram();
  readonly #stats: Omit<DecodeStats, "headNsQuantiles">;

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
    this.#argmaxes = new Uint32Array(slots);
    this.#ks = new Uint32Array(slots);
    this.#stats = {
      calls: 0, retries: 0, slotTokens: 0, callsByRows: new Array<number>(slots + 1).fill(0), gatherNs: 0, headNs: 0, finalizeNs: 0,
      wallNs: 0, admissions: 0, finished: 0, failed: 0, maxRows: 0,
    };
  }

  /** The current step of the clock. */
  get clock(): number {
    return this.#clock;
  }

  get pending(): number {
    return this.#pending.length - this.#pendingHead;
  }

  get active(): number {
    return this.#active;
  }

  /** True when nothing is running or queued. */
  get done(): boolean {
    return this.pending === 0 && this.#active === 0;
  }

  /** Statistics so far (a copy). */
  get stats(): DecodeStats {
    return { ...this.#stats, callsByRows: [...this.#stats.callsByRows], headNsQuantiles: this.#headNs.quantiles() };
  }

  /** Queues a request; it is admitted at its arrival step (or later, when a slot is free). Ids must be unique among queued and running requests. */
  submit(request: DecodeRequest): void {
    const { id, firstToken, maxNewTokens } = request;
    if (typeof id !== "string" || id.length === 0) throw new LmheadError("invalid_argument", `request id must be a non-empty string`);
    if (this.#inFlight.has(id)) throw new LmheadError("invalid_argument", `request id '${id}' submitted twice`);
    if (!Number.isInteger(firstToken) || firstToken < 0 || firstToken >= this.vocab) {
      throw new LmheadError("out_of_bounds", `request '${id}': first token ${firstToken} outside the vocabulary [0, ${this.vocab})`);
    }
    if (!Number.isSafeInteger(maxNewTokens) || maxNewTokens < 1) throw new LmheadError("invalid_argument", `request '${id}': maxNewTokens ${maxNewTokens} is not a positive integer`);
    const requested = request.arrivalStep ?? this.#clock;
    if (!Number.isSafeInteger(requested) || requested < 0) throw new LmheadError("invalid_argument", `request '${id}': arrivalStep ${requested} is not an integer >= 0`);
    const arrival = Math.max(requested, this.#clock);
    // Keep the queue ordered by (arrival, submission order).
    let at = this.#pending.length;
    while (at > this.#pendingHead && this.#pending[at - 1]!.arrival > arrival) at--;
    this.#pending.splice(at, 0, { request, arrival });
    this.#inFlight.add(id);
  }

  /**
   * Runs one step: admits arrivals, gathers, one head call, finalize, evicts. Returns null
   * (and does nothing) when no request is running or queued. Idle time before the next
   * arrival is skipped.
   */
  step(): StepEvent | null {
    const event = this.#step();
    if (event) this.options.onStep?.(event);
    return event;
  }

  /** Steps until every request is done, or `maxCalls` head calls have run; returns the requests that ended meanwhile, in order. */
  run(opts: { maxCalls?: number } = {}): DecodeReport {
    const maxCalls = opts.maxCalls ?? Infinity;
    const results: RequestResult[] = [];
    while (this.#stats.calls < maxCalls) {
      const event = this.#step();
      if (event === null) break;
      for (const r of event.finished) results.push(r);
      this.options.onStep?.(event);
    }
    return { results, stats: this.stats };
  }

  #step(): StepEvent | null {
    const t0 = Bun.nanoseconds();
    let admitted = this.#admit();
    if (this.#active === 0) {
      if (this.pending === 0 && this.#ended.length === 0) return null;
      if (this.pending > 0) {
        this.#clock = this.#pending[this.#pendingHead]!.arrival; // nothing to do until then
        admitted = admitted.concat(this.#admit());
      }
    }
    const stats = this.#stats;
    const step = this.#clock;

    const tg = Bun.nanoseconds();
    let n = this.#gather(step);
    const th = Bun.nanoseconds();
    let out = null;
    while (n > 0 && out === null) {
      try {
        out = this.weights.lmHeadBatched(this.#prefixes[n - 1]!, n);
      } catch (e) {
        if (!(e instanceof NonFiniteRowsError)) throw e;
        n = this.#dropRows(e.rows, n, step, e.message);
        stats.retries++;
      }
    }
    const tf = Bun.nanoseconds();
    if (out !== null) {
      hostPhases.time("finalize", () => {
        // Where any row is greedy, every row's argmax at once, and the top-k of the rows that
        // sample from one at once (native, whole rows on a pool of threads); then each row's pick.
        const vocab = out.vocab;
        let anyGreedy = false;
        let kMax = 0;
        for (let r = 0; r < n; r++) {
          const sampling = this.#slotState[this.#rowSlot[r]!]!.sampling;
          const k = sampling.kind === "greedy" ? 0 : topKOf(sampling, vocab);
          anyGreedy ||= sampling.kind === "greedy";
          this.#ks[r] = k;
          kMax = Math.max(kMax, k);
        }
        if (anyGreedy) argmaxRows(out.logits, n, this.#argmaxes);
        if (kMax > 0) {
          if (this.#topIndices.length < n * kMax) {
            this.#topIndices = new Uint32Array(this.#ks.length * kMax);
            this.#topKept = new Float32Array(this.#ks.length * kMax);
          }
          topKRows(out.logits, n, this.#ks, kMax, this.#topIndices, this.#topKept);
        }
        for (let r = 0; r < n; r++) {
          const a = this.#slotState[this.#rowSlot[r]!]!;
          const s = a.sampling;
          this.#picked[r] =
            s.kind === "greedy" ? this.#argmaxes[r]!
            : this.#ks[r]! > 0 ? pickTopK(this.#topKept, this.#topIndices, r * kMax, this.#ks[r]!, s.temperature, a.rng!)
            : this.#sampler.pick(out.row(r), s, a.rng);
        }
      });
    }
    const te = Bun.nanoseconds();

    // Every state change of the step first, then the callbacks: a callback sees a consistent loop.
    const tokenEvents = out === null ? [] : this.#apply(n, step, out);
    this.#clock++;
    const headNs = tf - th;
    if (out !== null) {
      stats.calls++;
      stats.slotTokens += n;
      stats.callsByRows[n]!++;
      stats.headNs += headNs;
      this.#headNs.record(headNs);
      stats.maxRows = Math.max(stats.maxRows, n);
    }
    stats.gatherNs += th - tg;
    stats.finalizeNs += te - tf;
    for (const e of tokenEvents) this.#deliver(e, step);
    const finished = this.#ended;
    this.#ended = [];
    stats.wallNs += Bun.nanoseconds() - t0;
    return { step, calls: stats.calls, rows: n, headNs, finalizeNs: te - tf, admitted, finished };
  }

  /** Writes the active slots' rows in slot order; a request whose source throws ends alone. Returns the rows. */
  #gather(step: number): number {
    let n = 0;
    for (let s = 0; s < this.slots; s++) {
      const a = this.#slotState[s];
      if (!a) continue;
      try {
        this.hiddenSource.fill(this.#rows, n * this.hidden, a.context, a.inputToken, a.result.tokens.length);
      } catch (e) {
        this.#end(s, "error", step, `hidden source: ${messageOf(e)}`);
        continue;
      }
      this.#rowSlot[n++] = s;
    }
    return n;
  }

  /** Ends the requests of `rows` and closes the gap they leave in the gathered rows. Returns the rows left. */
  #dropRows(rows: readonly number[], n: number, step: number, why: string): number {
    const drop = new Set(rows);
    let kept = 0;
    for (let r = 0; r < n; r++) {
      const slot = this.#rowSlot[r]!;
      if (drop.has(r)) {
        this.#end(slot, "error", step, why);
        continue;
      }
      if (kept !== r) this.#rows.copyWithin(kept * this.hidden, r * this.hidden, (r + 1) * this.hidden);
      this.#rowSlot[kept++] = slot;
    }
    return kept;
  }

  /** Feeds each picked token back and evicts finished requests; returns the token events to deliver. */
  #apply(n: number, step: number, out: BatchedHeadOut): TokenEvent[] {
    const events: TokenEvent[] = [];
    for (let r = 0; r < n; r++) {
      const slot = this.#rowSlot[r]!;
      const a = this.#slotState[slot]!;
      const token = this.#picked[r]!;
      const position = a.result.tokens.length;
      a.result.tokens.push(token);
      events.push({ id: a.request.id, slot, row: r, rows: n, step, position, inputToken: a.inputToken, token, logits: out.row(r) });
      a.inputToken = token;
      if (a.stop?.has(token)) this.#end(slot, "stop", step, null);
      else if (a.result.tokens.length >= a.request.maxNewTokens) this.#end(slot, "length", step, null);
    }
    return events;
  }

  /** Calls onToken; a throw ends that request, or turns its reason to "error" if the step ended it. */
  #deliver(event: TokenEvent, step: number): void {
    try {
      this.options.onToken?.(event);
    } catch (e) {
      const why = `onToken threw: ${messageOf(e)}`;
      const a = this.#slotState[event.slot];
      if (a && a.request.id === event.id) this.#end(event.slot, "error", step, why);
      else this.#relabel(event.id, why);
    }
  }

  /** A request the step already ended whose last token's callback threw. */
  #relabel(id: string, why: string): void {
    const result = this.#ended.find((r) => r.id === id);
    if (!result || result.reason === "error") return;
    result.reason = "error";
    result.error = why;
    this.#stats.finished--;
    this.#stats.failed++;
  }

  /** Evicts the request in `slot` and hands its result over. */
  #end(slot: number, reason: RequestResult["reason"], step: number, error: string | null): void {
    const a = this.#slotState[slot]!;
    this.#slotState[slot] = null;
    this.#active--;
    a.result.reason = reason;
    a.result.error = error;
    a.result.finishedStep = step;
    this.#inFlight.delete(a.request.id);
    this.#ended.push(a.result);
    if (reason === "error") this.#stats.failed++;
    else this.#stats.finished++;
  }

  #admit(): string[] {
    const admitted: string[] = [];
    while (this.pending > 0 && this.#active < this.slots && this.#pending[this.#pendingHead]!.arrival <= this.#clock) {
      const { request, arrival } = this.#pending[this.#pendingHead++]!;
      const slot = this.#slotState.indexOf(null);
      const sampling = request.sampling ?? greedy;
      // Placeholders until #end: a result is handed over only once it has ended.
      const result: RequestResult = { id: request.id, tokens: [], arrivalStep: arrival, admittedStep: this.#clock, finishedStep: -1, slot, reason: "length", error: null };
      this.#slotState[slot] = {
        request,
        context: { id: request.id, key: hash32(request.id) },
        sampling,
        rng: requestRng(sampling, request.id),
        stop: request.stopTokens && request.stopTokens.length > 0 ? new Set(request.stopTokens) : null,
        result,
        inputToken: request.firstToken,
      };
      this.#active++;
      this.#stats.admissions++;
      admitted.push(request.id);
    }
    // Drop the admitted prefix once it is most of the array, so the queue stays O(1) per request.
    if (this.#pendingHead > 1024 && this.#pendingHead * 2 > this.#pending.length) {
      this.#pending.splice(0, this.#pendingHead);
      this.#pendingHead = 0;
    }
    return admitted;
  }
}

/** What a caught value says: an Error's message, or the value itself. */
function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
