// The lmhead CLI end to end on a small generated GGUF artifact: decode prints its figures,
// --verify passes, bench writes its JSON and SVG, and bad flags, values and files are one-line
// errors with a non-zero exit. No timing is asserted.
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { synthBlocks, synthF32 } from "../src/artifact/synth.ts";
import { meta, writeGguf } from "../src/artifact/writer.ts";
import { bandwidthLine } from "../src/cli/decode.ts";
import { ProgressBar } from "../src/cli/progress.ts";
import { Rng } from "../src/random.ts";

const root = join(import.meta.dir, "..");
const dir = mkdtempSync(join(tmpdir(), "lmhead-cli-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const hidden = 256;
const vocab = 512;
const model = join(dir, "small-q8_0.gguf");
{
  const rng = new Rng(3);
  writeGguf(model, {
    metadata: [
      ["general.architecture", meta.str("gemma4")],
      ["gemma4.embedding_length", meta.u32(hidden)],
      ["gemma4.attention.layer_norm_rms_epsilon", meta.f32(1e-6)],
      ["gemma4.final_logit_softcapping", meta.f32(30)],
    ],
    tensors: [
      { name: "output_norm.weight", typeId: 0, dims: [hidden], data: new Uint8Array(synthF32(hidden, rng, 1, 0.25).buffer) },
      { name: "token_embd.weight", typeId: 8, dims: [hidden, vocab], data: synthBlocks(8, hidden * vocab, rng) },
    ],
  });
}

/** The checkout's command line, as ./lmhead runs it (bench/cli.ts); `bin` runs the package's own (src/cli/main.ts). */
function lmhead(...args: string[]): { code: number; stdout: string; stderr: string } {
  return run(join(root, "bench", "cli.ts"), args);
}

function bin(...args: string[]): { code: number; stdout: string; stderr: string } {
  return run(join(root, "src", "cli", "main.ts"), args);
}

function run(entry: string, args: string[]): { code: number; stdout: string; stderr: string } {
  const p = Bun.spawnSync([process.execPath, entry, ...args], {
    cwd: root,
    env: { ...process.env, LMHEAD_CACHE: join(dir, "cache"), LMHEAD_DEBUG: "" },
    stdout: "pipe",
    stderr: "pipe",
  });
  return { code: p.exitCode ?? -1, stdout: p.stdout.toString(), stderr: p.stderr.toString() };
}

/** A one-line error on stderr, nothing that looks like a stack trace, and a non-zero exit. */
function expectOneLineError(r: { code: number; stdout: string; stderr: string }, text: string, code = 2): void {
  expect(r.code).toBe(code);
  const lines = r.stderr.trimEnd().split("\n");
  expect(lines.length).toBe(1);
  expect(lines[0]).toStartWith("lmhead: ");
  expect(lines[0]).toContain(text);
  expect(r.stderr).not.toMatch(/^\s+at /m);
}

describe("lmhead decode", () => {
  test("runs on a small artifact and prints its figures; --verify passes", () => {
    const r = lmhead("decode", "--model", model, "--slots", "3", "--steps", "8", "--tokens", "2-5", "--probe-mib", "16", "--verify");
    expect(r.stderr).toBe(""); // no TTY: no progress bar
    expect(r.code).toBe(0);
    const out = r.stdout;
    expect(out).toContain("tied Q8_0 head 512 x 256");
    expect(out).toContain("3 slots, 8 steps");
    expect(out).toMatch(/slot-tokens\/s\s+\d+\.\d+/);
    expect(out).toMatch(/head ms\/step\s+p50 \d+\.\d+\s+p99 \d+\.\d+/);
    expect(out).toMatch(/head wait \d+\.\d+ ms .*readback \d+\.\d+ ms .*finalize \d+\.\d+ ms/);
    expect(out).toMatch(/weights GB\/s\s+\d+\.\d+/);
    expect(out).toMatch(/read bandwidth\s+\d+\.\d+ GB\/s with \d+ threads?, the head's own/);
    expect(out).toMatch(/% of read bw\s+\d+\.\d+%/);
    expect(out).toMatch(/verify\s+PASS slots=3: 5 requests/);
    expect(out).not.toContain("reference");
  });

  test("the bandwidth line names a CPU's threads and its one-thread figure, and a GPU's whole device", () => {
    const cpu = { bytes: 2 ** 24, passes: 5, gbs: 20.5, oneThreadGbs: 9.25, threads: 2, method: "probe" };
    expect(bandwidthLine(cpu)).toBe("read bandwidth     20.50 GB/s with 2 threads, the head's own (1 thread: 9.25); probe");
    const gpu = { ...cpu, gbs: 4479, oneThreadGbs: null, threads: 1 };
    expect(bandwidthLine(gpu)).toBe("read bandwidth     4479.00 GB/s over the whole GPU, the head's own; probe");
  });

  test("--verify --reference cpu: each request alone on a second device, named in the report", () => {
    const r = lmhead("decode", "--model", model, "--slots", "3", "--steps", "4", "--tokens", "2-5", "--probe-mib", "0", "--verify", "--reference", "cpu");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/reference\s+each request alone on cpu: /);
    expect(r.stdout).toMatch(/verify\s+PASS slots=3: 5 requests/);
    const json = JSON.parse(lmhead("decode", "--model", model, "--slots", "2", "--steps", "2", "--probe-mib", "0", "--verify", "--reference", "cpu", "--json").stdout);
    expect(json.reference).toStartWith("cpu: ");
    expect(json.verify[0].ok).toBe(true);
  });

  test("--json gives the same figures as data, with sampling", () => {
    const r = lmhead("decode", "--model", model, "--slots", "2", "--steps", "5", "--sampling", "temp:0.9,topk:8,seed:4", "--probe-mib", "0", "--json");
    expect(r.code).toBe(0);
    const s = JSON.parse(r.stdout);
    expect(s.model).toMatchObject({ arch: "gemma4", headType: "Q8_0", tied: true, hidden, vocab, headBytes: (hidden / 32) * 34 * vocab, softcap: 30 });
    expect(s.workload).toMatchObject({ slots: 2, steps: 5, sampling: "temp:0.9,topk:8,seed:4" });
    expect(s.slotTokens).toBeGreaterThanOrEqual(5);
    expect(s.slotTokens).toBeLessThanOrEqual(10);
    for (const k of ["headWait", "headReadback", "finalize", "gather", "other"]) expect(typeof s.phasesMsPerStep[k]).toBe("number");
    expect(s.weightsGBs).toBeGreaterThan(0);
    expect(s.bandwidth).toBeNull(); // --probe-mib 0
    expect(s.verify).toBeNull();
    expect(s.reference).toBeNull();
  });

  test("--help documents every flag", () => {
    const r = lmhead("decode", "--help");
    expect(r.code).toBe(0);
    for (const flag of ["--model", "--slots", "--steps", "--backend", "--sampling", "--verify", "--reference", "--tokens", "--seed", "--probe-mib", "--allow-missing-softcap", "--json", "--no-progress", "--help"]) {
      expect(r.stdout).toContain(flag);
    }
    const top = lmhead("--help");
    expect(top.code).toBe(0);
    expect(top.stdout).toContain("decode");
    expect(top.stdout).toContain("bench");
    const none = lmhead();
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("usage: lmhead");
  });

  const bad: [string[], string, number?][] = [
    [["decode", "--slots", "0"], "--slots must be an integer in [1, 256], got '0'"],
    [["decode", "--slots", "four"], "--slots must be an integer"],
    [["decode", "--steps"], "--steps needs a value"],
    [["decode", "--frobnicate"], "unknown flag --frobnicate"],
    [["decode", "--verify=yes"], "--verify takes no value"],
    [["decode", "--sampling", "temp:-1"], "bad sampling 'temp:-1'"],
    [["decode", "--sampling", "nucleus"], "bad sampling"],
    [["decode", "--backend", "tpu"], "--backend must be one of cpu, metal, cuda, got 'tpu'"],
    [["decode", "--verify", "--reference", "tpu"], "--reference must be one of cpu, metal, cuda, got 'tpu'"],
    [["decode", "--reference", "cpu"], "--reference needs --verify"],
    [["decode", "--tokens", "5-2"], "--tokens must be N or A-B"],
    [["decode", "--model", "/nonexistent/model.gguf"], "/nonexistent/model.gguf: no such file"],
    [["decode", "stray"], "unexpected argument 'stray'"],
    [["frobnicate"], "unknown command 'frobnicate'"],
    [["bench", "--types", "Q7_K"], "unknown type 'Q7_K'"],
    [["bench", "--rows", "1,x"], "--rows must be integers"],
    [["bench", "--hidden", "100", "--types", "Q6_K"], "--hidden 100: 100 values is not a whole number of Q6_K blocks (256 values each)"],
  ];
  for (const [args, text, code] of bad) {
    test(`${args.join(" ")}: one-line error, exit ${code ?? 2}`, () => {
      expectOneLineError(lmhead(...args), text, code);
    });
  }

  // Flags that only failed once the work was done: now refused first, with nothing run.
  const reducedBench = ["--types", "Q8_0", "--vocab", "512", "--hidden", "256", "--rows", "1", "--iterations", "1", "--warmup", "0"];
  const early: [string[], string][] = [
    [["decode", "--model", model, "--steps", "2", "--probe-mib", "8"], "--probe-mib must be 0 or an integer in [16, 16384], got '8'"],
    [["decode", "--model", model, "--steps", "2", "--probe-mib", "20000"], "--probe-mib must be 0 or an integer in [16, 16384], got '20000'"],
    [["bench", ...reducedBench, "--probe-mib", "1"], "--probe-mib must be 0 or an integer in [16, 16384], got '1'"],
    [["bench", ...reducedBench, "--probe-mib", "0", "--out", join(model, "results")], `--out ${join(model, "results")}: cannot write there`],
  ];
  for (const [args, text] of early) {
    test(`${args.slice(-2).join(" ")} is refused before any work`, () => {
      const r = lmhead(...args);
      expectOneLineError(r, text);
      expect(r.stdout).toBe("");
    });
  }

  test("a file that is not a GGUF, and a GGUF that is not a head, fail in one line with exit 1", () => {
    const junk = join(dir, "junk.gguf");
    writeFileSync(junk, new Uint8Array(64).fill(7));
    expectOneLineError(lmhead("decode", "--model", junk, "--probe-mib", "0"), junk, 1);
    const noSoftcap = join(dir, "no-softcap.gguf");
    const rng = new Rng(5);
    writeGguf(noSoftcap, {
      metadata: [
        ["general.architecture", meta.str("gemma4")],
        ["gemma4.attention.layer_norm_rms_epsilon", meta.f32(1e-6)],
      ],
      tensors: [
        { name: "output_norm.weight", typeId: 0, dims: [hidden], data: new Uint8Array(synthF32(hidden, rng, 1, 0.25).buffer) },
        { name: "token_embd.weight", typeId: 8, dims: [hidden, vocab], data: synthBlocks(8, hidden * vocab, rng) },
      ],
    });
    expectOneLineError(lmhead("decode", "--model", noSoftcap, "--probe-mib", "0"), "final_logit_softcapping", 1);
    // ...which --allow-missing-softcap accepts.
    const ok = lmhead("decode", "--model", noSoftcap, "--steps", "2", "--probe-mib", "0", "--allow-missing-softcap");
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain("softcap off");
  });
});

describe("the package's command line and the checkout's", () => {
  test("the package bin has the package's commands; bench and soak come with the checkout", () => {
    const help = bin("--help");
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^  decode /m);
    expect(help.stdout).not.toMatch(/^  (bench|soak) /m);
    expectOneLineError(bin("bench"), "unknown command 'bench' (commands: decode;");
    const checkout = lmhead("--help");
    for (const name of ["decode", "bench", "soak"]) expect(checkout.stdout).toMatch(new RegExp(`^  ${name} `, "m"));
  });

  test("nothing under src/ imports bench/, and src/decode/ nothing of the command line", () => {
    const sources = new Bun.Glob("src/**/*.ts").scanSync({ cwd: root });
    let files = 0;
    for (const file of sources) {
      files++;
      const text = readFileSync(join(root, file), "utf8");
      expect(`${file}: ${text.match(/["'](\.\.\/)+bench\/[^"']*["']/)?.[0] ?? "no bench import"}`).toBe(`${file}: no bench import`);
      if (file.startsWith("src/decode/")) expect(`${file}: ${text.match(/["']\.\.\/cli\/[^"']*["']/)?.[0] ?? "no cli import"}`).toBe(`${file}: no cli import`);
    }
    expect(files).toBeGreaterThan(10);
  });
});

describe("lmhead bench", () => {
  test("reduced size: prints the table, writes JSON and SVG", () => {
    const out = join(dir, "bench-out");
    const r = lmhead("bench", "--types", "Q8_0,F16", "--vocab", "512", "--hidden", "256", "--rows", "1,2,4", "--iterations", "2", "--warmup", "0", "--probe-mib", "16", "--out", out);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/type\s+N\s+ms\/call\s+GB\/s\s+% read bw\s+floor ms\s+% of floor\s+t\(N\)\/t\(1\)\s+scalar\/batched/);
    expect(r.stdout).toMatch(/^Q8_0\s+4\s+\d+\.\d+/m);
    expect(r.stdout).toMatch(/^F16\s+1\s+\d+\.\d+/m);
    const json = JSON.parse(readFileSync(join(out, "head-bench-512x256.json"), "utf8"));
    expect(json.rows.length).toBe(6);
    expect(json.types.map((t: { type: string }) => t.type)).toEqual(["Q8_0", "F16"]);
    const f16 = json.rows.find((row: { type: string; n: number }) => row.type === "F16" && row.n === 2);
    expect(f16).toMatchObject({ type: "F16", n: 2 });
    expect(f16.ms).toBeGreaterThan(0);
    expect(f16.scalarOverBatched).toBeGreaterThan(0);
    // The floor is the larger of the bandwidth and the fma floors, both probed in the run.
    const type = json.types.find((t: { type: string }) => t.type === "F16");
    expect(type.fmasPerSecond).toBeGreaterThan(0);
    expect(f16.floorMs).toBeCloseTo(Math.max(type.floorMs, (2 * 512 * 256 * 1e3) / type.fmasPerSecond), 9);
    expect(json.rows.find((row: { n: number }) => row.n === 1).timeVsN1).toBe(1);
    const svg = readFileSync(join(out, "head-bench-512x256.svg"), "utf8");
    expect(svg).toStartWith("<svg");
    expect(svg).toContain("bandwidth floor");
    expect(svg.match(/<polyline/g)?.length).toBe(2);
    expect(existsSync(join(out, "head-bench-512x256.json"))).toBe(true);
  });

  test("--batched-only times the N-row calls alone", () => {
    const out = join(dir, "bench-batched-only");
    const r = lmhead("bench", "--types", "Q8_0", "--vocab", "512", "--hidden", "256", "--rows", "1,4", "--iterations", "2", "--warmup", "0", "--probe-mib", "0", "--batched-only", "--out", out);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Q8_0\s+4\s+\d+\.\d+.*\s—$/m);
    const json = JSON.parse(readFileSync(join(out, "head-bench-512x256.json"), "utf8"));
    const [one, four] = json.rows;
    expect(four).toMatchObject({ type: "Q8_0", n: 4, scalarMs: null, scalarOverBatched: null });
    expect(four.ms).toBeGreaterThan(0);
    // N = 1 is its own one-row call.
    expect(one.scalarMs).toBe(one.ms);
  });

  test("--help documents every flag", () => {
    const r = lmhead("bench", "--help");
    expect(r.code).toBe(0);
    for (const flag of ["--types", "--rows", "--vocab", "--hidden", "--iterations", "--warmup", "--out", "--seed", "--backend", "--probe-mib", "--no-progress", "--help"]) {
      expect(r.stdout).toContain(flag);
    }
  });
});

describe("progress bar", () => {
  const fake = (isTTY: boolean) => {
    const writes: string[] = [];
    return { writes, stream: { isTTY, columns: 80, write: (s: string) => writes.push(s) > 0 } as unknown as NodeJS.WriteStream };
  };

  test("draws and clears one line on a TTY", () => {
    const { writes, stream } = fake(true);
    const bar = new ProgressBar("lmhead decode", 4, { stream });
    bar.update(4, "steps");
    bar.finish();
    expect(writes[0]).toStartWith("\r\x1b[2Klmhead decode [");
    expect(writes[0]).toContain("] 4/4 steps");
    expect(writes.at(-1)).toBe("\r\x1b[2K");
  });

  test("prints nothing when not a TTY, or when disabled", () => {
    for (const [isTTY, enabled] of [[false, true], [true, false]] as const) {
      const { writes, stream } = fake(isTTY);
      const bar = new ProgressBar("x", 2, { stream, enabled });
      bar.update(1);
      bar.update(2);
      bar.finish();
      expect(writes).toEqual([]);
    }
  });
});
