/**
 * Model files: mapped read-only (a file the process cannot write still loads), and a file
 * changed in place after loading fails the next call cleanly instead of killing the process.
 * What could kill the process runs in a child (model-files.child.ts).
 */
import { afterAll, describe, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Rng, synthBlocks, synthF32 } from "../src/artifact/synth.ts";
import { meta, writeGguf } from "../src/artifact/writer.ts";
import { MlxDevice, loadModel } from "../src/index.ts";

const dir = mkdtempSync(join(tmpdir(), "lmhead-files-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const hidden = 256;
const vocab = 64;
const Q8_0 = 8;

let fileNo = 0;
/** A small tied Q8_0 head, in a fresh file. */
function modelFile(): string {
  const rng = new Rng(7);
  const path = join(dir, `m${fileNo++}.gguf`);
  writeGguf(path, {
    metadata: [
      ["general.architecture", meta.str("gemma4")],
      ["gemma4.attention.layer_norm_rms_epsilon", meta.f32(1e-6)],
      ["gemma4.final_logit_softcapping", meta.f32(30)],
    ],
    tensors: [
      { name: "output_norm.weight", typeId: 0, dims: [hidden], data: new Uint8Array(synthF32(hidden, rng, 1, 0.2).buffer) },
      { name: "token_embd.weight", typeId: Q8_0, dims: [hidden, vocab], data: synthBlocks(Q8_0, hidden * vocab, rng) },
    ],
  });
  return path;
}

interface ChildResult {
  before: string;
  row: number[];
  after?: string;
  error?: { code: string; message: string };
  rowAfter?: number[];
  rowError?: { code: string; message: string };
}

const child = join(import.meta.dir, "model-files.child.ts");

/** Runs the child (under `prefix`, e.g. a namespace); its exit, signal and parsed output. */
async function runChild(args: string[], prefix: string[] = []): Promise<{ exitCode: number | null; signal: unknown; result: ChildResult | null; stderr: string }> {
  const proc = Bun.spawn([...prefix, process.execPath, child, ...args], { stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
  await proc.exited;
  const line = stdout.trim().split("\n").at(-1) ?? "";
  return { exitCode: proc.exitCode, signal: proc.signalCode, result: line.startsWith("{") ? (JSON.parse(line) as ChildResult) : null, stderr };
}

describe("a model file changed after loading", () => {
  test("truncated in place: the next head call and embedding row fail with an io error, no SIGBUS", async () => {
    const run = await runChild([modelFile(), "map", "truncate"]);
    expect({ exitCode: run.exitCode, signal: run.signal, stderr: run.stderr }).toEqual({ exitCode: 0, signal: null, stderr: "" });
    expect(run.result!.after).toBeUndefined();
    expect(run.result!.error!.code).toBe("io");
    expect(run.result!.error!.message).toMatch(/m\d+\.gguf: the file is now \d+ bytes, it was \d+ when loaded: it was truncated or rewritten in place; model files must be replaced by rename/);
    expect(run.result!.rowError!.code).toBe("io");
  });

  test("rewritten in place (same size): the next call fails, naming the change", async () => {
    const run = await runChild([modelFile(), "map", "rewrite"]);
    expect(run.exitCode).toBe(0);
    expect(run.result!.error!.message).toMatch(/modified in place after it was loaded \(its mtime changed\)/);
    expect(run.result!.rowError!.code).toBe("io");
  });

  /** The change left the loaded model's logits and embedding rows as they were. */
  async function expectUnaffected(load: "map" | "copy", change: "rename" | "truncate"): Promise<void> {
    const run = await runChild([modelFile(), load, change]);
    expect(run.exitCode).toBe(0);
    expect(run.result!.error).toBeUndefined();
    expect(run.result!.after).toBe(run.result!.before);
    expect(run.result!.rowAfter).toEqual(run.result!.row);
  }

  test("replaced by rename: the loaded model keeps the old file and its results", () => expectUnaffected("map", "rename"));

  test("loaded with copy: true, the file may be truncated: same logits and rows as before", () => expectUnaffected("copy", "truncate"));
});

describe("read-only mapping", () => {
  test.skipIf(process.platform !== "linux")("the file is mapped read-only and shared (r--s in /proc/self/maps), whole", async () => {
    const path = modelFile();
    using device = MlxDevice.open("cpu");
    using model = await loadModel(device, path);
    const maps = readFileSync("/proc/self/maps", "utf8")
      .split("\n")
      .filter((line) => line.endsWith(path));
    expect(maps.length).toBeGreaterThan(0);
    for (const line of maps) expect(line.split(/\s+/)[1]).toBe("r--s");
    expect(model.weights.lmHeadBatched(new Float32Array(hidden).fill(1), 1).logits.length).toBe(vocab);
  });

  // Root ignores file permissions, but not a read-only mount: a private mount namespace
  // (unshare -rm, no privileges needed) mounts a tmpfs, copies the model in and remounts it
  // read-only. Opening the file for writing (as Bun.mmap does) fails there with EROFS.
  const unshare = Bun.spawnSync(["unshare", "-rm", "true"], { stderr: "ignore" }).exitCode === 0;
  test.skipIf(!unshare)("a model on a read-only file system loads and runs (needs unshare -rm)", async () => {
    const mount = join(dir, "ro");
    mkdirSync(mount);
    const source = modelFile();
    const inside = join(mount, "model.gguf");
    const script = `mount -t tmpfs tmpfs '${mount}' && cp '${source}' '${inside}' && mount -o remount,ro '${mount}' && exec "$0" "$@"`;
    const run = await runChild([inside, "map", "none"], ["unshare", "-rm", "sh", "-c", script]);
    expect({ exitCode: run.exitCode, stderr: run.stderr }).toEqual({ exitCode: 0, stderr: "" });
    // The same bytes give the same logits as the writable copy in this process.
    copyFileSync(source, join(dir, "rw.gguf"));
    const writable = await runChild([join(dir, "rw.gguf"), "map", "none"]);
    expect(run.result!.before).toBe(writable.result!.before);
  });
});

test("disposing a model twice is a no-op", async () => {
  using device = MlxDevice.open("cpu");
  const model = await loadModel(device, modelFile());
  model[Symbol.dispose]();
  expect(() => model[Symbol.dispose]()).not.toThrow();
});
