/**
 * The CLI's main job: a staggered workload through the DecodeLoop on a loaded model, with the
 * throughput figures (slot-tokens/s, head ms per step, host-phase split, GB/s of weights
 * against this machine's read bandwidth) and, optionally, the slot-aware equivalence check.
 */
import { formatInfo } from "../formats.ts";
import type { MlxModelWeights } from "../head.ts";
import { hostPhases } from "../phases.ts";
import type { MlxDevice } from "../runtime.ts";
import { measureReadBandwidth, type BandwidthResult } from "./bandwidth.ts";
import { describeEquivalence, slotAwareEquivalence, type EquivalenceReport } from "./equivalence.ts";
import { EmbeddingHiddenSource, type EmbeddingTable, type HiddenSource } from "./hidden.ts";
import { DecodeLoop } from "./loop.ts";
import { ProgressBar } from "./progress.ts";
import { samplingText, type Sampling } from "./sampling.ts";
import { fixed } from "./stats.ts";
import { staggeredRequests } from "./workload.ts";

export interface DecodeJobOptions {
  device: MlxDevice;
  weights: MlxModelWeights;
  embedding: EmbeddingTable;
  /** Shown in the report. */
  modelPath: string;
  arch: string;
  slots: number;
  /** Head calls to run. */
  steps: number;
  sampling: Sampling;
  /** Workload seed (first tokens, lengths, arrival gaps). */
  seed: number;
  /** Tokens per request, drawn from [minNew, maxNew]. */
  minNew: number;
  maxNew: number;
  verify: boolean;
  progress: boolean;
  /** Read-bandwidth probe buffer in bytes (0 skips the probe). */
  probeBytes: number;
  hiddenSource?: HiddenSource;
}

export interface DecodeJobSummary {
  model: { path: string; arch: string; headType: string; tied: boolean; hidden: number; vocab: number; headBytes: number; softcap: number | null };
  device: string;
  workload: { slots: number; steps: number; requests: number; admitted: number; finished: number; failed: number; sampling: string; meanRows: number };
  slotTokens: number;
  wallMs: number;
  slotTokensPerSec: number;
  headMs: { p50: number; p99: number; mean: number };
  /** Per step, ms: the host phases (hostPhases) plus the loop's own gather and the rest. */
  phasesMsPerStep: { headWait: number; headReadback: number; finalize: number; gather: number; other: number };
  /** Head bytes × calls / Σ head call time. */
  weightsGBs: number;
  bandwidth: BandwidthResult | null;
  percentOfBandwidth: number | null;
  verify: EquivalenceReport[] | null;
}

export async function runDecodeJob(o: DecodeJobOptions): Promise<DecodeJobSummary> {
  const { weights } = o;
  const hiddenSource = o.hiddenSource ?? new EmbeddingHiddenSource(o.embedding);
  const vocab = Math.min(weights.vocabSize, o.embedding.vocab);
  const meanNew = (o.minNew + o.maxNew) / 2;
  const requests = staggeredRequests({
    count: Math.ceil((o.slots * o.steps * 1.25) / meanNew) + o.slots,
    vocab,
    slots: o.slots,
    minNew: o.minNew,
    maxNew: o.maxNew,
    seed: o.seed,
    sampling: o.sampling,
  });

  // One warm-up call: scratch allocation and first touch of the weight pages stay out of the figures.
  weights.lmHeadBatched(new Float32Array(o.slots * weights.hiddenSize).fill(1), o.slots);

  const bar = new ProgressBar("lmhead decode", o.steps, { enabled: o.progress });
  const loop = new DecodeLoop(weights, {
    slots: o.slots,
    hiddenSource,
    onStep: (s) => bar.update(s.calls, `steps, ${s.rows} rows, head ${(s.headNs / 1e6).toFixed(0)} ms`),
  });
  for (const r of requests) loop.submit(r);
  const wasEnabled = hostPhases.enabled;
  hostPhases.reset();
  hostPhases.enabled = true;
  let report;
  try {
    report = loop.run({ maxCalls: o.steps });
  } finally {
    hostPhases.enabled = wasEnabled;
    bar.finish();
  }
  const phases = hostPhases.snapshot();
  const st = report.stats;
  const calls = Math.max(1, st.calls);
  const perStep = (ns: number) => ns / 1e6 / calls;
  const headWait = phases.headWait.totalNs;
  const headReadback = phases.headReadback.totalNs;
  const finalize = phases.finalize.totalNs;
  const headBytes = weights.head.bytes;
  const weightsGBs = (headBytes * st.calls) / st.headNs;

  const bandwidth = o.probeBytes > 0 ? measureReadBandwidth(o.device, { bytes: o.probeBytes }) : null;

  let verify: EquivalenceReport[] | null = null;
  if (o.verify) {
    // At least 2 slots, or nothing would be batched.
    const verifySlots = Math.max(2, o.slots);
    const count = verifySlots + 2;
    // Sparse, uneven arrivals: slots free up and stay empty for a step, so rows move.
    const verifyRequests = staggeredRequests({
      count, vocab, slots: verifySlots, minNew: 1, maxNew: 4, seed: o.seed ^ 0x7e51f1, sampling: o.sampling, idPrefix: "verify-",
      upfront: Math.ceil(verifySlots / 2), meanGap: 1.5,
    });
    const vbar = new ProgressBar("lmhead verify", 1, { enabled: o.progress });
    vbar.update(0, "(serial and batched runs)");
    try {
      verify = slotAwareEquivalence(weights, verifyRequests, { slots: verifySlots, hiddenSource });
    } finally {
      vbar.finish();
    }
  }

  const format = formatInfo(weights.headType);
  return {
    model: {
      path: o.modelPath,
      arch: o.arch,
      headType: format?.name ?? `type ${weights.headType}`,
      tied: weights.tied,
      hidden: weights.hiddenSize,
      vocab: weights.vocabSize,
      headBytes,
      softcap: weights.finalLogitSoftcapping,
    },
    device: o.device.info,
    workload: {
      slots: o.slots,
      steps: st.calls,
      requests: requests.length,
      admitted: st.admissions,
      finished: st.finished,
      failed: st.failed,
      sampling: samplingText(o.sampling),
      meanRows: st.slotTokens / calls,
    },
    slotTokens: st.slotTokens,
    wallMs: st.wallNs / 1e6,
    slotTokensPerSec: st.slotTokens / (st.wallNs / 1e9),
    headMs: { p50: st.headNsQuantiles.p50 / 1e6, p99: st.headNsQuantiles.p99 / 1e6, mean: st.headNs / 1e6 / calls },
    phasesMsPerStep: {
      headWait: perStep(headWait),
      headReadback: perStep(headReadback),
      finalize: perStep(finalize),
      gather: perStep(st.gatherNs),
      other: perStep(st.wallNs - headWait - headReadback - finalize - st.gatherNs),
    },
    weightsGBs,
    bandwidth,
    percentOfBandwidth: bandwidth ? (100 * weightsGBs) / bandwidth.gbs : null,
    verify,
  };
}

/** The human report (stdout). */
export function formatDecodeSummary(s: DecodeJobSummary): string {
  const m = s.model;
  const mb = (b: number) => `${(b / 1e6).toFixed(1)} MB`;
  const ph = s.phasesMsPerStep;
  const wall = s.wallMs / Math.max(1, s.workload.steps);
  const pct = (ms: number) => `${fixed((100 * ms) / wall, 1)}%`;
  const lines = [
    `model       ${m.path}`,
    `            ${m.arch}, ${m.tied ? "tied" : "untied"} ${m.headType} head ${m.vocab} x ${m.hidden} (${mb(m.headBytes)}), softcap ${m.softcap ?? "off"}`,
    `device      ${s.device}`,
    `workload    ${s.workload.slots} slots, ${s.workload.steps} steps, ${s.workload.admitted} requests admitted and ${s.workload.finished} finished` +
      `${s.workload.failed > 0 ? `, ${s.workload.failed} failed` : ""} (staggered arrivals), ${s.workload.sampling}, ${fixed(s.workload.meanRows, 2)} rows/step`,
    ``,
    `slot-tokens/s      ${fixed(s.slotTokensPerSec, 2)}   (${s.slotTokens} slot-tokens in ${s.wallMs >= 1000 ? `${fixed(s.wallMs / 1000, 2)} s` : `${fixed(s.wallMs, 2)} ms`})`,
    `head ms/step       p50 ${fixed(s.headMs.p50, 2)}   p99 ${fixed(s.headMs.p99, 2)}   mean ${fixed(s.headMs.mean, 2)}`,
    `host phases/step   head wait ${fixed(ph.headWait, 2)} ms (${pct(ph.headWait)})   readback ${fixed(ph.headReadback, 2)} ms (${pct(ph.headReadback)})   ` +
      `finalize ${fixed(ph.finalize, 2)} ms (${pct(ph.finalize)})   gather ${fixed(ph.gather, 2)} ms (${pct(ph.gather)})   other ${fixed(ph.other, 2)} ms (${pct(ph.other)})`,
    `weights GB/s       ${fixed(s.weightsGBs, 2)}   (${mb(m.headBytes)} per head call / mean head time)`,
  ];
  if (s.bandwidth) {
    const b = s.bandwidth;
    lines.push(
      `read bandwidth     ${fixed(b.gbs, 2)} GB/s with ${b.threads} threads, the head's own (1 thread: ${fixed(b.oneThreadGbs, 2)}); ${b.method}`,
      `% of read bw       ${fixed(s.percentOfBandwidth, 1)}%`,
    );
  } else {
    lines.push(`read bandwidth     not measured (--probe-mib 0)`);
  }
  if (s.verify) {
    lines.push(``);
    for (const r of s.verify) lines.push(`verify      ${describeEquivalence(r)}`);
  }
  return lines.join("\n");
}
