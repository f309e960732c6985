/**
 * The GPU check (`lmhead-gpu-check`, run by `./lmhead test`) skips only on a machine without
 * CUDA; a CUDA device that fails to open fails the check. Shown with a stand-in driver
 * library whose cuInit answers "no device" or fails.
 */
import { afterAll, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const root = join(import.meta.dir, "..");
const check = join(root, "zig-out/bin/lmhead-gpu-check");
const dir = mkdtempSync(join(tmpdir(), "lmhead-gpu-check-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A libcuda.so.1 stand-in exporting every entry point the backend binds (driver.zig's Cuda
 *  table, read from the source so the two cannot drift); cuInit returns `initResult`. */
function fakeDriver(initResult: number): string {
  const source = readFileSync(join(root, "native/backends/cuda/driver.zig"), "utf8");
  const table = source.slice(source.indexOf("pub const Cuda = struct {"), source.indexOf("pub fn check("));
  const names = [...table.matchAll(/^\s+(cu\w+): \*const fn/gm)].map((m) => m[1]!);
  expect(names).toContain("cuInit");
  expect(names).toContain("cuGetErrorString");
  const stubs = names
    .filter((n) => n !== "cuInit" && n !== "cuGetErrorString")
    .map((n) => `int ${n}(void) { return 999; }`);
  const c = [
    ...stubs,
    `int cuInit(unsigned flags) { (void)flags; return ${initResult}; }`,
    `int cuGetErrorString(int result, const char **text) { (void)result; *text = "stand-in failure"; return 0; }`,
  ].join("\n");
  const base = join(dir, `fake${initResult}`);
  writeFileSync(`${base}.c`, c);
  const cc = Bun.spawnSync(["zig", "cc", "-shared", "-fPIC", "-o", `${base}.so`, `${base}.c`], { stderr: "pipe" });
  expect(cc.stderr.toString()).toBe("");
  expect(cc.exitCode).toBe(0);
  return `${base}.so`;
}

function runCheck(libcuda: string, args: string[] = ["check"]) {
  if (!existsSync(check)) throw new Error(`${check} is missing: ./lmhead test builds it (zig build gpu-check)`);
  const run = Bun.spawnSync([check, ...args], {
    env: { ...process.env, LMHEAD_LIBCUDA: libcuda, LMHEAD_NVRTC: join(dir, "no-nvrtc.so") },
    stdout: "pipe", stderr: "pipe",
  });
  return { code: run.exitCode, out: run.stdout.toString() + run.stderr.toString() };
}

test("a driver that sees no GPU is a machine without CUDA: the check skips and says why", () => {
  const { code, out } = runCheck(fakeDriver(100));
  expect(out).toContain("SKIP: no CUDA device: ");
  expect(out).toContain("the CUDA driver sees no GPU");
  expect(code).toBe(0);
});

test("a wrong argument is a usage error before any device opens (TYPE a head type, N 1 to 64, VOCAB 1 to 262144)", () => {
  const wrong = [
    ["bench", "Q6_K", "1", "0"], ["bench", "Q6_K", "1", "262145"], ["bench", "Q6_K", "1", "many"], ["bench", "Q6_K", "1", "8192", "x"],
    ["bench", "Q6_K", "0"], ["bench", "Q6_K", "65"], ["bench", "Q6_K", "1,,2"], ["bench", "Q6_K", Array.from({ length: 17 }, (_, i) => i + 1).join(",")],
    ["bench", "Q6K"], ["check", "Q6_K,Q4_1"], ["check", "Q6_K", "1"], ["profile"],
  ];
  for (const args of wrong) {
    const { code, out } = runCheck(join(dir, "no-libcuda.so"), args);
    expect(`${args.join(" ")}: ${out}`).toContain("usage: lmhead-gpu-check check [TYPE,...] | bench [TYPE,... [N,... [VOCAB]]] (TYPE a head type, N 1 to 64, VOCAB 1 to 262144)");
    expect(code).toBe(2);
  }
});

test("a driver that fails is a failure of the check, not a skip", () => {
  const { code, out } = runCheck(fakeDriver(999));
  expect(out).toContain("FAIL: the CUDA device did not open");
  expect(out).toContain("CUDA cuInit failed: stand-in failure (CUresult 999)");
  expect(out).not.toContain("SKIP");
  expect(code).toBe(1);
});
