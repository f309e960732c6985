/**
 * This machine's read bandwidth, measured in-process, as the ceiling a memory-bound head can
 * reach. The probe hashes a buffer far larger than the last-level cache with Bun's native XXH3
 * (vectorized, several times faster than DRAM from cache, so it runs at memory speed): once on
 * this thread, and once split over `threads` workers started together, which is the figure to
 * compare a head on the CPU backend's thread pool against. Best of `passes` each.
 */
export interface BandwidthResult {
  /** Bytes read per pass. */
  bytes: number;
  passes: number;
  /** GB/s (1e9 bytes) with one thread. */
  oneThread: number;
  /** Threads of the multi-thread measurement, and its GB/s (null when workers could not start). */
  threads: number;
  multiThread: number | null;
  method: string;
}

export interface BandwidthOptions {
  /** Buffer size (default 512 MiB: 16× a 32 MiB L3). */
  bytes?: number;
  /** Passes per measurement (default 5); the best counts. */
  passes?: number;
  /** Threads for the multi-thread figure (default 2). 1 skips it. */
  threads?: number;
}

export async function measureReadBandwidth(opts: BandwidthOptions = {}): Promise<BandwidthResult> {
  const threads = Math.max(1, Math.floor(opts.threads ?? 2));
  const passes = Math.max(1, Math.floor(opts.passes ?? 5));
  const pageAlign = 1 << 16;
  const bytes = Math.max(pageAlign * threads, Math.floor((opts.bytes ?? 512 * 2 ** 20) / (pageAlign * threads)) * pageAlign * threads);
  const buffer = new SharedArrayBuffer(bytes);
  const all = new Uint8Array(buffer);
  // Touch every page so reads hit real memory, not the shared zero page.
  for (let i = 0; i < bytes; i += 4096) all[i] = (i >>> 12) & 0xff;

  let best1 = Infinity;
  Bun.hash.xxHash3(all.subarray(0, 1 << 20)); // warm the code path
  for (let p = 0; p < passes; p++) {
    const t = Bun.nanoseconds();
    Bun.hash.xxHash3(all);
    best1 = Math.min(best1, Bun.nanoseconds() - t);
  }

  let multi: number | null = null;
  if (threads > 1) multi = await multiThreadPass(buffer, threads, passes);
  return {
    bytes,
    passes,
    oneThread: bytes / best1,
    threads,
    multiThread: multi,
    method: `native XXH3 (Bun.hash.xxHash3) over a ${Math.round(bytes / 2 ** 20)} MiB buffer, best of ${passes}`,
  };
}

async function multiThreadPass(buffer: SharedArrayBuffer, threads: number, passes: number): Promise<number | null> {
  const control = new SharedArrayBuffer(8);
  const ctl = new Int32Array(control);
  const share = buffer.byteLength / threads;
  const workers: Worker[] = [];
  try {
    const ready: Promise<unknown>[] = [];
    for (let w = 0; w < threads; w++) {
      const worker = new Worker(new URL("./bandwidth-worker.ts", import.meta.url).href);
      workers.push(worker);
      ready.push(
        new Promise((resolve, reject) => {
          worker.onmessage = resolve;
          worker.onerror = (e) => reject(new Error(e.message));
          worker.postMessage({ buffer, control, offset: w * share, length: share });
        }),
      );
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error("workers did not start")), 15_000);
    });
    try {
      await Promise.race([Promise.all(ready), timeout]);
    } finally {
      clearTimeout(timer);
    }
    let best = Infinity;
    for (let p = 0; p <= passes; p++) {
      Atomics.store(ctl, 1, 0);
      const t = Bun.nanoseconds();
      Atomics.add(ctl, 0, 1);
      Atomics.notify(ctl, 0);
      for (;;) {
        const done = Atomics.load(ctl, 1);
        if (done === threads) break;
        if (Atomics.wait(ctl, 1, done, 30_000) === "timed-out") return null;
      }
      if (p > 0) best = Math.min(best, Bun.nanoseconds() - t); // pass 0 warms the workers
    }
    return buffer.byteLength / best;
  } catch {
    return null;
  } finally {
    Atomics.store(ctl, 0, -1);
    Atomics.notify(ctl, 0);
    for (const w of workers) w.terminate();
  }
}
