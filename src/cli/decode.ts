/**
 * `lmhead decode`, the main job: a staggered workload through the DecodeLoop on a loaded model,
 * with the throughput figures (slot-tokens/s, head ms per step, host-phase split, GB/s of
 * weights against this machine's read bandwidth) and, optionally, the slot-aware equivalence.
 */
import { existsSync, statSync } from "node:fs";
import { describeEquivalence, slotAwareEquivalence, type EquivalenceReport } from "../decode/equivalence.ts";
import { EmbeddingHiddenSource, type EmbeddingTable, type HiddenSource } from "../decode/hidden.ts";
import { DecodeLoop } from "../decode/loop.ts";
import { parseSampling, samplingText, type Sampling } from "../decode/sampling.ts";
import { staggeredRequests } from "../decode/workload.ts";
import { formatInfo } from "../formats.ts";
import type { MlxModelWeights } from "../head.ts";
import { loadModel } from "../model.ts";
import { hostPhases } from "../phases.ts";
import { MlxDevice, type BandwidthResult } from "../runtime.ts";
import { backendFlag, commonFlags, flagHelp, intFlag, parseFlags, probeFlag, rangeFlag, stringFlag, UsageError, type FlagSpec } from "./args.ts";
import { fixed } from "./format.ts";
import type { Command } from "./main.ts";
import { ProgressBar } from "./progress.ts";

const decodeFlags: FlagSpec[] = [
  { name: "model", value: "FILE", help: "GGUF artifact (default: the built-in synthetic Gemma 4 head, tied Q6_K,\nhidden 2816, vocab 262144, ~606 MB, generated into the cache on first use)" },
  { name: "slots", value: "N", help: "decode slots, i.e. the most rows per head call (default 4, 1..256)" },
  { name: "steps", value: "S", help: "head calls (decode steps) to run (default 32, 1..100000)" },
  { name: "sampling", value: "SPEC", help: "greedy (default) or temp:T,topk:K,seed:S (each part optional: temp 1,\ntopk 40 (0 = whole vocab), seed 0; temp:0 is greedy)" },
  { name: "tokens", value: "A-B", help: "new tokens per request, drawn from [A, B] (default 4-16)" },
  { name: "verify", help: "also run the slot-aware equivalence on the artifact (max(slots,2)+2 short\nrequests, batched vs each alone, every token and logit bit); exit 1 on a mismatch" },
  { name: "reference", value: "BACKEND", help: "with --verify: run each request alone on this backend instead (cpu, metal,\ncuda), so the batched decode on --backend is compared with another device's" },
  { name: "allow-missing-softcap", help: "accept a gemma4 artifact without final_logit_softcapping (softcap off)" },
  { name: "json", help: "print the summary as JSON instead of text" },
  ...commonFlags,
];

const decodeUsage = `usage: lmhead decode [flags]

Runs a staggered workload (requests arrive over time, are admitted into free slots and
evicted when done) through the decode loop: each step gathers the active slots' hidden rows
(embedding of the previous token x sqrt(hidden) plus a per-request perturbation), calls the
head once for all of them, and picks a token per row.

flags:
${flagHelp(decodeFlags)}`;

export const decodeCommand: Command = {
  name: "decode",
  summary: `run the continuous-batching decode loop over the batched head and report
slot-tokens/s, head ms per step, the host-phase split and GB/s of weights
against this machine's read bandwidth (--verify: slot-aware byte equivalence)`,
  run: decodeMain,
};

/** Parses every flag (a UsageError before any work), then runs the job. */
async function decodeMain(argv: string[]): Promise<number> {
  const cmd = "decode";
  const flags = parseFlags(argv, decodeFlags, cmd);
  if (flags.has("help")) {
    console.log(decodeUsage);
    return 0;
  }
  const slots = intFlag(flags, "slots", 4, 1, 256, cmd);
  const steps = intFlag(flags, "steps", 32, 1, 100_000, cmd);
  const seed = intFlag(flags, "seed", 1, 0, 0xffffffff, cmd);
  const probeBytes = probeFlag(flags, cmd);
  const [minNew, maxNew] = rangeFlag(flags, "tokens", [4, 16], 100_000, cmd);
  const backend = backendFlag(flags, cmd);
  const referenceBackend = flags.has("reference") ? backendFlag(flags, cmd, "reference") : null;
  if (referenceBackend !== null && !flags.has("verify")) throw new UsageError(`${cmd}: --reference needs --verify`);
  let sampling: Sampling;
  try {
    sampling = parseSampling(stringFlag(flags, "sampling") ?? "greedy");
  } catch (e) {
    throw new UsageError(`${cmd}: --sampling: ${(e as Error).message}`);
  }
  const modelPath = stringFlag(flags, "model") ?? null;
  if (modelPath !== null) {
    if (!existsSync(modelPath)) throw new UsageError(`${cmd}: --model ${modelPath}: no such file`);
    if (!statSync(modelPath).isFile()) throw new UsageError(`${cmd}: --model ${modelPath}: not a file`);
  }

  const loadOptions = { allowMissingSoftcap: flags.has("allow-missing-softcap") };
  using device = MlxDevice.open(backend);
  using model = await loadModel(device, modelPath, loadOptions);
  using referenceDevice = referenceBackend === null ? null : MlxDevice.open(referenceBackend);
  using referenceModel = referenceDevice === null ? null : await loadModel(referenceDevice, modelPath, loadOptions);
  const summary = await runDecodeJob({
    device,
    weights: model.weights,
    embedding: model.embedding,
    modelPath: model.path,
    arch: model.arch,
    slots,
    steps,
    sampling,
    seed,
    minNew,
    maxNew,
    verify: flags.has("verify"),
    reference: referenceDevice && referenceModel ? { device: referenceDevice, weights: referenceModel.weights, embedding: referenceModel.embedding } : undefined,
    progress: !flags.has("no-progress"),
    probeBytes,
  });
  if (flags.has("json")) console.log(JSON.stringify(summary, null, 2));
  else console.log(formatDecodeSummary(summary));
  if (summary.verify && summary.verify.some((r) => !r.ok)) {
    console.error(`lmhead: verify FAILED: batched decode differs from serial decode${summary.reference ? ` on ${summary.reference}` : ""} (see above)`);
    return 1;
  }
  return 0;
}

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
  /** With verify: the same model on another device, where each request runs alone. */
  reference?: { device: MlxDevice; weights: MlxModelWeights; embedding: EmbeddingTable };
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
  phasesMsPerStep: { headWait: number; headDevice: number | null; headReadback: number; headCheck: number; finalize: number; gather: number; other: number };
  /** Head bytes × calls / Σ head call time. */
  weightsGBs: number;
  bandwidth: BandwidthResult | null;
  percentOfBandwidth: number | null;
  verify: EquivalenceReport[] | null;
  /** The device of verify's serial runs, when not `device`. */
  reference: string | null;
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
  const { headWait, headDevice, headReadback, headCheck, finalize } = phases;
  const hostNs = headWait.totalNs + headReadback.totalNs + headCheck.totalNs + finalize.totalNs;
  const headBytes = weights.head.bytes;
  const weightsGBs = (headBytes * st.calls) / st.headNs;

  const bandwidth = o.probeBytes > 0 ? o.device.readBandwidth({ bytes: o.probeBytes }) : null;

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
      const reference = o.reference ? { weights: o.reference.weights, hiddenSource: new EmbeddingHiddenSource(o.reference.embedding) } : undefined;
      verify = slotAwareEquivalence(weights, verifyRequests, { slots: verifySlots, hiddenSource, reference });
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
      headWait: perStep(headWait.totalNs),
      // Inside headWait: the device's own time, where it keeps one (null on the CPU).
      headDevice: headDevice.calls > 0 ? perStep(headDevice.totalNs) : null,
      headReadback: perStep(headReadback.totalNs),
      headCheck: perStep(headCheck.totalNs),
      finalize: perStep(finalize.totalNs),
      gather: perStep(st.gatherNs),
      other: perStep(st.wallNs - hostNs - st.gatherNs),
    },
    weightsGBs,
    bandwidth,
    percentOfBandwidth: bandwidth ? (100 * weightsGBs) / bandwidth.gbs : null,
    verify,
    reference: o.reference ? o.reference.device.info : null,
  };
}

/** The report's read-bandwidth line: a CPU's over its threads and with one; a GPU's over the whole device. */
export function bandwidthLine(b: BandwidthResult): string {
  const over = b.oneThreadGbs === null ? "over the whole GPU" : `with ${b.threads} threads`;
  const single = b.oneThreadGbs === null ? "" : ` (1 thread: ${fixed(b.oneThreadGbs, 2)})`;
  return `read bandwidth     ${fixed(b.gbs, 2)} GB/s ${over}, the head's own${single}; ${b.method}`;
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
    `host phases/step   head wait ${fixed(ph.headWait, 2)} ms (${pct(ph.headWait)}${ph.headDevice === null ? "" : `, device ${fixed(ph.headDevice, 2)} ms`})   readback ${fixed(ph.headReadback, 2)} ms (${pct(ph.headReadback)})   ` +
      `finite check ${fixed(ph.headCheck, 2)} ms (${pct(ph.headCheck)})   finalize ${fixed(ph.finalize, 2)} ms (${pct(ph.finalize)})   ` +
      `gather ${fixed(ph.gather, 2)} ms (${pct(ph.gather)})   other ${fixed(ph.other, 2)} ms (${pct(ph.other)})`,
    `weights GB/s       ${fixed(s.weightsGBs, 2)}   (${mb(m.headBytes)} per head call / mean head time)`,
  ];
  if (s.bandwidth) {
    const b = s.bandwidth;
    lines.push(
      bandwidthLine(b),
      `% of read bw       ${fixed(s.percentOfBandwidth, 1)}%`,
    );
  } else {
    lines.push(`read bandwidth     not measured (--probe-mib 0)`);
  }
  if (s.verify) {
    lines.push(``);
    if (s.reference) lines.push(`reference   each request alone on ${s.reference}`);
    for (const r of s.verify) lines.push(`verify      ${describeEquivalence(r)}`);
  }
  return lines.join("\n");
}
