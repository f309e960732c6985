/**
 * The release packages (`./lmhead package`): lmhead, @lmhead/linux-x64 and the cross-built
 * @lmhead/darwin-arm64. Installed from their tarballs into an empty project, with no Zig on
 * the PATH and no LMHEAD_LIB, `lmhead` loads the prebuilt library of @lmhead/linux-x64 and
 * runs the head, with the bytes of this checkout's build.
 */
import { expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const root = join(import.meta.dir, "..");

/** A small F32 head and two rows; prints the logits' bits as hex. Runs here and in the project. */
const headScript = (from: string) => `
  import { MlxDevice, MlxModelWeights } from ${JSON.stringify(from)};
  const hidden = 256, vocab = 50;
  using device = MlxDevice.open("cpu");
  const norm = device.allocBuffer(hidden * 4);
  norm.write(Float32Array.from({ length: hidden }, (_, k) => 1 + (k % 7) / 10));
  const head = device.allocBuffer(hidden * vocab * 4);
  head.write(Float32Array.from({ length: hidden * vocab }, (_, i) => Math.sin(i) / 16));
  using weights = new MlxModelWeights(device, { hiddenSize: hidden, vocabSize: vocab, finalNorm: norm, head, headType: 0, tied: false, finalLogitSoftcapping: 30, rmsNormEps: 1e-6 });
  const rows = Float32Array.from({ length: 2 * hidden }, (_, i) => Math.cos(i * 0.37) * 3);
  const logits = weights.lmHeadBatched(rows, 2).logits;
  console.log(Buffer.from(logits.buffer, logits.byteOffset, logits.byteLength).toString("hex"));
`;

test.skipIf(process.platform !== "linux" || process.arch !== "x64")(
  "the linux-x64 package, installed from its tarball into an empty project, runs the head with no Zig on the PATH",
  async () => {
    const packed = Bun.spawnSync([process.execPath, join(root, "scripts/package.ts")], { cwd: root, stderr: "pipe" });
    if (packed.exitCode !== 0) throw new Error(`./lmhead package failed: ${packed.stderr.toString()}`);
    const [main, linux, darwin] = packed.stdout.toString().trim().split("\n") as [string, string, string];
    expect([main, linux, darwin].map((t) => t.split("/").pop())).toEqual(["lmhead-0.1.0.tgz", "lmhead-linux-x64-0.1.0.tgz", "lmhead-darwin-arm64-0.1.0.tgz"]);
    // The macOS package is cross-built here; a Mac installs it the same way.
    expect(Bun.spawnSync(["tar", "-tzf", darwin]).stdout.toString()).toContain("package/liblmhead.dylib");
    const tarballs = [main, linux];

    const project = mkdtempSync(join(tmpdir(), "lmhead-package-"));
    try {
      await Bun.write(join(project, "package.json"), JSON.stringify({ name: "empty", private: true }));
      // The system's PATH only: no Zig, nothing of this checkout (Bun is run by its path).
      const env = { PATH: "/usr/bin:/bin", HOME: project };
      const bun = process.execPath;
      const added = Bun.spawnSync([bun, "add", ...tarballs], { cwd: project, env, stderr: "pipe" });
      if (added.exitCode !== 0) throw new Error(`bun add failed: ${added.stderr.toString()}`);
      expect(Bun.spawnSync(["which", "zig"], { env }).exitCode).not.toBe(0);
      await Bun.write(join(project, "run.ts"), headScript("lmhead") + `\nimport { libraryPath } from "lmhead/src/native.ts";\nconsole.log(libraryPath());\n`);
      const ran = Bun.spawnSync([bun, "run.ts"], { cwd: project, env, stderr: "pipe" });
      if (ran.exitCode !== 0) throw new Error(`the head failed in the project: ${ran.stderr.toString()}`);
      const [bytes, library] = ran.stdout.toString().trim().split("\n");
      expect(library).toBe(join(project, "node_modules/@lmhead/linux-x64/liblmhead.so"));

      await Bun.write(join(project, "here.ts"), headScript(join(root, "src/index.ts")));
      const here = Bun.spawnSync([bun, join(project, "here.ts")], { cwd: root, stderr: "pipe" });
      expect(here.exitCode).toBe(0);
      expect(bytes).toBe(here.stdout.toString().trim());
    } finally {
      rmSync(project, { recursive: true, force: true });
    }
  },
  // From a fresh clone, ./lmhead package builds the library in ReleaseFast for every CPU level
  // and for macOS: over the suite's 120 s on a 2-core machine (twice on 2026-12-01).
  600_000,
);
