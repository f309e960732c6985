#!/usr/bin/env bun
/** lmhead command line. For now: one head call over a built-in F32 head, timed. */
import { MlxDevice, MlxModelWeights } from "./index.ts";

const usage = `usage: lmhead decode [--slots N]
  Runs the batched head over a built-in F32 head (hidden 2816, vocab 32768, softcap 30)
  and prints the argmax of each row and the time taken.`;

function main(argv: string[]): number {
  if (argv[0] !== "decode" || argv.includes("--help")) {
    console.log(usage);
    return argv.includes("--help") ? 0 : 2;
  }
  const slotsFlag = argv.indexOf("--slots");
  const n = slotsFlag >= 0 ? Number(argv[slotsFlag + 1]) : 4;
  if (!Number.isInteger(n) || n < 1) {
    console.error(`lmhead: --slots must be a positive integer, got ${argv[slotsFlag + 1]}`);
    return 2;
  }
  const hidden = 2816;
  const vocab = 32768;
  using device = MlxDevice.open("cpu");
  const head = new Float32Array(hidden * vocab);
  let s = 1;
  for (let i = 0; i < head.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    head[i] = (s / 2 ** 32 - 0.5) * 0.1;
  }
  using norm = device.allocBuffer(hidden * 4);
  norm.write(new Float32Array(hidden).fill(1));
  using weight = device.allocBuffer(head.byteLength);
  weight.write(head);
  using weights = new MlxModelWeights(device, {
    hiddenSize: hidden, vocabSize: vocab, finalNorm: norm, head: weight, headType: 0, tied: false,
    finalLogitSoftcapping: 30, rmsNormEps: 1e-6,
  });
  const rows = new Float32Array(n * hidden).map((_, i) => Math.sin(i * 0.37));
  weights.lmHeadBatched(rows, n); // warm-up
  const start = Bun.nanoseconds();
  const out = weights.lmHeadBatched(rows, n);
  const ms = (Bun.nanoseconds() - start) / 1e6;
  for (let r = 0; r < n; r++) {
    const row = out.row(r);
    let best = 0;
    for (let j = 1; j < vocab; j++) if (row[j]! > row[best]!) best = j;
    console.log(`slot ${r}: argmax ${best} logit ${row[best]!.toFixed(4)}`);
  }
  console.log(`${device.info}; ${n} rows x ${vocab} vocab in ${ms.toFixed(2)} ms (${((head.byteLength / 1e9) / (ms / 1e3)).toFixed(1)} GB/s of weights)`);
  return 0;
}

process.exit(main(process.argv.slice(2)));
