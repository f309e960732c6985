#!/usr/bin/env bun
/**
 * lmhead command line.
 *   lmhead decode [flags]   the main job: a continuous-batching decode loop over the head
 *   lmhead bench [flags]    the head per type and batch size, with a JSON result and an SVG plot
 * Errors are one line on stderr and a non-zero exit: 2 for usage, 1 for everything else.
 */
import { existsSync, statSync } from "node:fs";
import { ArtifactError } from "./artifact/head.ts";
import { GgufError } from "./artifact/gguf.ts";
import { commonFlags, flagHelp, intFlag, parseFlags, rangeFlag, stringFlag, UsageError, type FlagSpec } from "./decode/args.ts";
import { formatDecodeSummary, runDecodeJob } from "./decode/job.ts";
import { parseSampling, type Sampling } from "./decode/sampling.ts";
import { LmheadError } from "./errors.ts";
import { loadModel } from "./model.ts";
import { MlxDevice, type BackendKind } from "./runtime.ts";

const topUsage = `usage: lmhead <command> [flags]

commands:
  decode    run the continuous-batching decode loop over the batched head and report
            slot-tokens/s, head ms per step, the host-phase split and GB/s of weights
            against this machine's read bandwidth (--verify: slot-aware byte equivalence)
  bench     time the head per type and rows per call; writes JSON and an SVG plot

lmhead <command> --help documents the command's flags.
In a checkout, ./lmhead test runs every test (zig build test, the macOS cross-build, the type check, bun test).`;

const decodeFlags: FlagSpec[] = [
  { name: "model", value: "FILE", help: "GGUF artifact (default: the built-in synthetic Gemma 4 head, tied Q6_K,\nhidden 2816, vocab 262144, ~606 MB, generated into the cache on first use)" },
  { name: "slots", value: "N", help: "decode slots, i.e. the most rows per head call (default 4, 1..256)" },
  { name: "steps", value: "S", help: "head calls (decode steps) to run (default 32, 1..100000)" },
  { name: "sampling", value: "SPEC", help: "greedy (default) or temp:T,topk:K,seed:S (each part optional: temp 1,\ntopk 40 (0 = whole vocab), seed 0; temp:0 is greedy)" },
  { name: "tokens", value: "A-B", help: "new tokens per request, drawn from [A, B] (default 4-16)" },
  { name: "verify", help: "also run the slot-aware equivalence on the artifact (max(slots,2)+2 short\nrequests, batched vs each alone, every token and logit bit); exit 1 on a mismatch" },
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

async function decode(argv: string[]): Promise<number> {
  const cmd = "decode";
  const flags = parseFlags(argv, decodeFlags, cmd);
  if (flags.has("help")) {
    console.log(decodeUsage);
    return 0;
  }
  const slots = intFlag(flags, "slots", 4, 1, 256, cmd);
  const steps = intFlag(flags, "steps", 32, 1, 100_000, cmd);
  const seed = intFlag(flags, "seed", 1, 0, 0xffffffff, cmd);
  const probeMib = intFlag(flags, "probe-mib", 512, 0, 65536, cmd);
  const [minNew, maxNew] = rangeFlag(flags, "tokens", [4, 16], 100_000, cmd);
  const backend = stringFlag(flags, "backend") ?? "cpu";
  if (!["cpu", "metal", "cuda"].includes(backend)) throw new UsageError(`${cmd}: --backend must be cpu, metal or cuda, got '${backend}'`);
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

  using device = MlxDevice.open(backend as BackendKind);
  using model = await loadModel(device, modelPath, { allowMissingSoftcap: flags.has("allow-missing-softcap") });
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
    progress: !flags.has("no-progress"),
    probeBytes: probeMib * 2 ** 20,
  });
  if (flags.has("json")) console.log(JSON.stringify(summary, null, 2));
  else console.log(formatDecodeSummary(summary));
  if (summary.verify && summary.verify.some((r) => !r.ok)) {
    console.error("lmhead: verify FAILED: batched decode differs from serial decode (see above)");
    return 1;
  }
  return 0;
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case undefined:
      console.error(topUsage);
      return 2;
    case "--help":
    case "-h":
    case "help":
      console.log(topUsage);
      return 0;
    case "decode":
      return decode(rest);
    case "bench": {
      const { benchMain } = await import("../bench/head.ts");
      return benchMain(rest);
    }
    default:
      throw new UsageError(`unknown command '${command}' (commands: decode, bench; see lmhead --help)`);
  }
}

/** One line, no stack: the message of a known error; for anything else, its message too (LMHEAD_DEBUG=1 adds the stack). */
function oneLine(e: unknown): string {
  const text = e instanceof Error ? e.message : String(e);
  return text.split("\n")[0]!;
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (e) {
  const known = e instanceof UsageError || e instanceof LmheadError || e instanceof ArtifactError || e instanceof GgufError;
  console.error(`lmhead: ${known ? "" : "error: "}${oneLine(e)}`);
  if (process.env.LMHEAD_DEBUG && e instanceof Error && e.stack) console.error(e.stack);
  process.exitCode = e instanceof UsageError ? 2 : 1;
}
