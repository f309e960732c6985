/**
 * lmhead and a peer side by side, per head type and rows per call N, in the bench's own run:
 * the same weight bytes, the same normalized hidden rows, both timed on the head matmul alone
 * (inputs already in place, outputs left where each one writes them), interleaved peer,
 * lmhead, peer so that drift on a shared machine shows as two different peer medians.
 * For each N it also reports each side's error against an f64 product of the exactly
 * decoded weights, and whether row r of the N-row call equals the 1-row call, bit for bit.
 */
import { stringFlag, UsageError, type FlagSpec, type Flags } from "../../src/cli/args.ts";
import { fixed } from "../../src/cli/format.ts";
import { Rng } from "../../src/random.ts";
import { dequantize, formatInfo } from "../../src/formats.ts";
import type { MlxModelWeights } from "../../src/head.ts";
import { GraphSession, type MlxBuffer, type MlxDevice } from "../../src/runtime.ts";
import { textTable } from "../table.ts";
import { timeTasks } from "../tasks.ts";
import { GgmlPeer, peerBuffers, peerPackage, PeerError, pinnedName, type GgmlHead, type PeerBuffer } from "./ggml.ts";

export interface PeerOptions {
  name: "ggml";
  buffer: PeerBuffer;
}

/** The vocab a peer run takes unless --vocab says otherwise: an eighth of Gemma's, so that it takes minutes on 2 cores. */
export const peerDefaultVocab = 32768;

export const peerFlags: FlagSpec[] = [
  { name: "peer", value: "NAME", help: `also time a peer side by side, on the same weights and rows: ggml (its CPU\nbackend, from ${peerPackage ? pinnedName(peerPackage) : "node-llama-cpp's package (none for this platform)"}, installed into\n.tools/peer on first use; with --backend metal, its Metal backend from the same\npackage; with --backend cuda, its CUDA backend as bench/peer/build-cuda.sh builds\nit, found through LMHEAD_PEER_CUDA_DIR). The default --vocab becomes ${peerDefaultVocab};\n--vocab 262144 is Gemma's` },
  { name: "peer-buffer", value: "B", help: "where the peer keeps the weights: best (default: AMX, else CPU_REPACK, else\nCPU, the first that runs the type here; a GPU's own memory), cpu, repack or amx" },
];

export function parsePeerOptions(flags: Flags, cmd: string): PeerOptions | null {
  const name = stringFlag(flags, "peer");
  const buffer = stringFlag(flags, "peer-buffer");
  if (name === undefined) {
    if (buffer !== undefined) throw new UsageError(`${cmd}: --peer-buffer needs --peer`);
    return null;
  }
  if (name !== "ggml") throw new UsageError(`${cmd}: --peer must be ggml, got '${name}'`);
  if (buffer !== undefined && !peerBuffers.includes(buffer as PeerBuffer)) {
    throw new UsageError(`${cmd}: --peer-buffer must be ${peerBuffers.join(", ")}, got '${buffer}'`);
  }
  return { name, buffer: (buffer ?? "best") as PeerBuffer };
}

export interface PeerRow {
  type: string;
  typeId: number;
  n: number;
  /** The peer's matmul, ms (median), measured before and after lmhead's. */
  peerMsBefore: number;
  peerMsAfter: number;
  /** lmhead's matvec alone on the same rows, ms (median). */
  lmheadMs: number;
  /** lmheadMs over the mean of the two peer medians (< 1: lmhead is faster). */
  ratio: number;
  /** Max over the N rows of max |out - ref| / max |ref| on the sampled vocab rows. */
  peerMaxRelError: number;
  lmheadMaxRelError: number;
  /** Rows of the N-row call whose bits differ from that row's 1-row call. */
  peerRowsDiffering: number;
  lmheadRowsDiffering: number;
}

export interface PeerResult {
  peer: "ggml";
  /** Where the peer came from: the npm package, or the build of ggml's source by build-cuda.sh. */
  package: string;
  ggml: string;
  /** The backend library loaded (on a CPU, the variant with ggml's best score for it) and the device it names. */
  library: string;
  device: string;
  /** The extra weight buffers ggml offers here (AMX and CPU_REPACK when the CPU has them). */
  extraBuffers: string[];
  /** The CPU backend's threads; 0 on a GPU. */
  threads: number;
  timed: string;
  error: string;
  sampleVocabRows: number;
  /** Per type, the ggml buffer type that held the weights (CPU: lmhead's bytes in place). */
  types: { type: string; typeId: number; buffer: string }[];
  rows: PeerRow[];
}

const sampleVocabRows = 256;

/** The hidden rows after lmhead's own final RMS norm, [rows, hidden]: the one input both sides multiply. */
function normalizedRows(weights: MlxModelWeights, hiddenRows: Float32Array, rows: number): Float32Array {
  const { device, hiddenSize: hidden } = weights;
  using input = device.allocBuffer(rows * hidden * 4);
  using normed = device.allocBuffer(rows * hidden * 4);
  input.write(hiddenRows.subarray(0, rows * hidden));
  using session = GraphSession.begin(device);
  session.rmsNorm(input, weights.finalNorm, normed, rows, hidden, weights.rmsNormEps);
  session.finish();
  return normed.readF32(0, rows * hidden);
}

/** Distinct seeded vocab rows, ascending: spread over the head and over the bench's 4096-row weight tile. */
function sampleRows(vocab: number, seed: number): number[] {
  const rng = new Rng(seed);
  const picked = new Set<number>();
  while (picked.size < Math.min(sampleVocabRows, vocab)) picked.add(rng.u32() % vocab);
  return [...picked].sort((a, b) => a - b);
}

/** ref[r][i] = Σ_k x[r, k]·W[sample_i, k] in f64, W (the head's bytes) decoded exactly by lmhead's reference decoder. */
function reference(weights: MlxModelWeights, head: Uint8Array, x: Float32Array, rows: number, samples: readonly number[]): Float64Array[] {
  const hidden = weights.hiddenSize;
  const rowBytes = head.byteLength / weights.vocabSize;
  const decoded = samples.map((j) => dequantize(weights.headType, head.subarray(j * rowBytes, (j + 1) * rowBytes)));
  return Array.from({ length: rows }, (_, r) => {
    const xr = x.subarray(r * hidden, (r + 1) * hidden);
    return Float64Array.from(decoded, (w) => {
      let sum = 0;
      for (let k = 0; k < hidden; k++) sum += xr[k]! * w[k]!;
      return sum;
    });
  });
}

/** Max over rows of max_i |out[r, sample_i] - ref[r][i]| / max_i |ref[r][i]|. */
function maxRelError(out: Float32Array, vocab: number, ref: Float64Array[], samples: readonly number[], rows: number): number {
  let worst = 0;
  for (let r = 0; r < rows; r++) {
    let err = 0;
    let scale = 0;
    samples.forEach((j, i) => {
      err = Math.max(err, Math.abs(out[r * vocab + j]! - ref[r]![i]!));
      scale = Math.max(scale, Math.abs(ref[r]![i]!));
    });
    worst = Math.max(worst, scale > 0 ? err / scale : err);
  }
  return worst;
}

/** Rows r < rows of `out` whose bits differ from singles[r]. */
function rowsDiffering(out: Float32Array, vocab: number, singles: readonly Float32Array[], rows: number): number {
  const bits = new Uint32Array(out.buffer, out.byteOffset, out.length);
  let differing = 0;
  for (let r = 0; r < rows; r++) {
    const single = new Uint32Array(singles[r]!.buffer, singles[r]!.byteOffset, vocab);
    const row = bits.subarray(r * vocab, (r + 1) * vocab);
    if (row.some((b, i) => b !== single[i])) differing++;
  }
  return differing;
}

/** lmhead's matvec alone: one session, one dispatch, one wait; the output stays in `output`. */
function lmheadMatvec(weights: MlxModelWeights, input: MlxBuffer, output: MlxBuffer, n: number): void {
  using session = GraphSession.begin(weights.device);
  session.matvec(input, weights.head, weights.headType, output, n, weights.hiddenSize, weights.vocabSize);
  session.finish();
}

/** The peer's side of a bench run: one ggml backend, one comparison per head type. */
export class PeerBench implements Disposable {
  readonly #types: PeerResult["types"] = [];
  readonly #rows: PeerRow[] = [];

  private constructor(
    readonly peer: GgmlPeer,
    readonly options: PeerOptions,
    readonly o: { rows: readonly number[]; iterations: number; warmup: number; seed: number },
  ) {}

  /** Opens the peer on lmhead's kind of device: ggml's CPU backend with as many threads, or its backend for the same GPU. */
  static open(options: PeerOptions, device: MlxDevice, o: PeerBench["o"], log: (line: string) => void): PeerBench {
    if (device.kind !== "cpu") {
      const name = device.kind === "cuda" ? "CUDA" : "Metal";
      if (options.buffer !== "best") throw new PeerError(`--peer-buffer ${options.buffer}: ggml's ${name} backend keeps the weights in the GPU's memory; only best applies`);
      const peer = device.kind === "cuda" ? GgmlPeer.openCuda(log) : GgmlPeer.openMetal(log);
      log(`peer: ggml ${peer.ggmlVersion} (${peer.ggmlCommit}), ${peer.library} from ${peer.source}, on ${peer.device}`);
      return new PeerBench(peer, options, o);
    }
    const threads = device.threads;
    const peer = GgmlPeer.open(threads, log);
    const named = ({ repack: "CPU_REPACK", amx: "AMX" } as Record<string, string | undefined>)[options.buffer];
    if (named && !peer.extraBuffers.includes(named)) {
      peer.close();
      throw new PeerError(`--peer-buffer ${options.buffer}: ggml's CPU backend offers no ${named} buffer on this machine (it offers ${["CPU", ...peer.extraBuffers].join(", ")})`);
    }
    const extra = peer.extraBuffers.length > 0 ? peer.extraBuffers.join(", ") : "none";
    log(`peer: ggml ${peer.ggmlVersion} (${peer.ggmlCommit}) from ${peer.source}, ${peer.library}, ${threads} threads, extra weight buffers here: ${extra}`);
    return new PeerBench(peer, options, o);
  }

  /** Timed tasks per type, for a progress bar. */
  get tasksPerType(): number {
    return 3 * this.o.rows.length;
  }

  /** Compares the peer with lmhead on weights' head; onTaskDone follows each timed task. */
  async runType(weights: MlxModelWeights, hiddenRows: Float32Array, onTaskDone: (name: string) => void): Promise<void> {
    const { device, hiddenSize: hidden, vocabSize: vocab, headType: typeId } = weights;
    const type = formatInfo(typeId)!.name;
    const maxRows = Math.max(...this.o.rows);
    const x = normalizedRows(weights, hiddenRows, maxRows);
    using stack = new DisposableStack();
    // ggml reads the bytes in place (plain CPU buffer) or copies them now (repacked, or into
    // a GPU): either way what it holds stays valid while `weights` lives, which outlasts this
    // run. A GPU's head is read back once, for the upload and the reference.
    const hostHead = device.hostVisible ? null : weights.head.read();
    const withHead = <T>(fn: (bytes: Uint8Array) => T): T => (hostHead ? fn(hostHead) : weights.head.withHostBytes(fn));
    const head = stack.use(withHead((bytes) => this.peer.head(typeId, hidden, vocab, bytes, this.options.buffer)));
    const normed = stack.use(device.allocBuffer(x.byteLength));
    normed.write(x);
    const singles = this.#singleRows(weights, head, normed, x, maxRows, stack);

    const sides = new Map(this.o.rows.map((n) => {
      const plan = stack.use(head.plan(n));
      plan.setInput(x.subarray(0, n * hidden));
      return [n, { plan, input: stack.use(normed.view(0, n * hidden * 4)), output: stack.use(device.allocBuffer(n * vocab * 4)) }];
    }));
    const tasks = this.o.rows.flatMap((n) => {
      const side = sides.get(n)!;
      const peer = () => side.plan.compute();
      return [
        { name: `ggml N=${n} before`, run: peer },
        { name: `lmhead N=${n}`, run: () => lmheadMatvec(weights, side.input, side.output, n) },
        { name: `ggml N=${n} after`, run: peer },
      ];
    });
    const ms = await timeTasks(`${type} vs ggml`, tasks, this.o, onTaskDone);
    const samples = sampleRows(vocab, this.o.seed);
    const ref = withHead((bytes) => reference(weights, bytes, x, maxRows, samples));
    this.#types.push({ type, typeId, buffer: head.buffer });
    for (const n of this.o.rows) {
      const side = sides.get(n)!;
      const peerOut = side.plan.output();
      const lmheadOut = side.output.readF32(0, n * vocab);
      const before = ms.get(`ggml N=${n} before`)!.p50;
      const after = ms.get(`ggml N=${n} after`)!.p50;
      const lmheadMs = ms.get(`lmhead N=${n}`)!.p50;
      this.#rows.push({
        type, typeId, n,
        peerMsBefore: before,
        peerMsAfter: after,
        lmheadMs,
        ratio: lmheadMs / ((before + after) / 2),
        peerMaxRelError: maxRelError(peerOut, vocab, ref, samples, n),
        lmheadMaxRelError: maxRelError(lmheadOut, vocab, ref, samples, n),
        peerRowsDiffering: rowsDiffering(peerOut, vocab, singles.peer, n),
        lmheadRowsDiffering: rowsDiffering(lmheadOut, vocab, singles.lmhead, n),
      });
    }
  }

  /** Each side's 1-row result for rows 0..maxRows-1, the baseline of the row-identity column. */
  #singleRows(weights: MlxModelWeights, head: GgmlHead, normed: MlxBuffer, x: Float32Array, maxRows: number, stack: DisposableStack) {
    const { hiddenSize: hidden, vocabSize: vocab } = weights;
    const plan = stack.use(head.plan(1));
    const output = stack.use(weights.device.allocBuffer(vocab * 4));
    const peer: Float32Array[] = [];
    const lmhead: Float32Array[] = [];
    for (let r = 0; r < maxRows; r++) {
      plan.setInput(x.subarray(r * hidden, (r + 1) * hidden));
      plan.compute();
      peer.push(plan.output());
      using input = normed.view(r * hidden * 4, hidden * 4);
      lmheadMatvec(weights, input, output, 1);
      lmhead.push(output.readF32(0, vocab));
    }
    return { peer, lmhead };
  }

  result(): PeerResult {
    const p = this.peer;
    return {
      peer: "ggml",
      package: p.source,
      ggml: `${p.ggmlVersion} (${p.ggmlCommit})`,
      library: p.library,
      device: p.device,
      extraBuffers: p.extraBuffers,
      threads: p.threads,
      timed: "the head matmul alone, on the same final-normed rows: ggml_backend_graph_compute of one mul_mat against lmhead's GraphSession with one matvec; inputs already in place, outputs left in each side's buffer",
      error: `max over the N rows of max |out - ref| / max |ref| over ${sampleVocabRows} sampled vocab rows; ref = f64 products of the rows with the exactly decoded weights`,
      sampleVocabRows,
      types: this.#types,
      rows: this.#rows,
    };
  }

  [Symbol.dispose](): void {
    this.peer.close();
  }
}

function exponent(v: number): string {
  return v === 0 ? "0" : v.toExponential(1);
}

/** The side-by-side table, one line per type and N. */
export function formatPeerTable(r: PeerResult): string {
  const header = ["type", "ggml buffer", "N", "ggml ms before/after", "lmhead ms", "lmhead/ggml", "ggml err", "lmhead err", "ggml rows != 1-row", "lmhead rows != 1-row"];
  const buffers = new Map(r.types.map((t) => [t.typeId, t.buffer]));
  const body = r.rows.map((row) => [
    row.type,
    buffers.get(row.typeId) ?? "?",
    String(row.n),
    `${fixed(row.peerMsBefore, 2)} / ${fixed(row.peerMsAfter, 2)}`,
    fixed(row.lmheadMs, 2),
    fixed(row.ratio, 2),
    exponent(row.peerMaxRelError),
    exponent(row.lmheadMaxRelError),
    `${row.peerRowsDiffering}/${row.n}`,
    `${row.lmheadRowsDiffering}/${row.n}`,
  ]);
  return textTable(header, body);
}
