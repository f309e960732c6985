/**
 * Deterministic arrival schedules: requests that arrive over time with varied lengths, so a
 * loop admits and evicts while other slots are mid-generation.
 */
import { LmheadError } from "../errors.ts";
import type { DecodeRequest } from "./loop.ts";
import { mix32, SplitMix32 } from "../random.ts";
import type { Sampling } from "./sampling.ts";

export interface WorkloadOptions {
  /** Requests to make. */
  count: number;
  /** First tokens are drawn from [0, vocab). */
  vocab: number;
  /** Slots of the loop the schedule is for: arrivals are spaced so they keep about that many busy. */
  slots: number;
  /** Tokens per request, drawn from [minNew, maxNew]. */
  minNew: number;
  maxNew: number;
  seed: number;
  sampling: Sampling;
  /** Request ids are `${idPrefix}${i}` (default "req-"). */
  idPrefix?: string;
  /** Requests arriving at step 0 (default `slots`). */
  upfront?: number;
  /** Mean steps between later arrivals (default 0.9 x mean length / slots). */
  meanGap?: number;
}

/**
 * A staggered schedule: `upfront` requests (default: one per slot) arrive at step 0, the rest
 * one by one at deterministic, jittered gaps averaging 0.9 x (mean length / slots) steps, a
 * little faster than full slots drain, so the loop keeps admitting into slots that other
 * requests just left while the rest are mid-generation.
 */
export function staggeredRequests(opts: WorkloadOptions): DecodeRequest[] {
  const { count, vocab, slots, minNew, maxNew, seed, sampling } = opts;
  for (const [name, v, min] of [["count", count, 0], ["vocab", vocab, 1], ["slots", slots, 1], ["minNew", minNew, 1], ["maxNew", maxNew, minNew]] as const) {
    if (!Number.isSafeInteger(v) || v < min) throw new LmheadError("invalid_argument", `workload: ${name} ${v} is not an integer >= ${min}`);
  }
  const rng = new SplitMix32(mix32(seed ^ 0x5eed1e55));
  const next = (): number => rng.float();
  const meanGap = opts.meanGap ?? (0.9 * (minNew + maxNew)) / 2 / slots;
  const upfront = Math.max(1, opts.upfront ?? slots);
  const out: DecodeRequest[] = [];
  let arrival = 0;
  for (let i = 0; i < count; i++) {
    if (i >= upfront) arrival += Math.floor(next() * 2 * meanGap + 0.5);
    out.push({
      id: `${opts.idPrefix ?? "req-"}${i}`,
      firstToken: Math.floor(next() * vocab),
      maxNewTokens: minNew + Math.floor(next() * (maxNew - minNew + 1)),
      sampling,
      arrivalStep: arrival,
    });
  }
  return out;
}
