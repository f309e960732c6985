/**
 * lmhead soak: long runs on a small head that show whether memory grows with the number of
 * calls. 100,000 head calls (every way of taking the logits: lent, into an out array, and
 * through a non-finite row), then a 200,000-request decode loop (some requests fail, ids are
 * reused once their request has ended), printing RSS and JS heap before and after each,
 * after a warm-up and a full GC. Not a test: it takes minutes and asserts nothing.
 */
import { heapStats } from "bun:jsc";
import { synthBlocks } from "../src/artifact/synth.ts";
import { backendFlag, commonFlags, flagHelp, intFlag, parseFlags, type FlagSpec } from "../src/cli/args.ts";
import type { Command } from "../src/cli/main.ts";
import { DecodeLoop } from "../src/decode/loop.ts";
import { denseEmbedding, EmbeddingHiddenSource, type HiddenSource } from "../src/decode/hidden.ts";
import { dequantize, rowBytes } from "../src/formats.ts";
import { MlxModelWeights, NonFiniteRowsError } from "../src/head.ts";
import { Rng, SplitMix32 } from "../src/random.ts";
import { MlxDevice } from "../src/runtime.ts";

const Q8_0 = 8;

const soakFlags: FlagSpec[] = [
  { name: "head-calls", value: "N", help: "head calls in the first part (default 100000)" },
  { name: "requests", value: "N", help: "requests through the decode loop in the second part (default 200000)" },
  { name: "hidden", value: "H", help: "hidden size of the Q8_0 head (default 256)" },
  { name: "vocab", value: "V", help: "vocab rows of the head (default 1024)" },
  { name: "slots", value: "S", help: "decode loop slots (default 8)" },
  ...commonFlags.filter((f) => f.name === "backend" || f.name === "help"),
];

export const soakCommand: Command = {
  name: "soak",
  summary: "head calls and decode-loop requests by the hundred thousand on a small head,\nwith RSS and heap before and after",
  run: soakMain,
};

async function soakMain(argv: string[]): Promise<number> {
  const cmd = "soak";
  const flags = parseFlags(argv, soakFlags, cmd);
  if (flags.has("help")) {
    console.log(`usage: lmhead soak [flags]\n\n${flagHelp(soakFlags)}`);
    return 0;
  }
  const headCalls = intFlag(flags, "head-calls", 100_000, 1, 100_000_000, cmd);
  const requests = intFlag(flags, "requests", 200_000, 1, 100_000_000, cmd);
  const hidden = intFlag(flags, "hidden", 256, 32, 8192, cmd);
  const vocab = intFlag(flags, "vocab", 1024, 1, 1 << 20, cmd);
  const slots = intFlag(flags, "slots", 8, 1, 256, cmd);
  using device = MlxDevice.open(backendFlag(flags, cmd));
  const rng = new Rng(1);
  const headBytes = synthBlocks(Q8_0, hidden * vocab, rng);
  rowBytes(Q8_0, hidden); // refuses a hidden that is not whole blocks, before any buffer
  using normBuffer = device.allocBuffer(hidden * 4);
  normBuffer.write(new Float32Array(hidden).fill(1));
  using headBuffer = device.allocBuffer(headBytes.byteLength);
  headBuffer.write(headBytes);
  using weights = new MlxModelWeights(device, {
    hiddenSize: hidden, vocabSize: vocab, finalNorm: normBuffer, head: headBuffer, headType: Q8_0, tied: true, finalLogitSoftcapping: 30, rmsNormEps: 1e-6,
  });
  console.log(`lmhead soak: Q8_0 head ${vocab} x ${hidden}, ${device.info}`);
  soakHead(weights, headCalls, slots);
  soakLoop(weights, new EmbeddingHiddenSource(denseEmbedding(dequantize(Q8_0, headBytes), vocab, hidden)), requests, slots);
  return 0;
}

/** Head calls of 1..slots rows, cycling through lent logits, an out array and a NaN row. */
function soakHead(weights: MlxModelWeights, calls: number, slots: number): void {
  const rows = new Float32Array(slots * weights.hiddenSize).map(() => Math.random() - 0.5);
  const out = new Float32Array(slots * weights.vocabSize);
  const call = (i: number): number => {
    const n = 1 + (i % slots);
    const input = rows.subarray(0, n * weights.hiddenSize);
    if (i % 3 === 1) return weights.lmHeadBatched(input, n, out.subarray(0, n * weights.vocabSize)).rows;
    if (i % 97 !== 0) return weights.lmHeadBatched(input, n).rows;
    input[0] = NaN;
    try {
      return weights.lmHeadBatched(input, n).rows;
    } catch (e) {
      if (!(e instanceof NonFiniteRowsError)) throw e;
      return e.rows.length;
    } finally {
      input[0] = 0.25;
    }
  };
  const warmup = Math.min(1000, calls);
  measure(`${calls} head calls (warm-up: ${warmup})`, () => {
    for (let i = 0; i < warmup; i++) call(i);
  }, () => {
    for (let i = warmup; i < calls; i++) call(i);
  });
}

/** A decode loop fed as it drains; every 1000th request has a NaN hidden row and fails alone; ids repeat every 4096 requests. */
function soakLoop(weights: MlxModelWeights, source: HiddenSource, requests: number, slots: number): void {
  const poisoned: HiddenSource = {
    hidden: source.hidden,
    fill(out, offset, request, token, position) {
      source.fill(out, offset, request, token, position);
      if (request.id.endsWith("/poison")) out[offset] = NaN;
    },
  };
  let tokens = 0;
  const loop = new DecodeLoop(weights, { slots, hiddenSource: poisoned, onToken: () => void tokens++ });
  const rng = new SplitMix32(7);
  let submitted = 0;
  let ended = 0;
  let failed = 0;
  const feed = (upTo: number): void => {
    for (; submitted < upTo; submitted++) {
      const id = `req-${submitted % 4096}${submitted % 1000 === 999 ? "/poison" : ""}`;
      loop.submit({ id, firstToken: Math.floor(rng.float() * weights.vocabSize), maxNewTokens: 1 + Math.floor(rng.float() * 4) });
    }
  };
  const drain = (target: number): void => {
    while (ended < target) {
      if (loop.pending < slots) feed(Math.min(requests, submitted + slots));
      const event = loop.step();
      if (event === null) break;
      ended += event.finished.length;
      failed += event.finished.filter((r) => r.reason === "error").length;
    }
  };
  const warmup = Math.min(2000, requests);
  measure(`${requests} decode-loop requests (warm-up: ${warmup})`, () => drain(warmup), () => drain(requests));
  console.log(`  ${ended} requests ended (${failed} failed on their NaN row), ${tokens} tokens; the loop holds ${loop.pending + loop.active} requests, stats ${JSON.stringify(loop.stats).length} bytes as JSON`);
}

/** Runs the warm-up, then the rest, printing RSS and heap after a full GC at both points. */
function measure(label: string, warmup: () => void, rest: () => void): void {
  warmup();
  const before = memory();
  const t0 = performance.now();
  rest();
  const seconds = (performance.now() - t0) / 1000;
  const after = memory();
  const mb = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
  console.log(`${label}: ${seconds.toFixed(1)} s after the warm-up`);
  console.log(`  RSS  ${mb(before.rss)} -> ${mb(after.rss)} (${after.rss >= before.rss ? "+" : ""}${mb(after.rss - before.rss)})`);
  console.log(`  heap ${mb(before.heap)} -> ${mb(after.heap)} (${after.heap >= before.heap ? "+" : ""}${mb(after.heap - before.heap)}), objects ${before.objects} -> ${after.objects}`);
}

function memory(): { rss: number; heap: number; objects: number } {
  Bun.gc(true);
  const stats = heapStats();
  return { rss: process.memoryUsage().rss, heap: stats.heapSize, objects: stats.objectCount };
}
