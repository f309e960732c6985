/**
 * lmhead bench: the batched head per type and rows per call N, with tinybench (timestamps from
 * Bun.nanoseconds). For each type and N: ms per N-row call, GB/s of weights (head bytes / ms),
 * % of this machine's read bandwidth (measured in the same run), time(N)/time(1), and the
 * batched-vs-scalar ratio: the time of N one-row calls over one N-row call (> 1: batching wins).
 * Writes a JSON result and an SVG plot.
 */
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { backendFlag, commonFlags, flagHelp, intFlag, intListFlag, parseFlags, probeFlag, stringFlag, UsageError, type FlagSpec } from "../src/cli/args.ts";
import { fixed } from "../src/cli/format.ts";
import type { Command } from "../src/cli/main.ts";
import { ProgressBar } from "../src/cli/progress.ts";
import { formatInfo, knownTypeIds, rowBytes, typeIdOf } from "../src/formats.ts";
import { MlxModelWeights } from "../src/head.ts";
import { limits } from "../src/native.ts";
import { SplitMix32 } from "../src/random.ts";
import { MlxDevice, type BackendKind, type BandwidthResult } from "../src/runtime.ts";
import { formatPeerTable, parsePeerOptions, PeerBench, peerDefaultVocab, peerFlags, type PeerOptions, type PeerResult } from "./peer/compare.ts";
import { plotSvg, type PlotSeries } from "./svg.ts";
import { textTable } from "./table.ts";
import { timeTasks, type TimedTask } from "./tasks.ts";
import { fillHead } from "./weights.ts";

export interface BenchOptions {
  typeIds: number[];
  rows: number[];
  vocab: number;
  hidden: number;
  iterations: number;
  warmup: number;
  seed: number;
  backend: BackendKind;
  outDir: string;
  probeBytes: number;
  progress: boolean;
  /** A peer timed side by side (--peer), or null. */
  peer: PeerOptions | null;
  /** Time only the N-row calls, not also N one-row calls each (--batched-only). */
  batchedOnly: boolean;
}

export interface BenchRow {
  type: string;
  typeId: number;
  n: number;
  /** One N-row call, ms: median, mean, min over the measured iterations. */
  ms: number;
  msMean: number;
  msMin: number;
  samples: number;
  /** Head bytes / ms. */
  gbs: number;
  percentOfBandwidth: number | null;
  /** max(head bytes / read bandwidth, N·vocab·hidden fmas / fma rate), ms; and that over ms. */
  floorMs: number | null;
  percentOfFloor: number | null;
  /** ms(N) / ms(1). */
  timeVsN1: number | null;
  /** N one-row calls, ms (median; the N-row call's own time at N = 1), and that over one
   * N-row call; null with --batched-only. */
  scalarMs: number | null;
  scalarOverBatched: number | null;
}

export interface BenchResult {
  date: string;
  device: string;
  bun: string;
  vocab: number;
  hidden: number;
  iterations: number;
  warmup: number;
  /** Read bandwidth, probed again just before each type: on a shared machine it drifts. */
  types: { type: string; typeId: number; headBytes: number; bandwidth: BandwidthResult | null; floorMs: number | null; fmasPerSecond: number | null }[];
  rows: BenchRow[];
  /** With --peer: lmhead and the peer side by side. */
  peer?: PeerResult;
}

export const benchFlags: FlagSpec[] = [
  { name: "types", value: "LIST", help: "head types, comma-separated, e.g. Q6_K,Q8_0,F16 (default: every head type)" },
  { name: "rows", value: "LIST", help: "rows per call N, comma-separated (default 1,2,4,8,16,32)" },
  { name: "vocab", value: "V", help: "vocab rows of the head (default 262144)" },
  { name: "hidden", value: "H", help: "hidden size (default 2816; must be whole blocks of every type benched)" },
  { name: "iterations", value: "I", help: "measured iterations per task (default 3; the median is reported)" },
  { name: "warmup", value: "W", help: "warm-up iterations per task (default 1)" },
  { name: "batched-only", help: "time only the N-row calls, not also N one-row calls for each N (no scalar/batched):\nso that a profile of the run samples the batched path alone" },
  { name: "out", value: "DIR", help: "directory for head-bench[-<backend>]-<vocab>x<hidden>.json and .svg\n(peer-<name>[-<backend>][-<buffer>]-… with --peer; the backend when not cpu;\ndefault bench/results/)" },
  ...peerFlags,
  ...commonFlags,
];

export const benchUsage = `usage: lmhead bench [flags]

Times the batched head (final norm, head matmul in the stored type, softcap 30) on seeded
random-but-valid weights of each type, for each N: one N-row call, and N one-row calls
(unless --batched-only).

flags:
${flagHelp(benchFlags)}`;

export function parseBenchArgs(argv: string[]): BenchOptions | "help" {
  const cmd = "bench";
  const flags = parseFlags(argv, benchFlags, cmd);
  if (flags.has("help")) return "help";
  const headTypes = knownTypeIds.filter((t) => formatInfo(t)!.head);
  let typeIds = headTypes;
  const typesText = stringFlag(flags, "types");
  if (typesText !== undefined) {
    typeIds = [];
    for (const name of typesText.split(",").map((s) => s.trim())) {
      let id: number;
      try {
        id = typeIdOf(name);
      } catch {
        throw new UsageError(`${cmd}: --types: unknown type '${name}' (known: ${headTypes.map((t) => formatInfo(t)!.name).join(", ")})`);
      }
      if (!formatInfo(id)!.head) throw new UsageError(`${cmd}: --types: ${name} is not admitted as a head`);
      if (!typeIds.includes(id)) typeIds.push(id);
    }
  }
  const rows = intListFlag(flags, "rows", [1, 2, 4, 8, 16, 32], 1, 1024, cmd);
  const peer = parsePeerOptions(flags, cmd);
  const vocab = intFlag(flags, "vocab", peer ? peerDefaultVocab : 262144, 1, limits.maxVocab, cmd);
  const hidden = intFlag(flags, "hidden", 2816, 1, limits.maxHidden, cmd);
  for (const t of typeIds) {
    try {
      rowBytes(t, hidden);
    } catch (e) {
      throw new UsageError(`${cmd}: --hidden ${hidden}: ${(e as Error).message}`);
    }
  }
  const backend = backendFlag(flags, cmd);
  const probeBytes = probeFlag(flags, cmd);
  const outDir = resolve(stringFlag(flags, "out") ?? join(import.meta.dir, "results"));
  checkWritable(outDir, cmd);
  return {
    typeIds,
    rows,
    vocab,
    hidden,
    iterations: intFlag(flags, "iterations", 3, 1, 10000, cmd),
    warmup: intFlag(flags, "warmup", 1, 0, 10000, cmd),
    seed: intFlag(flags, "seed", 1, 0, 0xffffffff, cmd),
    backend,
    outDir,
    probeBytes,
    progress: !flags.has("no-progress"),
    peer,
    batchedOnly: flags.has("batched-only"),
  };
}

/** Seeded hidden rows, [maxRows, hidden]. */
function benchRows(count: number, hidden: number, seed: number): Float32Array {
  const rng = new SplitMix32(seed);
  return new Float32Array(count * hidden).map(() => (rng.float() - 0.5) * 6);
}

export async function runBench(o: BenchOptions, log: (line: string) => void = () => {}): Promise<BenchResult> {
  using device = MlxDevice.open(o.backend);

  const maxRows = Math.max(...o.rows);
  const hiddenRows = benchRows(maxRows, o.hidden, o.seed);
  const inputs = new Map(o.rows.map((n) => [n, hiddenRows.subarray(0, n * o.hidden)]));
  const singles = Array.from({ length: maxRows }, (_, r) => hiddenRows.subarray(r * o.hidden, (r + 1) * o.hidden));
  const norm = new Float32Array(o.hidden).map((_, i) => 1 + 0.25 * Math.sin(i * 0.7));
  using normBuffer = device.allocBuffer(o.hidden * 4);
  normBuffer.write(norm);

  using peer = o.peer ? PeerBench.open(o.peer, device, o, log) : null;
  const tasksPerType = o.rows.length + o.rows.filter((n) => n > 1).length + (peer?.tasksPerType ?? 0);
  const bar = new ProgressBar("lmhead bench", o.typeIds.length * tasksPerType, { enabled: o.progress });
  let done = 0;
  const rows: BenchRow[] = [];
  const types: BenchResult["types"] = [];
  try {
    for (const typeId of o.typeIds) {
      const f = formatInfo(typeId)!;
      const bytes = rowBytes(typeId, o.hidden) * o.vocab;
      bar.update(done, `${f.name}: generating ${(bytes / 1e9).toFixed(2)} GB of weights`);
      using head = device.allocBuffer(bytes);
      const t0 = performance.now();
      if (device.hostVisible) {
        head.withHostBytes((bytes) => fillHead(bytes, typeId, o.hidden, o.vocab, o.seed));
      } else {
        // A GPU's memory: fill a host copy and upload it once.
        const host = new Uint8Array(bytes);
        fillHead(host, typeId, o.hidden, o.vocab, o.seed);
        head.write(host);
      }
      const genMs = performance.now() - t0;
      using weights = new MlxModelWeights(device, {
        hiddenSize: o.hidden, vocabSize: o.vocab, finalNorm: normBuffer, head, headType: typeId, tied: false,
        finalLogitSoftcapping: 30, rmsNormEps: 1e-6,
      });
      weights.lmHeadBatched(inputs.get(maxRows) ?? hiddenRows, maxRows); // scratch for the largest N, first touch
      const bandwidth = o.probeBytes > 0 ? device.readBandwidth({ bytes: o.probeBytes }) : null;
      // At large N the canonical order is bound by its fmas, not by the weights' bytes.
      const fmasPerSecond = o.probeBytes > 0 ? device.fmaRate() : null;

      const tasks: TimedTask[] = [];
      for (const n of o.rows) {
        const input = inputs.get(n)!;
        tasks.push({ name: `batched N=${n}`, run: () => void weights.lmHeadBatched(input, n) });
        if (n > 1 && !o.batchedOnly) {
          tasks.push({ name: `scalar N=${n}`, run: () => {
            for (let r = 0; r < n; r++) weights.lmHeadBatched(singles[r]!, 1);
          } });
        }
      }
      const latency = await timeTasks(f.name, tasks, o, (task) => bar.update(++done, `${f.name} ${task}`));
      const median = (name: string) => latency.get(name)!;
      const floorMs = bandwidth ? bytes / 1e6 / bandwidth.gbs : null;
      types.push({ type: f.name, typeId, headBytes: bytes, bandwidth, floorMs, fmasPerSecond });
      const ms1 = o.rows.includes(1) ? median("batched N=1").p50 : null;
      for (const n of o.rows) {
        const lat = median(`batched N=${n}`);
        const scalar = n === 1 ? lat.p50 : o.batchedOnly ? null : median(`scalar N=${n}`).p50;
        const gbs = bytes / 1e6 / lat.p50;
        const fmaFloorMs = fmasPerSecond ? (n * o.vocab * o.hidden) / fmasPerSecond * 1e3 : null;
        const rowFloorMs = floorMs !== null && fmaFloorMs !== null ? Math.max(floorMs, fmaFloorMs) : null;
        rows.push({
          type: f.name,
          typeId,
          n,
          ms: lat.p50,
          msMean: lat.mean,
          msMin: lat.min,
          samples: lat.samplesCount,
          gbs,
          percentOfBandwidth: bandwidth ? (100 * gbs) / bandwidth.gbs : null,
          floorMs: rowFloorMs,
          percentOfFloor: rowFloorMs !== null ? (100 * rowFloorMs) / lat.p50 : null,
          timeVsN1: ms1 !== null ? lat.p50 / ms1 : null,
          scalarMs: scalar,
          scalarOverBatched: scalar === null ? null : scalar / lat.p50,
        });
      }
      if (peer) await peer.runType(weights, hiddenRows, (task) => bar.update(++done, `${f.name} ${task}`));
      bar.finish();
      const read = bandwidth ? `; read bandwidth ${fixed(bandwidth.gbs, 2)} GB/s (${bandwidth.method}), ${fixed(fmasPerSecond! / 1e9, 1)} G fma/s` : "";
      log(`${f.name}: ${(bytes / 1e6).toFixed(1)} MB of weights generated in ${genMs.toFixed(0)} ms, benched${read}`);
    }
  } finally {
    bar.finish();
  }
  return {
    date: new Date().toISOString(),
    device: device.info,
    bun: Bun.version,
    vocab: o.vocab,
    hidden: o.hidden,
    iterations: o.iterations,
    warmup: o.warmup,
    types,
    rows,
    ...(peer ? { peer: peer.result() } : {}),
  };
}

export function formatBenchTable(r: BenchResult): string {
  const header = ["type", "N", "ms/call", "GB/s", "% read bw", "floor ms", "% of floor", "t(N)/t(1)", "scalar/batched"];
  const body = r.rows.map((row) => [
    row.type,
    String(row.n),
    fixed(row.ms, 2),
    fixed(row.gbs, 2),
    row.percentOfBandwidth === null ? "n/a" : `${fixed(row.percentOfBandwidth, 1)}%`,
    row.floorMs === null ? "n/a" : fixed(row.floorMs, 2),
    row.percentOfFloor === null ? "n/a" : `${fixed(row.percentOfFloor, 1)}%`,
    fixed(row.timeVsN1, 2),
    row.scalarOverBatched === null ? "—" : fixed(row.scalarOverBatched, 2),
  ]);
  return textTable(header, body);
}

/** ms against N per type; beside a peer, both sides' matmul alone (like for like: on a GPU a whole call also reads the logits back). */
export function benchSvg(r: BenchResult): string {
  const series: PlotSeries[] = r.types.map((t) => {
    const peerRows = r.peer?.rows.filter((row) => row.typeId === t.typeId);
    return {
      label: t.type,
      floorMs: t.floorMs,
      points: peerRows
        ? peerRows.map((row) => ({ n: row.n, ms: row.lmheadMs }))
        : r.rows.filter((row) => row.typeId === t.typeId).map((row) => ({ n: row.n, ms: row.ms })),
      peerPoints: peerRows?.map((row) => ({ n: row.n, ms: (row.peerMsBefore + row.peerMsAfter) / 2 })),
    };
  });
  const probes = r.types.flatMap((t) => (t.bandwidth ? [t.bandwidth.gbs] : []));
  const bw = probes.length
    ? `floor = head bytes / read bandwidth probed before each type (${Math.min(...probes).toFixed(1)}–${Math.max(...probes).toFixed(1)} GB/s)`
    : "no bandwidth probe";
  const peer = r.peer ? `ggml ${r.peer.library.replace(/^libggml-(cpu-)?|\.so$/g, "")}, matmul only` : undefined;
  const title = r.peer ? `lmhead (solid) and ggml (dotted), matmul alone, vocab ${r.vocab} x hidden ${r.hidden}` : `lmhead: batched head, vocab ${r.vocab} x hidden ${r.hidden}`;
  return plotSvg(title, `${r.device}; median of ${r.iterations}; ${bw}`, series, peer);
}

export const benchCommand: Command = {
  name: "bench",
  summary: "time the head per type and rows per call; writes JSON and an SVG plot",
  run: benchMain,
};

/** Creates `dir` and writes a file into it, so an --out that cannot take the results fails before the run. */
function checkWritable(dir: string, cmd: string): void {
  const probe = join(dir, `.lmhead-write-check-${process.pid}`);
  try {
    mkdirSync(dir, { recursive: true });
    writeFileSync(probe, "");
    rmSync(probe);
  } catch (e) {
    throw new UsageError(`${cmd}: --out ${dir}: cannot write there (${(e as Error).message})`);
  }
}

/**
 * The results' path without .json/.svg. A peer run names its files apart (and by the peer's
 * buffer when one is asked for), and a GPU's run by its backend, so no run replaces the table
 * of another kind.
 */
export function resultsBase(o: Pick<BenchOptions, "outDir" | "backend" | "peer" | "vocab" | "hidden">): string {
  const backend = o.backend === "cpu" ? "" : `-${o.backend}`;
  const peer = o.peer ? `peer-${o.peer.name}${backend}${o.peer.buffer === "best" ? "" : `-${o.peer.buffer}`}` : null;
  return join(o.outDir, `${peer ?? `head-bench${backend}`}-${o.vocab}x${o.hidden}`);
}

async function benchMain(argv: string[]): Promise<number> {
  const opts = parseBenchArgs(argv);
  if (opts === "help") {
    console.log(benchUsage);
    return 0;
  }
  const result = await runBench(opts, (line) => console.error(`lmhead bench: ${line}`));
  const base = resultsBase(opts);
  writeFileSync(`${base}.json`, JSON.stringify(result, null, 2) + "\n");
  writeFileSync(`${base}.svg`, benchSvg(result));
  console.log(`lmhead bench: vocab ${result.vocab} x hidden ${result.hidden}, ${result.device}, median of ${result.iterations} iterations`);
  console.log("% read bw = head bytes / time against the read bandwidth probed just before that type");
  console.log("floor = max(head bytes / read bandwidth, N·vocab·hidden fmas / the fma rate probed with it); % of floor = floor / time");
  console.log("scalar/batched = time of N one-row calls / time of one N-row call (> 1: batching wins)\n");
  console.log(formatBenchTable(result));
  if (result.peer) {
    const p = result.peer;
    console.log(`\nside by side with ggml ${p.ggml} (${p.package}, ${p.library}${p.threads > 0 ? `, ${p.threads} threads` : ""}; ${p.device})`);
    if (p.threads > 0) console.log(`ggml buffer: where ggml kept the weights (CPU: lmhead's bytes in place); offered here: ${["CPU", ...p.extraBuffers].join(", ")}`);
    console.log(`timed: ${p.timed}; peer, lmhead, peer in turn, so drift shows as two peer medians`);
    console.log(`err: ${p.error}`);
    console.log("rows != 1-row: rows of the N-row call whose bits differ from the same row computed alone\n");
    console.log(formatPeerTable(p));
  }
  console.log(`\nwrote ${base}.json and ${base}.svg`);
  return 0;
}
