// The bench's ggml peer (bench/peer): its flags, the clear error when its package is missing
// (nothing is downloaded here), and, only where the package is already installed, a small
// side-by-side run: ggml must get the very weights and rows lmhead multiplies (else its error
// would be of order 1), and the shim must refuse bad sizes instead of letting ggml abort.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { benchSvg, parseBenchArgs, resultsBase, runBench, type BenchResult } from "../bench/head.ts";
import { PeerBench, peerDefaultVocab } from "../bench/peer/compare.ts";
import { cudaBuild, GgmlPeer, installedBins, locatePackage, peerHome, peerPackage, peerPackageFor, PeerError, pinnedName, thisPeerPackage } from "../bench/peer/ggml.ts";
import { fillHead } from "../bench/weights.ts";
import { UsageError } from "../src/cli/args.ts";
import { rowBytes } from "../src/formats.ts";
import { MlxDevice } from "../src/runtime.ts";

const root = join(import.meta.dir, "..");
const empty = mkdtempSync(join(tmpdir(), "lmhead-peer-"));
afterAll(() => rmSync(empty, { recursive: true, force: true }));
// The two wired packages; `pinned` is this machine's (Linux's where none is wired), and the
// tests that need no particular one name Linux's.
const linux = peerPackageFor("linux", "x64")!;
const mac = peerPackageFor("darwin", "arm64")!;
const pinned = pinnedName(peerPackage ?? linux);

describe("bench --peer flags", () => {
  test("--peer ggml takes the best buffer and a reduced vocab unless --vocab is given", () => {
    const o = parseBenchArgs(["--peer", "ggml"]);
    expect(o).not.toBe("help");
    if (o === "help") return;
    expect(o.peer).toEqual({ name: "ggml", buffer: "best" });
    expect(o.vocab).toBe(peerDefaultVocab);
    const full = parseBenchArgs(["--peer", "ggml", "--vocab", "262144", "--peer-buffer", "repack"]);
    if (full === "help") throw new Error("unexpected help");
    expect(full.vocab).toBe(262144);
    expect(full.peer).toEqual({ name: "ggml", buffer: "repack" });
    const alone = parseBenchArgs([]);
    if (alone === "help") throw new Error("unexpected help");
    expect(alone.peer).toBeNull();
    expect(alone.vocab).toBe(262144);
  });

  test("an unknown peer or buffer, or --peer-buffer alone, is a usage error naming the value", () => {
    expect(() => parseBenchArgs(["--peer", "llama"])).toThrow(new UsageError("bench: --peer must be ggml, got 'llama'"));
    expect(() => parseBenchArgs(["--peer", "ggml", "--peer-buffer", "gpu"])).toThrow(/--peer-buffer must be best, cpu, repack, amx, got 'gpu'/);
    expect(() => parseBenchArgs(["--peer-buffer", "cpu"])).toThrow(new UsageError("bench: --peer-buffer needs --peer"));
  });

  test("results are named by peer, backend and buffer, so no run replaces another kind's", () => {
    const o = { outDir: "r", vocab: 8, hidden: 4 };
    const ggml = { name: "ggml", buffer: "best" } as const;
    expect(resultsBase({ ...o, backend: "cpu", peer: null })).toBe(join("r", "head-bench-8x4"));
    expect(resultsBase({ ...o, backend: "cuda", peer: null })).toBe(join("r", "head-bench-cuda-8x4"));
    expect(resultsBase({ ...o, backend: "cpu", peer: ggml })).toBe(join("r", "peer-ggml-8x4"));
    expect(resultsBase({ ...o, backend: "cpu", peer: { ...ggml, buffer: "repack" } })).toBe(join("r", "peer-ggml-repack-8x4"));
    expect(resultsBase({ ...o, backend: "cuda", peer: ggml })).toBe(join("r", "peer-ggml-cuda-8x4"));
  });

  test("beside a peer the plot shows lmhead's matmul alone, like ggml's; alone, its whole call", () => {
    // Only the fields benchSvg reads.
    const base = {
      vocab: 8, hidden: 4, device: "d", iterations: 1,
      types: [{ type: "Q8_0", typeId: 8, floorMs: null, bandwidth: null }],
      rows: [{ typeId: 8, n: 1, ms: 5 }],
    };
    const peer = { library: "libggml-cuda.so", rows: [{ typeId: 8, n: 1, lmheadMs: 2, peerMsBefore: 3, peerMsAfter: 4 }] };
    const beside = benchSvg({ ...base, peer } as unknown as BenchResult);
    expect(beside).toContain("Q8_0 N=1: 2.00 ms");
    expect(beside).toContain("Q8_0 ggml cuda, matmul only N=1: 3.50 ms");
    expect(beside).not.toContain("5.00 ms");
    expect(benchSvg(base as unknown as BenchResult)).toContain("Q8_0 N=1: 5.00 ms");
  });

  test("bench --help documents both flags", () => {
    const p = Bun.spawnSync([process.execPath, join(root, "bench", "cli.ts"), "bench", "--help"], { stdout: "pipe", stderr: "pipe" });
    expect(p.exitCode).toBe(0);
    expect(p.stdout.toString()).toContain("--peer NAME");
    expect(p.stdout.toString()).toContain("--peer-buffer B");
  });
});

describe("ggml peer package", () => {
  test("LMHEAD_PEER_DIR names the folder and turns the install off; the default installs into .tools/peer", () => {
    expect(peerHome({ LMHEAD_PEER_DIR: empty })).toEqual({ dir: empty, install: false });
    expect(peerHome({})).toEqual({ dir: join(root, ".tools", "peer"), install: true });
  });

  test("the peer is node-llama-cpp's package for Linux x86_64, or for macOS arm64 with its Metal backend, one release; elsewhere a PeerError", () => {
    expect(linux).toMatchObject({ name: "@node-llama-cpp/linux-x64", bins: "linux-x64", base: "libggml-base.so", metal: null });
    expect(mac).toMatchObject({ name: "@node-llama-cpp/mac-arm64-metal", bins: "mac-arm64-metal", base: "libggml-base.dylib", metal: "libggml-metal.so" });
    expect([mac.version, mac.ggml, mac.llamaCpp]).toEqual([linux.version, linux.ggml, linux.llamaCpp]);
    expect(peerPackageFor("linux", "arm64")).toBeNull();
    expect(() => thisPeerPackage(null, "win32 x64")).toThrow(PeerError);
    expect(() => thisPeerPackage(null, "win32 x64")).toThrow(/no peer package is wired for win32 x64 .*@node-llama-cpp\/linux-x64 and @node-llama-cpp\/mac-arm64-metal/);
    expect(thisPeerPackage(mac)).toBe(mac);
  });

  test("a package counts as installed only at its pinned version, with its libggml-base in its platform's folder", () => {
    const dir = mkdtempSync(join(empty, "installed-"));
    const packageDir = join(dir, "node_modules", "@node-llama-cpp", "mac-arm64-metal");
    const bins = join(packageDir, "bins", "mac-arm64-metal");
    mkdirSync(bins, { recursive: true });
    writeFileSync(join(packageDir, "package.json"), JSON.stringify({ version: mac.version }));
    expect(installedBins(dir, mac)).toBeNull(); // no libggml-base.dylib yet
    writeFileSync(join(bins, "libggml-base.dylib"), "");
    expect(installedBins(dir, mac)).toBe(bins);
    expect(installedBins(dir, linux)).toBeNull();
    expect(locatePackage({ dir, install: false }, () => {}, mac)).toBe(bins);
    writeFileSync(join(packageDir, "package.json"), JSON.stringify({ version: "3.19.0" }));
    expect(installedBins(dir, mac)).toBeNull();
  });

  test("a folder without the package is a PeerError that says how to install it", () => {
    expect(installedBins(empty, linux)).toBeNull();
    let error: unknown;
    try {
      locatePackage({ dir: empty, install: false }, () => {}, linux);
    } catch (e) {
      error = e;
    }
    const linuxPinned = pinnedName(linux);
    expect(error).toBeInstanceOf(PeerError);
    expect((error as Error).message).toContain(`${linuxPinned} is not installed in LMHEAD_PEER_DIR=${empty}`);
    expect((error as Error).message).toContain(`npm install --prefix ${empty} --no-save ${linuxPinned}`);
  });

  test.skipIf(!Bun.which("zig"))("the shim compiles for macOS arm64 (zig cc, its own macOS headers) as it does for Linux, warnings as errors", () => {
    for (const target of ["aarch64-macos", "x86_64-linux-gnu"]) {
      const object = join(empty, `shim-${target}.o`);
      const cc = Bun.spawnSync(["zig", "cc", "-target", target, "-c", "-o", object, "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", join(root, "bench", "peer", "shim.c")], { stderr: "pipe" });
      expect(`${target}: ${cc.stderr.toString()}`).toBe(`${target}: `);
      expect(cc.exitCode).toBe(0);
    }
  }, 120_000);

  test("the CUDA peer is a build named by LMHEAD_PEER_CUDA_DIR; without one, a PeerError says how to build it", () => {
    const unset = () => cudaBuild({});
    expect(unset).toThrow(PeerError);
    expect(unset).toThrow(/bench\/peer\/build-cuda\.sh GGML_SOURCE OUT.*tag v0\.19\.0.*set LMHEAD_PEER_CUDA_DIR=OUT/);
    expect(() => cudaBuild({ LMHEAD_PEER_CUDA_DIR: empty })).toThrow(`LMHEAD_PEER_CUDA_DIR=${empty} holds no libggml-base.so`);
    const build = join(empty, "build");
    mkdirSync(build);
    writeFileSync(join(build, "libggml-base.so"), "");
    expect(() => cudaBuild({ LMHEAD_PEER_CUDA_DIR: build })).toThrow(`LMHEAD_PEER_CUDA_DIR=${build} holds no libggml-cuda.so`);
    writeFileSync(join(build, "libggml-cuda.so"), "");
    expect(cudaBuild({ LMHEAD_PEER_CUDA_DIR: build })).toBe(build);
  });

  test("a peer on a GPU takes only the best buffer; the Metal peer needs the Mac's package", () => {
    const o = { rows: [1], iterations: 1, warmup: 0, seed: 1 };
    // Only the device's kind is read before the peer would load.
    const cuda = { kind: "cuda" } as MlxDevice;
    const metal = { kind: "metal" } as MlxDevice;
    expect(() => PeerBench.open({ name: "ggml", buffer: "repack" }, cuda, o, () => {})).toThrow(new PeerError("--peer-buffer repack: ggml's CUDA backend keeps the weights in the GPU's memory; only best applies"));
    expect(() => PeerBench.open({ name: "ggml", buffer: "amx" }, metal, o, () => {})).toThrow(new PeerError("--peer-buffer amx: ggml's Metal backend keeps the weights in the GPU's memory; only best applies"));
    if (peerPackage?.metal === null) {
      expect(() => PeerBench.open({ name: "ggml", buffer: "best" }, metal, o, () => {})).toThrow(new PeerError(`${pinned} carries no Metal backend`));
    }
  });

  test("lmhead bench --peer ggml with the package missing: one line on stderr, exit 1, no download", () => {
    const p = Bun.spawnSync(
      [process.execPath, join(root, "bench", "cli.ts"), "bench", "--peer", "ggml", "--types", "Q8_0", "--vocab", "64", "--hidden", "64", "--rows", "1", "--probe-mib", "0", "--out", join(empty, "out")],
      { env: { ...process.env, LMHEAD_PEER_DIR: empty, LMHEAD_DEBUG: "" }, stdout: "pipe", stderr: "pipe" },
    );
    expect(p.exitCode).toBe(1);
    const lines = p.stderr.toString().trimEnd().split("\n");
    expect(lines.length).toBe(1);
    expect(lines[0]).toStartWith(peerPackage ? `lmhead: ggml peer: ${pinned} is not installed` : `lmhead: ggml peer: no peer package is wired for ${process.platform} ${process.arch}`);
    expect(installedBins(empty, peerPackage ?? linux)).toBeNull();
  });
});

const home = peerHome();
const installed = peerPackage !== null && installedBins(home.dir, peerPackage) !== null;
const how = home.install ? "./lmhead bench --peer ggml installs it" : "LMHEAD_PEER_DIR turns the install off";
const why = installed ? "" : peerPackage ? ` (skipped: ${pinned} is not installed in ${home.dir}; ${how})` : ` (skipped: no peer package is wired for ${process.platform} ${process.arch})`;

describe("ggml peer, side by side", () => {
  test.skipIf(!installed)(`a small run: same weights and rows, lmhead exact and row-identical, ggml close${why}`, async () => {
    const o = parseBenchArgs(["--peer", "ggml", "--types", "Q8_0,Q4_0,F16", "--vocab", "512", "--hidden", "256", "--rows", "1,2,4", "--iterations", "1", "--warmup", "0", "--probe-mib", "0", "--no-progress"]);
    if (o === "help") throw new Error("unexpected help");
    const r = await runBench(o);
    const p = r.peer!;
    expect(p.package).toBe(pinned);
    expect(p.ggml).toStartWith(`${(peerPackage ?? linux).ggml} (`);
    expect(p.types.map((t) => t.type)).toEqual(["Q8_0", "Q4_0", "F16"]);
    for (const t of p.types) expect(["CPU", ...p.extraBuffers]).toContain(t.buffer);
    expect(p.rows.length).toBe(9);
    for (const row of p.rows) {
      expect(row.lmheadRowsDiffering).toBe(0);
      expect(row.lmheadMaxRelError).toBeLessThan(1e-5);
      // ggml rounds activations to 8 bits (16 for F16): errors of a few 1e-3, far from the
      // order-1 errors of weights or rows that differ from lmhead's.
      expect(row.peerMaxRelError).toBeLessThan(0.05);
      expect(row.peerRowsDiffering).toBeGreaterThanOrEqual(0);
      expect(row.peerRowsDiffering).toBeLessThanOrEqual(row.n);
      expect(row.ratio).toBeGreaterThan(0);
    }
    const svg = benchSvg(r);
    expect(svg.match(/<polyline/g)?.length).toBe(6); // lmhead and ggml per type
    expect(p.library).toMatch(/^libggml-cpu-.+\.so$/);
    expect(svg).toContain(`ggml ${p.library.slice("libggml-cpu-".length, -".so".length)}, matmul only`);
  });

  test.skipIf(!installed)(`--peer-buffer amx or repack where ggml offers no such buffer fails before any timing${why}`, () => {
    const offered = (() => {
      using peer = GgmlPeer.open(1, () => {}, home);
      return peer.extraBuffers;
    })();
    const o = { rows: [1], iterations: 1, warmup: 0, seed: 1 };
    using device = MlxDevice.open("cpu");
    for (const [buffer, name] of [["amx", "AMX"], ["repack", "CPU_REPACK"]] as const) {
      const open = () => PeerBench.open({ name: "ggml", buffer }, device, o, () => {})[Symbol.dispose]();
      if (offered.includes(name)) expect(open).not.toThrow();
      else expect(open).toThrow(new PeerError(`--peer-buffer ${buffer}: ggml's CPU backend offers no ${name} buffer on this machine (it offers ${["CPU", ...offered].join(", ")})`));
    }
  });

  test.skipIf(!installed)(`a CPU backend opened with 0 threads (a GPU's count) is a PeerError${why}`, () => {
    expect(() => GgmlPeer.open(0, () => {}, home)[Symbol.dispose]()).toThrow(/is a CPU backend: threads must be 1 or more/);
  });

  test.skipIf(!installed)(`bad sizes are PeerErrors, not an abort inside ggml${why}`, () => {
    using device = MlxDevice.open("cpu");
    using peer = GgmlPeer.open(1, () => {}, home);
    const hidden = 64;
    const vocab = 16;
    const headBytes = rowBytes(8, hidden) * vocab;
    using buffer = device.allocBuffer(headBytes + 64);
    buffer.withHostBytes((host) => {
      const bytes = host.subarray(0, headBytes);
      fillHead(bytes, 8, hidden, vocab, 1);
      expect(() => peer.head(8, hidden, vocab + 1, bytes, "best")).toThrow(/head has 1088 bytes, a q8_0 head of 17 x 64 needs 1156/);
      expect(() => peer.head(8, 48, vocab, bytes, "best")).toThrow(/48 values per row is not whole q8_0 blocks/);
      expect(() => peer.head(8, hidden, vocab, host.subarray(1, 1 + bytes.length), "cpu")).toThrow(/not 32-byte aligned/);
      expect(() => peer.head(4, hidden, vocab, bytes, "best")).toThrow(/ggml type 4 is not a ggml 0.19.0 type/);
      using head = peer.head(8, hidden, vocab, bytes, "cpu");
      expect(head.buffer).toBe("CPU");
      expect(() => head.plan(0)).toThrow(/rows 0 outside/);
      using plan = head.plan(2);
      expect(() => plan.setInput(new Float32Array(hidden))).toThrow(/input has 64 values, the plan takes 128/);
    });
  });
});
