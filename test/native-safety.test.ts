/**
 * The native library under concurrent and long-running misuse: each case runs in a child
 * process, so a fault is reported as a failed test instead of ending the test run.
 */
import { expect, test } from "bun:test";

const root = `${import.meta.dir}/..`;

/** Runs a script in a child Bun; returns its exit code and output. */
async function child(script: string): Promise<{ code: number; stdout: string; stderr: string }> {
  const proc = Bun.spawn([process.execPath, "-e", script], { cwd: root, stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
  return { code: await proc.exited, stdout, stderr };
}

test("a buffer freed on one thread while another reads and writes it never faults", async () => {
  // The worker hammers the buffer through its raw handle; the main thread frees it midway.
  // Every call either completes on live memory or fails with a bad-handle status.
  const script = `
    import { lib } from "./src/native.ts";
    import { MlxDevice } from "./src/index.ts";
    const device = MlxDevice.open("cpu");
    const bytes = 64 * 2 ** 20;
    const buffer = device.allocBuffer(bytes);
    const worker = new Worker(URL.createObjectURL(new Blob([\`
      import { lib } from "${root}/src/native.ts";
      self.onmessage = (e) => {
        const handle = e.data;
        const host = new Uint8Array(${64 * 2 ** 20});
        let ok = 0, refused = 0;
        for (let i = 0; i < 400; i++) {
          const status = i % 2 ? lib.lmh_buffer_read(handle, 0, host, host.length) : lib.lmh_buffer_write(handle, 0, host, host.length);
          if (status === 0) ok++; else if (status === 2) refused++; else throw new Error("status " + status);
          if (refused > 20) break;
        }
        postMessage({ ok, refused });
      };
    \`], { type: "application/typescript" })));
    const done = new Promise((resolve) => (worker.onmessage = (e) => resolve(e.data)));
    worker.postMessage(buffer.handle);
    await Bun.sleep(30);
    buffer.free();
    const { ok, refused } = await done;
    worker.terminate();
    console.log(JSON.stringify({ ok, refused }));`;
  const { code, stdout, stderr } = await child(script);
  expect({ code, stderr: code === 0 ? "" : stderr }).toEqual({ code: 0, stderr: "" });
  const { ok, refused } = JSON.parse(stdout.trim());
  expect(ok + refused).toBeGreaterThan(0);
  expect(refused).toBeGreaterThan(0); // the free was seen, as an error, not a fault
});

test("300,000 views of views, each parent freed, neither overflow the stack nor leak", async () => {
  const script = `
    import { lib } from "./src/native.ts";
    import { MlxDevice } from "./src/index.ts";
    const device = MlxDevice.open("cpu");
    const out = new BigUint64Array(1);
    if (lib.lmh_buffer_alloc(device.handle, 8192, out) !== 0) throw new Error("alloc");
    let handle = out[0];
    let size = 8192;
    for (let i = 0; i < 300_000; i++) {
      const offset = i % 1000 === 0 ? 1 : 0;
      size -= offset;
      if (lib.lmh_buffer_view(handle, offset, size, out) !== 0) throw new Error("view " + i);
      if (lib.lmh_buffer_free(handle) !== 0) throw new Error("free " + i);
      handle = out[0];
    }
    const data = new Uint8Array([7, 8, 9]);
    if (lib.lmh_buffer_write(handle, 0, data, 3) !== 0) throw new Error("write");
    if (lib.lmh_buffer_free(handle) !== 0) throw new Error("last free");
    console.log("ok");`;
  const { code, stdout, stderr } = await child(script);
  expect({ code, stdout: stdout.trim(), stderr: code === 0 ? "" : stderr }).toEqual({ code: 0, stdout: "ok", stderr: "" });
});

test("forgotten devices share one thread pool and are reclaimed by the collector", async () => {
  // 3000 devices opened and dropped: more than the device table holds, so each must be
  // released when collected; and the process never holds more than one pool of threads.
  const script = `
    import { MlxDevice } from "./src/index.ts";
    const threads = () => Number(/Threads:\\s+(\\d+)/.exec(require("node:fs").readFileSync("/proc/self/status", "utf8"))[1]);
    const first = MlxDevice.open("cpu");
    const base = threads();
    let most = base;
    for (let round = 0; round < 30; round++) {
      for (let i = 0; i < 100; i++) MlxDevice.open("cpu");
      most = Math.max(most, threads());
      Bun.gc(true);
      await Bun.sleep(1);
    }
    console.log(JSON.stringify({ extra: most - base, pool: first.threads }));`;
  const { code, stdout, stderr } = await child(script);
  expect({ code, stderr: code === 0 ? "" : stderr }).toEqual({ code: 0, stderr: "" });
  // A pool per device would add a thread per worker per device still alive (about 100 a
  // round); Bun's own runtime may start a few threads of its own meanwhile.
  const { extra } = JSON.parse(stdout.trim());
  expect(extra).toBeLessThan(16);
});

test("Workers that open devices and end without closing them leave the process able to open more", async () => {
  // Each Worker's device handle is lost when the Worker ends (no collector runs there). Devices
  // are cheap (CPU devices share the process's one pool) and the table holds 1024, so 100
  // such Workers cost no thread and leave room.
  const script = `
    import { MlxDevice } from "./src/index.ts";
    const threads = () => Number(/Threads:\\s+(\\d+)/.exec(require("node:fs").readFileSync("/proc/self/status", "utf8"))[1]);
    const keep = MlxDevice.open("cpu");
    const before = threads();
    for (let i = 0; i < 100; i++) {
      const worker = new Worker(URL.createObjectURL(new Blob([\`
        import { MlxDevice } from "${root}/src/index.ts";
        MlxDevice.open("cpu");
        postMessage("opened");
      \`], { type: "application/typescript" })));
      await new Promise((resolve) => (worker.onmessage = resolve));
      worker.terminate();
    }
    await Bun.sleep(50);
    const after = threads();
    const device = MlxDevice.open("cpu");
    console.log(JSON.stringify({ extra: after - before, info: device.info, pool: keep.threads }));`;
  const { code, stdout, stderr } = await child(script);
  expect({ code, stderr: code === 0 ? "" : stderr }).toEqual({ code: 0, stderr: "" });
  const { extra, info } = JSON.parse(stdout.trim());
  expect(info).toStartWith("cpu:");
  expect(extra).toBeLessThan(16); // a pool per device would leave 100 threads behind
});
