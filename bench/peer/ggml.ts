/**
 * The bench's ggml peer, driven through a small C shim (shim.c) compiled against the peer's
 * libggml-base. Bench only: nothing in src/ or native/ uses it.
 *
 * CPU (and, on a Mac, Metal): ggml's backends from the prebuilt npm package that node-llama-cpp
 * publishes for the platform, installed on first use into .tools/peer (npm, never the project's
 * package.json). LMHEAD_PEER_DIR names another folder and turns the install off: the package
 * must already be there.
 *
 * CUDA: the same ggml version's CUDA backend, built from its source for the GPU at hand by
 * build-cuda.sh (the project's prebuilt CUDA package carries every GPU architecture, 155 MB
 * of them); LMHEAD_PEER_CUDA_DIR names the build's folder.
 */
import { dlopen, FFIType } from "bun:ffi";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync } from "node:fs";
import { basename, join } from "node:path";
import { LmheadError } from "../../src/errors.ts";

/**
 * The pinned peer: node-llama-cpp's package of this machine's platform, of the newest release
 * whose ggml headers (tag v0.19.0) the shim's declarations follow. `bins` is its library
 * folder, `base` its libggml-base, `metal` the Metal backend it carries beside the CPU variants.
 */
export type PeerPackage = {
  readonly name: string;
  readonly version: string;
  readonly ggml: string;
  readonly llamaCpp: string;
  readonly bins: string;
  readonly base: string;
  readonly metal: string | null;
};

const peerRelease = { version: "3.20.0", ggml: "0.19.0", llamaCpp: "b10361" } as const;
const peerPlatforms: Record<string, Omit<PeerPackage, keyof typeof peerRelease>> = {
  "linux x64": { name: "@node-llama-cpp/linux-x64", bins: "linux-x64", base: "libggml-base.so", metal: null },
  "darwin arm64": { name: "@node-llama-cpp/mac-arm64-metal", bins: "mac-arm64-metal", base: "libggml-base.dylib", metal: "libggml-metal.so" },
};

/** The peer package for a platform and architecture (process.platform, process.arch), or null where none is wired. */
export function peerPackageFor(platform: string, arch: string): PeerPackage | null {
  const p = peerPlatforms[`${platform} ${arch}`];
  return p ? { ...p, ...peerRelease } : null;
}

/** This machine's peer package; null where none is wired (opening the peer then says so). */
export const peerPackage: PeerPackage | null = peerPackageFor(process.platform, process.arch);

/** The package a peer is opened from: this machine's, or a PeerError naming the platforms wired. */
export function thisPeerPackage(pkg: PeerPackage | null = peerPackage, where = `${process.platform} ${process.arch}`): PeerPackage {
  if (pkg) return pkg;
  throw new PeerError(`no peer package is wired for ${where} (${Object.keys(peerPlatforms).join(" and ")} are: node-llama-cpp's ${Object.values(peerPlatforms).map((p) => p.name).join(" and ")})`);
}

/** Where the weights live on the peer's side; "best" takes the first of AMX, CPU_REPACK, CPU that runs the type. */
export type PeerBuffer = "best" | "cpu" | "repack" | "amx";
export const peerBuffers: readonly PeerBuffer[] = ["best", "cpu", "repack", "amx"];

/** A peer that cannot be had or run: the message says why and what to do. */
export class PeerError extends LmheadError {
  constructor(message: string) {
    super("unsupported", `ggml peer: ${message}`);
  }
}

const { i32, i64, u64, ptr } = FFIType;
const shimSymbols = {
  lhp_last_error: { args: [ptr, u64], returns: u64 },
  lhp_variant_score: { args: [ptr], returns: i32 },
  lhp_open: { args: [ptr, i32, ptr], returns: i32 },
  lhp_info: { args: [u64, ptr, u64], returns: u64 },
  lhp_close: { args: [u64], returns: FFIType.void },
  lhp_head_new: { args: [u64, i32, i64, i64, ptr, u64, i32, ptr], returns: i32 },
  lhp_head_buffer: { args: [u64, ptr, u64], returns: u64 },
  lhp_head_free: { args: [u64], returns: FFIType.void },
  lhp_plan_new: { args: [u64, i64, ptr], returns: i32 },
  lhp_plan_free: { args: [u64], returns: FFIType.void },
  lhp_plan_set_input: { args: [u64, ptr, u64], returns: i32 },
  lhp_plan_compute: { args: [u64], returns: i32 },
  lhp_plan_get_output: { args: [u64, ptr, u64], returns: i32 },
} as const;
type Shim = ReturnType<typeof dlopen<typeof shimSymbols>>["symbols"];

const repoRoot = join(import.meta.dir, "..", "..");
const decoder = new TextDecoder();

/** The folder the package lives in, and whether the bench may install it there. */
export function peerHome(env: Record<string, string | undefined> = process.env): { dir: string; install: boolean } {
  const fromEnv = env.LMHEAD_PEER_DIR;
  return fromEnv ? { dir: fromEnv, install: false } : { dir: join(repoRoot, ".tools", "peer"), install: true };
}

function packageRoot(dir: string, pkg: PeerPackage): string {
  return join(dir, "node_modules", ...pkg.name.split("/"));
}

/** `name@version`, as npm installs it. */
export function pinnedName(pkg: PeerPackage): string {
  return `${pkg.name}@${pkg.version}`;
}

/** The package's library folder if the pinned version is installed in dir, else null. */
export function installedBins(dir: string, pkg: PeerPackage = thisPeerPackage()): string | null {
  try {
    const manifest = JSON.parse(readFileSync(join(packageRoot(dir, pkg), "package.json"), "utf8")) as { version?: string };
    const bins = join(packageRoot(dir, pkg), "bins", pkg.bins);
    return manifest.version === pkg.version && existsSync(join(bins, pkg.base)) ? bins : null;
  } catch {
    return null;
  }
}

/** The ggml CUDA build's folder (LMHEAD_PEER_CUDA_DIR), holding libggml-base.so and libggml-cuda.so. */
export function cudaBuild(env: Record<string, string | undefined> = process.env): string {
  const dir = env.LMHEAD_PEER_CUDA_DIR;
  const how = `'bench/peer/build-cuda.sh GGML_SOURCE OUT' builds it from ggml v${peerRelease.ggml}'s source (github.com/ggml-org/ggml, tag v${peerRelease.ggml}) for this GPU`;
  if (!dir) throw new PeerError(`the CUDA peer is ggml's CUDA backend built from source: ${how}; then set LMHEAD_PEER_CUDA_DIR=OUT`);
  for (const library of ["libggml-base.so", "libggml-cuda.so"]) {
    if (!existsSync(join(dir, library))) throw new PeerError(`LMHEAD_PEER_CUDA_DIR=${dir} holds no ${library}; ${how}`);
  }
  return dir;
}

/** The package's library folder, installing the package first when the home allows it. */
export function locatePackage(home: { dir: string; install: boolean }, log: (line: string) => void, pkg: PeerPackage = thisPeerPackage()): string {
  const pinned = pinnedName(pkg);
  const found = installedBins(home.dir, pkg);
  if (found) return found;
  if (!home.install) {
    throw new PeerError(`${pinned} is not installed in LMHEAD_PEER_DIR=${home.dir}; install it with 'npm install --prefix ${home.dir} --no-save ${pinned}', or unset LMHEAD_PEER_DIR to let the bench install it into .tools/peer`);
  }
  log(`installing ${pinned} into ${home.dir} (npm, 5-30 MB)`);
  mkdirSync(home.dir, { recursive: true });
  const npm = Bun.spawnSync(["npm", "install", "--prefix", home.dir, "--no-save", "--no-package-lock", "--no-audit", "--no-fund", "--loglevel=error", pinned], {
    stdout: "pipe",
    stderr: "pipe",
  });
  const bins = installedBins(home.dir, pkg);
  if (npm.exitCode !== 0 || !bins) {
    const why = npm.stderr.toString().trim().split("\n").filter((l) => l.length > 0).at(-1) ?? `exit ${npm.exitCode}`;
    throw new PeerError(`could not install ${pinned} with npm (${why}); it needs npm and the npm registry. Run the bench without --peer to time lmhead alone`);
  }
  return bins;
}

/** Compiles shim.c against the libggml-base in bins, once per shim source and folder. */
function buildShim(bins: string, dir: string, log: (line: string) => void): string {
  const source = join(import.meta.dir, "shim.c");
  const key = createHash("sha256").update(readFileSync(source)).update(bins).digest("hex").slice(0, 16);
  const out = join(dir, "shim", `liblmhead-peer-${key}.${process.platform === "darwin" ? "dylib" : "so"}`);
  if (existsSync(out)) return out;
  // zig cc where ./lmhead has installed zig; the system's cc on a GPU machine that runs the
  // bench with a Bun of its own.
  const cc = Bun.which("zig") ? ["zig", "cc"] : Bun.which("cc") ? ["cc"] : null;
  if (!cc) throw new PeerError("neither zig nor cc is on PATH; run the bench through ./lmhead, which installs zig");
  log(`compiling the peer shim with ${cc.join(" ")}`);
  mkdirSync(join(dir, "shim"), { recursive: true });
  const partial = `${out}.${process.pid}.tmp`;
  const flags = ["-shared", "-fPIC", "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror"];
  const built = Bun.spawnSync([...cc, ...flags, "-o", partial, source, `-L${bins}`, "-lggml-base", `-Wl,-rpath,${bins}`], { stdout: "pipe", stderr: "pipe" });
  if (built.exitCode !== 0) throw new PeerError(`${cc.join(" ")} could not build ${source}: ${built.stderr.toString().trim()}`);
  renameSync(partial, out); // atomic: another bench may be compiling the same shim
  return out;
}

function loadShim(path: string): Shim {
  try {
    return dlopen(path, shimSymbols).symbols;
  } catch (e) {
    throw new PeerError(`could not load ${path}: ${(e as Error).message}`);
  }
}

function cString(text: string): Uint8Array {
  return new TextEncoder().encode(`${text}\0`);
}

function shimString(write: (dst: Uint8Array, capacity: number) => number | bigint): string {
  const dst = new Uint8Array(512);
  const length = Math.min(Number(write(dst, dst.length)), dst.length - 1);
  return decoder.decode(dst.subarray(0, length));
}

function check(shim: Shim, status: number, what: string): void {
  if (status !== 0) throw new PeerError(`${what}: ${shimString((dst, capacity) => shim.lhp_last_error(dst, capacity))}`);
}

function handleOut(shim: Shim, call: (out: BigUint64Array) => number, what: string): bigint {
  const out = new BigUint64Array(1);
  check(shim, call(out), what);
  return out[0]!;
}

/** The CPU variant ggml would load here: the highest ggml_backend_score, as ggml_backend_load_best picks it. */
function bestVariant(shim: Shim, bins: string): { name: string; path: string } {
  const variants = readdirSync(bins).filter((f) => /^libggml-cpu-.+\.so$/.test(f)).sort();
  let best: { name: string; path: string; score: number } | null = null;
  for (const file of variants) {
    const path = join(bins, file);
    const score = shim.lhp_variant_score(cString(path));
    if (score > 0 && (!best || score > best.score)) best = { name: file.slice("libggml-cpu-".length, -".so".length), path, score };
  }
  if (!best) throw new PeerError(`none of the ${variants.length} CPU variants in ${bins} runs on this CPU`);
  return best;
}

/** ggml's backend on one device: the CPU (the best variant for it, with `threads` threads) or a GPU. */
export class GgmlPeer implements Disposable {
  readonly ggmlVersion: string;
  readonly ggmlCommit: string;
  /** The device, as ggml describes it: the CPU's name, or the GPU's. */
  readonly device: string;
  /** The extra weight buffer types ggml's CPU backend offers on this machine, e.g. ["AMX", "CPU_REPACK"]; none on a GPU. */
  readonly extraBuffers: string[];
  #open = true;

  private constructor(
    readonly shim: Shim,
    readonly handle: bigint,
    /** The backend library loaded, e.g. libggml-cpu-icelake.so or libggml-cuda.so. */
    readonly library: string,
    /** Where it came from: the npm package, or the build in LMHEAD_PEER_CUDA_DIR. */
    readonly source: string,
    /** The CPU backend's threads; 0 on a GPU. */
    readonly threads: number,
  ) {
    const [version = "", commit = "", device = "", extra = ""] = shimString((dst, capacity) => shim.lhp_info(handle, dst, capacity)).split("\t");
    this.ggmlVersion = version;
    this.ggmlCommit = commit;
    this.device = device;
    this.extraBuffers = extra.split(",").filter((name) => name.length > 0);
  }

  /** ggml's CPU backend: installs (if allowed) and loads the pinned package; every failure is a PeerError. */
  static open(threads: number, log: (line: string) => void = () => {}, home = peerHome()): GgmlPeer {
    const pkg = thisPeerPackage();
    const bins = locatePackage(home, log, pkg);
    const shim = loadShim(buildShim(bins, home.dir, log));
    const variant = bestVariant(shim, bins);
    const handle = handleOut(shim, (out) => shim.lhp_open(cString(variant.path), threads, out), `open ${variant.name}`);
    return new GgmlPeer(shim, handle, basename(variant.path), pinnedName(pkg), threads);
  }

  /** ggml's Metal backend from the pinned package (a Mac's), on the first GPU; every failure is a PeerError. */
  static openMetal(log: (line: string) => void = () => {}, home = peerHome()): GgmlPeer {
    const pkg = thisPeerPackage();
    if (!pkg.metal) throw new PeerError(`${pinnedName(pkg)} carries no Metal backend`);
    const bins = locatePackage(home, log, pkg);
    const shim = loadShim(buildShim(bins, home.dir, log));
    const handle = handleOut(shim, (out) => shim.lhp_open(cString(join(bins, pkg.metal!)), 0, out), `open ${pkg.metal}`);
    return new GgmlPeer(shim, handle, pkg.metal, pinnedName(pkg), 0);
  }

  /** ggml's CUDA backend on the first GPU, from the build in LMHEAD_PEER_CUDA_DIR; every failure is a PeerError. */
  static openCuda(log: (line: string) => void = () => {}, env: Record<string, string | undefined> = process.env): GgmlPeer {
    const bins = cudaBuild(env);
    const shim = loadShim(buildShim(bins, bins, log));
    const path = join(bins, "libggml-cuda.so");
    const handle = handleOut(shim, (out) => shim.lhp_open(cString(path), 0, out), "open libggml-cuda.so");
    return new GgmlPeer(shim, handle, "libggml-cuda.so", `ggml-org/ggml v${peerRelease.ggml} built by bench/peer/build-cuda.sh in ${bins}`, 0);
  }

  /**
   * The head's weights for ggml: vocab rows of `hidden` values of ggml type typeId, the very
   * bytes lmhead reads. In a plain CPU buffer ggml reads them in place, so `bytes` must
   * outlive the head; AMX and CPU_REPACK buffers hold a converted copy, and a GPU a copy in
   * its memory, made here.
   */
  head(typeId: number, hidden: number, vocab: number, bytes: Uint8Array, buffer: PeerBuffer): GgmlHead {
    const choice = peerBuffers.indexOf(buffer);
    const handle = handleOut(this.shim, (out) => this.shim.lhp_head_new(this.handle, typeId, hidden, vocab, bytes, bytes.byteLength, choice, out), `head (type ${typeId}, ${vocab} x ${hidden}, ${buffer} buffer)`);
    return new GgmlHead(this.shim, handle, hidden, vocab, bytes);
  }

  close(): void {
    if (!this.#open) return;
    this.#open = false;
    this.shim.lhp_close(this.handle);
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

export class GgmlHead implements Disposable {
  /** The ggml buffer type holding the weights: CPU (lmhead's bytes in place), CPU_REPACK, AMX, or a GPU's (e.g. CUDA0). */
  readonly buffer: string;
  #freed = false;

  /**
   * @internal Made by GgmlPeer.head. Holding `bytes` keeps a JS-owned array from being
   * collected while ggml reads it; memory it only views (an MlxBuffer's withHostBytes) stays the
   * caller's to keep alive.
   */
  constructor(
    readonly shim: Shim,
    readonly handle: bigint,
    readonly hidden: number,
    readonly vocab: number,
    private readonly bytes: Uint8Array,
  ) {
    this.buffer = shimString((dst, capacity) => shim.lhp_head_buffer(handle, dst, capacity));
  }

  /** A ready graph for `rows` rows; its compute is ggml's mul_mat alone. */
  plan(rows: number): GgmlPlan {
    const handle = handleOut(this.shim, (out) => this.shim.lhp_plan_new(this.handle, rows, out), `${rows}-row graph`);
    return new GgmlPlan(this, handle, rows);
  }

  free(): void {
    if (this.#freed) return;
    this.#freed = true;
    this.shim.lhp_head_free(this.handle);
  }

  [Symbol.dispose](): void {
    this.free();
  }
}

/** output[rows, vocab] = input[rows, hidden] x head^T, with ggml's own input and output tensors. */
export class GgmlPlan implements Disposable {
  #freed = false;

  constructor(
    readonly head: GgmlHead,
    readonly handle: bigint,
    readonly rows: number,
  ) {}

  setInput(values: Float32Array): void {
    check(this.head.shim, this.head.shim.lhp_plan_set_input(this.handle, values, values.length), "set input");
  }

  compute(): void {
    check(this.head.shim, this.head.shim.lhp_plan_compute(this.handle), "compute");
  }

  /** The last compute's output, [rows, vocab] f32, copied out. */
  output(): Float32Array {
    const out = new Float32Array(this.rows * this.head.vocab);
    check(this.head.shim, this.head.shim.lhp_plan_get_output(this.handle, out, out.length), "get output");
    return out;
  }

  free(): void {
    if (this.#freed) return;
    this.#freed = true;
    this.head.shim.lhp_plan_free(this.handle);
  }

  [Symbol.dispose](): void {
    this.free();
  }
}
