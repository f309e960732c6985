// Run by model-files.test.ts in a child process, because what it checks used to kill the
// process (SIGBUS after a mapped file was truncated): loads a model, changes its file, calls
// the head and an embedding row again, and prints what happened as one JSON line.
//   bun test/model-files.child.ts <path> <map|copy> <none|truncate|rewrite|rename>
import { closeSync, openSync, renameSync, statSync, truncateSync, writeFileSync, writeSync } from "node:fs";
import { LmheadError, MlxDevice, loadModel } from "../src/index.ts";

const [path, load, change] = process.argv.slice(2) as [string, "map" | "copy", "none" | "truncate" | "rewrite" | "rename"];

function changeFile(): void {
  const bytes = statSync(path).size;
  if (change === "truncate") truncateSync(path, Math.floor(bytes / 2));
  if (change === "rewrite") {
    Bun.sleepSync(20); // past the file system's timestamp granularity
    const fd = openSync(path, "r+");
    writeSync(fd, new Uint8Array(4096).fill(0x55), 0, 4096, Math.floor(bytes / 2));
    closeSync(fd);
  }
  if (change === "rename") {
    writeFileSync(`${path}.new`, new Uint8Array(bytes));
    renameSync(`${path}.new`, path);
  }
}

function described(e: unknown): { code: string; message: string } {
  if (!(e instanceof LmheadError)) throw e;
  return { code: e.code, message: e.message };
}

using device = MlxDevice.open("cpu");
using model = await loadModel(device, path, { copy: load === "copy" });
const n = 2;
const rows = new Float32Array(n * model.weights.hiddenSize).map((_, i) => Math.sin(i));
const digest = (): string => Bun.hash.xxHash3(new Uint8Array(model.weights.lmHeadBatched(rows, n).logits.buffer)).toString(16);
const result: Record<string, unknown> = { before: digest(), row: Array.from(model.embedding.row(1).subarray(0, 4)) };
changeFile();
try {
  result.after = digest();
} catch (e) {
  result.error = described(e);
}
try {
  result.rowAfter = Array.from(model.embedding.row(1).subarray(0, 4));
} catch (e) {
  result.rowError = described(e);
}
console.log(JSON.stringify(result));
