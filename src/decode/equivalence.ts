/**
 * Slot-aware byte equivalence, the README's row-identity promise end to end: a set of requests
 * run through the batched loop (S slots, staggered admission and eviction) must give, for every
 * request, exactly the tokens and the logits (u32 bits) it gets running alone (n = 1, serial).
 */
import { LmheadError } from "../errors.ts";
import type { MlxModelWeights } from "../head.ts";
import { DecodeLoop, type DecodeRequest } from "./loop.ts";
import type { HiddenSource } from "./hidden.ts";

/** Every request's tokens and logit bits from serial, one-row runs. */
export interface SerialReference {
  tokens: Map<string, number[]>;
  /** Logit bits by request id, then position. */
  logits: Map<string, Uint32Array[]>;
  calls: number;
}

export interface Mismatch {
  id: string;
  position: number;
  kind: "token" | "logits" | "length";
  /** Row and row count of the batched call. */
  row?: number;
  rows?: number;
  /** First differing logit index, with both u32 words. */
  index?: number;
  batched?: number;
  serial?: number;
  /** How many logit words differ in that row. */
  differing?: number;
}

export interface EquivalenceReport {
  ok: boolean;
  slots: number;
  requests: number;
  tokensCompared: number;
  logitWordsCompared: number;
  calls: { batched: number; serial: number };
  /** Largest rows in one batched call: above 1, or the comparison says nothing about batching. */
  maxRows: number;
  /** Steps where a request took its first token next to a request mid-generation. */
  staggeredAdmissions: number;
  /** Evictions while other slots kept running. */
  evictionsWithPeers: number;
  /** Times a request's row index changed between two of its steps. */
  rowMoves: number;
  mismatchCount: number;
  /** The first few mismatches. */
  mismatches: Mismatch[];
}

export interface EquivalenceOptions {
  /** One slot count, or several (the serial reference is computed once). */
  slots: number | readonly number[];
  hiddenSource: HiddenSource;
  /** Where the serial one-row runs go, if not on `weights`: the same head on another device,
   * so that its batched runs are compared with that device's serial ones. */
  reference?: { weights: MlxModelWeights; hiddenSource: HiddenSource };
  /** Mismatches kept in each report (default 10). */
  keepMismatches?: number;
}

/** Runs each request alone, one row per head call, keeping its tokens and logit bits. */
export function serialReference(weights: MlxModelWeights, requests: readonly DecodeRequest[], hiddenSource: HiddenSource): SerialReference {
  const tokens = new Map<string, number[]>();
  const logits = new Map<string, Uint32Array[]>();
  let calls = 0;
  for (const request of requests) {
    const rows: Uint32Array[] = [];
    const loop = new DecodeLoop(weights, {
      slots: 1,
      hiddenSource,
      onToken: (e) => {
        rows[e.position] = new Uint32Array(e.logits.buffer.slice(e.logits.byteOffset, e.logits.byteOffset + e.logits.byteLength));
      },
    });
    loop.submit({ ...request, arrivalStep: 0 });
    const report = loop.run();
    tokens.set(request.id, report.results[0]?.tokens ?? []);
    logits.set(request.id, rows);
    calls += report.stats.calls;
  }
  return { tokens, logits, calls };
}

/** Runs the requests batched over `slots` and compares every token and logit word with the reference. */
export function compareBatched(
  weights: MlxModelWeights,
  requests: readonly DecodeRequest[],
  slots: number,
  hiddenSource: HiddenSource,
  reference: SerialReference,
  keepMismatches = 10,
): EquivalenceReport {
  const mismatches: Mismatch[] = [];
  let mismatchCount = 0;
  const note = (m: Mismatch): void => {
    mismatchCount++;
    if (mismatches.length < keepMismatches) mismatches.push(m);
  };
  let tokensCompared = 0;
  let logitWordsCompared = 0;
  let staggeredAdmissions = 0;
  let evictionsWithPeers = 0;
  let rowMoves = 0;
  const lastRow = new Map<string, number>();
  let stepHasFirst = false;
  let stepHasLater = false;

  const loop = new DecodeLoop(weights, {
    slots,
    hiddenSource,
    onToken: (e) => {
      if (e.row === 0) {
        stepHasFirst = false;
        stepHasLater = false;
      }
      if (e.position === 0) stepHasFirst = true;
      else stepHasLater = true;
      const before = lastRow.get(e.id);
      if (before !== undefined && before !== e.row) rowMoves++;
      lastRow.set(e.id, e.row);

      tokensCompared++;
      const serialTokens = reference.tokens.get(e.id);
      const serialLogits = reference.logits.get(e.id)?.[e.position];
      if (serialTokens?.[e.position] !== e.token) {
        note({ id: e.id, position: e.position, kind: "token", row: e.row, rows: e.rows, batched: e.token, serial: serialTokens?.[e.position] });
      }
      const got = new Uint32Array(e.logits.buffer, e.logits.byteOffset, e.logits.length);
      if (!serialLogits || serialLogits.length !== got.length) {
        note({ id: e.id, position: e.position, kind: "length", row: e.row, rows: e.rows });
        return;
      }
      logitWordsCompared += got.length;
      let first = -1;
      let differing = 0;
      for (let i = 0; i < got.length; i++) {
        if (got[i] !== serialLogits[i]) {
          if (first < 0) first = i;
          differing++;
        }
      }
      if (first >= 0) {
        note({ id: e.id, position: e.position, kind: "logits", row: e.row, rows: e.rows, index: first, batched: got[first], serial: serialLogits[first], differing });
      }
    },
    onStep: (s) => {
      if (stepHasFirst && stepHasLater) staggeredAdmissions++;
      if (s.finished.length > 0 && s.rows > s.finished.length) evictionsWithPeers += s.finished.length;
    },
  });
  for (const request of requests) loop.submit(request);
  const report = loop.run();
  const batched = new Map(report.results.map((r) => [r.id, r.tokens]));
  for (const request of requests) {
    const tokens = batched.get(request.id) ?? [];
    const serial = reference.tokens.get(request.id) ?? [];
    if (tokens.length !== serial.length) note({ id: request.id, position: Math.min(tokens.length, serial.length), kind: "length" });
  }
  return {
    ok: mismatchCount === 0,
    slots,
    requests: requests.length,
    tokensCompared,
    logitWordsCompared,
    calls: { batched: report.stats.calls, serial: reference.calls },
    maxRows: report.stats.maxRows,
    staggeredAdmissions,
    evictionsWithPeers,
    rowMoves,
    mismatchCount,
    mismatches,
  };
}

/** Serial reference once (on opts.reference where given), then the batched comparison for each slot count. */
export function slotAwareEquivalence(weights: MlxModelWeights, requests: readonly DecodeRequest[], opts: EquivalenceOptions): EquivalenceReport[] {
  const serial = opts.reference ?? { weights, hiddenSource: opts.hiddenSource };
  if (serial.weights.vocabSize !== weights.vocabSize || serial.weights.hiddenSize !== weights.hiddenSize) {
    throw new LmheadError("invalid_argument", `equivalence: the reference head is ${serial.weights.hiddenSize} x ${serial.weights.vocabSize}, the batched one ${weights.hiddenSize} x ${weights.vocabSize}`);
  }
  const reference = serialReference(serial.weights, requests, serial.hiddenSource);
  const slotCounts = typeof opts.slots === "number" ? [opts.slots] : opts.slots;
  return slotCounts.map((s) => compareBatched(weights, requests, s, opts.hiddenSource, reference, opts.keepMismatches));
}

/** One line per report: pass/fail and what was compared. */
export function describeEquivalence(r: EquivalenceReport): string {
  const head = `${r.ok ? "PASS" : "FAIL"} slots=${r.slots}: ${r.requests} requests, ${r.tokensCompared} tokens and ${r.logitWordsCompared} logit words compared bit for bit ` +
    `(batched ${r.calls.batched} calls up to ${r.maxRows} rows vs ${r.calls.serial} one-row calls; ` +
    `${r.staggeredAdmissions} staggered admissions, ${r.evictionsWithPeers} evictions with peers running, ${r.rowMoves} row moves)`;
  if (r.ok) return head;
  const m = r.mismatches[0]!;
  const hex = (v: number | undefined) => (v === undefined ? "?" : `0x${v.toString(16).padStart(8, "0")}`);
  const detail = m.kind === "logits"
    ? `request ${m.id} position ${m.position} (row ${m.row} of ${m.rows}): logit ${m.index} is ${hex(m.batched)} batched vs ${hex(m.serial)} serial, ${m.differing} words differ`
    : m.kind === "token"
      ? `request ${m.id} position ${m.position} (row ${m.row} of ${m.rows}): token ${m.batched} batched vs ${m.serial} serial`
      : `request ${m.id}: ${m.position} tokens in common, lengths differ`;
  return `${head}; ${r.mismatchCount} mismatches, first: ${detail}`;
}
