/**
 * The CPU kernels are compiled once per CPU level (AVX-512, AVX2, baseline x86-64) and the
 * backend runs the best this machine supports. Every level must give the same bytes: each
 * level runs in a child process (the level is chosen when the worker pool starts) and
 * hashes the logits of every head type at several N.
 */
import { expect, test } from "bun:test";

const root = `${import.meta.dir}/..`;

const script = `
  import { synthBlocks } from "./src/artifact/synth.ts";
  import { Rng } from "./src/random.ts";
  import { MlxDevice, dequantize, formatInfo, knownTypeIds } from "./src/index.ts";
  import { buildHead, randomF32, rng } from "./test/support.ts";
  const device = MlxDevice.open("cpu");
  const hash = new Bun.CryptoHasher("sha256");
  for (const typeId of knownTypeIds) {
    const hidden = formatInfo(typeId).blockValues === 256 ? 512 : 576;
    const vocab = 37;
    const bytes = synthBlocks(typeId, hidden * vocab, new Rng(typeId), { rms: 0.3 });
    const norm = randomF32(hidden, rng(typeId), 0.3).map((x) => 1 + x);
    using head = buildHead(device, hidden, vocab, typeId, bytes, dequantize(typeId, bytes), norm, 30, false);
    for (const n of [1, 2, 3, 5, 7, 8, 9, 10, 11, 16, 33]) {
      const out = head.weights.lmHeadBatched(randomF32(n * hidden, rng(n), 2), n, new Float32Array(n * vocab));
      hash.update(new Uint8Array(out.logits.buffer));
    }
  }
  console.log(JSON.stringify({ info: device.info, hash: hash.digest("hex") }));`;

function runAt(level: string): { info: string; hash: string } | { error: string } {
  const p = Bun.spawnSync([process.execPath, "-e", script], { cwd: root, env: { ...process.env, LMHEAD_CPU_LEVEL: level }, stdout: "pipe", stderr: "pipe" });
  if (p.exitCode !== 0) return { error: p.stderr.toString() };
  return JSON.parse(p.stdout.toString().trim());
}

test("every CPU level this machine runs gives the same logits, bit for bit", () => {
  const best = runAt("");
  if ("error" in best) throw new Error(best.error);
  const levels = process.arch === "x64" ? ["x86_64_v4", "x86_64_v3", "x86_64"] : [];
  let compared = 0;
  for (const level of levels) {
    const at = runAt(level);
    if ("error" in at) {
      // A level this CPU cannot run is refused by name, never run.
      expect(at.error).toContain(`LMHEAD_CPU_LEVEL ${level}: this CPU lacks its instructions`);
      continue;
    }
    expect(at.info).toContain(`${level} kernels`);
    expect(at.hash).toBe(best.hash);
    compared++;
  }
  if (process.arch === "x64") expect(compared).toBeGreaterThanOrEqual(2); // the baseline and at least one vector level
  console.log(`compared ${compared} CPU levels against the best (${best.info})`);
});

test("LMHEAD_CPU_LEVEL naming no level is a clear error", () => {
  const at = runAt("pentium");
  expect("error" in at && at.error).toContain("LMHEAD_CPU_LEVEL pentium is not a CPU level of this library");
});
